"""The ``batchaug`` command line: ``batchaug cache build|info``, ``bench`` and ``show``.

Argument parsing and error reporting live here; the work is done by
``batchaug.data.build`` (cache commands), ``batchaug.bench`` (benchmark) and
``batchaug.show_command`` (show). Each handler takes the parsed ``argparse.Namespace`` and returns
an exit status. User mistakes (bad arguments, missing paths, bad data) and failures to write
output (a directory where a file goes, a full disk, out of memory) end in one
``batchaug: error: ...`` line and a non-zero exit, not a traceback; set ``BATCHAUG_DEBUG=1``
to see the traceback. Messages raised while a command runs give the fix as a flag
(``batchaug.errors.hint``). Output into a pipe whose reader has gone (``batchaug cache info C
| head -1``) ends quietly with status 141, as for SIGPIPE.
"""
from __future__ import annotations

import argparse
import errno
import os
import sys
from typing import List, Optional

from batchaug._validation import MAX_SIZE
from batchaug.bench.contenders import RECIPE_NAMES
from batchaug.errors import CLIError, command_line
from batchaug.recipes import names as recipe_names

DESCRIPTION = ("batchaug: build and inspect on-disk image caches, benchmark input pipelines, "
               "and picture augmentation recipes.")


class _HelpFormatter(argparse.HelpFormatter):
    """Shows each option's default where it has one (not for flags and empty defaults)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if ("%(default)" not in text and action.option_strings and action.default is not None
                and action.default is not False and action.default is not argparse.SUPPRESS):
            text += " (default: %(default)s)"
        return text


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # one line instead of usage + message
        raise CLIError(f"{message} (see `{self.prog} --help`)", prog=self.prog)


def _int_at_least(text: str, low: int, expected: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
    if value < low:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {value}")
    return value


def _positive_int(text: str) -> int:
    return _int_at_least(text, 1, "a positive integer")


def _non_negative_int(text: str) -> int:
    return _int_at_least(text, 0, "an integer >= 0")


def _size(text: str) -> int:
    """A side in pixels: a positive integer up to the transforms' bound (``MAX_SIZE``)."""
    value = _positive_int(text)
    if value > MAX_SIZE:
        raise argparse.ArgumentTypeError(f"expected at most {MAX_SIZE} pixels, got {value}")
    return value


