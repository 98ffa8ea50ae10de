"""batchaug: batched per-sample image augmentation inside the model, and a device-resident data path."""

from batchaug._version import __version__
from batchaug.compose import Augment, AugmentedModel
from batchaug.data import CacheFormatError, DeviceCache, DeviceLoader, DeviceMemoryError
from batchaug.stall import StallMeter
from batchaug.transforms import (
    CenterCrop,
    Normalize,
    RandomCrop,
    RandomHorizontalFlip,
    RandomResizedCrop,
    RandomRotation,
    RandomVerticalFlip,
    Resize,
    ToDtype,
)

__all__ = [
    # transforms
    "CenterCrop",
    "Normalize",
    "RandomCrop",
    "RandomHorizontalFlip",
    "RandomVerticalFlip",
    "ToDtype",
    "RandomResizedCrop",
    "RandomRotation",
    "Resize",
    # the prefix
    "Augment",
    "AugmentedModel",
    # data
    "CacheFormatError",
    "DeviceCache",
    "DeviceLoader",
    "DeviceMemoryError",
    # measuring
    "StallMeter",
]
