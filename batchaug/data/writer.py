"""``write_cache``: decode a dataset straight into a cache directory, one chunk at a time.

It writes what ``DeviceCache.from_dataset(...).save(path)`` writes (byte for byte with
``shuffle=False``, but for meta.json's record of the order) while holding only the chunks in
flight. Both run ``ingest.fill``, the one chunk loop; here it fills ``_DiskColumns``: the images
column dense (``_DenseImagesWriter``) or ragged / JPEG (``RaggedImagesWriter``; raw uint8
images start over in this mode once one differs in size from the first), the labels in
``labels.part``, the masks and boxes through ``target_writer.TargetParts``. Every file is hashed
as it is written: nothing is read twice.

The directory is staged and published with ``batchaug.data.atomic``'s protocol, as ``save``.
After each chunk ``progress.json`` in the staging directory records how far the write got and
the SHA-256 of each work file's written prefix, so ``resume=True`` checks them, cuts what a
killed chunk appended, and continues with the same files as an uninterrupted write.
"""
from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import shutil
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from batchaug.data import atomic
from batchaug.data.atomic import hash_prefix as _hash_prefix, pwrite_all as _pwrite_all
from batchaug.data import format as fmt
from batchaug.data.ragged import INDEX_COLUMNS, RaggedBuilder, check_storage, index_bytes, \
    ragged_meta_fields
from batchaug.data.ingest import SampleChecker, _SizeMismatch, all_skipped, check_dataset_args, \
    chunk_images, fill, skipped_summary, source_info, stack_as
from batchaug.data.storage import _fmt_bytes
from batchaug.data.target_writer import TargetParts
from batchaug.errors import DiskFullError, hint
from batchaug._validation import check_bool, check_int

#: The work files next to images.npy while writing (``atomic.WORK_FILES``: a killed save's).
PROGRESS, PROGRESS_NEW, LABELS_PART = "progress.json", "progress.json.new", "labels.part"
INDEX_PART = "index.part"
_WRITER_VERSION = 1
#: Bytes kept free beyond the cache's own size when checking the disk up front.
_DISK_MARGIN = 16 * 1024 * 1024


@dataclass
class WriteResult:
    """What ``write_cache`` wrote: ``rows`` images of ``shape[1:]``, and what it skipped."""

    path: str
    rows: int
    shape: Tuple[int, int, int, int]
    dtype: torch.dtype
    classes: Optional[List[str]]
    #: ``(index, reason)`` of each sample dropped by ``skip_bad=True``.
    skipped: List[Tuple[int, str]] = field(default_factory=list)
    #: Samples taken from an interrupted write (``resume=True``); 0 for a fresh write.
    resumed_from: int = 0
    #: Seconds spent, and bytes of images written, by this call (not the resumed part).
    seconds: float = 0.0
    bytes_written: int = 0
    #: ``"raw"`` or ``"jpeg"``; a ragged cache's image bytes (``images.bin``), else None.
    storage: str = "raw"
    stored_bytes: Optional[int] = None

    @property
    def nbytes(self) -> int:
        """Bytes of images and labels in the cache."""
        if self.stored_bytes is not None:
            return self.stored_bytes + self.rows * 8
        n, c, h, w = self.shape
        return n * c * h * w * self.dtype.itemsize + n * 8


def _disk_full(path: Path, needed: int, free: Optional[int] = None) -> DiskFullError:
    where = f"{_fmt_bytes(free)} ({free} bytes) are free" if free is not None else \
        "the disk filled up"
    smaller = hint("a smaller pre_transform, dtype=torch.uint8", "a smaller --resize")
    return DiskFullError(errno.ENOSPC,
                         f"not enough disk space to write {path}: the cache needs "
                         f"{_fmt_bytes(needed)} ({needed} bytes) and {where}; free some space, "
                         f"write it elsewhere, or make it smaller ({smaller})")


