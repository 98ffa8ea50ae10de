"""Where a loaded cache keeps its images: on the device, in host memory, or on disk.

``DeviceCache.load(path, placement=...)`` takes one of ``PLACEMENTS``; ``"auto"`` asks
``choose_placement`` (pure, so the rule is testable without a GPU or a large machine) with the
device's free memory, the host's available memory and how many ranks share them.

A ``"host"`` cache is ordinary (pageable) memory: the loader copies each batch through its own
small pinned staging buffers, so pinning the whole cache would buy nothing, and torch's pinned
allocator would round it up to a power of two and keep it (40 GiB pins 64 GiB of unswappable
memory).
"""
from __future__ import annotations

import logging
import math
import os
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

import numpy as np
import torch
from torch import Tensor

from batchaug.data import format as fmt
from batchaug.data.ragged import RaggedImages
from batchaug.data.storage import MappedRows, _fmt_bytes, check_device_memory, device_free_bytes

#: Values ``placement=`` accepts.
PLACEMENTS = ("device", "host", "disk", "auto")
#: "auto" keeps the images on a CUDA device only if they take at most this share of its free
#: memory (split between the ranks that share the device): the model, activations and the
#: optimizer need the rest.
DEVICE_SHARE = 0.5
#: ...and in host memory only if they take at most this share of the available RAM, split
#: between the host's ranks (``LOCAL_WORLD_SIZE``): every rank holds its own copy (or part),
#: and all of them read the same free-memory figure before any has allocated.
HOST_SHARE = 0.5


def available_ram() -> Optional[int]:
    """Bytes of RAM available to new allocations (Linux ``MemAvailable``), or None if unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def local_world_size() -> int:
    """Processes on this host that each load a cache: ``LOCAL_WORLD_SIZE`` (set by torchrun
    and by Lightning's launchers), else 1."""
    raw = os.environ.get("LOCAL_WORLD_SIZE")
    if raw is None or raw.strip() == "":
        return 1
    try:
        n = int(raw)
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"the environment variable LOCAL_WORLD_SIZE must be an int >= 1 (the "
                         f"processes on this host), got {raw!r}")
    return n


def choose_placement(nbytes: int, device_type: str, device_free: Optional[int],
                     ram_available: Optional[int], local_ranks: int = 1,
                     ranks_per_device: int = 1) -> Tuple[str, str]:
    """The ``"auto"`` rule: ``(placement, reason)`` for ``nbytes`` of images per rank.

    On a CUDA device: ``"device"`` if they fit in this rank's part of ``DEVICE_SHARE`` of its
    free memory (``ranks_per_device`` ranks share it), else ``"host"`` if they fit in this
    rank's part of ``HOST_SHARE`` of the available RAM (``local_ranks`` ranks on this host
    share it), else ``"disk"``. On the CPU the device is the host: ``"device"`` if they fit in
    the rank's part of the RAM, else ``"disk"``. Unknown free memory counts as not fitting.

    Example:
        >>> choose_placement(10 * 2**30, "cuda", 8 * 2**30, 64 * 2**30)[0]
        'host'
        >>> choose_placement(10 * 2**30, "cuda", 8 * 2**30, 64 * 2**30, local_ranks=8)[0]
        'disk'
    """
    need = _fmt_bytes(nbytes)
    dev_budget = (DEVICE_SHARE * device_free / ranks_per_device
                  if device_free is not None else None)
    ram_budget = HOST_SHARE * ram_available / local_ranks if ram_available is not None else None
    dev_of = (f"{DEVICE_SHARE:.0%} of the device's {_fmt_bytes(device_free)} free"
              + (f" / {ranks_per_device} ranks on it" if ranks_per_device > 1 else "")
              if device_free is not None else "")
    ram_of = (f"{HOST_SHARE:.0%} of the {_fmt_bytes(ram_available)} of RAM available"
              + (f" / {local_ranks} ranks on this host (LOCAL_WORLD_SIZE)"
                 if local_ranks > 1 else "")
              if ram_available is not None else "")
    fits_ram = ram_budget is not None and nbytes <= ram_budget
    ram_note = ram_of if ram_available is not None else "the RAM available (unknown)"
    if device_type == "cuda":
        if dev_budget is not None and nbytes <= dev_budget:
            return "device", f"auto: {need} of images fit in {dev_of}"
        dev_note = (f"more than {dev_of}" if device_free is not None
                    else "the device's free memory is unknown")
        if fits_ram:
            return "host", f"auto: {need} of images are {dev_note}; they fit in {ram_of}"
        return "disk", f"auto: {need} of images are {dev_note} and more than {ram_note}"
    if fits_ram:
        return "device", f"auto: {need} of images fit in {ram_of}"
    return "disk", f"auto: {need} of images are more than {ram_note}"


def _ranks_per_device(device: torch.device, local_ranks: int) -> int:
    """Local ranks that share ``device``: 1 unless there are more ranks than devices."""
    if device.type != "cuda" or local_ranks <= 1:
        return 1
    return max(1, math.ceil(local_ranks / max(1, torch.cuda.device_count())))


