"""The on-disk cache format: arrays and meta.json, read and written; nothing of ``DeviceCache``.

Layout (format version 1; a ragged cache, version 2, has ``images.bin`` + ``index.npy`` and
``masks.bin`` instead of the .npy pixel columns, see ``batchaug.data.meta``)::

    CACHE/
      images.npy   (N, C, H, W) or (N, H, W, C) array, plain .npy, memory-mappable
      labels.npy   (N,) int64 (absent in a target cache without labels)
      meta.json    format name and version, shape, dtype, layout, classes, source, each
                   file's size and SHA-256, and a checksum of its own content
      masks.npy    (N, H, W) uint8/int16/int32/int64 segmentation masks      } only in a cache
      boxes.npy, box_valid.npy, box_labels.npy: (N, M, 4) float32 XYXY,      } with targets
                   (N, M) bool, (N, M) int64 detection boxes                 } (meta "targets")

Saves follow ``batchaug.data.atomic``'s protocol (``CACHE`` holds the complete old or new cache
at every instant). Loads check meta.json (``batchaug.data.meta``, shared with ``batchaug cache
info``), every file's size, the .npy headers and the labels (``verify=True``: every SHA-256),
raising ``CacheFormatError`` naming the file. Nothing is unpickled; bfloat16 is stored as its
16-bit patterns (``<u2``). Columns are read a chunk at a time (through one small pinned buffer
pair for CUDA), so loading never holds a second full host copy.
"""
from __future__ import annotations

import hashlib
import io
import itertools
import json
import os
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Tuple, TypeVar, Union

import numpy as np
import torch

from batchaug._version import __version__
from batchaug.data import atomic
from batchaug.data.atomic import write_file
from batchaug.data.ragged import RaggedImages, ragged_meta_fields, open_ragged, \
    write_ragged_files, write_ragged_bytes
from batchaug.data.storage import DenseImages
from batchaug.errors import hint
from batchaug.data.meta import (  # noqa: F401 - re-exported: the format's public names
    BOX_LABELS, BOX_VALID, BOXES, DATA, FORMAT_NAME, FORMAT_VERSION, IMAGES, INDEX, LABELS, MASKS,
    MASKS_BIN, META, CacheFormatError, _meta_checksum, cache_files, check_labels_file, has_labels,
    is_ragged, open_npy, read_meta)

_TORCH_TO_NAME = {torch.uint8: "uint8", torch.float16: "float16", torch.bfloat16: "bfloat16",
                  torch.float32: "float32"}
_NAME_TO_TORCH = {v: k for k, v in _TORCH_TO_NAME.items()}
# numpy dtype of the stored array for each cache dtype (bfloat16 as raw uint16 bit patterns).
_NAME_TO_NUMPY = {"uint8": np.dtype("uint8"), "float16": np.dtype("<f2"),
                  "bfloat16": np.dtype("<u2"), "float32": np.dtype("<f4")}
_READ_BLOCK = 8 * 1024 * 1024
T = TypeVar("T")
#: Rows per read or write step: about 64 MiB, so no second full copy is ever held.
_CHUNK_BYTES = 64 * 1024 * 1024


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            block = f.read(_READ_BLOCK)
            if not block:
                return h.hexdigest()
            h.update(block)


def disk_shape(shape: Tuple[int, ...], layout: str) -> Tuple[int, ...]:
    """An ``(N, C, H, W)`` shape in a dense images file's ``layout`` (``"NCHW"`` or ``"NHWC"``)."""
    n, c, h, w = shape
    return (n, c, h, w) if layout == "NCHW" else (n, h, w, c)


# --- writing ----------------------------------------------------------------------------------
def dtype_name(dtype: torch.dtype) -> str:
    """The name meta.json records for a cache dtype (``torch.uint8`` -> ``"uint8"``)."""
    return _TORCH_TO_NAME[dtype]


def npy_header(disk_shape: Tuple[int, ...], dtype: Union[str, np.dtype]) -> bytes:
    """The .npy header (format 1.0) every writer uses, ``dtype`` a cache dtype's name or a
    numpy dtype (stored little-endian): the same arrays give the same bytes."""
    dtype = _NAME_TO_NUMPY[dtype] if isinstance(dtype, str) else dtype
    header = {"descr": np.lib.format.dtype_to_descr(dtype.newbyteorder("<") if dtype.itemsize > 1
                                                    else dtype),
              "fortran_order": False, "shape": tuple(int(v) for v in disk_shape)}
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, header)
    return buf.getvalue()