def _seed(text: str) -> int:
    value = _non_negative_int(text)
    if value >= 2 ** 63:
        raise argparse.ArgumentTypeError(f"expected an integer in [0, 2**63), got {value}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="batchaug", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    cache = sub.add_parser("cache", help="build or inspect an on-disk image cache")
    cache_sub = cache.add_subparsers(dest="cache_command", required=True, parser_class=_Parser)

    build = cache_sub.add_parser(
        "build",
        help="decode a dataset once into a cache directory",
        description="SRC is an ImageFolder-style directory (one sub-folder per class, JPEG/PNG), "
        "a CIFAR-10/CIFAR-100 python-format directory, or WebDataset tar shards (a .tar, or a "
        "quoted pattern such as 'train-{000000..000099}.tar'; members KEY.jpg|jpeg|png|webp "
        "with KEY.cls).",
    )
    build.add_argument("src", help="ImageFolder or CIFAR python-format directory, or tar shards")
    build.add_argument("out", help="cache directory to write")
    build.add_argument("--resize", type=_size, metavar="N",
                       help="resize each image's shorter side to N pixels, keeping the aspect "
                       "ratio (images then differ in size: each is stored at its own)")
    build.add_argument("--max-size", type=_size, metavar="N",
                       help="with --resize: cap the longer side at N pixels (torchvision "
                       "Resize's max_size)")
    build.add_argument("--center-crop", type=_size, metavar="N",
                       help="center-crop each image to N x N pixels")
    build.add_argument("--storage", choices=["raw", "jpeg"], default="raw",
                       help="raw pixels, or JPEG bytes decoded per batch by the loader "
                       "(about 1/4 of the raw size or less at quality 90)")
    build.add_argument("--quality", type=_positive_int, default=None,
                       help="JPEG quality 1..100, with --storage jpeg only (default 90)")
    build.add_argument("--workers", type=_non_negative_int, default=0,
                       help="decode in this many worker processes (0: in this one)")
    build.add_argument("--skip-bad", action="store_true",
                       help="skip unreadable images (listed at the end) instead of stopping")
    build.add_argument("--split", choices=["train", "test"], default="train",
                       help="which CIFAR split to read (ignored for ImageFolder)")
    build.add_argument("--seed", type=_seed, default=0,
                       help="seed of the shuffled order the images are stored in (rows are "
                       "shuffled so that every part of the cache mixes all classes)")
    build.add_argument("--no-shuffle", action="store_true",
                       help="store the images in the dataset's order (an ImageFolder's is "
                       "class by class: shards and disk reads then see few classes)")
    build.add_argument("--overwrite", action="store_true",
                       help="replace an existing OUT, or discard an interrupted build of it")
    build.add_argument("--resume", action="store_true",
                       help="continue an interrupted build of OUT from its last completed chunk")

    info = cache_sub.add_parser("info", help="print a cache's shape, dtype, classes, size")
    info.add_argument("path", help="cache directory")
    info.add_argument("--verify", action="store_true", help="also check SHA-256 hashes")

    bench = sub.add_parser("bench", help="compare input pipelines side by side")
    bench.add_argument("--recipe", choices=[*RECIPE_NAMES, "all", "auto"], default="auto",
                       help="auto: imagenet with --data on a cache of photos at their own "
                       "sizes (each photo as it is, the crop in the loader, as training does), "
                       "else cifar; all = cifar, rotation and imagenet; color (32x32 or the data's "
                       "size), color224 (224x224), simclr (256x256 -> 224) and photos (JPEG "
                       "files of mixed sizes -> 224, with DALI when installed: RandomResizedCrop "
                       "+ flip, then photos_rotation, RandomRotation(30) first) run by name")
    bench.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                       help="where the batches go (auto: cuda when available)")
    bench.add_argument("--batch-size", type=_positive_int, default=None,
                       help="images per batch (default: 256; 64 for photos)")
    bench.add_argument("--images", type=_positive_int, default=None,
                       help="images in the pool every contender reads, i.e. one epoch "
                       "(default: recipe-dependent)")
    bench.add_argument("--window", type=_positive_float, default=None,
                       help="seconds every contender is timed per round, the same for all "
                       "(default: 0.5; 1.0 for imagenet, simclr and colour on images over 128x128)")
    bench.add_argument("--rounds", type=_positive_int, default=5,
                       help="timing rounds (the contenders' order rotates)")
    bench.add_argument("--data", default=None, help="a cache built by `batchaug cache build`")
    bench.add_argument("--out", default="bench-results", help="where results are written")
    bench.add_argument("--train", action="store_true",
                       help="short training run per pipeline, reporting data-wait fraction")
    bench.add_argument("--steps", type=_positive_int, default=None,
                       help="training steps per pipeline with --train")

    show = sub.add_parser("show", help="write a PNG grid of a pipeline's augmentations",
                          description="One row per image drawn from CACHE: the image as "
                          "stored (at its own size), then DRAWS augmented versions or, with "
                          "--epoch, each sample as training saw it at those epochs (train mode, "
                          "Normalize undone); rows are labelled with the sample index and class "
                          "name, columns with original, draw K or epoch E. A cache with masks or "
                          "boxes has them drawn on every cell, moved with the image.")
    show.add_argument("cache", help="a cache built by `batchaug cache build`")
    show.add_argument("--out", default="grid.png", help="PNG file to write")
    which = show.add_mutually_exclusive_group()
    which.add_argument("--pipeline", default=None, metavar="MODULE:ATTR",
                       help="the training pipeline to draw: a Migration (from_torchvision's: "
                       "its .crop, then its .augment), a (crop, augment) pair or an Augment "
                       "(migration.deploy or a DeployedModel: the evaluation pipeline), "
                       "named as module:attribute (a module importable from here, or a .py "
                       "path; an attribute that is a function is called without arguments). "
                       "The file is imported: a training script must keep its training under "
                       "if __name__ == '__main__': (one whose top level runs a loop or calls "
                       "its own function is refused, not run)")
    which.add_argument("--recipe", choices=recipe_names(), default="simclr",
                       help="instead of --pipeline, a preset from batchaug.recipes (for "
                       "resnet50_v2 and deit: their image augmentation, without the label "
                       "mixing)")
    show.add_argument("--size", type=_size, default=None, metavar="N",
                      help="with --recipe: its output side in pixels (default: the images' "
                      "shorter side)")
    show.add_argument("--n", type=_positive_int, default=8, help="images (rows)")
    show.add_argument("--draws", type=_positive_int, default=4, help="augmented columns")
    show.add_argument("--crop", type=_positive_int, default=None, metavar="N",
                      help="with --recipe: a crop first takes each image's largest centred "
                      "square, resized to N x N (without it: only when the images shown "
                      "differ in size, to the shortest side shown)")
    show.add_argument("--seed", type=_non_negative_int, default=0,
                      help="picks the images and the augmentation; with --epoch, the "
                           "DeviceLoader seed of the training run")
    show.add_argument("--index", type=_non_negative_int, nargs="+", default=None,
                      help="show these cache rows (sample indices) instead of --n random ones")
    show.add_argument("--epoch", type=_non_negative_int, nargs="+", default=None,
                      help="one column per epoch: each sample exactly as a run with "
                           "DeviceLoader(cache, crop=crop, seed=SEED, return_keys=True) and "
                           "augment(x, keys) augmented it then (replaces --draws)")
    show.add_argument("--no-targets", action="store_true",
                      help="a cache with masks or boxes: draw the images only")
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    """Run the command line; returns the exit status (``sys.exit(main())``)."""
    try:
        status = _main(argv)
        sys.stdout.flush()  # a reader that went away (``| head -1``) shows up here or above
        return status
    except BrokenPipeError:
        # The reader closed the pipe: stop quietly, as a tool killed by SIGPIPE would (exit
        # 141 = 128 + SIGPIPE), and point stdout at /dev/null so the interpreter's own flush
        # at exit does not fail again (https://docs.python.org/3/library/signal.html).
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (AttributeError, OSError, ValueError):  # stdout without a file descriptor
            pass
        return 141