def pixel_bytes(meta: Dict[str, Any], index: Optional[np.ndarray], start: int, end: int
                ) -> Tuple[int, int]:
    """Bytes of rows ``[start, end)`` of the cache's two pixel columns, ``(images, masks)``:
    a dense column's rows times their size, a ragged one's stored bytes (masks: ``h * w``
    each). ``index`` is a ragged cache's index rows (None for a dense cache)."""
    masks = (meta.get("targets") or {}).get("masks")
    if index is not None:
        rows = index[start:end]
        images = int(rows[:, 1].sum()) if len(rows) else 0
        mask_bytes = int((rows[:, 2] * rows[:, 3]).sum()) if len(rows) and masks else 0
        return images, mask_bytes
    n, c, h, w = (int(v) for v in meta["shape"])
    row = c * h * w * fmt.torch_dtype(meta["dtype"]).itemsize
    mask_row = 0 if masks is None else h * w * np.dtype(masks["dtype"]).itemsize
    return (end - start) * row, (end - start) * mask_row


def resolve_placement(path: Path, meta: Dict[str, Any], nbytes: int, dev: torch.device,
                      placement: Optional[str]) -> Tuple[str, Optional[str]]:
    """``(placement, auto's reason or None)`` for a cache whose pixel columns take ``nbytes``
    on this rank. ``None`` means ``"device"``, except for a JPEG cache on a CUDA device:
    ``"host"``, where the decoder reads its bitstreams; so does ``"auto"`` there, or
    ``"disk"`` when they do not fit in RAM."""
    jpeg_cuda = meta.get("storage") == "jpeg" and dev.type == "cuda"
    if placement is None:
        return ("host" if jpeg_cuda else "device"), None
    if placement != "auto":
        return placement, None
    local = local_world_size()
    if jpeg_cuda:
        placement, reason = choose_placement(nbytes, "cpu", None, available_ram(), local)
        placement = "host" if placement == "device" else placement
        reason = f"{reason}; JPEG bytes stay on the host, where the decoder reads them"
    else:
        placement, reason = choose_placement(nbytes, dev.type, device_free_bytes(dev),
                                             available_ram(), local,
                                             _ranks_per_device(dev, local))
    logging.getLogger("batchaug.data.cache").info(
        "DeviceCache.load(%s): placement=%s (%s)", path, placement, reason)
    return placement, reason


def place_dense(path: Path, name: str, arr: np.memmap, start: int, end: int,
                dev: torch.device, placement: str, dtype: torch.dtype,
                channels_last: bool = False) -> Tuple[Tensor, Optional[MappedRows]]:
    """Rows ``[start, end)`` of the dense column stored in ``path/name`` (``arr``: its checked
    header-only memory map, rows in on-disk order) where ``placement`` says: ``(rows, the
    MappedRows of a "disk" column or None)``. ``dtype`` is the column's torch dtype (bfloat16
    is stored as its bit patterns); ``channels_last``: an NHWC images file, returned as an
    NCHW view. ``"disk"`` reads nothing here."""
    if placement == "disk":
        mapped = MappedRows(path / name, arr.offset, start, end - start, arr.shape[1:],
                            arr.dtype)
        raw = torch.from_numpy(mapped.array)
        if dtype == torch.bfloat16:
            raw = raw.view(torch.bfloat16)
        return (raw.permute(0, 3, 1, 2) if channels_last else raw), mapped
    # "host": pageable memory (see the module docstring); the loader's staging buffers are pinned.
    where = torch.device("cpu") if placement == "host" else dev
    shape = (end - start,) + tuple(int(v) for v in arr.shape[1:])  # on-disk order
    raw = torch.empty(shape, dtype=dtype, device=where)
    row_bytes = int(np.prod(arr.shape[1:], dtype=np.int64)) * arr.dtype.itemsize
    fmt.read_into(path / name, arr.offset + start * row_bytes, raw)
    return (raw.permute(0, 3, 1, 2) if channels_last else raw), None


def place_ragged(path: Path, name: str, rows: np.ndarray, channels: int, dev: torch.device,
                 placement: str, storage: str = "raw", quality: Optional[int] = None,
                 originals: Optional[int] = None) -> Tuple[RaggedImages, Optional[MappedRows]]:
    """The ragged column stored in ``path/name`` (bytes back to back) for the index ``rows``
    (this part's rows, offsets into the file), where ``placement`` says: ``(column, the
    MappedRows of a "disk" column or None)``. ``"disk"`` reads nothing here."""
    index = torch.from_numpy(np.array(rows, dtype=np.int64)).reshape(-1, 5)
    first = int(index[0, 0]) if len(index) else 0
    nbytes = int(index[:, 1].sum()) if len(index) else 0
    index[:, 0] -= first
    mapped = None
    if placement == "disk":
        mapped = MappedRows(path / name, 0, first, nbytes, (), np.dtype(np.uint8))
        data = torch.from_numpy(mapped.array)
    else:
        # pageable, as a dense host column: the loader gathers each batch's bytes into a fresh
        # pinned buffer (the copy or the decoder reads that), so gigabytes are never pinned
        where = torch.device("cpu") if placement == "host" else dev
        data = torch.empty(nbytes, dtype=torch.uint8, device=where)
        fmt.read_into(path / name, first, data)
    return RaggedImages(data, index, channels, storage, quality, mapped=mapped,
                         originals=originals), mapped


def check_images_memory(placement: str, images_bytes: int, rows: int, dev: torch.device
                        ) -> None:
    """``DeviceMemoryError`` now if the images (on the device) and the labels (always there)
    of ``rows`` rows do not fit in ``dev``'s free memory."""
    if placement == "device":
        check_device_memory(images_bytes + rows * 8, dev)
    else:
        check_device_memory(rows * 8, dev, "labels")
