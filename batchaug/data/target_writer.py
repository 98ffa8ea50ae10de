"""``TargetParts``: the targets (masks or boxes) of every cache build, dense or ragged, in memory
(``DeviceCache.from_dataset``) or streamed (``write_cache``), the one accumulator behind
``targets.admit_sample``.

A streamed build writes each chunk's masks to ``masks.part`` (int64 rows at the row's offset; a
ragged cache's straight to ``masks.bin``, uint8, appended) and its boxes as fixed-size records
(row, XYXY, valid, label) to ``boxes.part``; the progress record holds their lengths and SHA-256
prefixes, so ``resume=True`` checks them and cuts what a killed chunk appended. ``finish`` writes
``masks.npy`` in the narrowest dtype holding every value and the padded box arrays: the files
``DeviceCache.from_dataset(...).save(path)`` writes.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np
import torch

from batchaug.data import format as fmt
from batchaug.data.atomic import hash_prefix as _hash_prefix, pwrite_all as _pwrite_all
from batchaug.data.targets import Sample, admit_sample, check_ragged_mask_range, \
    mask_range, narrow_mask_dtype

MASKS_PART, BOXES_PART = "masks.part", "boxes.part"
BOX_RECORD = np.dtype([("row", "<i8"), ("box", "<f4", (4,)), ("valid", "?"), ("label", "<i8")])


class TargetParts:
    """The targets of a cache build: the kind check (``admit_sample``), then each chunk's masks
    and box records, held in memory (``tmp=None``: ``tensors`` gives the cache's target
    tensors) or written to part files in ``tmp`` (a streaming write: ``record`` for the
    progress record, ``resume``, and ``finish`` writes the final files)."""

    def __init__(self, tmp: Optional[Path] = None, record: Optional[Dict[str, Any]] = None,
                 ragged: bool = False) -> None:
        record = record or {}
        self.tmp = tmp
        #: a ragged cache: each mask at its image's own size, uint8 (appended to masks.bin)
        self.ragged = ragged
        self.mask_bytes = int(record.get("mask_bytes", 0))  # masks.bin's length (ragged)
        self.masks_file = fmt.MASKS_BIN if ragged else MASKS_PART
        self.kind: Optional[str] = record.get("kind")
        self.first: Optional[str] = record.get("first")
        self.lo, self.hi = int(record.get("lo", 0)), int(record.get("hi", 0))
        self.hw: Optional[Tuple[int, int]] = tuple(record["hw"]) if record.get("hw") else None
        self.boxes = int(record.get("boxes", 0))  # box records written
        self.max_boxes = int(record.get("max_boxes", 0))
        self.digests = list(record.get("digests", ["", ""]))
        self._pending: List[Sample] = []
        self._fds: Dict[str, int] = {}
        self._hashes: Dict[str, Any] = {}
        # in memory: the masks (dense: one tensor per chunk, held in the narrowest dtype of its
        # own values, not int64; ragged: one (1, h, w) uint8 tensor per row) and box records
        self._masks: List[torch.Tensor] = []
        self._records: List[np.ndarray] = []

    @property
    def has_targets(self) -> bool:
        return self.kind is not None and self.kind.split("+")[0] in ("masks", "boxes")

    @property
    def has_labels(self) -> bool:
        return not self.has_targets or self.kind.endswith("+label")

    def take(self, label: Any, where: str) -> int:
        """A kept sample's per-image label (0 when it has none); its targets are queued."""
        s = admit_sample(self, label, where, self.ragged)
        if s is None:
            return label
        if s.mask is not None and self.hw is None and not self.ragged:
            self.hw = tuple(s.mask.shape)
        self._pending.append(s)
        return 0 if s.label is None else s.label

    def to_ragged(self) -> None:
        """In memory: the images turned out to differ in size, so the masks held so far become
        ragged (uint8 each at its own size; their ids must fit) and later ones are checked as
        they are taken."""
        check_ragged_mask_range(self.lo, self.hi)
        self._masks = [m.to(torch.uint8).unsqueeze(0) for chunk in self._masks for m in chunk]
        self.ragged, self.hw = True, None

    def _fd(self, name: str) -> int:
        if name not in self._fds:
            self._fds[name] = os.open(self.tmp / name, os.O_RDWR | os.O_CREAT, 0o644)
            self._hashes[name] = hashlib.sha256()
        return self._fds[name]

    def resume(self, rows: int) -> bool:
        """Check the parts' prefixes against the progress record and cut the rest; False when
        they do not match (the caller starts over)."""
        if not self.has_targets:
            return True
        masks = self.mask_bytes if self.ragged else rows * self._mask_row()
        lengths = {self.masks_file: masks if self.kind.startswith("masks") else 0,
                   BOXES_PART: self.boxes * BOX_RECORD.itemsize}
        for k, name in enumerate((self.masks_file, BOXES_PART)):
            fd = self._fd(name)
            h = _hash_prefix(fd, lengths[name])
            if h is None or h.hexdigest() != self.digests[k]:
                return False
            os.ftruncate(fd, lengths[name])
            self._hashes[name] = h
        return True

    def _mask_row(self) -> int:
        return 0 if self.hw is None else self.hw[0] * self.hw[1] * 8

    def _append(self, name: str, data: Union[bytes, memoryview], offset: int) -> None:
        fd = self._fd(name)
        _pwrite_all(fd, memoryview(data), offset)
        self._hashes[name].update(data)

    def write_chunk(self, first_row: int) -> None:
        """Keep the queued samples' targets (rows ``first_row, first_row + 1, ...``)."""
        samples, self._pending = self._pending, []
        if not samples or not self.has_targets:
            return
        memory = self.tmp is None
        if samples[0].mask is not None and self.ragged:
            masks = [s.mask.to(torch.uint8) for s in samples]
            if memory:
                self._masks.extend(m.unsqueeze(0) for m in masks)
            else:
                data = b"".join(m.numpy().tobytes() for m in masks)
                self._append(self.masks_file, data, self.mask_bytes)
                self.mask_bytes += len(data)
        elif samples[0].mask is not None:
            chunk = torch.stack([s.mask for s in samples])
            if memory:
                self._masks.append(chunk.to(narrow_mask_dtype(*mask_range(chunk))))
            else:
                data = chunk.to(torch.int64).numpy().astype("<i8")
                self._append(MASKS_PART, memoryview(np.ascontiguousarray(data).reshape(-1))
                             .cast("B"), first_row * self._mask_row())
        if samples[0].boxes is not None:
            recs = np.zeros(sum(int(s.boxes.shape[0]) for s in samples), dtype=BOX_RECORD)
            a = 0
            for k, s in enumerate(samples):
                m = int(s.boxes.shape[0])
                self.max_boxes = max(self.max_boxes, m)
                recs["row"][a:a + m] = first_row + k
                recs["box"][a:a + m] = s.boxes.numpy()
                recs["valid"][a:a + m] = s.box_valid.numpy()
                recs["label"][a:a + m] = s.box_labels.numpy()
                a += m
            if memory:
                self._records.append(recs)
            else:
                self._append(BOXES_PART, recs.tobytes(), self.boxes * BOX_RECORD.itemsize)
            self.boxes += len(recs)

    def record(self) -> Dict[str, Any]:
        """The progress record (after ``write_chunk``)."""
        digests = [self._hashes.get(n, hashlib.sha256()).copy().hexdigest()
                   for n in (self.masks_file, BOXES_PART)]
        return {"kind": self.kind, "first": self.first, "lo": self.lo, "hi": self.hi,
                "hw": list(self.hw) if self.hw else None, "boxes": self.boxes,
                "max_boxes": self.max_boxes, "digests": digests,
                "mask_bytes": self.mask_bytes}

    def _padded_boxes(self, recs: np.ndarray, rows: int) -> Dict[str, torch.Tensor]:
        """The box records as ``(rows, max_boxes)`` arrays, zero-padded (the cache's columns)."""
        m = self.max_boxes
        boxes = np.zeros((rows, m, 4), dtype="<f4")
        valid = np.zeros((rows, m), dtype=np.bool_)
        labels = np.zeros((rows, m), dtype="<i8")
        # each box's slot: its position among its row's records (records are row-ordered)
        starts = np.searchsorted(recs["row"], np.arange(rows))
        slot = np.arange(len(recs)) - starts[recs["row"]]
        boxes[recs["row"], slot] = recs["box"]
        valid[recs["row"], slot] = recs["valid"]
        labels[recs["row"], slot] = recs["label"]
        return {"boxes": torch.from_numpy(boxes), "box_valid": torch.from_numpy(valid),
                "box_labels": torch.from_numpy(labels)}

    def tensors(self, rows: int) -> Dict[str, Any]:
        """In memory: the cache's target columns on the CPU (``{}`` for an image dataset); the
        masks in the narrowest dtype holding every id (a ragged cache's: a uint8
        ``RaggedImages``)."""
        if not self.has_targets:
            return {}
        if self.kind.startswith("masks") and self.ragged:
            from batchaug.data.ragged import RaggedImages

            return {"masks": RaggedImages.from_list(self._masks)}
        if self.kind.startswith("masks"):
            dtype = narrow_mask_dtype(self.lo, self.hi)
            return {"masks": torch.cat([m.to(dtype) for m in self._masks])}
        recs = np.concatenate(self._records) if self._records else np.zeros(0, BOX_RECORD)
        return self._padded_boxes(recs, rows)

    def finish(self, rows: int) -> Tuple[Dict[str, Any], Optional[Dict[str, Any]]]:
        """Write the final target files from the parts: ``(files, meta's "targets" record)``."""
        if not self.has_targets:
            return {}, None
        if self.kind.startswith("masks") and self.ragged:  # masks.bin is already the file
            os.fsync(self._fd(fmt.MASKS_BIN))
            out: Tuple[Dict[str, Any], Optional[Dict[str, Any]]] = (
                {fmt.MASKS_BIN: {"size": self.mask_bytes,
                                 "sha256": self._hashes[fmt.MASKS_BIN].hexdigest()}},
                {"masks": {"dtype": "uint8"}})
        elif self.kind.startswith("masks"):
            h, w = self.hw
            part = np.memmap(self.tmp / MASKS_PART, dtype="<i8", mode="r", shape=(rows, h, w))
            # a memory map of int64 rows, narrowed as written (fmt's writer goes chunk by chunk)
            out = fmt.write_targets(self.tmp, {"masks": _NarrowRows(
                part, narrow_mask_dtype(self.lo, self.hi))})
        else:
            recs = np.fromfile(self.tmp / BOXES_PART, dtype=BOX_RECORD, count=self.boxes)
            out = fmt.write_targets(self.tmp, self._padded_boxes(recs, rows))
        self.close()
        for name in (MASKS_PART, BOXES_PART, fmt.MASKS_BIN):
            if name not in out[0]:  # the work files; a ragged cache's masks.bin is its file
                (self.tmp / name).unlink(missing_ok=True)
        return out

    def close(self) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds = {}


class _NarrowRows:
    """Rows of an int64 memory map seen as a tensor of ``dtype``, a slice at a time: just what
    ``format._write_npy`` and ``write_targets`` use (``shape``, ``dtype``, slicing, ``[0]``)."""

    def __init__(self, part: np.memmap, dtype: torch.dtype) -> None:
        self.part = part
        self.dtype = dtype
        self.shape = torch.Size(part.shape)

    def __getitem__(self, key: Any) -> torch.Tensor:
        return torch.from_numpy(np.array(self.part[key])).to(self.dtype)

    def element_size(self) -> int:
        return torch.empty(0, dtype=self.dtype).element_size()
