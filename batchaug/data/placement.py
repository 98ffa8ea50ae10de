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
from batchaug.data.mapped import MappedRows
from batchaug.data.storage import check_device_memory, device_free_bytes, empty_images

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


def check_placement(placement: object) -> str:
    if not isinstance(placement, str) or placement not in PLACEMENTS:
        raise ValueError(f"placement must be one of {list(PLACEMENTS)}, got {placement!r}")
    return placement


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


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


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
    need = _gib(nbytes)
    dev_budget = (DEVICE_SHARE * device_free / ranks_per_device
                  if device_free is not None else None)
    ram_budget = HOST_SHARE * ram_available / local_ranks if ram_available is not None else None
    dev_of = (f"{DEVICE_SHARE:.0%} of the device's {_gib(device_free)} free"
              + (f" / {ranks_per_device} ranks on it" if ranks_per_device > 1 else "")
              if device_free is not None else "")
    ram_of = (f"{HOST_SHARE:.0%} of the {_gib(ram_available)} of RAM available"
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


def place_images(path: Path, meta: Dict[str, Any], mm: np.memmap, start: int, end: int,
                 dev: torch.device, placement: str
                 ) -> Tuple[Tensor, Optional[MappedRows], str, Optional[str]]:
    """Rows ``[start, end)`` of ``path``'s images where ``placement`` says (``"auto"``
    resolved here): ``(images, mapped rows for "disk", placement, auto's reason)``.

    ``meta`` and ``mm`` are what ``format.open_cache`` returned (checked meta, header-only
    memory map). ``"disk"`` reads nothing here.
    """
    dtype = fmt.torch_dtype(meta["dtype"])
    shape = [end - start] + [int(v) for v in meta["shape"][1:]]
    channels_last = meta["layout"] == "NHWC"
    row_bytes = int(np.prod(mm.shape[1:], dtype=np.int64)) * mm.dtype.itemsize
    reason = None
    if placement == "auto":
        local = local_world_size()
        masks = (meta.get("targets") or {}).get("masks")
        # masks stay where the images do: their bytes count towards the choice
        mask_row = 0 if masks is None else int(meta["shape"][2]) * int(meta["shape"][3]) * \
            np.dtype(masks["dtype"]).itemsize
        placement, reason = choose_placement((end - start) * (row_bytes + mask_row), dev.type,
                                             device_free_bytes(dev), available_ram(), local,
                                             _ranks_per_device(dev, local))
        logging.getLogger("batchaug.data.cache").info(
            "DeviceCache.load(%s): placement=%s (%s)", path, placement, reason)
    if placement == "disk":
        mapped = MappedRows(path / fmt.IMAGES, mm.offset, start, end - start, mm.shape[1:],
                            mm.dtype)
        check_device_memory((end - start) * 8, dev, "labels")
        raw = torch.from_numpy(mapped.array)
        if dtype == torch.bfloat16:
            raw = raw.view(torch.bfloat16)
        return (raw.permute(0, 3, 1, 2) if channels_last else raw), mapped, placement, reason
    host = placement == "host"
    check_device_memory((end - start) * (8 if host else row_bytes + 8), dev)
    # "host": pageable memory (see the module docstring); the loader's staging buffers are pinned.
    images = empty_images(shape, dtype, torch.device("cpu") if host else dev,
                          channels_last=channels_last)
    # The raw (on-disk order) contiguous tensor behind ``images``; bf16 read as its bits.
    raw = images.permute(0, 2, 3, 1) if channels_last else images
    if dtype == torch.bfloat16:
        raw = raw.view(torch.uint16)
    fmt.read_rows_into(path, mm, start, raw)
    return images, None, placement, reason
