"""batchaug: batched per-sample image augmentation inside the model, and a device-resident data path."""

from batchaug._version import __version__
from batchaug._random import sample_keys, substream
from batchaug import errors
from batchaug.compose import Augment, AugmentedModel
from batchaug.deploy import DeployedModel
from batchaug.cuda_graph import graphed
from batchaug.data import *  # noqa: F401,F403 (the cache, the loader, the writer and its sources)
from batchaug.stall import StallMeter
from batchaug import recipes
from batchaug.picture import show
from batchaug.migrate import from_torchvision
from batchaug.migrate_timm import from_timm, timm_augment
from batchaug.transforms import *  # noqa: F401,F403 (every transform)
from batchaug.transforms._base import GeometricTransform, Transform
from batchaug import data as _data, transforms as _transforms

__all__ = [
    # the transform protocol (base classes for your own transforms)
    "Transform",
    "GeometricTransform",
    # every transform, as batchaug.transforms lists them
    *_transforms.__all__,
    # the prefix
    "Augment",
    "AugmentedModel",
    "DeployedModel",
    "graphed",
    # the data path, as batchaug.data lists it
    *_data.__all__,
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
