"""meta.json: what it must hold, and the one check of it that ``load`` and ``cache info`` share.

A cache's meta.json names the format and its version, the logical shape ``(N, C, H, W)``, dtype,
on-disk layout, value range, class names, source, each file's size and SHA-256, and a checksum of
its own content (``meta_sha256``). ``read_meta`` parses it and ``validate_meta`` checks every
field any reader uses; ``check_labels_file`` checks labels.npy against ``classes`` (the check
``DeviceCache`` applies on construction), so ``batchaug cache info`` fails exactly when ``load``
would.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Dict, Optional, Tuple, Union

import numpy as np

from batchaug.data import atomic
from batchaug.data.storage import check_label_range
from batchaug.errors import CacheFormatError

FORMAT_NAME = "batchaug-cache"
#: The newest version this batchaug reads and writes. Version 1: a fixed-size ``images.npy``.
#: Version 2 adds ragged storage (``"storage"``: ``"raw"`` or ``"jpeg"``, ``"ragged"``): the
#: images' bytes back to back in ``images.bin`` and one ``index.npy`` row ``(offset, nbytes,
#: height, width)`` per image. A fixed-size raw cache is still written as version 1, so that
#: earlier batchaug versions keep reading it.
FORMAT_VERSION = 2
IMAGES, LABELS, META = "images.npy", "labels.npy", "meta.json"
#: Files of a ragged (version 2, own sizes or JPEG) cache, in place of ``images.npy``.
DATA, INDEX = "images.bin", "index.npy"
STORAGES = ("raw", "jpeg")

DTYPES = ("uint8", "float16", "bfloat16", "float32")
#: Dense targets (``batchaug.data.targets``): meta.json's ``"targets"`` object names what the
#: cache holds, ``{"masks": {"dtype": "uint8"}}`` (``masks.npy`` ``(N, H, W)``) and/or
#: ``{"boxes": {"max_boxes": M}}`` (``boxes.npy`` ``(N, M, 4)`` float32, ``box_valid.npy``
#: ``(N, M)`` bool, ``box_labels.npy`` ``(N, M)`` int64). ``"has_labels": false`` means no
#: ``labels.npy`` (a target cache without per-image labels). A cache without targets has
#: neither field and is written exactly as before; an older batchaug refuses a cache with
#: targets (its file list differs), it never reads one as images only.
MASKS, BOXES, BOX_VALID, BOX_LABELS = "masks.npy", "boxes.npy", "box_valid.npy", "box_labels.npy"
#: A ragged cache's masks: uint8 bytes back to back, mask ``i`` at image ``i``'s own
#: ``(h, w)`` from ``index.npy`` (so ``h * w`` bytes each, in image order; no index of its own).
MASKS_BIN = "masks.bin"
MASK_DTYPES = ("uint8", "int16", "int32", "int64")


def _meta_checksum(meta: Dict[str, Any]) -> str:
    body = {k: v for k, v in meta.items() if k != "meta_sha256"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def read_meta(path: Union[str, os.PathLike]) -> Dict[str, Any]:
    """Read and validate ``meta.json`` (format, version, checksum, fields)."""
    path = Path(path)
    if not path.exists():
        # Only on a filesystem without RENAME_EXCHANGE can a killed save leave PATH missing.
        aside = [p for p in atomic.leftovers(path) if ".old-" in p.name]
        extra = (f" (a save of it was interrupted; the previous cache is in {aside[-1]}, and "
                 f"the next save of {path.name} removes it)" if aside else "")
        note = atomic.interrupted_note(path)
        if note is not None:
            extra += f"; {note}"
        raise FileNotFoundError(f"{path}: no such cache directory{extra}")
    if not path.is_dir():
        raise NotADirectoryError(f"{path}: a cache is a directory (made by DeviceCache.save or "
                                 f"`batchaug cache build`)")
    meta_path = path / META
    if not meta_path.is_file():
        raise CacheFormatError(meta_path, "missing: this is not a batchaug cache directory "
                                          "(or its save was interrupted)")
    try:
        meta = json.loads(meta_path.read_text())
    except (ValueError, UnicodeDecodeError) as exc:
        raise CacheFormatError(meta_path, f"not valid JSON ({exc})") from None
    except RecursionError:  # e.g. thousands of nested brackets
        raise CacheFormatError(meta_path, "not a batchaug cache's meta.json (JSON nested too "
                                          "deeply to read)") from None
    return validate_meta(meta, meta_path)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _field_problem(meta: Dict[str, Any]) -> Optional[str]:
    """What is wrong with meta.json's fields (after the checksum matched), or None."""
    shape = meta.get("shape")
    if not (isinstance(shape, list) and len(shape) == 4 and all(_is_int(v) and v >= 0
                                                                 for v in shape)):
        return f"shape must be 4 integers >= 0, got {shape!r}"
    if meta.get("dtype") not in DTYPES:
        return f"dtype must be one of {list(DTYPES)}, got {meta.get('dtype')!r}"
    if meta.get("layout") not in ("NCHW", "NHWC"):
        return f"layout must be 'NCHW' or 'NHWC', got {meta.get('layout')!r}"
    classes = meta.get("classes")
    if classes is not None and not (isinstance(classes, list)
                                    and all(isinstance(c, str) for c in classes)):
        return "classes must be a list of strings or null"
    if not isinstance(meta.get("source") or {}, dict):
        return "source must be an object"
    files = meta.get("files")
    if not isinstance(files, dict):
        return "files must be an object"
    problem = _targets_problem(meta)
    if problem is not None:
        return problem
    expected = cache_files(meta)
    if expected is None:
        return (f"storage must be one of {list(STORAGES)} and ragged a bool (format version 2), "
                f"got storage={meta.get('storage')!r}, ragged={meta.get('ragged')!r}")
    if set(files) != set(expected):  # meta.json never names any other file
        return f"files must list exactly {' and '.join(expected)}, got {sorted(files)}"
    if is_ragged(meta) and meta["dtype"] != "uint8":
        return f"a ragged (own sizes or JPEG) cache holds uint8, got dtype {meta['dtype']!r}"
    if meta.get("storage") == "jpeg" and not (_is_int(meta.get("quality"))
                                              and 1 <= meta["quality"] <= 100):
        return f"quality must be an integer in 1..100, got {meta.get('quality')!r}"
    originals = meta.get("originals")
    if originals is not None and not (_is_int(originals)
                                      and 0 <= originals <= int(meta["shape"][0])):
        return f"originals must be an integer in 0..N (images), got {originals!r}"
    for name, rec in files.items():
        if not (isinstance(rec, dict) and _is_int(rec.get("size")) and rec["size"] >= 0
                and isinstance(rec.get("sha256"), str) and len(rec["sha256"]) == 64
                and all(ch in "0123456789abcdef" for ch in rec["sha256"])):
            return (f"files[{name!r}] must be an object with an integer size >= 0 and a "
                    f"64-digit hex sha256, got {rec!r}"[:300])
    return None


