"""batchaug: batched per-sample image augmentation inside the model, and a device-resident data path."""

# --- transforms (core) ---
from batchaug.transforms import (
    CenterCrop,
    Normalize,
    RandomCrop,
    RandomHorizontalFlip,
    RandomVerticalFlip,
    ToDtype,
)
from batchaug.transforms import RandomResizedCrop, RandomRotation, Resize
# --- prefix (compose) ---
from batchaug.compose import Augment, AugmentedModel
# --- data ---
from batchaug.data import CacheFormatError, DeviceCache, DeviceLoader, DeviceMemoryError
# --- bench helpers ---
from batchaug.stall import StallMeter

__version__ = "0.1.0"

__all__ = [
    # --- transforms (core) ---
    "CenterCrop",
    "Normalize",
    "RandomCrop",
    "RandomHorizontalFlip",
    "RandomVerticalFlip",
    "ToDtype",
    "RandomResizedCrop",
    "RandomRotation",
    "Resize",
    # --- prefix (compose) ---
    "Augment",
    "AugmentedModel",
    # --- data ---
    "CacheFormatError",
    "DeviceCache",
    "DeviceLoader",
    "DeviceMemoryError",
    # --- bench helpers ---
    "StallMeter",
]
