"""The ``batchaug`` command line: ``batchaug cache build|info``, ``bench`` and ``show``.

Argument parsing and error reporting live here; the work is done by
``batchaug.data.build`` (cache commands) and ``batchaug.bench`` (benchmark). Each handler takes
the parsed ``argparse.Namespace`` and returns an exit status. User mistakes (bad arguments,
missing paths, bad data) end in one ``batchaug: error: ...`` line and a non-zero exit, not a
traceback; set ``BATCHAUG_DEBUG=1`` to see the traceback. Output into a pipe whose reader
has gone (``batchaug cache info C | head -1``) ends quietly with status 141, as for SIGPIPE.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import List, Optional

from batchaug.errors import CLIError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line instead of usage + message
        raise CLIError(f"{message} (see `{self.prog} --help`)", prog=self.prog)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {value}")
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
    parser = _Parser(prog="batchaug", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    cache = sub.add_parser("cache", help="build or inspect an on-disk image cache")
    cache_sub = cache.add_subparsers(dest="cache_command", required=True, parser_class=_Parser)

    build = cache_sub.add_parser(
        "build",
        help="decode a dataset once into a cache directory",
        description="SRC is an ImageFolder-style directory (one sub-folder per class, JPEG/PNG) "
        "or a CIFAR-10/CIFAR-100 python-format directory.",
    )
    build.add_argument("src", help="ImageFolder or CIFAR python-format directory")
    build.add_argument("out", help="cache directory to write")
    build.add_argument("--resize", type=_positive_int,
                       help="resize the shorter side to N, keeping the aspect ratio (images "
                       "then differ in size: each is stored at its own)")
    build.add_argument("--max-size", type=_positive_int,
                       help="with --resize: cap the longer side at N (torchvision Resize's "
                       "max_size)")
    build.add_argument("--center-crop", type=_positive_int, help="center-crop to N x N")
    build.add_argument("--storage", choices=["raw", "jpeg"], default="raw",
                       help="raw pixels, or JPEG bytes decoded per batch by the loader "
                       "(about 1/4 of the raw size or less at quality 90)")
    build.add_argument("--quality", type=_positive_int, default=90,
                       help="JPEG quality 1..100 with --storage jpeg (default 90)")
    build.add_argument("--workers", type=_non_negative_int, default=0, help="decode workers")
    build.add_argument("--skip-bad", action="store_true", help="skip unreadable images")
    build.add_argument("--split", choices=["train", "test"], default="train",
                       help="which CIFAR split to read (ignored for ImageFolder)")
    build.add_argument("--overwrite", action="store_true", help="replace an existing OUT")
    build.add_argument("--resume", action="store_true",
                       help="continue an interrupted build of OUT from its last completed chunk")

    info = cache_sub.add_parser("info", help="print a cache's shape, dtype, classes, size")
    info.add_argument("path", help="cache directory")
    info.add_argument("--verify", action="store_true", help="also check SHA-256 hashes")

    bench = sub.add_parser("bench", help="compare input pipelines side by side")
    bench.add_argument("--recipe", choices=["cifar", "rotation", "imagenet", "color", "color224",
                                            "simclr", "all"], default="cifar",
                       help="all = cifar, rotation and imagenet; color (32x32 or the data's "
                       "size), color224 (224x224) and simclr (256x256 -> 224) run by name")
    bench.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    bench.add_argument("--batch-size", type=_positive_int, default=256)
    bench.add_argument("--images", type=_positive_int, default=None,
                       help="images in the pool every contender reads, i.e. one epoch "
                       "(default: recipe-dependent)")
    bench.add_argument("--window", type=_positive_float, default=None,
                       help="seconds every contender is timed per round, the same for all "
                       "(default: 0.5; 1.0 for imagenet, simclr and colour on images over 128x128)")
    bench.add_argument("--rounds", type=_positive_int, default=5)
    bench.add_argument("--data", default=None, help="a cache built by `batchaug cache build`")
    bench.add_argument("--out", default="bench-results", help="where results are written")
    bench.add_argument("--train", action="store_true",
                       help="short training run per pipeline, reporting data-wait fraction")
    bench.add_argument("--steps", type=_positive_int, default=None,
                       help="training steps per pipeline with --train")

    show = sub.add_parser("show", help="write a PNG grid of a recipe's augmentations",
                          description="One row per image drawn from CACHE: the original, "
                          "then DRAWS augmented versions (train mode, Normalize undone).")
    show.add_argument("cache", help="a cache built by `batchaug cache build`")
    show.add_argument("--out", default="grid.png", help="PNG file to write")
    show.add_argument("--recipe", choices=["cifar10", "imagenet", "simclr", "color"],
                      default="simclr", help="a preset from batchaug.recipes")
    show.add_argument("--n", type=_positive_int, default=8, help="images (rows)")
    show.add_argument("--draws", type=_positive_int, default=4, help="augmented columns")
    show.add_argument("--crop", type=_positive_int, default=None,
                      help="a ragged or JPEG cache: resize each image (shorter side) and "
                      "centre-crop it to N x N first (default: the shortest side shown)")
    show.add_argument("--seed", type=_non_negative_int, default=0,
                      help="picks the images and the augmentation; with --epoch, the "
                           "DeviceLoader seed of the training run")
    show.add_argument("--index", type=_non_negative_int, nargs="+", default=None,
                      help="show these cache rows (sample indices) instead of --n random ones")
    show.add_argument("--epoch", type=_non_negative_int, nargs="+", default=None,
                      help="one column per epoch: each sample exactly as a run with "
                           "DeviceLoader(cache, seed=SEED, return_keys=True) and "
                           "recipe(x, keys) augmented it then (replaces --draws)")
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
        args = build_parser().parse_args(argv)
        if args.command == "cache":
            from batchaug.data import build as cache_cmds

            if args.cache_command == "build":
                return cache_cmds.build_command(args)
            return cache_cmds.info_command(args)
        if args.command == "show":
            from batchaug.picture import show_command

            return show_command(args)
        from batchaug import bench as bench_cmd

        return bench_cmd.bench_command(args)
    except (CLIError, ValueError, FileNotFoundError, NotADirectoryError,
            FileExistsError, PermissionError) as exc:
        if debug:
            raise
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        prog = getattr(exc, "prog", "batchaug")
        print(f"{prog}: error: {msg}", file=sys.stderr)
        _print_notes(exc, prog)
        return 2
    except KeyboardInterrupt as exc:
        print("batchaug: interrupted", file=sys.stderr)
        _print_notes(exc, "batchaug")
        return 130


def _print_notes(exc: BaseException, prog: str) -> None:
    """Notes added on the way up (e.g. how to resume an interrupted `cache build`)."""
    for note in getattr(exc, "__notes__", ()):
        print(f"{prog}: {note}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