def raw_rows(part: torch.Tensor) -> memoryview:
    """Rows of a CPU image tensor (in on-disk order) as bytes; bfloat16 as its bit patterns."""
    part = part.contiguous()
    if part.dtype == torch.bfloat16:
        part = part.view(torch.uint16)
    # flat first: memoryview cannot cast a shape with a zero (a cache whose samples have no boxes)
    return memoryview(part.reshape(-1).numpy()).cast("B")


def _write_npy(path: Path, array: torch.Tensor, head: Optional[bytes] = None
               ) -> Dict[str, Any]:
    """A tensor (any device; rows in on-disk order) as a plain .npy, a chunk of rows at a time
    (one on the host at a time), hashed as it is written. ``head``: the .npy header (default:
    the array's own dtype, a numpy-representable one)."""
    if head is None:
        head = npy_header(tuple(array.shape), torch.empty(0, dtype=array.dtype).numpy().dtype)
    row = array[0].numel() * array.element_size() if array.shape[0] else 1
    step = max(1, _CHUNK_BYTES // max(1, row))
    return write_file(path, itertools.chain([head], (
        raw_rows(array[a:a + step].cpu()) for a in range(0, array.shape[0], step))))


def write_targets(tmp: Path, targets: Dict[str, torch.Tensor]
                  ) -> Tuple[Dict[str, Any], Optional[Dict[str, Any]]]:
    """Write a cache's target arrays into ``tmp``: ``(files, meta.json's "targets" field)``."""
    from batchaug.data.targets import MASK_DTYPE_NAMES

    files: Dict[str, Any] = {}
    record: Dict[str, Any] = {}
    if targets.get("masks") is not None:
        files[MASKS] = _write_npy(tmp / MASKS, targets["masks"])
        record["masks"] = {"dtype": MASK_DTYPE_NAMES[targets["masks"].dtype]}
    if targets.get("boxes") is not None:
        files[BOXES] = _write_npy(tmp / BOXES, targets["boxes"].to(torch.float32))
        files[BOX_VALID] = _write_npy(tmp / BOX_VALID, targets["box_valid"])
        files[BOX_LABELS] = _write_npy(tmp / BOX_LABELS, targets["box_labels"].to(torch.int64))
        record["boxes"] = {"max_boxes": int(targets["boxes"].shape[1])}
    return files, (record or None)


def _is_replaceable(path: Path) -> bool:
    """Only an empty directory or an earlier batchaug cache may be replaced by a save."""
    if not path.is_dir():
        return False
    if not any(path.iterdir()):
        return True
    try:
        return json.loads((path / META).read_text()).get("format") == FORMAT_NAME
    except (OSError, ValueError, AttributeError, RecursionError):
        return False


def check_destination(path: Union[str, os.PathLike], overwrite: bool = False) -> None:
    """Raise ``FileExistsError`` now if ``save(path, overwrite)`` would refuse ``path`` (for
    callers that check before spending time on the work, such as ``batchaug cache build``)."""
    path = Path(path)
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} already exists; "
                              f"{hint('pass overwrite=True', 'add --overwrite')} to replace it")
    if path.exists() and not _is_replaceable(path):
        raise FileExistsError(f"{path} exists and is not a batchaug cache; refusing to replace it")


def check_replace(path: Path, overwrite: bool) -> None:
    check_destination(path, overwrite)
    if path.exists():
        atomic.check_removable(path)


def write_labels(tmp: Path, labels: np.ndarray) -> Dict[str, Any]:
    """labels.npy for ``labels`` (any integer array), as every writer stores it."""
    buf = io.BytesIO()
    np.save(buf, np.asarray(labels).astype("<i8"), allow_pickle=False)
    return write_file(tmp / LABELS, buf.getvalue())


