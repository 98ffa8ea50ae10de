"""``batchaug cache build`` and ``batchaug cache info``.

``build`` reads an ImageFolder-style directory (one sub-folder per class, JPEG/PNG) or a
CIFAR-10/CIFAR-100 python-format directory, decodes it once (optionally resizing and
center-cropping), and writes the on-disk cache format of ``batchaug.data.format`` with the
streaming writer (``batchaug.data.writer``: one chunk in memory at a time, ``--resume``).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
import torch

from batchaug.data import atomic
from batchaug.data.cache import DeviceCache
from batchaug.data.ragged import describe_sizes, open_ragged, originals_text
from batchaug.data.format import CacheFormatError, check_destination, open_cache, read_meta
from batchaug.data.meta import DATA, is_ragged
from batchaug.data.storage import _fmt_bytes
from batchaug.data.writer import DiskFullError, WriteResult, order_record, stored_order, \
    write_cache
from batchaug.errors import CLIError

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png")
_CIFAR = {
    # kind: (usual folder name, files that must be present, display name)
    "cifar10": ("cifar-10-batches-py",
                [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch", "batches.meta"],
                "CIFAR-10"),
    "cifar100": ("cifar-100-python", ["train", "test", "meta"], "CIFAR-100"),
}
#: Folder names that mean a dataset split, not a class: SRC probably points one level too high.
SPLIT_NAMES = {"train", "training", "test", "testing", "val", "valid", "validation", "dev",
               "eval"}


def detect_source(src: Path) -> Tuple[str, Path]:
    """``(kind, folder)``: kind is cifar10, cifar100 or imagefolder; folder holds the data."""
    if not src.exists():
        raise FileNotFoundError(f"{src}: no such directory")
    if not src.is_dir():
        raise NotADirectoryError(f"{src}: SRC must be a directory (ImageFolder or CIFAR)")
    for kind, (folder, files, _) in _CIFAR.items():
        if (src / folder).is_dir():
            return kind, src / folder
        # Pointed at the batch folder itself (any name): recognised by its metadata file.
        if (src / files[-1]).is_file() and (src / files[0]).is_file():
            return kind, src
    return "imagefolder", src


def load_image(path: str):
    """ImageFolder's loader, decoding fully so that a truncated file fails here, by name."""
    from batchaug.data.sources import decode_pil

    return decode_pil(path, path)


def is_image_file(path: str) -> bool:
    return path.lower().endswith(IMAGE_EXTENSIONS)


def _cifar_dataset(kind: str, folder: Path, train: bool):
    from torchvision.datasets import CIFAR10, CIFAR100

    _, files, name = _CIFAR[kind]
    for f in files:
        if not (folder / f).is_file():
            raise FileNotFoundError(f"{folder / f}: missing from the {name} directory")
    base = CIFAR10 if kind == "cifar10" else CIFAR100
    # torchvision compares each file's MD5 with the official download's; a user's own copy
    # (re-exported, a subset, or the small files our tests write) would fail that, so only the
    # files' presence is checked here and their content when read (shapes, labels). Reading
    # them unpickles them, exactly as torchvision does: CIFAR's python format *is* pickle, and
    # this is the user's own dataset directory, not a downloaded or shared cache (caches are
    # never unpickled).
    cls = type(f"{base.__name__}Dir", (base,), {
        "base_folder": folder.name,
        "train_list": [[f, None] for f, _ in base.train_list],
        "test_list": [[f, None] for f, _ in base.test_list],
        "meta": {**base.meta, "md5": None},
    })
    try:
        return cls(str(folder.parent), train=train, download=False)
    except Exception as exc:  # a damaged pickle raises anything from EOFError to KeyError
        raise ValueError(f"{folder}: cannot read the {name} files ({type(exc).__name__}: "
                         f"{exc})") from None


