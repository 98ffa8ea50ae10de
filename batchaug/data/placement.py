"""Where a loaded cache keeps its images: on the device, in host memory, or on disk.

``DeviceCache.load(path, placement=...)`` takes one of ``PLACEMENTS``; ``"auto"`` asks
``choose_placement`` (pure, so the rule is testable without a GPU or a large machine) with the
device's free memory and the host's available memory.
"""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

import numpy as np
import torch
from torch import Tensor

from batchaug.data import format as fmt
from batchaug.data.mapped import MappedRows
from batchaug.data.storage import check_device_memory, empty_images

#: Values ``placement=`` accepts.
PLACEMENTS = ("device", "host", "disk", "auto")
#: "auto" keeps the images on a CUDA device only if they take at most this share of its free
#: memory: the model, activations and the optimizer need the rest.
DEVICE_SHARE = 0.5
#: ...and in host memory only if they take at most this share of the available RAM (other
#: ranks on the same host, the page cache and the training process need the rest).
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


def choose_placement(nbytes: int, device_type: str, device_free: Optional[int],
                     ram_available: Optional[int]) -> Tuple[str, str]:
    """The ``"auto"`` rule: ``(placement, reason)`` for ``nbytes`` of images.

    On a CUDA device: ``"device"`` if they fit in ``DEVICE_SHARE`` of its free memory, else
    ``"host"`` if they fit in ``HOST_SHARE`` of the available RAM, else ``"disk"``. On the CPU
    the device is the host: ``"device"`` if they fit in ``HOST_SHARE`` of the RAM, else
    ``"disk"``. Unknown free memory counts as not fitting.

    Example:
        >>> choose_placement(10 * 2**30, "cuda", 8 * 2**30, 64 * 2**30)[0]
        'host'
    """
    need = _gib(nbytes)
    if device_type == "cuda":
        if device_free is not None and nbytes <= DEVICE_SHARE * device_free:
            return "device", (f"auto: {need} of images fit in {DEVICE_SHARE:.0%} of the "
                              f"device's {_gib(device_free)} free")
        dev_note = (f"more than {DEVICE_SHARE:.0%} of the device's {_gib(device_free)} free"
                    if device_free is not None else "the device's free memory is unknown")
        if ram_available is not None and nbytes <= HOST_SHARE * ram_available:
            return "host", (f"auto: {need} of images are {dev_note}; they fit in "
                            f"{HOST_SHARE:.0%} of the {_gib(ram_available)} of RAM available")
        return "disk", (f"auto: {need} of images are {dev_note} and more than "
                        f"{HOST_SHARE:.0%} of the RAM available "
                        f"({_gib(ram_available) if ram_available is not None else 'unknown'})")
    if ram_available is not None and nbytes <= HOST_SHARE * ram_available:
        return "device", (f"auto: {need} of images fit in {HOST_SHARE:.0%} of the "
                          f"{_gib(ram_available)} of RAM available")
    return "disk", (f"auto: {need} of images are more than {HOST_SHARE:.0%} of the RAM "
                    f"available ({_gib(ram_available) if ram_available is not None else 'unknown'})")


def device_free_bytes(device: torch.device) -> Optional[int]:
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    return None


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
        placement, reason = choose_placement((end - start) * row_bytes, dev.type,
                                             device_free_bytes(dev), available_ram())
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
    if host and dev.type == "cuda":  # pinned: the loader's copies to the device are async
        n, c, h, w = shape
        raw = torch.empty((n, h, w, c) if channels_last else (n, c, h, w), dtype=dtype,
                          pin_memory=True)
        images = raw.permute(0, 3, 1, 2) if channels_last else raw
    else:
        images = empty_images(shape, dtype, torch.device("cpu") if host else dev,
                              channels_last=channels_last)
    # The raw (on-disk order) contiguous tensor behind ``images``; bf16 read as its bits.
    raw = images.permute(0, 2, 3, 1) if channels_last else images
    if dtype == torch.bfloat16:
        raw = raw.view(torch.uint16)
    fmt.read_rows_into(path, mm, start, raw)
    return images, None, placement, reason
