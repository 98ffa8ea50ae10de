"""The streaming writer's ragged images column: ragged or JPEG images appended to ``images.bin``.

``write_cache`` (``batchaug.data.writer``) writes with ``RaggedImagesWriter`` for
``storage="jpeg"``, and for raw uint8 images once one differs in size from the first (it then
starts over in this mode: the images decoded so far are decoded again, at most up to the first
differing one). Each completed chunk appends its images' bytes to ``images.bin``, their
``(offset, nbytes, h, w, crc32)`` rows to ``index.part`` (and the loop their labels to
``labels.part``), and records the files' lengths and SHA-256 prefixes in ``progress.json``:
``resume=True`` checks the prefixes, cuts anything a killed chunk appended after them, and
continues, giving the same files as an uninterrupted write (and as
``DeviceCache.from_dataset(...).save(path)``).
"""
from __future__ import annotations

import hashlib
import json
import os
import zlib
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
import torch

from batchaug.data import format as fmt
from batchaug.data.atomic import hash_prefix as _hash_prefix, pwrite_all as _pwrite_all
from batchaug.data.ragged import INDEX_COLUMNS, RaggedBuilder, ragged_meta_fields, index_bytes
from batchaug.data.ingest import stack_as
from batchaug.data.meta import DATA, INDEX

PROGRESS, PROGRESS_NEW = "progress.json", "progress.json.new"
LABELS_PART, INDEX_PART = "labels.part", "index.part"
_WORK = (DATA, INDEX_PART, LABELS_PART, PROGRESS, PROGRESS_NEW, fmt.IMAGES, fmt.MASKS_BIN,
         "masks.part", "boxes.part")


def is_ragged_progress(tmp: Path) -> bool:
    """Whether ``tmp`` holds an interrupted ragged (or JPEG) write (its progress.json says so)."""
    try:
        # "compact": the ragged column's key in progress.json (the name it was written with)
        return bool(json.loads((tmp / PROGRESS).read_text()).get("compact"))
    except (OSError, ValueError, AttributeError):
        return False


def clear(tmp: Path) -> None:
    """Remove a fixed-size write's work files before starting over ragged."""
    for name in _WORK:
        try:
            (tmp / name).unlink()
        except FileNotFoundError:
            pass




class RaggedImagesWriter:
    """The images column of a streaming write, ragged (or JPEG): each kept image's bytes
    appended to ``images.bin``, its ``(offset, nbytes, h, w, crc32)`` row to ``index.part``.
    ``write_cache``'s one chunk loop (``batchaug.data.writer``) drives it; ``record`` is its
    part of progress.json (``"compact"``, ``"bytes"``, ``"originals"``)."""

    #: its work files, in the order of progress.json's digests (labels.part's comes after)
    files = (DATA, INDEX_PART)

    def __init__(self, tmp: Path, target: Path, storage: str, quality: Optional[int],
                 rec: Dict[str, Any], ref: Optional[Tuple[int, Tuple[int, ...]]],
                 disk_full: Callable, is_disk_full: Callable) -> None:
        self.tmp, self.target = tmp, target
        self.storage, self.quality = storage, quality
        self.nbytes = int(rec.get("bytes", 0))
        self.builder = RaggedBuilder(storage, quality)
        self.builder.originals = int(rec.get("originals", 0))  # the chunks before a resume
        if ref is not None:
            self.builder.channels = (ref[0], ref[1][0])
        self._disk_full, self._is_disk_full = disk_full, is_disk_full
        self.fds = {name: os.open(tmp / name, os.O_RDWR | os.O_CREAT, 0o644)
                    for name in self.files}
        self.hashes: Dict[str, Any] = {}
        self.lengths: Dict[str, int] = {}

    def resume(self, rows: int, digests: List[str], resumed: bool) -> bool:
        """Check the files' written prefixes (``rows`` rows) against ``digests`` and cut what a
        killed chunk appended; False when they do not match."""
        self.lengths = {DATA: self.nbytes, INDEX_PART: rows * INDEX_COLUMNS * 8}
        for k, name in enumerate(self.files):
            h = _hash_prefix(self.fds[name], self.lengths[name])
            if h is None or (resumed and h.hexdigest() != digests[k]):
                return False
            os.ftruncate(self.fds[name], self.lengths[name])
            self.hashes[name] = h
        return True

    def write(self, good: List[Tuple[int, Any, Any]], stacked: Any, first_row: int,
              checker: Any, lfd: int) -> int:
        """Append the kept ``(index, image, original)`` samples; returns the bytes written."""
        data: List[bytes] = []
        rows: List[Tuple[int, int, int, int, int]] = []
        offset = self.nbytes
        for i, image, original in good:
            chw = stack_as([image], torch.uint8)[0]
            b = self.builder.encode(chw, f"dataset[{i}]", original).numpy().tobytes()
            data.append(b)
            rows.append((offset, len(b), int(chw.shape[1]), int(chw.shape[2]), zlib.crc32(b)))
            offset += len(b)
        for name, blob in ((DATA, b"".join(data)),
                           (INDEX_PART, np.asarray(rows, dtype="<i8").tobytes())):
            try:
                _pwrite_all(self.fds[name], memoryview(blob), self.lengths[name])
            except OSError as exc:
                if self._is_disk_full(exc):
                    raise self._disk_full(self.target, self.lengths[name] + len(blob)) \
                        from None
                raise
            self.hashes[name].update(blob)
            self.lengths[name] += len(blob)
        written, self.nbytes = offset - self.nbytes, offset
        return written

    def digests(self) -> List[str]:
        return [self.hashes[k].copy().hexdigest() for k in self.files]

    def record(self) -> Dict[str, Any]:
        return {"compact": True, "bytes": self.nbytes, "originals": self.builder.originals}

    def sync(self, lfd: int) -> None:
        """After each chunk, before its progress record: the appended bytes (and labels.part's)
        are on disk."""
        for fd in list(self.fds.values()) + [lfd]:
            os.fsync(fd)

    def finish(self, rows: int, ref: Tuple[int, Tuple[int, ...]]
               ) -> Tuple[Dict[str, Any], Tuple[int, int, int, int], Dict[str, Any]]:
        """``(files, shape, meta.json's version-2 fields)``; index.npy written."""
        files = {DATA: {"size": self.nbytes, "sha256": self.hashes[DATA].hexdigest()}}
        index = np.frombuffer(os.pread(self.fds[INDEX_PART], self.lengths[INDEX_PART], 0),
                              dtype="<i8").reshape(-1, INDEX_COLUMNS)
        os.fsync(self.fds[DATA])
        blob = index_bytes(index)
        (self.tmp / INDEX).write_bytes(blob)
        files[INDEX] = {"size": len(blob), "sha256": hashlib.sha256(blob).hexdigest()}
        (self.tmp / INDEX_PART).unlink()
        shape = (rows, ref[1][0], int(index[:, 2].max()), int(index[:, 3].max()))
        ragged = bool((index[:, 2:4] != index[0, 2:4]).any())
        originals = self.builder.originals if self.storage == "jpeg" else None
        return files, shape, ragged_meta_fields(ragged, self.storage, self.quality, originals)

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds = {}