def _check_paths(src: Path, out: Path, overwrite: bool,
                 files: Optional[List[str]] = None) -> None:
    """Refuse, before decoding anything, every OUT that the final save would refuse.

    ``files``: SRC is these files (tar shards), not a folder that is read whole."""
    s, o = src.resolve(), out.resolve()
    if files is not None:
        for f in files:
            if Path(f).resolve().is_relative_to(o):
                raise CLIError(f"shard {f} is inside OUT {out}; replacing OUT would delete it")
    elif o == s:
        raise CLIError(f"OUT {out} is SRC itself; write the cache to another directory")
    if files is None and o.is_relative_to(s):
        raise CLIError(f"OUT {out} is inside SRC {src}; write the cache outside the dataset "
                       f"directory (it would be read as part of the data next time)")
    if files is None and s.is_relative_to(o):
        raise CLIError(f"SRC {src} is inside OUT {out}; replacing OUT would delete the dataset")
    check_destination(out, overwrite)  # the rule save(..., overwrite) applies
    parent = o.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise CLIError(f"cannot create {out}: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise CLIError(f"cannot create {out}: {parent} is not writable")


def _check_crop(samples: Optional[List[Tuple[str, int]]], fixed_hw: Optional[Tuple[int, int]],
                resize: Optional[int], crop: Optional[int]) -> None:
    """Refuse a --center-crop that would pad images with black borders (CenterCrop pads).

    ``samples``: ImageFolder's ``(path, class)`` list, whose sizes are read from the file
    headers (no decoding); ``fixed_hw``: the one size of every image (CIFAR: 32 x 32).
    """
    if crop is None:
        return
    if resize is not None:
        if crop > resize:
            raise CLIError(f"--center-crop {crop} is larger than --resize {resize}: every image "
                           f"would be padded with black borders; use --center-crop <= --resize")
        return
    fix = (f"add --resize N (N >= {crop}, e.g. --resize {crop}) to scale each image's shorter "
           f"side to N before the crop")
    if fixed_hw is not None:
        if crop > min(fixed_hw):
            raise CLIError(f"--center-crop {crop} without --resize: the images are "
                           f"{fixed_hw[0]}x{fixed_hw[1]} and would be padded with black "
                           f"borders; {fix}")
        return
    from PIL import Image

    print(f"checking image sizes (--center-crop {crop} without --resize)", file=sys.stderr)
    small: List[str] = []
    for path, _ in samples or []:
        try:
            with Image.open(path) as im:  # reads the header only
                w, h = im.size
        except Exception:  # unreadable: reported (or skipped) by the decoding pass
            continue
        if min(w, h) < crop:
            small.append(f"{path} ({w}x{h})")
    if small:
        shown = ", ".join(small[:5]) + (f", ... ({len(small) - 5} more)" if len(small) > 5 else "")
        raise CLIError(f"--center-crop {crop} without --resize: {len(small)} of "
                       f"{len(samples or [])} images are smaller than {crop} px on a side and "
                       f"would be padded with black borders: {shown}; {fix}")


def _describe_classes(classes: List[str], n: int, folder: Path) -> None:
    """Print what ``cache build`` found in the class folders (and a warning) to stderr."""
    shown = ", ".join(classes[:20]) + (f", ... ({len(classes) - 20} more)"
                                       if len(classes) > 20 else "")
    print(f"reading {n} images from {folder}; found {len(classes)} classes: {shown}",
          file=sys.stderr)
    splits = [c for c in classes if c.lower() in SPLIT_NAMES]
    if splits and (len(splits) >= 2 or len(classes) == 1):
        print(f"warning: the class folders {', '.join(splits)} look like dataset splits, not "
              f"classes: SRC should be one split's folder (one sub-folder per class), e.g. "
              f"{folder / splits[0]}", file=sys.stderr)


class _KeepOnePixelResize:
    """torchvision's ``Resize(size, max_size=max_size)`` for ``--resize N --max-size M``,
    except that no side drops to 0 pixels: a 1 x 400 strip with ``--resize 16 --max-size 40``
    would be 0 x 40, which torchvision refuses ("height and width must be > 0", without the
    file's name), stopping the whole build; it becomes 1 x 40. Every other image gets
    torchvision's size and pixels exactly, and the ``repr`` (recorded in meta.json, compared
    on ``--resume``) is the ``Resize``'s. (A module-level class: workers unpickle it.)"""

    def __init__(self, size: int, max_size: Optional[int]) -> None:
        from torchvision import transforms as T

        self.resize = T.Resize(size, max_size=max_size)

    def __call__(self, img):
        from torchvision.transforms import functional as TF

        _, h, w = TF.get_dimensions(img)
        r = self.resize
        size = TF._compute_resized_output_size((h, w), [r.size], r.max_size)
        if min(size) >= 1:
            return r(img)
        return TF.resize(img, [max(1, s) for s in size], r.interpolation, None, r.antialias)

    def __repr__(self) -> str:
        return repr(self.resize)


def _pre_transform(resize: Optional[int], crop: Optional[int], max_size: Optional[int] = None):
    if resize is None and crop is None:
        return None
    from torchvision import transforms as T

    steps: List[Any] = []
    if resize is not None:
        steps.append(_KeepOnePixelResize(resize, max_size))
    if crop is not None:
        steps.append(T.CenterCrop(crop))
    return T.Compose(steps)


def _write(dataset, out: Path, pre, args: argparse.Namespace, skip_bad: bool,
           source: Dict[str, Any]) -> WriteResult:
    """The streaming writer, with its warnings as stderr lines (skips are listed after)."""
    if args.resume:
        print(f"--resume: continuing an interrupted write of {out} if there is one",
              file=sys.stderr)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = write_cache(dataset, out, pre_transform=pre, num_workers=args.workers,
                                 skip_bad=skip_bad, overwrite=args.overwrite,
                                 resume=args.resume, source=source, shuffle=not args.no_shuffle,
                                 seed=args.seed, storage=getattr(args, "storage", "raw"),
                                 quality=getattr(args, "quality", None) or 90)
        except DiskFullError as exc:
            raise CLIError(str(exc).split("] ", 1)[-1]) from None
    for w in caught:
        text = str(w.message)
        if text.startswith("an interrupted write of"):  # the writer's: one stderr line
            print(f"warning: {text}", file=sys.stderr)
        elif not text.startswith("skipped "):  # (skips are listed below) e.g. 16-bit: as was
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    if result.resumed_from:
        print(f"resumed after {result.resumed_from} of {len(dataset)} images", file=sys.stderr)
    return result


def build_command(args: argparse.Namespace) -> int:
    """``batchaug cache build SRC OUT``: decoded by the streaming writer, ``write_cache``."""
    src, out = Path(args.src), Path(args.out)
    from batchaug.data.sources import TarShards, is_tar_source

    shards = None
    if is_tar_source(args.src):  # WebDataset shards: a .tar, or a brace pattern of them
        try:
            shards = TarShards(args.src)
        except (OSError, ValueError, TypeError) as exc:
            raise CLIError(str(exc)) from None
        kind, folder = "webdataset", Path(shards.shards[0]).parent
    else:
        kind, folder = detect_source(src)
    max_size = getattr(args, "max_size", None)
    storage = getattr(args, "storage", "raw")
    if max_size is not None and args.resize is None:
        raise CLIError("--max-size caps the longer side after --resize N: add --resize")
    if max_size is not None and max_size <= args.resize:
        raise CLIError(f"--max-size {max_size} must be larger than --resize {args.resize}")
    quality = getattr(args, "quality", None)
    if quality is not None and storage != "jpeg":
        # raw pixels have no quality: writing raw would silently ignore the request
        raise CLIError(f"--quality {quality} is the JPEG quality: add --storage jpeg (raw "
                       f"storage keeps the pixels as they are)")
    if quality is not None and not 1 <= quality <= 100:
        raise CLIError(f"--quality must be in 1..100, got {quality}")
    _check_paths(folder if shards is not None else src, out, args.overwrite,
                 None if shards is None else shards.shards)  # all before any decoding
    source: Dict[str, Any] = {"kind": kind, "path": str(folder.resolve())}
    if shards is not None:
        source["shards"] = [os.path.basename(p) for p in shards.shards]
    pre = _pre_transform(args.resize, args.center_crop, max_size)
    if args.resize is not None:
        source["resize"] = args.resize
    if max_size is not None:
        source["max_size"] = max_size
    if args.center_crop is not None:
        source["center_crop"] = args.center_crop
    if shards is not None:
        print(f"reading {len(shards)} samples from {len(shards.shards)} tar shard(s)",
              file=sys.stderr)
        dataset = shards
        result = _write(dataset, out, pre, args, args.skip_bad, source)
    elif kind == "imagefolder":
        from torchvision.datasets import ImageFolder

        dataset = ImageFolder(str(folder), loader=load_image, is_valid_file=is_image_file)
        _describe_classes(dataset.classes, len(dataset), folder)
        _check_crop(dataset.samples, None, args.resize, args.center_crop)
        result = _write(dataset, out, pre, args, args.skip_bad, source)
    else:
        dataset = _cifar_dataset(kind, folder, train=args.split == "train")
        source["dataset"] = type(dataset).__mro__[1].__name__  # CIFAR10/CIFAR100
        source["split"] = args.split
        _check_crop(None, tuple(dataset.data.shape[1:3]), args.resize, args.center_crop)
        print(f"reading {_CIFAR[kind][2]} {args.split} split ({len(dataset)} images) from "
              f"{folder}", file=sys.stderr)
        if pre is not None or storage != "raw":
            result = _write(dataset, out, pre, args, False, source)
        else:  # already one (N, 32, 32, 3) uint8 array in memory: saved in the writer's order
            t0 = time.perf_counter()
            images, labels = dataset.data, torch.as_tensor(dataset.targets)
            order = stored_order(len(dataset), not args.no_shuffle, args.seed)
            if order is not None:
                images, labels = images[order], labels[order]
            cache = DeviceCache.from_tensors(images, labels, device="cpu", layout="NHWC",
                                             classes=list(dataset.classes))
            cache.source = {**source, **order_record(not args.no_shuffle, args.seed)}
            cache.save(out, overwrite=args.overwrite)
            result = WriteResult(str(out), len(cache), tuple(cache.images.shape), cache.dtype,
                                 cache.classes, seconds=time.perf_counter() - t0,
                                 bytes_written=cache.images.numel())
    n, c, h, w = result.shape
    ncls = _classes_text(result.classes, out)
    if result.stored_bytes is not None:  # ragged: sizes vary or bytes are JPEG
        what = "jpeg" if result.storage == "jpeg" else "raw"
        per = result.stored_bytes / max(1, n)
        print(f"wrote {out}: {n} images, {c} channel(s), up to {h}x{w}, {what}, "
              f"{per:.0f} bytes per image, {ncls}, {_fmt_bytes(result.nbytes)}")
        _print_skipped(result.skipped, len(dataset))
        return 0
    rate = ""
    if result.seconds > 0 and result.rows - result.resumed_from > 0:
        done = len(dataset) - result.resumed_from
        rate = (f" in {result.seconds:.1f} s ({done / result.seconds:.0f} img/s, "
                f"{result.bytes_written / result.seconds / 1e6:.1f} MB/s written)")
    print(f"wrote {out}: {n} images {c}x{h}x{w} {str(result.dtype).replace('torch.', '')}, "
          f"{ncls}, {_fmt_bytes(result.nbytes)}{rate}")
    _print_skipped(result.skipped, len(dataset))
    return 0


def _print_skipped(skipped, total: int) -> None:
    if skipped:
        print(f"skipped {len(skipped)} unreadable image(s) of {total} (--skip-bad):",
              file=sys.stderr)
        for _, reason in skipped[:10]:
            print(f"  {reason}", file=sys.stderr)
        if len(skipped) > 10:
            print(f"  ... and {len(skipped) - 10} more", file=sys.stderr)


def _classes_text(classes: Optional[List[str]], out: Path) -> str:
    """``"N classes"``, or for a source without class names (tar shards' ``.cls`` numbers)
    how many distinct labels were written."""
    if classes is not None:
        return f"{len(classes)} classes"
    try:
        labels = np.load(atomic.resolve(out) / "labels.npy", allow_pickle=False)
    except (OSError, ValueError):
        return "no class names"
    return f"{len(np.unique(labels))} labels (no class names)"


def info_command(args: argparse.Namespace) -> int:
    """``batchaug cache info PATH [--verify]``: exit 1 when the integrity check fails."""
    path = Path(args.path)
    meta = read_meta(path)  # unreadable/foreign/newer meta.json: one-line error, exit 2
    n, c, h, w = meta["shape"]
    classes = meta.get("classes")
    files = meta["files"]
    total = sum(int(rec["size"]) for rec in files.values())
    print(f"cache:    {path}")
    print(f"format:   {meta['format']} v{meta['format_version']} ({meta.get('created_by')})")
    if is_ragged(meta):
        storage = meta.get("storage", "raw")
        kind = "raw"
        if storage == "jpeg":
            # the quality applies only to the images encoded here, not to a file's own bytes
            kind = (f"jpeg (each the source file's own bytes, no quality applied)"
                    if meta.get("originals") == n else f"jpeg q{meta.get('quality')}")
        print(f"images:   {n} x {c} channel(s), {'ragged' if meta.get('ragged') else 'one size'}"
              f", up to {h} x {w}, {meta['dtype']} stored {kind} (values "
              f"{meta.get('value_range')})")
        try:
            index: Optional[np.ndarray] = open_ragged(path, meta)
            print(f"sizes:    {describe_sizes(index)}")
            raw = float((index[:, 2] * index[:, 3]).sum()) * c / max(1, n)  # decoded C * h * w
        except CacheFormatError as exc:
            index, raw = None, float("nan")
            print(f"sizes:    unreadable ({exc})")
        data = int(files[DATA]["size"])
        print(f"per image: {data / max(1, n):.0f} bytes stored ({storage}); raw pixels would "
              f"be {raw:.0f}")
        if storage == "jpeg":
            print(f"jpeg:     {originals_text(meta.get('originals'), n)}")
        hint = storage_hint(meta, index, raw)
        if hint:
            print(f"speed:    {hint}")
    else:
        print(f"images:   {n} x {c} x {h} x {w} {meta['dtype']} (stored {meta['layout']}, values "
              f"{meta.get('value_range')})")
    targets = meta.get("targets") or {}
    if targets:
        parts = []
        if "masks" in targets:
            if is_ragged(meta) and meta.get("ragged"):  # each at its image's own size
                parts.append(f"masks {n}, each at its image's size (up to {h} x {w}), "
                             f"{targets['masks']['dtype']}")
            else:
                parts.append(f"masks {n} x {h} x {w} {targets['masks']['dtype']}")
        if "boxes" in targets:
            parts.append(f"boxes {n} x {targets['boxes']['max_boxes']} (padded) XYXY float32, "
                         f"with box_valid and box_labels")
        labels = "per-image labels" if meta.get("has_labels", True) else "no per-image labels"
        print(f"targets:  {'; '.join(parts)}; {labels}")
    if classes is None:
        print("classes:  (none recorded)")
    else:
        shown = ", ".join(classes[:10]) + (f", ... ({len(classes) - 10} more)"
                                           if len(classes) > 10 else "")
        print(f"classes:  {len(classes)}: {shown}")
    print(f"bytes:    {total} ({_fmt_bytes(total)}) on disk: " + ", ".join(
        f"{name} {rec['size']}" for name, rec in files.items()))
    source = meta.get("source") or {}
    if source:
        print("source:   " + ", ".join(f"{k}={v}" for k, v in source.items()))
    note = atomic.interrupted_note(atomic.resolve(path))
    if note is not None:
        print(f"interrupted: {note}")
    try:
        open_cache(path, verify=args.verify)
    except CacheFormatError as exc:
        print(f"integrity: FAILED: {exc}")
        return 1
    if args.verify:
        print("integrity: OK (sizes, headers and SHA-256 of every file match meta.json)")
    else:
        print("integrity: OK (sizes and headers; --verify also checks SHA-256)")
    return 0


# What docs/performance.md ("Which storage wins when") measured: 300 photos of 180-420 px,
# RandomResizedCrop(128) + flip in the loader, one thread (median same-round ratios)
_RAW_OVER_JPEG = 1.7
_RESIZED_OVER_RAW = 2.3
_LARGE_SHORT_SIDE = 256  # photos whose shorter side is mostly above a 224 crop's Resize(256)


def storage_hint(meta: Dict[str, Any], index: Optional[np.ndarray], raw: float) -> str:
    """``cache info``'s suggestion of a faster storage for a ragged cache (its ``index.npy``
    rows, None if unreadable; ``raw`` decoded bytes per image), where one clearly is
    (docs/performance.md): raw pixels instead of JPEG when decoding costs more than the
    bytes; a size-reducing pre_transform for raw photos mostly larger than a crop needs."""
    stored = int(meta["files"][DATA]["size"]) / max(1, int(meta["shape"][0]))
    if meta.get("storage", "raw") == "jpeg":
        return (f"raw storage (cache build without --storage jpeg) reads photos about "
                f"{_RAW_OVER_JPEG:g}x faster per thread (no JPEG decode per batch) for "
                f"{raw / max(1.0, stored):.1f}x the bytes; add --resize N to shrink them too "
                f"(docs/performance.md, Which storage wins when)")
    if index is None or len(index) == 0:
        return ""
    short = float(np.median(np.minimum(index[:, 2], index[:, 3])))
    if short <= _LARGE_SHORT_SIDE:
        return ""
    return (f"the photos' shorter side is {short:.0f} px (median): if training crops to 224 px "
            f"or less, build with --resize 256 (a pre_transform that shrinks each photo before "
            f"it is cached) to read fewer pixels per batch, about {_RESIZED_OVER_RAW:g}x faster "
            f"for 128 px crops with --resize 146 (docs/performance.md, Which storage wins when)")

