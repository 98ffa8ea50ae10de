"""batchaug: batched per-sample image augmentation inside the model, and a device-resident data path."""

from batchaug._version import __version__
from batchaug._random import sample_keys, substream
from batchaug import errors
from batchaug.compose import Augment, AugmentedModel
from batchaug.deploy import DeployedModel
from batchaug.cuda_graph import graphed
from batchaug.data import (
    BadImageError,
    CacheFormatError,
    DeviceCache,
    DeviceLoader,
    DeviceMemoryError,
    DiskFullError,
    WriteResult,
    write_cache,
)
from batchaug.stall import StallMeter
from batchaug import recipes
from batchaug.picture import show
from batchaug.migrate import from_torchvision
from batchaug.migrate_timm import from_timm, timm_augment
from batchaug.transforms import (
    CenterCrop,
    Normalize,
    Pad,
    RandomCrop,
    RandomHorizontalFlip,
    RandomAffine,
    RandomPerspective,
    RandomResizedCrop,
    RandomRotation,
    RandomVerticalFlip,
    Resize,
    ToDtype,
    ColorJitter,
    GaussianBlur,
    Grayscale,
    RandomAdjustSharpness,
    RandomApply,
    RandomAutocontrast,
    RandomChoice,
    RandomEqualize,
    RandomErasing,
    RandomGrayscale,
    RandomInvert,
    RandomOrder,
    RandomPosterize,
    RandomSolarize,
    TrivialAugmentWide,
    RandAugment,
    AutoAugment,
    AugMix,
)
from batchaug.transforms import CutMix, MixUp, MixUpOrCutMix
from batchaug.transforms import (
    TimmAugMix,
    TimmAutoAugment,
    TimmMixup,
    TimmRandAugment,
    TimmRandomErasing,
    TimmRandomResizedCrop,
)
from batchaug.transforms._base import GeometricTransform, Transform

__all__ = [
    # the transform protocol (base classes for your own transforms)
    "Transform",
    "GeometricTransform",
    # transforms
    "CenterCrop",
    "Normalize",
    "Pad",
    "RandomCrop",
    "RandomHorizontalFlip",
    "RandomVerticalFlip",
    "ToDtype",
    "RandomAffine",
    "RandomPerspective",
    "RandomResizedCrop",
    "RandomRotation",
    "Resize",
    "ColorJitter",
    "Grayscale",
    "RandomGrayscale",
    "RandomInvert",
    "RandomPosterize",
    "RandomSolarize",
    "RandomAdjustSharpness",
    "RandomAutocontrast",
    "RandomEqualize",
    "GaussianBlur",
    "RandomErasing",
    "RandomApply",
    "RandomChoice",
    "RandomOrder",
    # automatic augmentation policies (an op per sample)
    "TrivialAugmentWide",
    "RandAugment",
    "AutoAugment",
    "AugMix",
    # label mixing (after the prefix: takes labels)
    "MixUp",
    "CutMix",
    "MixUpOrCutMix",
    # timm's semantics, per sample (from_timm builds them)
    "TimmRandAugment",
    "TimmAutoAugment",
    "TimmAugMix",
    "TimmRandomErasing",
    "TimmRandomResizedCrop",
    "TimmMixup",
    # the prefix
    "Augment",
    "AugmentedModel",
    "DeployedModel",
    "graphed",
    # data
    "BadImageError",
    "CacheFormatError",
    "DeviceCache",
    "DeviceLoader",
    "DeviceMemoryError",
    "DiskFullError",
    "WriteResult",
    "write_cache",
    "errors",
    # measuring
    "StallMeter",
    # presets and a picture of them
    "recipes",
    "show",
    # migration
    "from_torchvision",
    "from_timm",
    "timm_augment",
    # keyed randomness: the key of (seed, epoch, sample index)
    "sample_keys",
    "substream",
]
