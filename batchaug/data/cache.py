"""``DeviceCache``: a whole image dataset as one compact tensor on one device.

The deterministic part of an input pipeline (decode, resize, crop, convert) runs once; what is
left is an ``(N, C, H, W)`` image tensor (uint8 by default: 4x smaller than float32 and fast to
index) and an ``(N,)`` int64 label tensor, both on the training device. ``DeviceLoader`` draws
batches from it by on-device indexing, with no worker processes, collate or host-to-device copy.
"""
from __future__ import annotations

import numbers
import os
import pickle
import warnings
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch import Tensor

#: Image dtypes a cache may hold. Floating caches hold values in [0, 1] (uint8 / 255).
CACHE_DTYPES = (torch.uint8, torch.float16, torch.bfloat16, torch.float32)
#: Rows copied per step when converting or moving images, so that no second full-size copy
#: (host or device) is ever held: about 64 MiB of float32 at ImageNet size.
_CHUNK_BYTES = 64 * 1024 * 1024

DeviceLike = Union[str, torch.device, int, None]


class DeviceMemoryError(MemoryError):
    """Raised before allocating a cache that does not fit in the device's free memory."""

    def __init__(self, message: str, needed: int, free: int) -> None:
        super().__init__(message)
        self.needed = needed
        self.free = free


def _fmt_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{n} B"
        n /= 1024
    return f"{n} B"  # pragma: no cover


def memory_check_error(
    needed: int, free: int, device: Union[str, torch.device] = "cuda", what: str = "cache"
) -> Optional[DeviceMemoryError]:
    """Return the error to raise if ``needed`` bytes do not fit in ``free`` bytes, else None.

    Pure (no device query), so the decision is testable anywhere; ``check_device_memory`` feeds
    it ``torch.cuda.mem_get_info``.

    Example:
        >>> memory_check_error(10, 100) is None
        True
    """
    if needed <= free:
        return None
    return DeviceMemoryError(
        f"the {what} needs {_fmt_bytes(needed)} ({needed} bytes) on {device} but only "
        f"{_fmt_bytes(free)} ({free} bytes) are free. Options: keep the images as uint8 "
        f"(dtype=torch.uint8, 4x smaller than float32), pre-resize them smaller "
        f"(a smaller pre_transform / `cache build --resize`), load only this rank's part with "
        f"DeviceCache.load(path, shard=(rank, world_size)), or keep the cache on the CPU "
        f"(device='cpu').",
        needed=needed,
        free=free,
    )


def check_device_memory(needed: int, device: torch.device, what: str = "cache") -> None:
    """Raise ``DeviceMemoryError`` if ``needed`` bytes do not fit in ``device``'s free memory.

    Only CUDA devices are checked; on the CPU the operating system decides.
    """
    if device.type != "cuda":
        return
    free, _total = torch.cuda.mem_get_info(device)
    err = memory_check_error(needed, free, device, what)
    if err is not None:
        raise err


def pickling_error(device: torch.device) -> Optional[pickle.PicklingError]:
    """The error pickling a cache on ``device`` must raise, or None when it may be pickled."""
    if device.type == "cpu":
        return None
    return pickle.PicklingError(
        f"a DeviceCache holding {device.type} tensors cannot be pickled. This usually means it "
        f"was handed to a torch.utils.data.DataLoader with num_workers > 0, whose worker "
        f"processes pickle the dataset (and would fail with '_share_filename_: only available "
        f"on CPU'). Iterate it with batchaug.DeviceLoader(cache, batch_size) instead (no workers "
        f"needed: batches are drawn on the device), or use num_workers=0. To store it, use "
        f"cache.save(path); to move it, cache.to('cpu')."
    )


def resolve_device(device: DeviceLike) -> torch.device:
    """``None`` means the default accelerator: CUDA if available, else the CPU."""
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if isinstance(device, bool) or not isinstance(device, (str, torch.device, numbers.Integral)):
        raise TypeError(f"device must be a str, torch.device, int or None, got {device!r}")
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={str(dev)!r} was requested but CUDA is not available")
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    return dev


def check_cache_dtype(dtype: Any, name: str = "dtype") -> torch.dtype:
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"{name} must be a torch.dtype, got {dtype!r}")
    if dtype not in CACHE_DTYPES:
        raise ValueError(
            f"{name} must be one of {[str(d) for d in CACHE_DTYPES]}, got {dtype}"
        )
    return dtype


