"""``batchaug bench``: the usual input pipelines side by side with batchaug, on this machine.

What it runs, how it times and what it writes: docs/performance.md ("Benchmark your own
pipeline"). Results are rewritten after each recipe, so that a run stopped part-way keeps the
recipes it finished (``"complete": false`` in the JSON, a "partial" line in the markdown).
"""
from __future__ import annotations

import argparse
import os
import platform
import shlex
import sys
import time
from typing import Any, Callable, List, Optional, Tuple

import torch

from batchaug.bench import contenders as C
from batchaug.bench import report, timing

__all__ = ["bench_command"]

SYNTHETIC_NOTE = ("synthetic random uint8 images made on the fly (augmentation cost does not "
                  "depend on image content; use --data CACHE_DIR for your own images)")


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def resolve_device(name: str) -> torch.device:
    """``auto`` -> cuda when available else cpu; ``cuda`` without CUDA is a user error."""
    from batchaug.errors import CLIError

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
        raise CLIError(f"--device cuda: CUDA is not available on this machine (torch "
                       f"{torch.__version__}, {build}, no usable GPU); use --device cpu or auto")
    return torch.device(name)


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:  # Linux: the CPU model, which platform.processor() does not give
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


class DataSource:
    """Where the benchmark's images come from: synthetic per recipe, or one cache directory."""

    def __init__(self, path: Optional[str], needed: int = 0) -> None:
        """``needed``: the most images any measurement pool will take from the cache."""
        self.path = path
        self.images: Optional[torch.Tensor] = None
        self.labels: Optional[torch.Tensor] = None
        #: photos at their own sizes (a ragged or JPEG cache): the imagenet recipe reads them
        #: as they are, with the crop in the loader; other recipes need one size (squares)
        self.own_sizes: Optional[Any] = None
        if path is None:
            self.note = SYNTHETIC_NOTE
            return
        if not os.path.exists(path):
            raise FileNotFoundError(f"--data: no such cache directory: {path}")
        if not os.path.isdir(path):
            raise NotADirectoryError(f"--data: not a directory: {path} (expected a cache "
                                     "built by `batchaug cache build`)")
        from batchaug import DeviceCache
        from batchaug.data.format import read_meta

        # A big cache (ImageNet: ~200 GB) must not be read whole for a few thousand images:
        # load only a leading part (shard 0 of W), enough for the largest pool. `cache build`
        # writes images in random order, so that part is a fair sample.
        total = int(read_meta(path)["shape"][0])
        parts = max(1, total // max(1, needed))
        cache = DeviceCache.load(path, device="cpu", shard=(0, parts) if parts > 1 else None)
        if cache.images.dtype != torch.uint8:
            raise ValueError(f"--data: the benchmark reads uint8 caches, {path} holds "
                             f"{cache.images.dtype}")
        if len(cache) == 0:
            raise ValueError(f"--data: the cache {path} holds no images")
        read = f" (the first {len(cache)} read)" if len(cache) < total else ""
        if not cache.dense:
            from batchaug.data.ragged import describe_sizes

            self.own_sizes = cache
            self.labels = cache.labels
            c = int(cache.images.index.shape[0] and cache.image(0).shape[0])
            self.note = (f"cache {path}: {total} photos at their own sizes "
                         f"({describe_sizes(cache.images.index.numpy())}), {c} channel(s), "
                         f"{cache.storage}{read}")
            return
        self.images = cache.images.contiguous()
        self.labels = cache.labels
        n, c, h, w = self.images.shape
        self.note = f"cache {path}: {total} images {c}x{h}x{w} uint8{read}"

    def squared(self) -> None:
        """For a recipe that needs images of one size: each photo of a ragged cache resized
        and centre-cropped to the shortest side among them (said in the note)."""
        if self.images is not None or self.own_sizes is None:
            return
        from batchaug.data.ragged_batches import smallest_side, square_crops

        cache = self.own_sizes
        rows = torch.arange(len(cache))
        side = smallest_side(cache.images, rows)
        self.images = square_crops(cache.images, rows, side).contiguous()
        self.note += (f"; for the recipes that need one size (all but imagenet) each photo "
                      f"resized and centre-cropped to {side}x{side}")

    def channels_and_size(self) -> Tuple[int, Optional[Tuple[int, int]]]:
        if self.own_sizes is not None and self.images is None:
            return int(self.own_sizes.image(0).shape[0]), None
        if self.images is None:
            return 3, None
        return int(self.images.shape[1]), (int(self.images.shape[2]), int(self.images.shape[3]))

    def take(self, recipe: C.Recipe, count: int,
             seed: int = 0) -> Tuple[torch.Tensor, torch.Tensor]:
        """``count`` images (fewer if the cache is smaller) as CPU uint8 NCHW + int64 labels."""
        self.squared()
        if self.images is not None:
            assert self.labels is not None
            return self.images[:count], self.labels[:count]
        g = torch.Generator().manual_seed(seed)
        h, w = recipe.source_hw
        images = torch.randint(0, 256, (count, 3, h, w), dtype=torch.uint8, generator=g)
        labels = torch.randint(0, 10, (count,), generator=g)
        return images, labels


def _command_line(args: argparse.Namespace) -> str:
    """The equivalent command line, rebuilt from the parsed arguments (defaults included)."""
    parts = ["batchaug", "bench"]
    for flag, value in (("--recipe", args.recipe), ("--device", args.device),
                        ("--batch-size", args.batch_size), ("--rounds", args.rounds),
                        ("--out", args.out), ("--images", args.images),
                        ("--window", getattr(args, "window", None)), ("--data", args.data)):
        if value is not None:
            parts += [flag, str(value)]
    if args.train:
        parts += ["--train"] + ([] if args.steps is None else ["--steps", str(args.steps)])
    return " ".join(shlex.quote(p) for p in parts)


def _versions() -> dict:
    import importlib

    import torchvision

    from batchaug import __version__

    versions = {"torch": torch.__version__, "torchvision": torchvision.__version__,
                "python": platform.python_version()}
    for name in ("kornia", "torchaug"):
        try:
            versions[name] = importlib.import_module(name).__version__
        except Exception:
            versions[name] = None
    versions["batchaug"] = __version__
    return versions


def _recipe_names(choice: str) -> List[str]:
    if choice == "photos":
        return list(C.PHOTO_RECIPES)
    return list(C.ALL_RECIPES) if choice == "all" else [choice]


def _images_needed(args: argparse.Namespace) -> int:
    """The largest image pool any recipe of this run takes (bench or --train)."""
    recipes = [C.make_recipe(name, 3) for name in _recipe_names(args.recipe)]
    if args.train:
        from batchaug.bench.train import WARMUP_STEPS

        return max(min(args.images or r.default_images,
                       ((args.steps or r.default_train_steps) + WARMUP_STEPS) * args.batch_size)
                   for r in recipes)
    return max(args.images or r.default_images for r in recipes)


def _own_sizes(path: Optional[str]) -> bool:
    """Whether ``path`` is a cache of photos stored at their own sizes (ragged or JPEG)."""
    if path is None or not os.path.isdir(path):
        return False
    from batchaug.data.format import read_meta
    from batchaug.data.meta import is_ragged

    try:
        return is_ragged(read_meta(path))
    except Exception:  # DataSource reports an unreadable cache in its own words
        return False


def bench_command(args: argparse.Namespace) -> int:
    """Run ``batchaug bench`` with parsed arguments; returns the exit status."""
    from batchaug.errors import CLIError

    if args.recipe in (None, "auto"):  # photos at their own sizes: the recipe that crops them
        args.recipe = "imagenet" if _own_sizes(args.data) else "cifar"
    if getattr(args, "steps", None) is not None and not args.train:
        raise CLIError("--steps only applies together with --train")
    if args.recipe in C.PHOTO_RECIPES and (args.train or args.data is not None):
        raise CLIError(f"{'--train' if args.train else '--data'} does not apply to --recipe "
                       f"photos, which writes and reads its own JPEG files; run it without")
    if args.batch_size is None:
        args.batch_size = 64 if args.recipe in C.PHOTO_RECIPES else 256
    if getattr(args, "window", None) is not None and args.train:
        raise CLIError("--window does not apply to --train (it runs a number of --steps)")
    report.check_out_dir(args.out, "train-results" if args.train else "results")
    device = resolve_device(args.device)
    data = DataSource(args.data, needed=_images_needed(args))
    if args.recipe in C.PHOTO_RECIPES:
        data.note = "JPEG files cut from scikit-image's sample photographs (the photos recipe)"
    started = time.perf_counter()
    planned = _recipe_names(args.recipe)
    if args.train or any(name != "imagenet" for name in planned):
        data.squared()  # before the notes are written: they say how the photos were squared
    from batchaug.bench import train

    write = train.write_train_outputs if args.train else report.write_outputs

    def finish(results: dict) -> dict:
        results["command"] = _command_line(args)
        results["elapsed_s"] = time.perf_counter() - started
        results["recipes_planned"] = planned
        results["complete"] = len(results["recipes"]) == len(planned)
        return results

    def save_so_far(results: dict) -> None:
        """After each recipe: a run stopped later keeps the recipes measured so far."""
        if len(results["recipes"]) < len(planned):
            paths = write(finish(results), args.out)
            _log(f"{results['recipes'][-1]['name']}: done; results so far in {paths['json']}, "
                 f"{paths['md']}")

    if args.train:
        results = finish(train.run_training(args, device, data, _log,
                                            common_header(args, device, data), planned,
                                            on_recipe=save_so_far))
        train.print_train_report(results)
    else:
        results = finish(run_bench(args, device, data, on_recipe=save_so_far))
        report.print_report(results)
    paths = write(results, args.out)
    print()
    print(f"wrote {paths['json']}, {paths['md']}, {paths['png']} "
          f"({results['elapsed_s']:.0f} s)")
    return 0


def common_header(args: argparse.Namespace, device: torch.device, data: DataSource) -> dict:
    return {
        "version": 2,  # 2: equal windows, ratios to every contender with min-max, antialias
        "device": device.type,
        "device_name": device_name(device),
        "cpu_count": os.cpu_count(),
        "default_threads": torch.get_num_threads(),
        "batch_size": args.batch_size,
        "data_note": data.note,
        "data": {"source": "synthetic" if data.path is None else os.path.abspath(data.path)},
        "versions": _versions(),
    }


def run_bench(args: argparse.Namespace, device: torch.device, data: DataSource,
              on_recipe: Optional[Callable[[dict], None]] = None) -> dict:
    """Measure every recipe of ``args.recipe``; ``on_recipe(results)`` runs after each one."""
    threads = sorted({1, torch.get_num_threads()})
    results = common_header(args, device, data)
    results.update({"mode": "bench", "thread_counts": threads, "rounds": args.rounds,
                    "recipes": [], "measurements": []})
    _log(f"batchaug bench on {device} ({results['device_name']}), torch threads "
         f"{threads}, batch {args.batch_size}, {args.rounds} rounds; data: {data.note}")
    channels, data_hw = data.channels_and_size()
    for name in _recipe_names(args.recipe):
        recipe = C.make_recipe(name, channels, data_hw)
        count = args.images or recipe.default_images
        window = getattr(args, "window", None) or recipe.default_window
        cleanup: Callable[[], None] = lambda: None
        source = None
        description = recipe.description
        if recipe.name == "imagenet" and data.own_sizes is not None and data.images is None:
            # the user's photos as training reads them: each at its own size, cropped by the
            # loader (RandomResizedCrop's boxes from the whole photo), nothing squared first
            from batchaug.bench import photos

            contenders, skipped = photos.own_sizes_contenders(
                data.own_sizes, recipe.out_hw[0], args.batch_size, device), []
            count, image_shape = len(data.own_sizes), [channels, 0, 0]
            source = f"your {count} photos at their own sizes (crop in the loader)"
            description = photos.OWN_SIZES_DESCRIPTION
        elif recipe.kind == "photos":  # JPEG files and a cache of them, made before any clock
            from batchaug.bench import photos

            contenders, skipped, source, cleanup = photos.build_contenders(
                count, args.batch_size, device, log=_log,
                rotation=recipe.name == "photos_rotation")
            image_shape = [3, 0, 0]
        else:
            images, labels = data.take(recipe, count)  # not timed: made before any clock
            if images.shape[0] < count:
                _log(f"{name}: the cache holds {images.shape[0]} images, fewer than the {count} "
                     f"asked for; the pool is all {images.shape[0]}")
            count, image_shape = int(images.shape[0]), list(images.shape[1:])
            contenders, skipped = C.build_contenders(recipe, images, labels, args.batch_size,
                                                     device, log=_log)
        try:
            measurements = timing.run_rounds(name, contenders, threads, args.rounds, window,
                                             device, log=_log)
        finally:
            for c in contenders:
                c.close()
            cleanup()
        summary = timing.summarize(measurements)
        usual = C.usual_per_sample_keys(contenders)
        results["measurements"] += [m.__dict__ for m in measurements]
        results["recipes"].append({
            "name": name,
            "description": description,
            "image_shape": image_shape,
            "source": source,
            "output_hw": list(recipe.out_hw),
            "window_s": window,
            "pool_images": count,
            "usual_per_sample": usual,
            "strongest_usual": {str(t): timing.strongest(summary, usual, t) for t in threads},
            "contenders": [{
                "key": c.key, "label": c.label, "per_sample": c.per_sample, "note": c.note,
                "antialias": c.antialias,
                "by_threads": {str(t): summary[(c.key, t)] for t in threads
                               if (c.key, t) in summary},
            } for c in contenders],
            "skipped": skipped,
        })
        if on_recipe is not None:
            on_recipe(results)
    return results
