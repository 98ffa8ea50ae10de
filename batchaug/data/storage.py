"""How a cache's images are held: dtypes, conversion, devices, memory checks, rows on disk.

Shared, one way, by the device cache (``batchaug.data.cache``), the decoding pass
(``batchaug.data.ingest``) and the streaming writer (``batchaug.data.writer``); it imports none
of them.
"""
from __future__ import annotations

import numbers
import os
from pathlib import Path
from typing import Any, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch import Tensor

from batchaug.errors import CacheFormatError, DeviceMemoryError, hint

#: Image dtypes a cache may hold. Floating caches hold values in [0, 1] (uint8 / 255).
CACHE_DTYPES = (torch.uint8, torch.float16, torch.bfloat16, torch.float32)
#: Rows copied per step when converting or moving images, so that no second full-size copy
#: (host or device) is ever held: about 64 MiB of float32 at ImageNet size.
_CHUNK_BYTES = 64 * 1024 * 1024

DeviceLike = Union[str, torch.device, int, None]


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
    it ``device_free_bytes``.

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
        f"({hint('a smaller pre_transform', 'a smaller --resize')}), load only this rank's "
        f"part with "
        f"DeviceCache.load(path, shard=(rank, world_size)), or keep the cache on the CPU "
        f"(device='cpu').",
        needed=needed,
        free=free,
    )


def device_free_bytes(device: torch.device) -> Optional[int]:
    """Bytes a new tensor on ``device`` can take: the driver's free memory plus what PyTorch's
    caching allocator holds but no tensor uses (``reserved - allocated``, which it hands out
    before asking the driver for more, and releases and retries before an out-of-memory
    error; free pieces of partly used blocks only serve tensors that fit in them, so with a
    fragmented cache this is an upper bound). None for a non-CUDA device.

    Example:
        >>> device_free_bytes(torch.device("cpu")) is None
        True
    """
    if device.type != "cuda":
        return None
    free, _total = torch.cuda.mem_get_info(device)
    cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    return int(free) + max(0, int(cached))


def check_device_memory(needed: int, device: torch.device, what: str = "cache") -> None:
    """Raise ``DeviceMemoryError`` if ``needed`` bytes do not fit in ``device_free_bytes``
    (only CUDA devices are checked; on the CPU the operating system decides)."""
    free = device_free_bytes(device)
    if free is None:
        return
    err = memory_check_error(needed, free, device, what)
    if err is not None:
        raise err


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


