"""Rows of an on-disk ``images.npy`` kept on disk: a memory map for access, ``pread`` for loading.

``DeviceCache.load(..., placement="disk")`` wraps one of these. The images are a copy-on-write
memory map of the file (``cache.images``: nothing is read until touched, and writing to the
tensor never changes the file). The loader does not read through the map: it reads rows with
``os.preadv`` on a descriptor opened at load time, because a read past the end of a file that
shrank returns short (a clear ``CacheFormatError``) where a memory map would kill the process
with SIGBUS, and because one call per run of consecutive rows is cheaper than page faults.
Before each batch the descriptor's size and modification time are compared with those at load
time; a file rewritten in place raises instead of yielding a mix of old and new rows. (An atomic
save of a new cache at the same path does not disturb it: the descriptor keeps the old file.)
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Tuple

import numpy as np

from batchaug.data.meta import CacheFormatError


class MappedRows:
    """Rows ``[start, start + n)`` of the array stored at byte ``data_offset`` of ``path``.

    ``row_shape`` is one row's shape in on-disk order and ``dtype`` the stored numpy dtype.

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