def _targets_problem(meta: Dict[str, Any]) -> Optional[str]:
    targets = meta.get("targets")
    has_labels = meta.get("has_labels", True)
    if not isinstance(has_labels, bool):
        return f"has_labels must be a bool, got {has_labels!r}"
    if targets is None:
        return None if has_labels else "has_labels is false but there are no targets"
    if not (isinstance(targets, dict) and targets and set(targets) <= {"masks", "boxes"}):
        return f"targets must be an object with 'masks' and/or 'boxes', got {targets!r}"[:300]
    if is_ragged(meta) and "masks" in targets and targets["masks"] != {"dtype": "uint8"}:
        return "a ragged (own sizes or JPEG) cache holds its masks as uint8"
    masks = targets.get("masks")
    if "masks" in targets and not (isinstance(masks, dict)
                                   and masks.get("dtype") in MASK_DTYPES):
        return f"targets.masks must be {{'dtype': one of {list(MASK_DTYPES)}}}, got {masks!r}"
    boxes = targets.get("boxes")
    if "boxes" in targets and not (isinstance(boxes, dict) and _is_int(boxes.get("max_boxes"))
                                   and boxes["max_boxes"] >= 0):
        return f"targets.boxes must be {{'max_boxes': an integer >= 0}}, got {boxes!r}"
    return None