def copy_images_chunked(dest: Tensor, src: Tensor) -> None:
    """``dest[:] = convert(src)`` a chunk of rows at a time: no full-size temporary."""
    step = max(1, _CHUNK_BYTES // max(1, src[0].numel() * 4 if src.shape[0] else 1))
    for a in range(0, src.shape[0], step):
        part = src[a:a + step]
        if part.device != dest.device:
            part = part.to(dest.device)
        dest[a:a + step].copy_(convert_images(part, dest.dtype))


class DenseImages:
    """A dense pixel column, one ``(N, C, H, W)`` tensor (every image at one size), answering
    what a cache asks of its images column as a ragged one (``RaggedImages``) does.

    Example:
        >>> col = DenseImages(torch.zeros(2, 3, 4, 5, dtype=torch.uint8))
        >>> col.sizes.tolist(), col.nbytes, col.image(1).shape
        ([[4, 5], [4, 5]], 120, torch.Size([3, 4, 5]))
    """

    storage = "raw"
    ragged = False

    def __init__(self, data: Tensor) -> None:
        self.data = data

    @property
    def sizes(self) -> Tensor:
        """``(N, 2)`` int64 ``(height, width)`` of each image, on the CPU."""
        n, _, h, w = self.data.shape
        return torch.tensor([[h, w]], dtype=torch.int64).expand(n, 2).clone()

    def image(self, i: int) -> Tensor:
        return self.data[i]

    @property
    def channels_last(self) -> bool:
        # A (N, 3, 1, 1) tensor is "contiguous" in both formats; report the NCHW reading then.
        return (not self.data.is_contiguous()) and self.data.is_contiguous(
            memory_format=torch.channels_last)

    @property
    def nbytes(self) -> int:
        return self.data.numel() * self.data.element_size()

    @property
    def shape_text(self) -> str:
        return str(tuple(self.data.shape))

    def to(self, device: torch.device) -> Tensor:
        """A copy on ``device`` (same dtype and memory format), made a chunk at a time."""
        out = empty_images(self.data.shape, self.data.dtype, device, self.channels_last)
        copy_images_chunked(out, self.data)
        return out

    def describe(self) -> str:
        return "channels_last" if self.channels_last else ""


def check_classes(classes: Optional[Sequence[str]]) -> Optional[List[str]]:
    if classes is None:
        return None
    if isinstance(classes, str) or not all(isinstance(c, str) for c in classes):
        raise TypeError(f"classes must be a sequence of str or None, got {classes!r}")
    return list(classes)


def check_label_range(lo: int, hi: int, classes: Optional[Sequence[str]]) -> None:
    """Labels from ``lo`` to ``hi`` are >= 0 and, with ``classes``, below their count."""
    if lo < 0:
        raise ValueError(f"labels must be >= 0, got {lo}")
    if classes is not None and hi >= len(classes):
        raise ValueError(f"label {hi} is out of range for {len(classes)} classes")


class MappedRows:
    """Rows ``[start, start + n)`` of the array stored at byte ``data_offset`` of ``path``, kept
    on disk (``placement="disk"``). ``row_shape`` is one row's shape in on-disk order and
    ``dtype`` the stored numpy dtype.

    ``array`` is a copy-on-write memory map (``cache.images``: nothing is read until touched,
    and writing to it never changes the file). The loader does not read through the map but
    with ``os.preadv`` on the descriptor opened here: a read past the end of a file that shrank
    returns short (a clear ``CacheFormatError``) where a memory map would kill the process with
    SIGBUS, and one call per run of consecutive rows is cheaper than page faults. Before each
    batch the descriptor's size and modification time are compared with those at load time, so
    a file rewritten in place raises instead of yielding a mix of old and new rows (an atomic
    save of a new cache at the same path does not disturb it: the descriptor keeps the old file).

    Example:
        >>> rows = MappedRows("c/images.npy", 128, 0, 10, (3, 8, 8), np.dtype("uint8"))  # doctest: +SKIP
        >>> rows.array.shape  # doctest: +SKIP
        (10, 3, 8, 8)
    """

    def __init__(self, path: os.PathLike, data_offset: int, start: int, n: int,
                 row_shape: Tuple[int, ...], dtype: np.dtype) -> None:
        self.path = Path(path)
        self.n = int(n)
        self.row_shape = tuple(int(v) for v in row_shape)
        self.dtype = np.dtype(dtype)
        self.row_bytes = int(np.prod(self.row_shape, dtype=np.int64)) * self.dtype.itemsize
        self.base = int(data_offset) + int(start) * self.row_bytes
        self._file = open(self.path, "rb", buffering=0)
        try:
            st = os.fstat(self._file.fileno())
            self._stamp = (st.st_size, st.st_mtime_ns)
            if self.base + self.n * self.row_bytes > st.st_size:
                raise CacheFormatError(self.path, f"is {st.st_size} bytes, too short for rows "
                                                  f"[{start}, {start + n}): truncated")
            if self.n == 0 or self.row_bytes == 0:
                self.array = np.empty((self.n,) + self.row_shape, dtype=self.dtype)
            else:
                # mode "c": copy-on-write, so a write to cache.images stays in this process
                # (a read-only map would turn that write into a segfault).
                self.array = np.memmap(self._file, dtype=self.dtype, mode="c", offset=self.base,
                                       shape=(self.n,) + self.row_shape)
        except BaseException:
            self._file.close()
            raise

    @property
    def nbytes(self) -> int:
        return self.n * self.row_bytes

    def check_unchanged(self) -> None:
        """Raise ``CacheFormatError`` if the file's size or modification time changed."""
        st = os.fstat(self._file.fileno())
        if (st.st_size, st.st_mtime_ns) != self._stamp:
            raise CacheFormatError(
                self.path, f"changed on disk while a loader was reading it (size "
                           f"{self._stamp[0]} -> {st.st_size} bytes, mtime changed: "
                           f"{st.st_mtime_ns != self._stamp[1]}); load the cache again")

    def read(self, first_row: int, dest: memoryview) -> None:
        """Read consecutive rows starting at ``first_row`` into ``dest`` (a whole number of rows)."""
        offset = self.base + first_row * self.row_bytes
        fd = self._file.fileno()
        got = 0
        while got < dest.nbytes:
            k = os.preadv(fd, [dest[got:]], offset + got)
            if k <= 0:
                raise CacheFormatError(
                    self.path, f"ended at byte {offset + got} while reading rows from "
                               f"{first_row}: the file shrank or was truncated after loading")
            got += k

    def will_need(self, first_row: int, count: int) -> None:
        """Let the kernel start reading rows ``[first_row, first_row + count)`` now
        (``POSIX_FADV_WILLNEED``), so that they are in the page cache when ``read`` asks."""
        if hasattr(os, "posix_fadvise") and count > 0:
            os.posix_fadvise(self._file.fileno(), self.base + first_row * self.row_bytes,
                             count * self.row_bytes, os.POSIX_FADV_WILLNEED)

    def close(self) -> None:
        self._file.close()

    def __getstate__(self):
        raise TypeError("a cache with placement='disk' holds an open file and cannot be "
                        "pickled; pickle its path and call DeviceCache.load(path, "
                        "placement='disk') where it is needed")
