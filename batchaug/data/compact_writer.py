"""The streaming writer's compact mode: ragged or JPEG images appended to ``images.bin``.

``write_cache`` (``batchaug.data.writer``) calls ``write_compact`` for ``storage="jpeg"``, and
for raw uint8 images once one differs in size from the first (it then starts over in this
mode: the images decoded so far are decoded again, at most up to the first differing one).
Each completed chunk appends its images' bytes to ``images.bin``, their ``(offset, nbytes, h,
w, crc32)`` rows to ``index.part`` and their labels to ``labels.part``, and records the three files'
lengths and SHA-256 prefixes in ``progress.json``: ``resume=True`` checks the prefixes, cuts
anything a killed chunk appended after them, and continues, giving the same files as an
uninterrupted write (and as ``DeviceCache.from_dataset(...).save(path)``).
"""
from __future__ import annotations

import hashlib
import json
import os
import time
import zlib
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np
import torch

from batchaug.data import format as fmt
from batchaug.data.atomic import hash_prefix as _hash_prefix, pwrite_all as _pwrite_all
from batchaug.data.compact import INDEX_COLUMNS, CompactBuilder, compact_meta_fields, index_bytes
from batchaug.data.ingest import SampleChecker, all_skipped, prepared_batches, stack_as
from batchaug.data.meta import DATA, INDEX
from batchaug.data.storage import check_label_range
from batchaug.data.target_writer import TargetParts

PROGRESS, PROGRESS_NEW = "progress.json", "progress.json.new"
LABELS_PART, INDEX_PART = "labels.part", "index.part"
_VERSION = 1
_WORK = (DATA, INDEX_PART, LABELS_PART, PROGRESS, PROGRESS_NEW, fmt.IMAGES, fmt.MASKS_BIN,
         "masks.part", "boxes.part")
_FILES = (DATA, INDEX_PART, LABELS_PART)


def is_compact_progress(tmp: Path) -> bool:
    """Whether ``tmp`` holds an interrupted compact write (its progress.json says so)."""
    try:
        return bool(json.loads((tmp / PROGRESS).read_text()).get("compact"))
    except (OSError, ValueError, AttributeError):
        return False


def clear(tmp: Path) -> None:
    """Remove a fixed-size write's work files before starting over in compact mode."""
    for name in _WORK:
        try:
            (tmp / name).unlink()
        except FileNotFoundError:
            pass




