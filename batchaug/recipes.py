"""Named augmentation presets: ``recipes.get("simclr", size=224)`` or ``recipes.simclr()``.

Each preset returns a fresh :class:`batchaug.Augment` taking uint8 (N, 3, H, W) batches. Used by
``batchaug show``, the benchmarks and the examples; copy one and edit it for your own recipe.

Example:
    >>> import torch
    >>> from batchaug import recipes
    >>> aug = recipes.get("cifar10")
    >>> aug(torch.zeros(8, 3, 32, 32, dtype=torch.uint8)).shape
    torch.Size([8, 3, 32, 32])
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional

from batchaug.compose import Augment
from batchaug.transforms import (
    ColorJitter,
    GaussianBlur,
    Normalize,
    RandomApply,
    RandomCrop,
    RandomGrayscale,
    RandomHorizontalFlip,
    RandomResizedCrop,
)

CIFAR10_MEAN = [0.4914, 0.4822, 0.4465]
CIFAR10_STD = [0.2470, 0.2435, 0.2616]
IMAGENET_MEAN = [0.485, 0.456, 0.406]
IMAGENET_STD = [0.229, 0.224, 0.225]


def cifar10(size: int = 32) -> Augment:
    """The standard CIFAR-10 training augmentation: ``RandomCrop(size, padding=size // 8)``
    (4 at 32 px), horizontal flip, CIFAR-10 normalisation."""
    return Augment(
        RandomCrop(size, padding=max(1, size // 8)),
        RandomHorizontalFlip(),
        Normalize(CIFAR10_MEAN, CIFAR10_STD),
    )


def imagenet(size: int = 224) -> Augment:
    """The standard ImageNet training augmentation: ``RandomResizedCrop(size)`` (scale
    (0.08, 1)), horizontal flip, ImageNet normalisation."""
    return Augment(
        RandomResizedCrop(size),
        RandomHorizontalFlip(),
        Normalize(IMAGENET_MEAN, IMAGENET_STD),
    )


def _blur_kernel(size: int) -> int:
    k = max(3, int(0.1 * size))
    return k if k % 2 == 1 else k + 1


def color(size: Optional[int] = None) -> Augment:
    """Colour only: ``ColorJitter(0.4, 0.4, 0.4, 0.1)`` + ``RandomGrayscale(0.2)`` (the colour
    part of SimCLR without its p=0.8; ``size`` is ignored, kept for a uniform signature)."""
    return Augment(ColorJitter(0.4, 0.4, 0.4, 0.1), RandomGrayscale(0.2))


def simclr(size: int = 224) -> Augment:
    """SimCLR's ImageNet augmentation (Chen et al. 2020, appendix A): ``RandomResizedCrop``,
    flip, ``ColorJitter(0.4, 0.4, 0.4, 0.1)`` with p=0.8, ``RandomGrayscale(0.2)``, Gaussian
    blur with p=0.5 (kernel 10% of ``size``, sigma in [0.1, 2.0]), ImageNet normalisation."""
    return Augment(
        RandomResizedCrop(size),
        RandomHorizontalFlip(),
        RandomApply([ColorJitter(0.4, 0.4, 0.4, 0.1)], p=0.8),
        RandomGrayscale(0.2),
        RandomApply([GaussianBlur(_blur_kernel(size), sigma=(0.1, 2.0))], p=0.5),
        Normalize(IMAGENET_MEAN, IMAGENET_STD),
    )


RECIPES: Dict[str, Callable[..., Augment]] = {
    "cifar10": cifar10,
    "imagenet": imagenet,
    "color": color,
    "simclr": simclr,
}


def names() -> List[str]:
    """The preset names, for ``get``."""
    return sorted(RECIPES)


def get(name: str, size: Optional[int] = None) -> Augment:
    """A fresh preset by name (see ``names()``); ``size`` is the output side (each preset's
    default when None)."""
    if name not in RECIPES:
        raise ValueError(f"recipe must be one of {names()}, got {name!r}")
    if size is None:
        return RECIPES[name]()
    if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
        raise ValueError(f"size must be a positive int, got {size!r}")
    return RECIPES[name](size)