def target_files(meta: Dict[str, Any]) -> tuple:
    """The target files meta.json lists (none for a cache without targets)."""
    targets = meta.get("targets") or {}
    names: tuple = ()
    if "masks" in targets:
        names += (MASKS_BIN,) if is_ragged(meta) else (MASKS,)
    if "boxes" in targets:
        names += (BOXES, BOX_VALID, BOX_LABELS)
    return names


def has_labels(meta: Dict[str, Any]) -> bool:
    """Whether the cache has ``labels.npy`` (every cache but a target cache without labels)."""
    return meta.get("has_labels", True) is not False


def is_ragged(meta: Dict[str, Any]) -> bool:
    """Whether meta.json describes a ragged cache (``images.bin`` + ``index.npy``)."""
    return meta.get("format_version", 1) >= 2 and (
        meta.get("storage", "raw") != "raw" or bool(meta.get("ragged", False)))


def cache_files(meta: Dict[str, Any]) -> Optional[tuple]:
    """The data files meta.json must list (None when its storage fields are invalid)."""
    if meta.get("format_version", 1) >= 2 and (meta.get("storage", "raw") not in STORAGES
                                               or not isinstance(meta.get("ragged", False), bool)):
        return None
    images = (DATA, INDEX) if is_ragged(meta) else (IMAGES,)
    return images + ((LABELS,) if has_labels(meta) else ()) + target_files(meta)


def validate_meta(meta: Any, meta_path: Union[str, os.PathLike]) -> Dict[str, Any]:
    """The one check of a parsed meta.json, shared by ``load`` and ``batchaug cache info``:
    format name and version, checksum, then every field the readers use. Returns ``meta``."""
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
        raise CacheFormatError(meta_path, f"not a batchaug cache (format is not {FORMAT_NAME!r})")
    version = meta.get("format_version")
    if not _is_int(version) or version < 1:
        raise CacheFormatError(meta_path, f"invalid format_version {version!r}")
    if version > FORMAT_VERSION:
        raise CacheFormatError(
            meta_path, f"written in format version {version} by {meta.get('created_by')}, newer "
                       f"than this batchaug reads ({FORMAT_VERSION}); upgrade batchaug")
    try:
        sealed = meta.get("meta_sha256") == _meta_checksum(meta)
    except (RecursionError, ValueError, TypeError):
        sealed = False
    if not sealed:
        raise CacheFormatError(meta_path, "content does not match its checksum: meta.json was "
                                          "edited or damaged after the cache was written")
    problem = _field_problem(meta)
    if problem is not None:
        raise CacheFormatError(meta_path, f"invalid field: {problem}")
    return meta


def open_npy(fp: Path, shape: Tuple[int, ...], dtype: np.dtype, mmap: bool) -> np.ndarray:
    """The .npy array ``fp`` (a memory map with ``mmap``), checked to hold ``dtype``
    ``shape`` as meta.json records."""
    try:
        arr = np.load(fp, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise CacheFormatError(fp, f"not a readable .npy array ({exc})") from None
    if tuple(arr.shape) != tuple(shape) or arr.dtype != dtype:
        raise CacheFormatError(fp, f"holds {arr.dtype} {tuple(arr.shape)} but meta.json records "
                                   f"{dtype} {tuple(shape)}")
    return arr


def check_labels_file(labels: np.ndarray, meta: Dict[str, Any], fp: Path) -> None:
    """``storage.check_label_range`` (the check ``DeviceCache`` applies) on labels.npy against
    meta.json's classes, as a ``CacheFormatError`` naming the file."""
    if labels.size:
        try:
            check_label_range(int(labels.min()), int(labels.max()), meta.get("classes"))
        except ValueError as exc:
            raise CacheFormatError(fp, str(exc)) from None