def write_meta(tmp: Path, shape, dtype: str, layout: str, classes: Optional[list],
               source: Optional[Dict[str, Any]], files: Dict[str, Any],
               ragged: Optional[Dict[str, Any]] = None,
               targets: Optional[Dict[str, Any]] = None, labels: bool = True
               ) -> Dict[str, Any]:
    """Seal and write meta.json last: a staged directory without it is never a cache.

    ``ragged``: a ragged cache's version-2 fields (without them, version 1, which earlier
    batchaug reads); ``targets``: ``write_targets``' record; ``labels=False``: no labels.npy.
    """
    meta: Dict[str, Any] = {
        "format": FORMAT_NAME,
        "format_version": 1 if ragged is None else FORMAT_VERSION,
        "created_by": f"batchaug {__version__}",
        "shape": [int(v) for v in shape],
        "dtype": dtype,
        "value_range": [0, 255] if dtype == "uint8" else [0.0, 1.0],
        "layout": layout,
        "classes": classes,
        "source": source or {},
        "files": files,
    }
    meta.update(ragged or {})
    if targets:
        meta["targets"] = targets
    if not labels:
        meta["has_labels"] = False
    meta["meta_sha256"] = _meta_checksum(meta)
    write_file(tmp / META, (json.dumps(meta, indent=2) + "\n").encode())
    return meta


def save_cache(path: Union[str, os.PathLike], images: Union[torch.Tensor, RaggedImages],
               labels: Optional[torch.Tensor], *, classes: Optional[list] = None,
               source: Optional[Dict[str, Any]] = None, overwrite: bool = False,
               targets: Optional[Dict[str, Any]] = None) -> None:
    """Write a cache's columns to the directory ``path`` (see the module docstring), each pixel
    column dense (.npy, NHWC when channels_last) or a ``RaggedImages`` (``images.bin`` +
    ``index.npy`` or ``masks.bin``). ``overwrite=True`` replaces an existing cache, never a
    directory that is not one; a symlink at ``path`` keeps the link and replaces its target.
    """
    target = atomic.resolve(Path(path))
    check_replace(target, overwrite)  # fail before writing anything...
    targets = dict(targets or {})
    # a ragged masks column goes to masks.bin; a dense one is a target array as the boxes are
    masks = targets.pop("masks") if isinstance(targets.get("masks"), RaggedImages) else None
    ragged = isinstance(images, RaggedImages)
    # ...and again under the lock, in case another save made ``path`` meanwhile.
    with atomic.replace_directory(target, lambda p: check_replace(p, overwrite),
                                  claim=atomic.keeper(target, overwrite)) as tmp:
        if ragged:
            files, layout = write_ragged_files(tmp, images), "NCHW"
        else:
            channels_last = DenseImages(images).channels_last
            layout = "NHWC" if channels_last else "NCHW"
            disk = images.permute(0, 2, 3, 1) if channels_last else images
            files = {IMAGES: _write_npy(tmp / IMAGES, disk, npy_header(
                tuple(disk.shape), _TORCH_TO_NAME[images.dtype]))}
        if labels is not None:
            files[LABELS] = write_labels(tmp, labels.cpu().numpy())
        extra, record = write_targets(tmp, targets)
        files.update(extra)
        if masks is not None:
            files[MASKS_BIN] = write_ragged_bytes(tmp / MASKS_BIN, masks)[0]
            record = {**(record or {}), "masks": {"dtype": "uint8"}}
        write_meta(tmp, images.shape, _TORCH_TO_NAME[images.dtype], layout, classes, source,
                   files, targets=record, labels=labels is not None,
                   ragged=ragged_meta_fields(images.ragged, images.storage, images.quality,
                                             images.originals) if ragged else None)


def mask_index(index: np.ndarray) -> torch.Tensor:
    """The ``RaggedImages`` index of a ragged cache's masks from its images' index rows
    (their sizes): offsets back to back from 0, ``h * w`` bytes each, no CRC."""
    idx = torch.from_numpy(np.array(index, dtype=np.int64)).reshape(-1, 5).clone()
    nb = idx[:, 2] * idx[:, 3]
    idx[:, 1] = nb
    idx[:, 0] = torch.cumsum(nb, 0) - nb
    idx[:, 4] = 0
    return idx


