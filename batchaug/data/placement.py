"""Where a loaded cache keeps its images: on the device, in host memory, or on disk.

``DeviceCache.load(path, placement=...)`` takes one of ``PLACEMENTS``; ``"auto"`` asks
``choose_placement`` (pure, so the rule is testable without a GPU or a large machine) with the
device's free memory and the host's available memory.
"""
from __future__ import annotations

import os
from typing import Optional, Tuple

import torch

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
