"""One pass over a map-style dataset: what ``DeviceCache.from_dataset`` and ``write_cache`` both
run.

Each sample is read and pre-transformed once, turned into a ``(C, H, W)`` tensor, checked, and
its label and targets taken, possibly in ``DataLoader`` workers, which return CPU tensors and
errors as values (so the main process raises them with their own message, not re-wrapped).
``fill`` is that one loop; the build's columns say where the rows go: memory
(``MemoryColumns``) or a cache directory (``writer._DiskColumns``).
"""
from __future__ import annotations

import math
import os
import re
import time
import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from batchaug.data.storage import check_cache_dtype, check_classes, check_device_memory, \
    check_label_range, convert_images, empty_images
from batchaug.data.target_writer import TargetParts
from batchaug.data.targets import is_target, label_to_int, prepare_sample
from batchaug.errors import BadImageError, hint
from batchaug._validation import check_int


#: What reading a corrupt, truncated or unsupported image file raises (PIL, ImageFolder).
_READ_ERRORS: Tuple[type, ...] = (OSError, SyntaxError)
try:
    from PIL import Image as _PILImage

    _READ_ERRORS += (_PILImage.DecompressionBombError,)
except ImportError:  # pragma: no cover - pillow is a dependency
    pass
#: PIL modes of 16-bit (and 32-bit integer) grayscale images, e.g. a 16-bit PNG.
_WIDE_MODES = ("I;16", "I;16L", "I;16B", "I;16N", "I")
_warned_16bit = False


class _SizeMismatch(ValueError):
    """Two images differ in height or width (same channels): a fixed-size pass switches to a
    ragged cache when it can, else this is raised with the fix."""