# --- reading ----------------------------------------------------------------------------------
def check_files(path: Union[str, os.PathLike], meta: Dict[str, Any], verify: bool) -> None:
    """Every recorded file exists with its recorded size (and SHA-256 when ``verify``)."""
    path = Path(path)
    for name in cache_files(meta):  # only these names: meta.json never points elsewhere
        rec = meta["files"][name]
        fp = path / name
        if not fp.is_file():
            raise CacheFormatError(fp, "missing (the cache is incomplete)")
        size = fp.stat().st_size
        if size != rec["size"]:
            raise CacheFormatError(fp, f"is {size} bytes but meta.json records {rec['size']}: "
                                       f"truncated or replaced")
        if verify and sha256_file(fp) != rec["sha256"]:
            raise CacheFormatError(fp, "SHA-256 does not match meta.json: the file is corrupted")


def open_cache(path: Union[str, os.PathLike], verify: bool = False
               ) -> Tuple[Dict[str, Any], np.ndarray, Optional[np.ndarray]]:
    """All the checks ``load`` makes, without reading the images: ``(meta, images, labels)``,
    ``images`` a dense cache's header-only memory map of images.npy or a ragged cache's index
    rows, ``labels`` None for a target cache without them."""
    path = Path(path)
    meta = read_meta(path)
    check_files(path, meta, verify)
    shape = tuple(int(v) for v in meta["shape"])
    masks = "masks" in (meta.get("targets") or {})
    if is_ragged(meta):
        images = index = open_ragged(path, meta)
        if masks:
            need = int((index[:, 2] * index[:, 3]).sum()) if len(index) else 0
            got = (path / MASKS_BIN).stat().st_size
            if got != need:
                raise CacheFormatError(path / MASKS_BIN, f"holds {got} bytes but the images' "
                                                         f"sizes need {need} (h * w each)")
    else:
        images = open_npy(path / IMAGES, disk_shape(shape, meta["layout"]),
                           _NAME_TO_NUMPY[meta["dtype"]], mmap=True)
        if masks:
            open_masks(path, meta)  # its header against meta.json
    open_boxes(path, meta)  # headers against meta.json
    labels = None
    if has_labels(meta):
        labels = open_npy(path / LABELS, (shape[0],), np.dtype("<i8"), mmap=False)
        check_labels_file(labels, meta, path / LABELS)
    return meta, images, labels


def open_masks(path: Union[str, os.PathLike], meta: Dict[str, Any]) -> np.ndarray:
    """A dense cache's ``masks.npy`` as a header-only memory map, checked against meta.json."""
    from batchaug.data.targets import mask_dtype_from_name, mask_numpy_dtype

    n, _, h, w = (int(v) for v in meta["shape"])
    dtype = mask_numpy_dtype(mask_dtype_from_name(meta["targets"]["masks"]["dtype"]))
    return open_npy(Path(path) / MASKS, (n, h, w), dtype, mmap=True)


def open_boxes(path: Union[str, os.PathLike], meta: Dict[str, Any]) -> Dict[str, np.ndarray]:
    """The box arrays of a checked cache (dense or ragged: the same files), read, by name
    (``{}`` without boxes)."""
    boxes = (meta.get("targets") or {}).get("boxes")
    if boxes is None:
        return {}
    path = Path(path)
    n, m = int(meta["shape"][0]), int(boxes["max_boxes"])
    return {"boxes": open_npy(path / BOXES, (n, m, 4), np.dtype("<f4"), mmap=False),
            "box_valid": open_npy(path / BOX_VALID, (n, m), np.dtype(np.bool_), mmap=False),
            "box_labels": open_npy(path / BOX_LABELS, (n, m), np.dtype("<i8"), mmap=False)}


def check_shard(shard: Any) -> Optional[Tuple[int, int]]:
    if shard is None:
        return None
    if (not isinstance(shard, (tuple, list)) or len(shard) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in shard)):
        raise TypeError(f"shard must be a (rank, world_size) pair of ints, got {shard!r}")
    rank, world = shard
    if world < 1 or not 0 <= rank < world:
        raise ValueError(f"shard must satisfy 0 <= rank < world_size, got {shard!r}")
    return rank, world


