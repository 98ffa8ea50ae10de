"""Batched augmentation modules: one small ``nn.Module`` per transform, per-sample random params."""
# --- the protocol: base classes (not in __all__, which lists the transforms themselves) ---
from batchaug.transforms._base import GeometricTransform, Transform
# --- geometry (flips, crops, pad, rotation, affine, perspective, resized crop, resize) ---
from batchaug.transforms._geometry import (
    CenterCrop,
    Pad,
    RandomCrop,
    RandomHorizontalFlip,
    RandomResizedCrop,
    RandomVerticalFlip,
    Resize,
)
from batchaug.transforms._warps import RandomAffine, RandomPerspective, RandomRotation
# --- colour transforms (jitter, grayscale, invert, posterize, solarize, sharpness, ...) ---
from batchaug.transforms._color import (
    ColorJitter,
    Grayscale,
    RandomAdjustSharpness,
    RandomAutocontrast,
    RandomEqualize,
    RandomGrayscale,
    RandomInvert,
    RandomPosterize,
    RandomSolarize,
)
# --- misc transforms (blur, erasing) ---
from batchaug.transforms._misc import GaussianBlur, Normalize, RandomErasing, ToDtype
# --- label mixing (images, labels) -> (images, targets); not for Augment ---
from batchaug.transforms._augment import CutMix, MixUp, MixUpOrCutMix
# --- automatic augmentation policies (one op per sample) ---
from batchaug.transforms._auto_augment import AugMix, AutoAugment, RandAugment, TrivialAugmentWide
# --- timm's policies, erasing and mixup with per-sample draws (batchaug.from_timm) ---
from batchaug.transforms._timm import (
    TimmAugMix,
    TimmAutoAugment,
    TimmRandAugment,
    TimmRandomResizedCrop,
)
from batchaug.transforms._timm_mix import TimmMixup, TimmRandomErasing
# --- per-sample random containers ---
from batchaug.transforms._container import RandomApply, RandomChoice, RandomOrder

__all__ = [
    "CenterCrop", "Normalize", "Pad", "RandomCrop", "RandomHorizontalFlip", "RandomAffine",
    "RandomPerspective", "RandomResizedCrop", "RandomRotation", "RandomVerticalFlip", "Resize",
    "ToDtype", "ColorJitter", "Grayscale", "RandomGrayscale", "RandomInvert", "RandomPosterize",
    "RandomSolarize", "RandomAdjustSharpness", "RandomAutocontrast", "RandomEqualize",
    "GaussianBlur", "RandomErasing", "TrivialAugmentWide", "RandAugment", "AutoAugment",
    "AugMix", "RandomApply", "RandomChoice", "RandomOrder", "MixUp", "CutMix", "MixUpOrCutMix",
    "TimmRandAugment", "TimmAutoAugment", "TimmAugMix", "TimmRandomErasing", "TimmMixup",
    "TimmRandomResizedCrop",
]

# Augment's refusals and from_torchvision's hints offer what this module exports
import sys as _sys  # noqa: E402
from batchaug import _equivalents as _equivalents  # noqa: E402

_equivalents.set_exports(_sys.modules[__name__])