def to_8bit(image: Any, name: str) -> Any:
    """A 16-bit grayscale PIL image (mode ``I;16``/``I``) as an 8-bit ``L`` image, value ``v``
    as ``round(v / 257)`` (PIL's own ``convert`` clips to 255: a 16-bit PNG comes out almost
    all white); warns once per process. Mode ``I`` (32-bit integers, no declared bit depth)
    with every value in 0..255 holds 8-bit values, kept as they are. Other modes: unchanged.
    """
    global _warned_16bit
    from PIL import Image

    if image.mode not in _WIDE_MODES:
        return image
    arr = np.asarray(image).astype(np.int64)
    if arr.size and (arr.min() < 0 or arr.max() > 65535):
        raise BadImageError(f"{name}: {image.mode} image with values in [{arr.min()}, "
                            f"{arr.max()}], outside the 16-bit range 0..65535: convert it to "
                            f"8 bits yourself (a pre_transform)")
    if image.mode == "I" and (arr.size == 0 or arr.max() <= 255):
        return Image.fromarray(arr.astype(np.uint8))  # 8-bit values in 32-bit ints: as is
    if not _warned_16bit:
        _warned_16bit = True
        warnings.warn(f"{name}: 16-bit image ({image.mode}) converted to 8 bits as "
                      f"round(value / 257); later 16-bit images are converted the same way "
                      f"without a warning", stacklevel=2)
    return Image.fromarray(((arr + 128) // 257).astype(np.uint8))  # mode "L"


def sample_to_chw(image: Any, index: int) -> Tensor:
    """A PIL image, HWC uint8 numpy array or CHW tensor as a CPU ``(C, H, W)`` tensor.

    uint8 stays uint8; a floating tensor is taken as [0, 1] (what ``ToTensor`` gives). A 16-bit
    grayscale PIL image is scaled to 8 bits (``to_8bit``), not clipped.
    """
    try:
        from PIL import Image
    except ImportError:  # pragma: no cover - pillow is a dependency
        Image = None
    if Image is not None and isinstance(image, Image.Image):
        image = to_8bit(image, f"dataset[{index}]")
        if image.mode not in ("L", "RGB", "RGBA"):
            image = image.convert("RGB")  # palette, CMYK...: RGB as torchvision's loader
        image = np.array(image)  # uint8 HW or HWC, a writable copy
    if isinstance(image, np.ndarray):
        if image.dtype != np.uint8:
            raise TypeError(f"dataset[{index}]: numpy images must be HWC uint8, got {image.dtype}")
        if image.ndim not in (2, 3):
            raise ValueError(f"dataset[{index}]: numpy image must be HW or HWC, got shape "
                             f"{image.shape}")
        t = torch.from_numpy(np.ascontiguousarray(image))
        return t.unsqueeze(0) if t.dim() == 2 else t.permute(2, 0, 1).contiguous()
    if isinstance(image, Tensor):
        if image.dim() == 2:
            image = image.unsqueeze(0)
        if image.dim() != 3:
            raise ValueError(f"dataset[{index}]: tensor images must be CHW, got shape "
                             f"{tuple(image.shape)}")
        if image.dtype != torch.uint8 and not image.is_floating_point():
            raise TypeError(f"dataset[{index}]: tensor images must be uint8 or floating in "
                            f"[0, 1], got {image.dtype}")
        image = image.detach().cpu()
        return image.contiguous() if image.dtype == torch.uint8 else image.float().contiguous()
    raise TypeError(f"dataset[{index}]: expected a PIL image, HWC uint8 numpy array or CHW "
                    f"tensor, got {type(image).__name__}")


class _Prepared(Dataset):
    """The user's dataset as ``(index, CHW tensor, label, error, original)`` per sample, never
    raising: a read error comes back as a ``BadImageError`` naming the file. With
    ``originals``, ``original`` is the source file's JPEG bytes when they decode to exactly the
    prepared image (a JPEG cache stores them instead of encoding again), else None.
    """

    def __init__(self, dataset: Any, pre_transform: Optional[Callable],
                 originals: bool = False) -> None:
        self.dataset = dataset
        self.pre_transform = pre_transform
        self.originals = originals

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i: int):
        try:
            item = self.dataset[i]
            if not isinstance(item, (tuple, list)) or len(item) < 2:
                raise TypeError(f"dataset[{i}] must be an (image, label) pair, got "
                                f"{type(item).__name__}")
            target = is_target(item[1])  # (image, mask) or (image, detection dict)
            if target:
                image, sample = prepare_sample(item, self.pre_transform, i,
                                               _name(self.dataset, i))
            else:
                image = item[0] if self.pre_transform is None else self.pre_transform(item[0])
            chw = sample_to_chw(image, i)
            label = sample if target else label_to_int(item[1], i)
            return i, chw, label, None, self._original(i, chw)
        except BadImageError as exc:  # already names its file
            return i, None, None, exc, None
        except _READ_ERRORS as exc:  # PIL decodes lazily: in dataset[i] or the pre_transform
            return i, None, None, BadImageError(
                f"{_name(self.dataset, i)}: cannot read image ({type(exc).__name__}: {exc})"
            ), None
        except Exception as exc:  # returned, raised by the main process with its own message
            return i, None, None, exc, None

    def _original(self, i: int, chw: Tensor) -> Optional[Tensor]:
        if not self.originals or chw.dtype != torch.uint8:
            return None
        from batchaug.data.jpeg import original_if_exact

        return original_if_exact(source_jpeg(self.dataset, i), chw)


def source_jpeg(dataset: Any, i: int) -> Optional[Tensor]:
    """Sample ``i``'s JPEG file bytes where the dataset says which file it read (an ImageFolder
    or DatasetFolder's ``samples[i][0]``), else None. Whether they hold the prepared pixels is
    checked by decoding them (``original_if_exact``), never assumed."""
    from batchaug.data.jpeg import jpeg_file_bytes

    stored = getattr(dataset, "source_bytes", None)  # HuggingFaceImages, TarShards
    if callable(stored):
        return jpeg_file_bytes(stored(i))
    samples = getattr(dataset, "samples", None)
    try:
        path = samples[i][0]
    except (TypeError, IndexError, KeyError):
        return None
    if not isinstance(path, (str, os.PathLike)):
        return None
    try:
        with open(path, "rb") as f:
            return jpeg_file_bytes(f.read())
    except OSError:
        return None


def _name(dataset: Any, i: int) -> str:
    """``dataset[i]``, with the file name when the dataset knows it (ImageFolder)."""
    named = getattr(dataset, "sample_name", None)  # HuggingFaceImages, TarShards
    if callable(named):
        return named(i)
    samples = getattr(dataset, "samples", None)
    try:
        return f"dataset[{i}] ({samples[i][0]})"
    except (TypeError, IndexError, KeyError):
        return f"dataset[{i}]"


def _mismatch(dataset: Any, i: int, shape: Tuple[int, ...], ref: Tuple[int, Tuple[int, ...]]
              ) -> ValueError:
    j, ref_shape = ref
    if shape[0] != ref_shape[0]:
        return ValueError(f"{_name(dataset, i)} has {shape[0]} channel(s) (C, H, W = {shape}) "
                          f"but {_name(dataset, j)} has {ref_shape[0]} ({ref_shape}); images "
                          f"with different channel counts cannot share a cache (grayscale 'L' "
                          f"= 1, 'RGB' = 3, 'RGBA' = 4): convert them all to one mode, e.g. "
                          f"pre_transform=lambda im: im.convert('RGB') (inside a Compose with "
                          f"any resize)")
    fix = hint("pass a resizing pre_transform, e.g. pre_transform=torchvision.transforms."
               "Compose([Resize(256), CenterCrop(224)])", "add --resize and --center-crop, "
               "e.g. --resize 256 --center-crop 224")
    return _SizeMismatch(f"{_name(dataset, i)} has image shape {shape} (C, H, W) but "
                         f"{_name(dataset, j)} has {ref_shape}; a cache holds images of one "
                         f"size: {fix}")


def skipped_summary(skipped: Sequence[Tuple[int, str]], n: int, shown: int = 5) -> str:
    """``skipped 2 of 40 unreadable images: reason; reason`` (the first ``shown`` of them)."""
    text = (f"skipped {len(skipped)} of {n} images as unreadable "
            f"({hint('skip_bad=True', '--skip-bad')}): ") + "; ".join(
        reason for _, reason in skipped[:shown])
    return text + (f"; ... and {len(skipped) - shown} more" if len(skipped) > shown else "")


def check_dataset_args(dataset: Any, pre_transform: Optional[Callable], dtype: torch.dtype,
                       num_workers: int, classes: Optional[Sequence[str]]
                       ) -> Tuple[torch.dtype, Optional[List[str]]]:
    """Validate what ``from_dataset`` and ``write_cache`` share; returns ``(dtype, classes)``.

    ``classes=None`` takes ``dataset.classes`` when it is a list of names (ImageFolder, CIFAR).
    """
    if not hasattr(dataset, "__getitem__") or not hasattr(dataset, "__len__"):
        raise TypeError(f"dataset must be a map-style dataset (__getitem__ and __len__), got "
                        f"{type(dataset).__name__}")
    if pre_transform is not None and not callable(pre_transform):
        raise TypeError(f"pre_transform must be callable or None, got {pre_transform!r}")
    dtype = check_cache_dtype(dtype)
    check_int(num_workers, "num_workers", 0)
    if classes is None:
        found = getattr(dataset, "classes", None)
        if isinstance(found, (list, tuple)) and all(isinstance(c, str) for c in found):
            classes = list(found)
    classes = check_classes(classes)
    if len(dataset) == 0:
        raise ValueError("dataset is empty: nothing to cache")
    return dtype, classes


def source_info(dataset: Any, pre_transform: Optional[Callable],
                source: Optional[dict] = None) -> dict:
    """What meta.json's ``source`` records about a dataset pass (``source`` overrides)."""
    text = None
    if pre_transform is not None:  # without memory addresses: the same for every run
        text = re.sub(r" at 0x[0-9a-fA-F]+", "", " ".join(repr(pre_transform).split()))
    info = {"kind": "dataset", "dataset": type(dataset).__name__, "pre_transform": text}
    info.update(source or {})
    return info


class SampleChecker:
    """The per-sample rules of every pass over a dataset: ``check(i, image, label, err)`` is
    True for a sample to keep; a bad image raises (with ``skip_bad``: recorded in ``skipped``),
    and so does a shape other than the first kept one's (``ref``: ``(index, (C, H, W))``).
    """

    def __init__(self, dataset: Any, skip_bad: bool,
                 ref: Optional[Tuple[int, Tuple[int, ...]]] = None, ragged: bool = False) -> None:
        self.dataset = dataset
        self.skip_bad = skip_bad
        self.ref = ref
        #: Images may differ in height and width (a ragged cache); channels must still agree.
        self.ragged = ragged
        self.skipped: List[Tuple[int, str]] = []

    def check(self, i: int, image: Optional[Tensor], label: Optional[int],
              err: Optional[BaseException]) -> bool:
        if err is not None:
            if not isinstance(err, BadImageError):
                raise err
            if self.skip_bad:
                self.skipped.append((i, str(err)))
                return False
            raise BadImageError(f"{err}; {hint('pass skip_bad=True', 'add --skip-bad')} to "
                                f"skip unreadable images")
        if self.ref is None:
            self.ref = (i, tuple(image.shape))
        elif tuple(image.shape) != self.ref[1] and not (
                self.ragged and image.shape[0] == self.ref[1][0]):
            raise _mismatch(self.dataset, i, tuple(image.shape), self.ref)
        return True


def stack_as(good: List[Tensor], dtype: torch.dtype) -> Tensor:
    """Stack kept CHW samples and convert them to the cache dtype (uint8 or [0, 1] floats)."""
    if any(t.is_floating_point() for t in good):
        good = [convert_images(t, torch.float32) for t in good]
    return convert_images(torch.stack(good), dtype)


def collate_chunk(batch: List[tuple]) -> Tuple[List[tuple], Optional[Tensor]]:
    """In the worker: the chunk's images stacked into one tensor when they share shape and
    dtype, so that one shared-memory block crosses to the main process instead of one per
    image. Returns ``(samples, stacked)``: the samples then hold views of ``stacked``."""
    images = [s[1] for s in batch if s[3] is None]
    if not images or len({(tuple(t.shape), t.dtype) for t in images}) != 1:
        return batch, None
    stacked = torch.stack(images)
    views = iter(stacked.unbind(0))
    return [(i, next(views) if err is None else None, label, err, original)
            for i, _, label, err, original in batch], stacked


def chunk_images(good: List[Tensor], stacked: Optional[Tensor], dtype: torch.dtype) -> Tensor:
    """The kept images as one tensor in the cache dtype (``stack_as``'s conversion), taken
    from ``stacked`` when it holds exactly them."""
    if stacked is None or len(good) != stacked.shape[0]:
        return stack_as(good, dtype)  # some were skipped (or shapes differ: an error follows)
    if stacked.is_floating_point():
        stacked = convert_images(stacked, torch.float32)
    return convert_images(stacked, dtype)


def all_skipped(n: int, skipped: Sequence[Tuple[int, str]]) -> ValueError:
    return ValueError(f"no readable images: all {n} samples were skipped (the first: "
                      f"{skipped[0][1]})")


def fill(dataset: Any, pre_transform: Optional[Callable], num_workers: int, columns: Any,
         classes: Optional[Sequence[str]], bar: Any, chunk_size: int = 64, start: int = 0,
         order: Optional[Sequence[int]] = None) -> int:
    """The one loop of every cache build, in memory (``MemoryColumns``) and on disk
    (``writer._DiskColumns``); returns the bytes of images written.

    Samples ``start..`` (``dataset[order[start]], ...`` with ``order``) are read in chunks of
    ``chunk_size`` by ``num_workers`` workers. Each is checked and its targets taken before the
    next, so errors come in sample order whichever step finds them; a ``_SizeMismatch`` is
    raised unless ``columns.to_ragged(index)`` switched to ragged storage. Each chunk's kept
    samples and labels go to ``columns.write``, then ``columns.chunk_done()``.
    """
    prepared = _Prepared(dataset, pre_transform, columns.originals)
    if order is not None:
        prepared = torch.utils.data.Subset(prepared, order[start:])
    elif start:
        prepared = torch.utils.data.Subset(prepared, range(start, len(dataset)))
    t0 = time.perf_counter()
    written = 0
    for samples, stacked in DataLoader(prepared, batch_size=chunk_size, shuffle=False,
                                       num_workers=num_workers, collate_fn=collate_chunk):
        good, labels = [], []
        for i, image, label, err, original in samples:
            if _admit(columns, i, image, label, err):
                good.append((i, image, original))
                labels.append(columns.targets.take(label, _name(dataset, i)))
        if good:
            lab = np.asarray(labels, dtype="<i8")
            check_label_range(int(lab.min()), int(lab.max()), classes)
            written += columns.write(good, stacked, lab)
        columns.chunk_done()
        bar.update(len(samples))
        elapsed = time.perf_counter() - t0
        if elapsed > 0:
            bar.set_postfix_str(f"{written / elapsed / 1e6:.1f} MB/s", refresh=False)
    return written


def _admit(columns: Any, i: int, image: Optional[Tensor], label: Any,
           err: Optional[BaseException]) -> bool:
    try:
        return columns.checker.check(i, image, label, err)
    except _SizeMismatch:
        if not columns.to_ragged(i):
            raise
        return columns.checker.check(i, image, label, err)


class MemoryColumns:
    """The columns of an in-memory build (``DeviceCache.from_dataset``), filled by ``fill``: the
    images in one tensor on ``device`` (allocated once the first kept image fixes the row size)
    or a ``RaggedBuilder`` (JPEG, or uint8 images of different sizes: ``to_ragged``), the
    labels in a CPU tensor, the targets in an in-memory ``TargetParts``."""

    def __init__(self, dataset: Any, dtype: torch.dtype, device: torch.device,
                 channels_last: bool, storage: str, quality: int, skip_bad: bool) -> None:
        from batchaug.data.ragged import RaggedBuilder

        self.dataset, self.n, self.dtype, self.device = dataset, len(dataset), dtype, device
        self.channels_last = channels_last
        self.checker = SampleChecker(dataset, skip_bad, ragged=storage == "jpeg")
        self.builder = RaggedBuilder(storage, quality) if storage == "jpeg" else None
        self.originals = storage == "jpeg"  # (see _Prepared)
        self.dest: Optional[Tensor] = None
        self.labels = torch.empty(self.n, dtype=torch.int64)
        self.targets = TargetParts(ragged=self.builder is not None)
        self.rows = 0

    def build(self, pre_transform: Optional[Callable], num_workers: int,
              classes: Optional[Sequence[str]], show: bool
              ) -> Tuple[Any, Optional[Tensor], Dict[str, Any]]:
        """The pass behind ``DeviceCache.from_dataset`` (arguments checked there): ``fill``
        into these columns, then ``finish``; ``show``: a progress bar."""
        from tqdm.auto import tqdm

        with tqdm(total=self.n, disable=not show, desc="caching", unit="img") as bar:
            fill(self.dataset, pre_transform, num_workers, self, classes, bar)
        return self.finish()

    def write(self, good: List[Tuple[int, Tensor, Optional[Tensor]]], stacked: Optional[Tensor],
              labels: np.ndarray) -> int:
        """Rows ``self.rows..`` of every column: the kept ``(index, image, original)`` samples,
        their labels and queued targets; returns the bytes of images."""
        k = len(good)
        if self.builder is not None:
            before = self.builder.offset
            for i, image, original in good:
                self.builder.add(stack_as([image], torch.uint8)[0], _name(self.dataset, i),
                                 original)
            nbytes = self.builder.offset - before
        else:
            if self.dest is None:
                shape = self.checker.ref[1]
                check_device_memory(self.n * math.prod(shape) * self.dtype.itemsize + self.n * 8,
                                    self.device)
                self.dest = empty_images((self.n,) + shape, self.dtype, self.device,
                                         self.channels_last)
            rows = chunk_images([im for _, im, _ in good], stacked, self.dtype)
            self.dest[self.rows:self.rows + k].copy_(rows)
            nbytes = rows.numel() * rows.element_size()
        self.labels[self.rows:self.rows + k] = torch.from_numpy(labels)
        self.targets.write_chunk(self.rows)
        self.rows += k
        return nbytes

    def chunk_done(self) -> None:
        """Nothing to record per chunk in memory."""

    def to_ragged(self, i: int) -> bool:
        """Sample ``i`` differs in size from the first: uint8 images are kept at their own
        sizes from here (True), other caches cannot be (False: the mismatch is raised)."""
        from batchaug.data.ragged import RaggedBuilder

        if self.dtype != torch.uint8 or self.channels_last:
            return False
        self.builder = RaggedBuilder("raw")
        for k in range(self.rows):
            self.builder.add(self.dest[k], _name(self.dataset, k))
        self.dest = None
        self.checker.ragged = True
        self.targets.to_ragged()
        return True

    def finish(self) -> Tuple[Any, Optional[Tensor], Dict[str, Any]]:
        """``(images, labels or None, targets)`` on ``device``: the kept rows only."""
        if self.rows == 0:
            raise all_skipped(self.n, self.checker.skipped)
        if self.builder is not None:
            check_device_memory(self.builder.offset + self.n * 8, self.device)
            images: Any = self.builder.finish(self.device)
        else:  # drop the skipped rows' space
            images = self.dest if self.rows == self.n else self.dest[:self.rows].clone()
        labels = self.labels[:self.rows].to(self.device) if self.targets.has_labels else None
        targets = {k: v.to(self.device) for k, v in self.targets.tensors(self.rows).items()}
        return images, labels, targets