def _main(argv: Optional[List[str]]) -> int:
    debug = os.environ.get("BATCHAUG_DEBUG") == "1"
    try:
        with command_line():  # library messages name flags, not Python arguments
            return _run(build_parser().parse_args(argv))
    except (CLIError, ValueError, FileNotFoundError, NotADirectoryError,
            FileExistsError, PermissionError) as exc:
        if debug:
            raise
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        prog = getattr(exc, "prog", "batchaug")
        print(f"{prog}: error: {msg}", file=sys.stderr)
        _print_notes(exc, prog)
        return 2
    except (OSError, MemoryError) as exc:  # writing output, or an image too large to hold
        if debug or isinstance(exc, BrokenPipeError):
            raise
        print(f"batchaug: error: {_resource_error(exc)}", file=sys.stderr)
        _print_notes(exc, "batchaug")
        return 1
    except KeyboardInterrupt as exc:
        print("batchaug: interrupted", file=sys.stderr)
        _print_notes(exc, "batchaug")
        return 130


def _resource_error(exc: BaseException) -> str:
    """One line for an OSError (``PATH: reason``) or a MemoryError."""
    if isinstance(exc, MemoryError):
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return ("out of memory" + (f" ({detail})" if detail else "")
                + ": an image or batch is too large for this machine; make it smaller "
                  "(e.g. a smaller --resize, --n, --batch-size)")
    assert isinstance(exc, OSError)
    reason = exc.strerror or (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        reason += " (the disk is full)"
    return f"{exc.filename}: {reason}" if exc.filename else reason


def _run(args: argparse.Namespace) -> int:
    if args.command == "cache":
        from batchaug.data import build as cache_cmds

        if args.cache_command == "build":
            return cache_cmds.build_command(args)
        return cache_cmds.info_command(args)
    if args.command == "show":
        from batchaug.show_command import show_command

        return show_command(args)
    from batchaug import bench as bench_cmd

    return bench_cmd.bench_command(args)


def _print_notes(exc: BaseException, prog: str) -> None:
    """Notes added on the way up (e.g. how to resume an interrupted `cache build`)."""
    for note in getattr(exc, "__notes__", ()):
        print(f"{prog}: {note}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