def convert_images(x: Tensor, dtype: torch.dtype) -> Tensor:
    """Convert an image tensor between uint8 ([0, 255]) and floating ([0, 1]) storage."""
    if x.dtype == dtype:
        return x
    if x.dtype == torch.uint8:  # scale in float32, then narrow: exact for bf16/fp16 rounding
        return x.to(torch.float32).div_(255.0).to(dtype)
    if dtype == torch.uint8:
        return x.to(torch.float32).mul(255.0).round_().clamp_(0, 255).to(torch.uint8)
    return x.to(dtype)


def empty_images(
    shape: Sequence[int], dtype: torch.dtype, device: torch.device, channels_last: bool
) -> Tensor:
    n, c, h, w = shape
    if channels_last:
        return torch.empty((n, h, w, c), dtype=dtype, device=device).permute(0, 3, 1, 2)
    return torch.empty((n, c, h, w), dtype=dtype, device=device)


def chunk_rows(row_bytes: int) -> int:
    return max(1, _CHUNK_BYTES // max(1, row_bytes))


def copy_images_chunked(dest: Tensor, src: Tensor) -> None:
    """``dest[:] = convert(src)`` a chunk of rows at a time: no full-size temporary."""
    step = chunk_rows(src[0].numel() * 4 if src.shape[0] else 1)
    for a in range(0, src.shape[0], step):
        part = src[a:a + step]
        if part.device != dest.device:
            part = part.to(dest.device)
        dest[a:a + step].copy_(convert_images(part, dest.dtype))


def _as_tensor(x: Any, name: str) -> Tensor:
    if isinstance(x, Tensor):
        return x
    if isinstance(x, np.ndarray):
        if x.dtype == object:
            raise TypeError(f"{name} must be a numeric array, got dtype=object")
        if not x.flags.writeable:  # torch.from_numpy warns on read-only arrays (e.g. memmaps)
            x = np.array(x)
        return torch.from_numpy(x)
    raise TypeError(f"{name} must be a torch.Tensor or numpy.ndarray, got {type(x).__name__}")


def check_labels(labels: Any, n: int, classes: Optional[Sequence[str]]) -> Tensor:
    labels = _as_tensor(labels, "labels")
    if labels.dim() != 1 or labels.shape[0] != n:
        raise ValueError(f"labels must have shape ({n},) to match images, got {tuple(labels.shape)}")
    if labels.dtype == torch.bool or labels.is_floating_point() or labels.is_complex():
        raise TypeError(f"labels must be an integer tensor, got {labels.dtype}")
    labels = labels.to(torch.int64)
    if n:
        lo, hi = int(labels.min()), int(labels.max())  # once, at construction, not per batch
        if lo < 0:
            raise ValueError(f"labels must be >= 0, got {lo}")
        if classes is not None and hi >= len(classes):
            raise ValueError(f"label {hi} is out of range for {len(classes)} classes")
    return labels


def check_classes(classes: Optional[Sequence[str]]) -> Optional[List[str]]:
    if classes is None:
        return None
    if isinstance(classes, str) or not all(isinstance(c, str) for c in classes):
        raise TypeError(f"classes must be a sequence of str or None, got {classes!r}")
    return list(classes)


class DeviceCache:
    """Images ``(N, C, H, W)`` and int64 labels ``(N,)`` held on one device.

    Build one with ``from_tensors``, ``from_dataset`` or ``load``; draw batches from it with
    ``DeviceLoader``. Floating caches hold values in [0, 1] (uint8 images divided by 255).

    Example:
        >>> cache = DeviceCache.from_tensors(torch.zeros(10, 3, 8, 8, dtype=torch.uint8),
        ...                                  torch.arange(10), device="cpu")
        >>> len(cache), cache.images.shape
        (10, torch.Size([10, 3, 8, 8]))
    """

    def __init__(
        self,
        images: Tensor,
        labels: Tensor,
        classes: Optional[Sequence[str]] = None,
        source: Optional[Dict[str, Any]] = None,
        shard: Optional[Tuple[int, int]] = None,
        global_len: Optional[int] = None,
    ) -> None:
        if not isinstance(images, Tensor) or images.dim() != 4:
            raise ValueError(
                f"images must be an (N, C, H, W) tensor, got "
                f"{tuple(images.shape) if isinstance(images, Tensor) else type(images).__name__}"
            )
        check_cache_dtype(images.dtype, "images.dtype")
        self.classes: Optional[List[str]] = check_classes(classes)
        labels = check_labels(labels, images.shape[0], self.classes)
        if labels.device != images.device:
            raise ValueError(f"labels are on {labels.device} but images on {images.device}")
        self.images: Tensor = images
        self.labels: Tensor = labels
        self.source: Dict[str, Any] = dict(source or {})
        #: ``(rank, world_size)`` when this is one part of a cache loaded with ``shard=``.
        self.shard: Optional[Tuple[int, int]] = tuple(shard) if shard is not None else None
        #: Length of the whole cache this is a part of (``len(self)`` when not sharded).
        self.global_len: int = int(global_len) if global_len is not None else len(labels)

    # --- constructors -------------------------------------------------------------------------
    @classmethod
    def from_tensors(
        cls,
        images: Union[Tensor, np.ndarray],
        labels: Union[Tensor, np.ndarray, Sequence[int]],
        device: DeviceLike = None,
        layout: str = "NCHW",
        *,
        dtype: Optional[torch.dtype] = None,
        channels_last: bool = False,
        classes: Optional[Sequence[str]] = None,
    ) -> "DeviceCache":
        """Wrap image and label tensors (torch or numpy) as a cache on ``device``.

        ``layout`` says how ``images`` is laid out: ``"NCHW"`` or ``"NHWC"`` (e.g. a numpy
        array straight from decoded images). ``labels`` are integer class indices: floats
        (even ``[1.0, 2.0]``) and bools are refused, never truncated. ``dtype`` defaults to the
        images' own (uint8 or float); converting uint8 to float divides by 255. ``device=None``
        means CUDA if available, else CPU. When nothing needs converting or moving, the tensors
        are used as they are (no copy).

        Example:
            >>> x = np.zeros((4, 32, 32, 3), dtype=np.uint8)
            >>> DeviceCache.from_tensors(x, [0, 1, 2, 3], device="cpu", layout="NHWC").images.shape
            torch.Size([4, 3, 32, 32])
        """
        if layout not in ("NCHW", "NHWC"):
            raise ValueError(f"layout must be 'NCHW' or 'NHWC', got {layout!r}")
        if not isinstance(labels, (Tensor, np.ndarray)):
            # A plain list: reject floats as float tensors are, never truncate 1.9 to 1.
            values = list(labels)
            for k, v in enumerate(values):
                if isinstance(v, (bool, np.bool_)) or not isinstance(
                        v, (numbers.Integral, np.integer, Tensor)):
                    raise TypeError(f"labels must be integer class indices, got {v!r} at index "
                                    f"{k}; convert them explicitly (e.g. [int(y) for y in labels]) "
                                    f"if that is what you mean")
            try:
                labels = (torch.as_tensor(values) if values
                          else torch.empty(0, dtype=torch.int64))
            except (TypeError, ValueError, RuntimeError) as exc:
                raise TypeError(f"labels must be a sequence of ints: {exc}") from None
        images = _as_tensor(images, "images")
        if images.dim() != 4:
            raise ValueError(
                f"images must be 4-D ({layout}), got shape {tuple(images.shape)}"
            )
        if layout == "NHWC":
            images = images.permute(0, 3, 1, 2)
        if images.dtype not in CACHE_DTYPES and dtype is None:
            raise TypeError(
                f"images have dtype {images.dtype}; pass dtype= one of "
                f"{[str(d) for d in CACHE_DTYPES]} or convert them first"
            )
        dtype = check_cache_dtype(images.dtype if dtype is None else dtype)
        if not isinstance(channels_last, bool):
            raise TypeError(f"channels_last must be a bool, got {channels_last!r}")
        dev = resolve_device(device)
        classes = check_classes(classes)
        labels = check_labels(labels, images.shape[0], classes)
        fmt = torch.channels_last if channels_last else torch.contiguous_format
        if images.device == dev and images.dtype == dtype and images.is_contiguous(memory_format=fmt):
            out = images
        else:
            check_device_memory(images.shape[0] * images[0].numel() * dtype.itemsize
                                + labels.numel() * 8, dev)
            out = empty_images(images.shape, dtype, dev, channels_last)
            copy_images_chunked(out, images)
        return cls(out, labels.to(dev), classes=classes, source={"kind": "tensors"})

    @classmethod
    def from_dataset(
        cls,
        dataset: Any,
        pre_transform: Optional[Any] = None,
        device: DeviceLike = None,
        dtype: torch.dtype = torch.uint8,
        *,
        channels_last: bool = False,
        num_workers: int = 0,
        progress: Optional[bool] = None,
        skip_bad: bool = False,
        classes: Optional[Sequence[str]] = None,
    ) -> "DeviceCache":
        """Decode a map-style dataset once into a cache on ``device``.

        ``dataset[i]`` gives ``(image, label)`` with a PIL image, an HWC uint8 numpy array or a
        CHW tensor (uint8, or floating in [0, 1]). ``pre_transform`` (deterministic, e.g.
        ``Resize(256)`` + ``CenterCrop(224)``) runs once per image on what the dataset returns.
        uint8 keeps [0, 255]; floating dtypes store [0, 1]. ``num_workers`` > 0 decodes in
        DataLoader worker processes (CPU tensors only). ``progress=None`` shows a tqdm bar only
        on a terminal. A corrupt or unreadable image raises ``BadImageError`` (a ``ValueError``)
        naming the file (ImageFolder's path, else the index); ``skip_bad=True`` drops such samples
        instead and warns with their count and first names (the count is also in
        ``cache.source["skipped"]``). A 16-bit grayscale PIL image is scaled to 8 bits (one
        warning), never clipped. Class names come from ``classes`` or ``dataset.classes``.
        Images of different sizes or channel counts raise ``ValueError`` naming the first
        offending index and the fix.

        Example:
            >>> from torchvision.datasets import FakeData
            >>> DeviceCache.from_dataset(FakeData(8, (3, 16, 16)), device="cpu").images.shape
            torch.Size([8, 3, 16, 16])
        """
        from batchaug.data.ingest import decode_dataset, skipped_summary

        cache, skipped = decode_dataset(dataset, pre_transform, device, dtype, channels_last,
                                        num_workers, progress, skip_bad, classes)
        if skipped:  # the count is also in cache.source["skipped"]
            warnings.warn(skipped_summary(skipped, len(dataset)), stacklevel=2)
        return cache

    @classmethod
    def load(
        cls,
        path: Union[str, os.PathLike],
        device: DeviceLike = None,
        shard: Optional[Tuple[int, int]] = None,
        verify: bool = False,
    ) -> "DeviceCache":
        """Load a cache directory written by ``save`` (or ``batchaug cache build``).

        ``shard=(rank, world_size)`` loads only that rank's contiguous part (for data larger
        than one device); ``verify=True`` also checks every file's SHA-256. Bad, truncated,
        foreign or newer-format directories raise ``CacheFormatError`` naming the file.

        Example:
            >>> cache = DeviceCache.load("cifar10-cache", device="cuda")  # doctest: +SKIP
        """
        from batchaug.data.format import load_cache

        return load_cache(path, device=device, shard=shard, verify=verify)

    def save(self, path: Union[str, os.PathLike], overwrite: bool = False) -> None:
        """Write the cache to directory ``path`` atomically (see ``batchaug.data.format``).

        Example:
            >>> cache.save("cifar10-cache")  # doctest: +SKIP
        """
        from batchaug.data.format import save_cache

        save_cache(self, path, overwrite=overwrite)

    # --- accessors ----------------------------------------------------------------------------
    def __len__(self) -> int:
        return int(self.labels.shape[0])

    @property
    def device(self) -> torch.device:
        return self.images.device

    @property
    def dtype(self) -> torch.dtype:
        return self.images.dtype

    @property
    def channels_last(self) -> bool:
        # A (N, 3, 1, 1) tensor is "contiguous" in both formats; report the NCHW reading then.
        return (not self.images.is_contiguous()) and self.images.is_contiguous(
            memory_format=torch.channels_last)

    @property
    def nbytes(self) -> int:
        """Bytes held by images and labels together."""
        return (self.images.numel() * self.images.element_size()
                + self.labels.numel() * self.labels.element_size())

    def to(self, device: DeviceLike) -> "DeviceCache":
        """A copy of this cache on ``device`` (self if already there)."""
        dev = resolve_device(device)
        if dev == self.device:
            return self
        check_device_memory(self.nbytes, dev)
        out = empty_images(self.images.shape, self.dtype, dev, self.channels_last)
        copy_images_chunked(out, self.images)
        return DeviceCache(out, self.labels.to(dev), self.classes, self.source, self.shard,
                           self.global_len)

    def __repr__(self) -> str:
        shape = tuple(self.images.shape)
        dtype = str(self.dtype).replace("torch.", "")
        extra = ", channels_last" if self.channels_last else ""
        classes = "" if self.classes is None else f", classes={len(self.classes)}"
        shard = "" if self.shard is None else f", shard={self.shard[0]}/{self.shard[1]}"
        return (f"DeviceCache(images={shape} {dtype}{extra}, device={self.device}, "
                f"size={_fmt_bytes(self.nbytes)}{classes}{shard})")

    def __getstate__(self) -> Dict[str, Any]:
        err = pickling_error(self.device)
        if err is not None:
            raise err
        return dict(self.__dict__)

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update(state)