def write_compact(dataset: Any, tmp: Path, target: Path, job: Dict[str, Any], pre_transform,
                  storage: str, quality: Optional[int], chunk_size: int, num_workers: int,
                  skip_bad: bool, classes, info: Dict[str, Any], show: bool,
                  state: Dict[str, Any], tqdm: Callable, disk_full: Callable,
                  is_disk_full: Callable, progress_type: Any,
                  order: Optional[List[int]] = None
                  ) -> Tuple[int, Tuple[int, ...], List, int, int, float]:
    """Write (or continue) a compact cache into ``tmp``; returns ``(rows, shape, skipped,
    resumed_from, bytes_written, seconds)``. ``progress_type`` is the writer's progress record
    class, whose ``chunks`` the writer's exception handler reads (via ``state``); ``order`` the
    dataset indices in stored order (None: the dataset's)."""
    t0 = time.perf_counter()
    n = job["samples"]
    rec: Dict[str, Any] = {}
    if (tmp / PROGRESS).exists():
        rec = json.loads((tmp / PROGRESS).read_text())
    resumed = bool(rec.get("compact"))
    prog = progress_type(job)
    if resumed:
        prog.chunks, prog.rows = int(rec["chunks"]), int(rec["rows"])
        prog.skipped = [(int(i), str(r)) for i, r in rec["skipped"]]
    state["progress"], state["tmp"] = prog, tmp
    nbytes = int(rec.get("bytes", 0))
    ref = None if rec.get("ref") is None else (int(rec["ref"][0]), tuple(rec["ref"][1]))
    checker = SampleChecker(dataset, skip_bad, ref=ref, ragged=True)
    checker.skipped = list(prog.skipped)
    builder = CompactBuilder(storage, quality)
    builder.originals = int(rec.get("originals", 0))  # the chunks written before a resume
    if ref is not None:
        builder.channels = (ref[0], ref[1][0])
    start = prog.chunks * chunk_size
    fds = {name: os.open(tmp / name, os.O_RDWR | os.O_CREAT, 0o644) for name in _FILES}
    written = 0
    # the masks (masks.bin) and boxes, as a dense write's (their record in "targets")
    parts = TargetParts(tmp, rec.get("targets"), ragged=True)
    try:
        old_masks = rec.get("mask_bytes") is not None  # a record from before masks were parts
        if resumed and (old_masks or not parts.resume(prog.rows)):
            state["progress"] = None
            raise ValueError(f"resume=True: the interrupted write of {target} does not match "
                             f"its progress record (its target part changed, or was lost in a "
                             f"crash); it is removed, and the next write starts over")
        lengths = {DATA: nbytes, INDEX_PART: prog.rows * INDEX_COLUMNS * 8,
                   LABELS_PART: prog.rows * 8}
        hashes = {}
        digests = list(rec.get("digests", [])) + [hashlib.sha256().hexdigest()] * len(_FILES)
        for k, name in enumerate(_FILES):
            h = _hash_prefix(fds[name], lengths[name])
            if h is None or (resumed and h.hexdigest() != digests[k]):
                state["progress"] = None
                raise ValueError(f"resume=True: the interrupted write of {target} does not "
                                 f"match its progress record (its files changed, or were lost "
                                 f"in a crash); it is removed, and the next write starts over")
            os.ftruncate(fds[name], lengths[name])  # what a killed chunk appended goes
            hashes[name] = h
        with tqdm(total=n, initial=start, disable=not show, desc="writing", unit="img") as bar:
            for batch in prepared_batches(dataset, pre_transform, num_workers, chunk_size,
                                          start, order=order, originals=storage == "jpeg"):
                data: List[bytes] = []
                rows: List[Tuple[int, int, int, int]] = []
                labels: List[int] = []
                offset = nbytes
                for i, image, label, err, original in batch:
                    if not checker.check(i, image, label, err):
                        continue
                    label = parts.take(label, f"dataset[{i}]")
                    chw = stack_as([image], torch.uint8)[0]
                    encoded = builder.encode(chw, f"dataset[{i}]", original)
                    b = encoded.numpy().tobytes()
                    data.append(b)
                    rows.append((offset, len(b), int(chw.shape[1]), int(chw.shape[2]),
                                 zlib.crc32(b)))
                    offset += len(b)
                    labels.append(label)
                if labels:
                    lab = np.asarray(labels, dtype="<i8")
                    check_label_range(int(lab.min()), int(lab.max()), classes)
                    for name, blob in ((DATA, b"".join(data)),
                                       (INDEX_PART, np.asarray(rows, dtype="<i8").tobytes()),
                                       (LABELS_PART, lab.tobytes())):
                        try:
                            _pwrite_all(fds[name], memoryview(blob), lengths[name])
                        except OSError as exc:
                            if is_disk_full(exc):
                                raise disk_full(target, lengths[name] + len(blob)) from None
                            raise
                        hashes[name].update(blob)
                        lengths[name] += len(blob)
                    parts.write_chunk(prog.rows)
                    written += offset - nbytes
                    nbytes = offset
                    prog.rows += len(labels)
                prog.chunks += 1
                prog.skipped = list(checker.skipped)
                rec = {"writer": _VERSION, "compact": True, "job": job, "chunks": prog.chunks,
                       "rows": prog.rows, "bytes": nbytes, "skipped": [list(s) for s in
                                                                      prog.skipped],
                       "ref": None if checker.ref is None else [checker.ref[0],
                                                                list(checker.ref[1])],
                       "digests": [hashes[k].copy().hexdigest() for k in _FILES],
                       "targets": parts.record(),
                       "originals": builder.originals}
                for fd in fds.values():
                    os.fsync(fd)
                (tmp / PROGRESS_NEW).write_text(json.dumps(rec))
                os.replace(tmp / PROGRESS_NEW, tmp / PROGRESS)
                bar.update(len(batch))
        if prog.rows == 0:
            raise all_skipped(n, checker.skipped)
        files = {DATA: {"size": nbytes, "sha256": hashes[DATA].hexdigest()}}
        index = np.frombuffer(os.pread(fds[INDEX_PART], lengths[INDEX_PART], 0),
                              dtype="<i8").reshape(-1, INDEX_COLUMNS)
        labels_all = np.frombuffer(os.pread(fds[LABELS_PART], lengths[LABELS_PART], 0),
                                   dtype="<i8")
        os.fsync(fds[DATA])
        target_files, record = parts.finish(prog.rows)
    finally:
        for fd in fds.values():
            os.close(fd)
        parts.close()
    blob = index_bytes(index)
    (tmp / INDEX).write_bytes(blob)
    files[INDEX] = {"size": len(blob), "sha256": hashlib.sha256(blob).hexdigest()}
    files.update(target_files)
    if parts.has_labels:
        files[fmt.LABELS] = fmt.write_labels(tmp, labels_all)
    (tmp / PROGRESS).unlink()  # first: from here on, not resumable
    (tmp / INDEX_PART).unlink()
    (tmp / LABELS_PART).unlink()
    c = checker.ref[1][0]
    shape = (prog.rows, c, int(index[:, 2].max()), int(index[:, 3].max()))
    ragged = bool((index[:, 2:4] != index[0, 2:4]).any())
    meta_source = dict(info)
    if checker.skipped:
        meta_source["skipped"] = len(checker.skipped)
    fmt.write_meta(tmp, shape, "uint8", "NCHW", classes, meta_source, files,
                   compact=compact_meta_fields(ragged, storage, quality,
                                               builder.originals if storage == "jpeg" else None),
                   targets=record,
                   labels=fmt.LABELS in files)
    return (prog.rows, shape, list(checker.skipped), start if resumed else 0, written,
            time.perf_counter() - t0)