def shard_range(n: int, rank: int, world_size: int) -> Tuple[int, int]:
    """Contiguous part ``[start, end)`` of ``n`` rows for ``rank``; sizes differ by at most 1.

    The part is ``[rank*n//world_size, (rank+1)*n//world_size)``. With fewer rows than ranks
    some of those are empty; such a part is padded to the one row at its start (a repeat of
    the next rank's first row), so that no rank ever holds nothing to train on. Only an empty
    cache (``n == 0``) gives empty parts.
    """
    start, end = rank * n // world_size, (rank + 1) * n // world_size
    if start == end and n > 0:  # start < n always: (world_size-1)*n//world_size < n
        end = start + 1
    return start, end


def _readinto(f, view: memoryview, fp: Path) -> None:
    got = 0
    while got < view.nbytes:
        k = f.readinto(view[got:])
        if not k:
            raise CacheFormatError(fp, "ended early while reading: truncated")
        got += k


def read_consistently(path: Path, read: Callable[[Path], T]) -> T:
    """``read(path)``, read again if a save swapped a new directory in at ``path`` meanwhile
    (its identity is compared before and after), so no load mixes files of two caches."""
    for attempt in range(3):
        before = _identity(path)
        try:
            out = read(path)
        except (CacheFormatError, FileNotFoundError):
            if attempt < 2 and _identity(path) != before:
                continue
            raise
        if _identity(path) == before:
            return out
    raise CacheFormatError(path, "replaced by another save three times while being loaded")


def _identity(path: Path) -> Optional[Tuple[int, int, int]]:
    """Which directory ``path`` names now (a save swaps in a new one; ctime against inode reuse)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_ctime_ns


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype of a cache dtype name from meta.json (``"uint8"`` -> ``torch.uint8``)."""
    return _NAME_TO_TORCH[name]


def read_into(fp: Path, offset: int, dest: torch.Tensor) -> None:
    """Bytes ``[offset, offset + dest's bytes)`` of file ``fp`` into the contiguous tensor
    ``dest`` (any device and dtype: its bytes), the one reader of every column a load reads
    (dense rows, ragged bytes). Reads straight from the file, a chunk at a time: one kernel
    copy per chunk into ``dest`` (CPU) or into a pinned staging buffer (CUDA); no second full
    host copy."""
    flat = dest.reshape(-1).view(torch.uint8)  # dest is contiguous: a view, never a copy
    n = int(flat.numel())
    with open(fp, "rb", buffering=0) as f:
        f.seek(offset)
        if flat.device.type == "cpu":
            out = flat.numpy()
            for a in range(0, n, _CHUNK_BYTES):
                _readinto(f, memoryview(out[a:a + _CHUNK_BYTES]), fp)
        else:
            _load_to_device(f, fp, flat, _CHUNK_BYTES, n, flat.device)


def _load_to_device(f, fp: Path, raw: torch.Tensor, step: int, n: int, dev: torch.device) -> None:
    """File -> pinned staging buffer -> device, two buffers so reading overlaps copying."""
    if dev.type != "cuda":  # another accelerator: same chunking, plain buffer, no overlap
        buf = torch.empty((min(step, max(1, n)),) + tuple(raw.shape[1:]), dtype=raw.dtype)
        for a in range(0, n, step):
            k = min(step, n - a)
            _readinto(f, memoryview(buf.numpy()[:k]).cast("B"), fp)
            raw[a:a + k].copy_(buf[:k])
        return
    with torch.cuda.device(dev):  # events and streams below belong to ``dev``
        rows = min(step, max(1, n))
        staging = [torch.empty((rows,) + tuple(raw.shape[1:]), dtype=raw.dtype,
                               pin_memory=True) for _ in range(2)]
        done = [None, None]
        for i, a in enumerate(range(0, n, step)):
            k = min(step, n - a)
            buf = staging[i % 2]
            if done[i % 2] is not None:
                done[i % 2].synchronize()  # the copy out of this buffer has finished
            _readinto(f, memoryview(buf.numpy()[:k]).cast("B"), fp)
            raw[a:a + k].copy_(buf[:k], non_blocking=True)
            done[i % 2] = torch.cuda.Event()
            done[i % 2].record()
        torch.cuda.current_stream(dev).synchronize()