def _is_disk_full(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


def stored_order(n: int, shuffle: bool = True, seed: int = 0) -> Optional[List[int]]:
    """The dataset index of each stored row: ``torch.randperm(n)`` drawn from a CPU generator
    seeded with ``seed``, or None (the dataset's order) when ``shuffle`` is False.

    Example:
        >>> stored_order(4, shuffle=False) is None
        True
    """
    if not shuffle:
        return None
    g = torch.Generator().manual_seed(seed)
    return torch.randperm(n, generator=g).tolist()


def order_record(shuffle: bool, seed: int) -> Dict[str, Any]:
    """meta.json ``source`` fields saying how rows are ordered (what ``stored_order`` gives)."""
    if not shuffle:
        return {"order": "dataset"}
    return {"order": "shuffled: row k is dataset[torch.randperm(N, generator=torch.Generator()"
                     ".manual_seed(shuffle_seed))[k]]", "shuffle_seed": seed}


class _Progress:
    """The state ``progress.json`` records after each completed chunk."""

    def __init__(self, job: Dict[str, Any]) -> None:
        self.job = job
        self.chunks = 0  # completed chunks: samples [0, chunks * chunk_size) are done
        self.rows = 0  # rows written (kept samples)
        self.ref: Optional[Tuple[int, Tuple[int, ...]]] = None  # first kept sample, its shape
        self.skipped: List[Tuple[int, str]] = []
        #: SHA-256 of the images column's work files' and labels.part's written prefixes
        #: (images.npy, labels.part; or images.bin, index.part, labels.part): a resume re-reads
        #: them and refuses files that do not match (data lost in an OS crash, or edited).
        self.digests: List[str] = []
        #: The images column's own record (a ragged column's ``compact``, ``bytes``, ...).
        self.images: Dict[str, Any] = {}
        #: The targets' record (``TargetParts.record``): kind, parts' lengths and digests.
        self.targets: Optional[Dict[str, Any]] = None

    def to_json(self) -> Dict[str, Any]:
        out = {"writer": _WRITER_VERSION, "job": self.job, "chunks": self.chunks,
               "rows": self.rows, "ref": None if self.ref is None else
               [self.ref[0], list(self.ref[1])], "skipped": [list(s) for s in self.skipped],
               "digests": list(self.digests)}
        if self.targets is not None:
            out["targets"] = self.targets
        out.update(self.images)
        return out

    def save(self, tmp: Path) -> None:
        (tmp / PROGRESS_NEW).write_text(json.dumps(self.to_json()))
        os.replace(tmp / PROGRESS_NEW, tmp / PROGRESS)  # one record or the other, never half

    @classmethod
    def read(cls, tmp: Path) -> Optional["_Progress"]:
        try:
            d = json.loads((tmp / PROGRESS).read_text())
            p = cls(d["job"])
            p.chunks, p.rows = int(d["chunks"]), int(d["rows"])
            p.ref = None if d["ref"] is None else (int(d["ref"][0]), tuple(d["ref"][1]))
            p.skipped = [(int(i), str(r)) for i, r in d["skipped"]]
            p.digests = [str(v) for v in d["digests"]]
            p.targets = d.get("targets")
            p.images = {k: d[k] for k in ("compact", "bytes", "originals") if k in d}
            ok = d.get("writer") == _WRITER_VERSION
        except (OSError, ValueError, KeyError, TypeError, IndexError):
            return None
        return p if ok else None


# job fields only some jobs record (raw jobs keep the fields they had before JPEG storage)
_JOB_DEFAULTS: Dict[str, Any] = {"storage": "raw"}


def _claimer(job: Dict[str, Any], path: Path) -> Callable[[Path], bool]:
    def claim(leftover: Path) -> bool:
        p = _Progress.read(leftover)
        if p is None or p.chunks == 0:
            return False  # not a resumable write (a killed save, or nothing done yet)
        # both jobs' fields: a JPEG write (whose job has storage and quality) resumed without
        # storage="jpeg" would otherwise go on as raw and leave a cache load refuses
        for key in list(job) + [k for k in p.job if k not in job]:
            default = _JOB_DEFAULTS.get(key)
            was, now = p.job.get(key, default), job.get(key, default)
            if was != now:
                fix = hint("pass the same arguments to continue it, or overwrite=True instead of "
                           "resume=True to discard it and start over",
                           "use the same options to continue it, or --overwrite instead of "
                           "--resume to discard it and start over")
                raise ValueError(
                    f"{hint('resume=True', '--resume')}: the interrupted write of {path} "
                    f"({leftover.name}) was made with {key}={was!r}, this one has "
                    f"{key}={now!r}; {fix}")
        return True
    return claim


def _check_disk(tmp: Path, target: Path, images_bytes: int, labels_bytes: int) -> None:
    """Refuse before writing if the files cannot fit (what is already allocated counts)."""
    have = 0
    for name in (fmt.IMAGES, LABELS_PART):
        try:
            have += (tmp / name).stat().st_blocks * 512
        except FileNotFoundError:
            pass
    needed = images_bytes + 2 * labels_bytes + _DISK_MARGIN
    free = shutil.disk_usage(tmp).free
    if free + have < needed:
        raise _disk_full(target, needed, free)


def _allocate(fd: int, size: int) -> None:
    """Reserve ``size`` bytes for the file now, so that a full disk fails here, not later."""
    os.ftruncate(fd, max(size, os.fstat(fd).st_size))
    if hasattr(os, "posix_fallocate"):
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError as exc:
            if exc.errno not in (errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS):
                raise  # ENOSPC/EDQUOT: a clear error above; unsupported: write as we go


def is_ragged_progress(tmp: Path) -> bool:
    """Whether ``tmp`` holds an interrupted ragged (or JPEG) write (its progress.json says so)."""
    try:
        # "compact": the ragged column's key in progress.json (the name it was written with)
        return bool(json.loads((tmp / PROGRESS).read_text()).get("compact"))
    except (OSError, ValueError, AttributeError):
        return False


class RaggedImagesWriter:
    """The images column of a streaming write, ragged (or JPEG): each kept image's bytes
    appended to ``images.bin``, its ``(offset, nbytes, h, w, crc32)`` row to ``index.part``;
    ``record`` is its part of progress.json (``"compact"``, ``"bytes"``, ``"originals"``)."""

    #: its work files, in the order of progress.json's digests (labels.part's comes after)
    files = (fmt.DATA, INDEX_PART)

    def __init__(self, tmp: Path, target: Path, storage: str, quality: Optional[int],
                 rec: Dict[str, Any], ref: Optional[Tuple[int, Tuple[int, ...]]]) -> None:
        self.tmp, self.target = tmp, target
        self.storage, self.quality = storage, quality
        self.builder = RaggedBuilder(storage, quality)  # rows added, written out, dropped
        self.builder.offset = int(rec.get("bytes", 0))  # the chunks before a resume
        self.builder.originals = int(rec.get("originals", 0))
        if ref is not None:
            self.builder.channels = (ref[0], ref[1][0])
        self.fds = {name: os.open(tmp / name, os.O_RDWR | os.O_CREAT, 0o644)
                    for name in self.files}
        self.hashes: Dict[str, Any] = {}
        self.lengths: Dict[str, int] = {}

    def resume(self, rows: int, digests: List[str], resumed: bool) -> bool:
        """Check the files' written prefixes (``rows`` rows) against ``digests`` and cut what a
        killed chunk appended; False when they do not match."""
        self.lengths = {fmt.DATA: self.builder.offset, INDEX_PART: rows * INDEX_COLUMNS * 8}
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
        b, before = self.builder, self.builder.offset
        for i, image, original in good:
            b.add(stack_as([image], torch.uint8)[0], f"dataset[{i}]", original)
        data = b"".join(p.numpy().tobytes() for p in b.parts)
        rows = np.asarray(b.rows, dtype="<i8").tobytes()
        b.parts, b.rows = [], []  # written out below: the builder keeps only its counts
        for name, blob in ((fmt.DATA, data), (INDEX_PART, rows)):
            _write_or_disk_full(self.fds[name], memoryview(blob), self.lengths[name],
                                self.target, self.lengths[name] + len(blob))
            self.hashes[name].update(blob)
            self.lengths[name] += len(blob)
        return b.offset - before

    def digests(self) -> List[str]:
        return [self.hashes[k].copy().hexdigest() for k in self.files]

    def record(self) -> Dict[str, Any]:
        return {"compact": True, "bytes": self.builder.offset,
                "originals": self.builder.originals}

    def sync(self, lfd: int) -> None:
        """After each chunk, before its progress record: the appended bytes (and labels.part's)
        are on disk."""
        for fd in list(self.fds.values()) + [lfd]:
            os.fsync(fd)

    def finish(self, rows: int, ref: Tuple[int, Tuple[int, ...]]
               ) -> Tuple[Dict[str, Any], Tuple[int, int, int, int], Dict[str, Any]]:
        """``(files, shape, meta.json's version-2 fields)``; index.npy written."""
        files = {fmt.DATA: {"size": self.builder.offset,
                            "sha256": self.hashes[fmt.DATA].hexdigest()}}
        index = np.frombuffer(os.pread(self.fds[INDEX_PART], self.lengths[INDEX_PART], 0),
                              dtype="<i8").reshape(-1, INDEX_COLUMNS)
        os.fsync(self.fds[fmt.DATA])
        files[fmt.INDEX] = atomic.write_file(self.tmp / fmt.INDEX, index_bytes(index))
        (self.tmp / INDEX_PART).unlink()
        shape = (rows, ref[1][0], int(index[:, 2].max()), int(index[:, 3].max()))
        ragged = bool((index[:, 2:4] != index[0, 2:4]).any())
        originals = self.builder.originals if self.storage == "jpeg" else None
        return files, shape, ragged_meta_fields(ragged, self.storage, self.quality, originals)

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds = {}


def write_cache(
    dataset: Any,
    path: Union[str, os.PathLike],
    *,
    pre_transform: Optional[Callable] = None,
    dtype: torch.dtype = torch.uint8,
    num_workers: int = 0,
    skip_bad: bool = False,
    overwrite: bool = False,
    resume: bool = False,
    progress: Optional[bool] = None,
    classes: Optional[Sequence[str]] = None,
    channels_last: bool = False,
    chunk_size: int = 64,
    source: Optional[Dict[str, Any]] = None,
    shuffle: bool = True,
    seed: int = 0,
    storage: str = "raw",
    quality: int = 90,
) -> WriteResult:
    """Decode a map-style dataset once, straight into the cache directory ``path``.

    Writes what ``DeviceCache.from_dataset(dataset, pre_transform, dtype=dtype,
    channels_last=channels_last).save(path)`` writes (with ``shuffle=False``: the same
    images.npy and labels.npy, byte for byte; meta.json adds the order), without holding the
    decoded dataset in memory: peak memory is about ``chunk_size`` samples per worker in
    flight, whatever the dataset's length. ``dataset``, ``pre_transform``, ``dtype``,
    ``num_workers``, ``skip_bad``, ``progress`` and ``classes`` mean what they mean for
    ``from_dataset`` (same checks, same errors); ``overwrite`` as for ``save``.

    Rows are stored shuffled (``shuffle=True``): row ``k`` holds ``dataset[order[k]]`` with
    ``order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(seed))``,
    the order ``batchaug cache build`` stores for the same seed (recorded in meta.json's
    ``source``), so that every contiguous part (``DeviceCache.load(path, shard=(rank, world))``,
    a ``quasi_random`` read from disk) is a uniform sample of the data. ``shuffle=False`` keeps
    the dataset's order, and with it the dataset's grouping: an ``ImageFolder`` (listed class
    by class) then gives each shard only some classes, and disk reads class-lopsided batches.
    Skipped samples are named by their dataset index either way. (A dataset that is slow to
    read out of order, e.g. one streaming a compressed archive, may prefer ``shuffle=False``.)

    ``resume=True`` continues a write of ``path`` that was killed or interrupted, from its
    last completed chunk (``chunk_size`` samples), giving the same files as an uninterrupted
    write; the dataset must be the same, in the same order, and ``dtype``, ``channels_last``,
    ``chunk_size``, ``classes``, ``shuffle``, ``seed`` and ``source`` unchanged (else a
    ``ValueError`` naming the field). With nothing to resume it starts from the beginning. A
    write interrupted by an exception keeps its completed chunks for ``resume=True`` (said in
    the exception's notes); a later write of ``path`` without ``resume=True`` refuses to
    discard them (``FileExistsError``) unless ``overwrite=True``, and ``DeviceCache.load`` and
    ``batchaug cache info`` report them. Not enough disk space raises ``DiskFullError``
    (an ``OSError``, ENOSPC) as soon as the first chunk fixes the row size (or when the disk
    fills anyway), and leaves nothing behind. ``source``
    adds fields to meta.json's ``source`` record. Returns a ``WriteResult``.

    ``storage`` and ``quality`` mean what they mean for ``from_dataset``: uint8 images of
    different sizes are kept at their own sizes (the write starts over in that mode when the
    first differing size appears), ``storage="jpeg"`` keeps JPEG bytes; both resume as above.

    A dataset of ``(image, mask)`` or detection ``(image, {"boxes", "labels"})`` items writes
    the targets ``from_dataset`` keeps (``masks.npy`` in its narrowest dtype, or the padded box
    arrays; a ragged or JPEG cache's uint8 ``masks.bin``), streamed chunk by chunk through work
    files and resumable like the images.

    Example:
        >>> from torchvision.datasets import FakeData
        >>> write_cache(FakeData(8, (3, 16, 16)), "fake-cache").shape  # doctest: +SKIP
        (8, 3, 16, 16)
    """
    from tqdm.auto import tqdm

    from batchaug.data.sources import as_map_dataset

    dataset = as_map_dataset(dataset)
    dtype, classes = check_dataset_args(dataset, pre_transform, dtype, num_workers, classes)
    storage, jpeg_quality = check_storage(storage, quality, dtype)
    for name, value in (("skip_bad", skip_bad), ("overwrite", overwrite), ("resume", resume),
                        ("channels_last", channels_last), ("shuffle", shuffle)):
        check_bool(value, name)
    chunk_size = check_int(chunk_size, "chunk_size", 1)
    if source is not None and not isinstance(source, dict):
        raise TypeError(f"source must be a dict or None, got {type(source).__name__}")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2 ** 63:
        raise ValueError(f"seed must be an int in [0, 2**63), got {seed!r}")
    n = len(dataset)
    info = source_info(dataset, pre_transform, source)
    info.update(order_record(shuffle, seed))
    # what must be the same for resume=True to continue (the order is in the source record)
    job = {"samples": n, "dtype": fmt.dtype_name(dtype), "layout": "NHWC" if channels_last
           else "NCHW", "chunk_size": chunk_size, "classes": classes, "source": info}
    if storage == "jpeg":  # (a raw job stays as it was: earlier interrupted writes resume)
        job.update(storage=storage, quality=jpeg_quality)
    target = atomic.resolve(Path(path))
    fmt.check_replace(target, overwrite)  # refuse before decoding anything
    show = sys.stderr.isatty() if progress is None else bool(progress)
    state: Dict[str, Any] = {}

    def keep(exc: BaseException) -> bool:
        done, tmp = state.get("progress"), state.get("tmp")
        keep_it = (done is not None and done.chunks > 0 and not _is_disk_full(exc)
                   and (tmp / PROGRESS).exists())
        if keep_it and hasattr(exc, "add_note"):
            how = hint("write_cache(..., resume=True)", "the same command with --resume")
            exc.add_note(f"the write of {target} stopped after "
                         f"{min(n, done.chunks * chunk_size)} of {n} samples; {how} continues "
                         f"from there")
        return keep_it

    claim = _claimer(job, target) if resume else atomic.keeper(target, overwrite)
    order = stored_order(n, shuffle, seed)
    with atomic.replace_directory(target, lambda p: fmt.check_replace(p, overwrite),
                                  claim=claim, keep=keep) as tmp:
        ragged = storage == "jpeg" or is_ragged_progress(tmp)
        args = (dataset, tmp, target, job, pre_transform, dtype, channels_last, chunk_size,
                num_workers, skip_bad, classes, info, show, state, tqdm, order, storage,
                jpeg_quality)
        if not ragged:
            try:
                result = _write(*args, ragged=False)
            except _SizeMismatch:
                if dtype != torch.uint8 or channels_last:
                    raise
                for name in atomic.WORK_FILES | {fmt.DATA, fmt.IMAGES, fmt.MASKS_BIN}:
                    (tmp / name).unlink(missing_ok=True)  # own sizes: start over, ragged
                ragged = True
        if ragged:
            result = _write(*args, ragged=True)
    if result.skipped:
        warnings.warn(skipped_summary(result.skipped, n), stacklevel=2)
    return result


def _write(dataset, tmp: Path, target: Path, job, pre_transform, dtype, channels_last,
           chunk_size, num_workers, skip_bad, classes, info, show, state, tqdm,
           order: Optional[List[int]], storage: str, quality: Optional[int],
           ragged: bool) -> WriteResult:
    """One write into the staging directory ``tmp``: ``ingest.fill`` into ``_DiskColumns``
    (the module docstring's columns), then the final files and meta.json."""
    t0 = time.perf_counter()
    n = job["samples"]
    prog = _Progress.read(tmp) if (tmp / PROGRESS).exists() else None
    resumed = prog is not None and bool(prog.images.get("compact")) == ragged
    if not resumed:  # a fresh write, in an empty staging directory
        prog = _Progress(job)
    state["progress"], state["tmp"] = prog, tmp
    checker = SampleChecker(dataset, skip_bad, ref=prog.ref, ragged=ragged)
    checker.skipped = list(prog.skipped)
    start = prog.chunks * chunk_size
    if ragged:
        images: Any = RaggedImagesWriter(tmp, target, storage, quality, prog.images, prog.ref)
    else:
        images = _DenseImagesWriter(tmp, target, n, job, prog.ref)
    lfd = os.open(tmp / LABELS_PART, os.O_RDWR | os.O_CREAT, 0o644)
    parts = TargetParts(tmp, prog.targets, ragged=ragged)
    try:
        k = len(images.files)
        digests = list(prog.digests) + [hashlib.sha256().hexdigest()] * (k + 1)
        hl = _hash_prefix(lfd, prog.rows * 8)
        # a ragged write recorded before its masks were target parts: not resumable
        old_masks = resumed and ragged and "mask_bytes" in json.loads(
            (tmp / PROGRESS).read_text())
        if not images.resume(prog.rows, digests, resumed) or hl is None or (
                resumed and (hl.hexdigest() != digests[k] or not parts.resume(prog.rows)
                             or old_masks)):
            state["progress"] = None  # not worth keeping: removed on the way out
            raise ValueError(f"{hint('resume=True', '--resume')}: the interrupted write "
                             f"of {target} does not "
                             f"match its progress record (its files changed, or were lost "
                             f"in a crash); it is removed, and the next write starts over")
        if ragged:  # what a killed chunk appended goes (images.npy's rows are overwritten)
            os.ftruncate(lfd, prog.rows * 8)
        columns = _DiskColumns(images, parts, lfd, hl, prog, checker, tmp, target,
                               storage == "jpeg")
        with tqdm(total=n, initial=start, disable=not show, desc="writing", unit="img") as bar:
            written = fill(dataset, pre_transform, num_workers, columns, classes, bar,
                           chunk_size, start, order)
        if prog.rows == 0:
            raise all_skipped(n, checker.skipped)
        files, shape, ragged_fields = images.finish(prog.rows, checker.ref)
        labels_all = np.frombuffer(os.pread(lfd, prog.rows * 8, 0), dtype="<i8")
        extra, record = parts.finish(prog.rows)
    finally:
        images.close()
        os.close(lfd)
        parts.close()
    files.update(extra)
    if parts.has_labels:
        files[fmt.LABELS] = fmt.write_labels(tmp, labels_all)
    (tmp / PROGRESS).unlink()  # first: from here on, not resumable (labels.part goes next)
    (tmp / LABELS_PART).unlink()
    meta_source = dict(info)
    if checker.skipped:
        meta_source["skipped"] = len(checker.skipped)
    fmt.write_meta(tmp, shape, "uint8" if ragged else job["dtype"], "NCHW" if ragged
                   else job["layout"], classes, meta_source, files, ragged=ragged_fields,
                   targets=record, labels=parts.has_labels)
    return WriteResult(path=str(target), rows=prog.rows, shape=shape,
                       dtype=torch.uint8 if ragged else dtype, classes=classes,
                       skipped=list(checker.skipped), resumed_from=start if resumed else 0,
                       seconds=time.perf_counter() - t0, bytes_written=written,
                       storage=storage if ragged else "raw",
                       stored_bytes=files[fmt.DATA]["size"] if ragged else None)


class _DiskColumns:
    """The columns of a streaming write, filled by ``ingest.fill``: the images column, the
    labels in labels.part and the targets' parts, and after each chunk the progress record
    (synced first), from which ``resume=True`` continues."""

    def __init__(self, images: Any, targets: TargetParts, lfd: int, hl: Any, prog: "_Progress",
                 checker: SampleChecker, tmp: Path, target: Path, originals: bool) -> None:
        self.images, self.targets, self.lfd, self.hl = images, targets, lfd, hl
        self.prog, self.checker, self.tmp, self.target = prog, checker, tmp, target
        self.n = prog.job["samples"]
        self.originals = originals  # (see ingest._Prepared)

    def to_ragged(self, i: int) -> bool:
        """No switch mid-write: the mismatch is raised, and ``write_cache`` starts over ragged
        (the rows are already on disk)."""
        return False

    def write(self, good: List[Tuple[int, Any, Any]], stacked: Optional[torch.Tensor],
              labels: np.ndarray) -> int:
        """Rows ``prog.rows..`` of every column; returns the bytes of images written."""
        row = self.prog.rows
        written = self.images.write(good, stacked, row, self.checker, self.lfd)
        _write_or_disk_full(self.lfd, memoryview(labels).cast("B"), row * 8, self.target,
                            self.n * 8)
        self.hl.update(labels.tobytes())
        self.targets.write_chunk(row)
        self.prog.rows += len(good)
        return written

    def chunk_done(self) -> None:
        prog = self.prog
        prog.chunks += 1
        prog.ref = self.checker.ref
        prog.skipped = list(self.checker.skipped)
        prog.targets = self.targets.record()
        prog.images = self.images.record()
        if prog.ref is not None:
            prog.digests = self.images.digests() + [self.hl.copy().hexdigest()]
        self.images.sync(self.lfd)
        prog.save(self.tmp)


class _DenseImagesWriter:
    """The images column of a streaming write, dense: ``images.npy``, allocated at its full
    size once the first kept sample fixes the row size (a full disk fails then, not hours
    later), each chunk written into its rows."""

    #: its work files, in the order of progress.json's digests (labels.part's comes after)
    files = (fmt.IMAGES,)

    def __init__(self, tmp: Path, target: Path, n: int, job: Dict[str, Any],
                 ref: Optional[Tuple[int, Tuple[int, ...]]]) -> None:
        self.tmp, self.target, self.n, self.ref = tmp, target, n, ref
        self.dtype_name, self.layout = job["dtype"], job["layout"]
        self.dtype = fmt.torch_dtype(self.dtype_name)
        self.fd = os.open(tmp / fmt.IMAGES, os.O_RDWR | os.O_CREAT, 0o644)
        self.header: Optional[bytes] = None
        self.row_bytes = 0
        self.h: Any = None

    def resume(self, rows: int, digests: List[str], resumed: bool) -> bool:
        """Check images.npy's written prefix (``rows`` rows) against ``digests``."""
        if not resumed or self.ref is None:
            return True
        self.header, self.row_bytes = _header(self.n, self.ref[1], self.dtype_name,
                                              self.layout)
        self.h = _hash_prefix(self.fd, len(self.header) + rows * self.row_bytes)
        return self.h is not None and self.h.hexdigest() == digests[0]

    def write(self, good: List[Tuple[int, Any, Any]], stacked: Optional[torch.Tensor],
              first_row: int, checker: Any, lfd: int) -> int:
        """Write the kept samples' rows from ``first_row``; returns the bytes written."""
        if self.header is None:  # the first kept sample fixes the row shape
            self.header, self.row_bytes = _header(self.n, checker.ref[1], self.dtype_name,
                                                  self.layout)
            total = len(self.header) + self.n * self.row_bytes
            _check_disk(self.tmp, self.target, total, self.n * 8)
            try:
                _allocate(self.fd, total)
                _allocate(lfd, self.n * 8)
            except OSError as exc:
                if _is_disk_full(exc):
                    raise _disk_full(self.target, total) from None
                raise
            _pwrite_all(self.fd, memoryview(self.header), 0)
            self.h = hashlib.sha256(self.header)
        header_len = len(self.header)
        rows = chunk_images([im for _, im, _ in good], stacked, self.dtype)
        if self.layout == "NHWC":
            rows = rows.permute(0, 2, 3, 1)
        data = fmt.raw_rows(rows)
        _write_or_disk_full(self.fd, data, header_len + first_row * self.row_bytes,
                            self.target, header_len + self.n * self.row_bytes)
        self.h.update(data)
        return data.nbytes

    def digests(self) -> List[str]:
        return [self.h.copy().hexdigest()]

    def record(self) -> Dict[str, Any]:
        return {}

    def sync(self, lfd: int) -> None:
        """Nothing per chunk: images.npy is synced once, when finished."""

    def finish(self, rows: int, ref: Tuple[int, Tuple[int, ...]]
               ) -> Tuple[Dict[str, Any], Tuple[int, int, int, int], None]:
        """``(files, shape, None)``: images.npy sealed, with skipped samples the real row
        count in its header and the file cut."""
        size = len(self.header) + rows * self.row_bytes
        h = self.h
        if rows != self.n:  # skip_bad dropped some: the header changes, so hash again
            final, _ = _header(rows, ref[1], self.dtype_name, self.layout)
            if len(final) != len(self.header):  # pragma: no cover - numpy pads the header
                raise RuntimeError("npy header length changed with the row count")
            _pwrite_all(self.fd, memoryview(final), 0)
            os.ftruncate(self.fd, size)
            h = _hash_prefix(self.fd, size)
        os.fsync(self.fd)
        c, hh, ww = ref[1]
        return {fmt.IMAGES: {"size": size, "sha256": h.hexdigest()}}, (rows, c, hh, ww), None

    def close(self) -> None:
        os.close(self.fd)


def _header(n: int, chw: Tuple[int, ...], dtype: str, layout: str) -> Tuple[bytes, int]:
    """images.npy's header for ``n`` rows of ``chw``, and one row's bytes."""
    return (fmt.npy_header(fmt.disk_shape((n, *chw), layout), dtype),
            math.prod(chw) * fmt.torch_dtype(dtype).itemsize)


def _write_or_disk_full(fd: int, data: memoryview, offset: int, target: Path,
                        needed: int) -> None:
    try:
        _pwrite_all(fd, data, offset)
    except OSError as exc:
        if _is_disk_full(exc):
            raise _disk_full(target, needed) from None
        raise
