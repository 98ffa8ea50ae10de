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

from dataclasses import dataclass
from typing import Callable, Dict, List, Optional

from torch import nn

from batchaug.compose import Augment
from batchaug.transforms import (
    CenterCrop,
    ColorJitter,
    GaussianBlur,
    Normalize,
    MixUpOrCutMix,
    RandomApply,
    RandomCrop,
    RandomErasing,
    RandomGrayscale,
    RandomHorizontalFlip,
    RandomResizedCrop,
    Resize,
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


@dataclass
class TrainingRecipe:
    """A full training recipe: ``augment`` (uint8 batch -> normalised float batch), ``mix``
    (``(images, labels) -> (images, targets)``, label smoothing included: use a plain
    soft-target ``F.cross_entropy(logits, targets)``) and ``eval_augment`` (the deterministic
    evaluation preprocessing). ``mix`` runs after ``augment``, outside it::

        x, targets = recipe.mix(recipe.augment(images), labels)
        loss = F.cross_entropy(model(x), targets)
    """

    augment: Augment
    mix: nn.Module
    eval_augment: Augment


def _resnet50_v2_train(size: int = 176) -> Augment:
    """torchvision's ResNet-50 V2 training images (the recipe behind ``IMAGENET1K_V2``):
    ``RandomResizedCrop(size)`` (176), flip, ``TrivialAugmentWide(interpolation="bilinear")``,
    ImageNet normalisation, ``RandomErasing(0.1)``. Mixing: :func:`resnet50_v2`."""
    from batchaug.transforms import TrivialAugmentWide

    return Augment(
        RandomResizedCrop(size),
        RandomHorizontalFlip(),
        TrivialAugmentWide(interpolation="bilinear"),
        Normalize(IMAGENET_MEAN, IMAGENET_STD),
        RandomErasing(0.1),  # after Normalize, as torchvision: erased pixels are the mean colour
    )


def resnet50_v2(num_classes: int = 1000, size: int = 176, eval_size: int = 224,
                eval_resize: int = 232) -> TrainingRecipe:
    """torchvision's ResNet-50 V2 recipe (references/classification, ``--auto-augment ta_wide
    --random-erase 0.1 --mixup-alpha 0.2 --cutmix-alpha 1.0 --label-smoothing 0.1
    --train-crop-size 176 --val-resize-size 232``): training images as
    ``_resnet50_v2_train``; ``MixUpOrCutMix(num_classes, 0.2, 1.0, switch_prob=0.5,
    label_smoothing=0.1)``; eval ``Resize(232)`` + ``CenterCrop(224)`` + normalisation.

    Differences: torchvision picks MixUp or CutMix and one λ (and box) per batch
    (``v2.RandomChoice``), here per sample; each of our random ops draws per sample.

    Example:
        >>> import torch
        >>> from batchaug import recipes
        >>> r = recipes.resnet50_v2(num_classes=10, size=64, eval_size=56, eval_resize=64)
        >>> x, targets = r.mix(r.augment(torch.zeros(4, 3, 80, 80, dtype=torch.uint8)),
        ...                    torch.tensor([0, 1, 2, 3]))
        >>> x.shape, targets.shape
        (torch.Size([4, 3, 64, 64]), torch.Size([4, 10]))
    """
    return TrainingRecipe(
        augment=_resnet50_v2_train(size),
        mix=MixUpOrCutMix(num_classes, mixup_alpha=0.2, cutmix_alpha=1.0, switch_prob=0.5,
                          label_smoothing=0.1),
        eval_augment=Augment(Resize(eval_resize), CenterCrop(eval_size),
                             Normalize(IMAGENET_MEAN, IMAGENET_STD)),
    )


def _deit_train(size: int = 224) -> Augment:
    """DeiT's training images (Touvron et al. 2021, timm ``create_transform`` with
    ``rand-m9-mstd0.5-inc1``, ``re_prob=0.25``, ``re_mode="pixel"``): bicubic
    ``RandomResizedCrop``, flip, ``RandAugment(num_ops=2, magnitude=9,
    num_magnitude_bins=11)`` (bilinear), ImageNet normalisation, ``RandomErasing(0.25,
    value="random")``. Mixing: :func:`deit`."""
    from batchaug.transforms import RandAugment

    return Augment(
        RandomResizedCrop(size, interpolation="bicubic"),
        RandomHorizontalFlip(),
        RandAugment(num_ops=2, magnitude=9, num_magnitude_bins=11, interpolation="bilinear"),
        Normalize(IMAGENET_MEAN, IMAGENET_STD),
        RandomErasing(0.25, value="random"),  # timm's "pixel" mode: normal noise per pixel
    )


def deit(num_classes: int = 1000, size: int = 224, eval_resize: int = 256) -> TrainingRecipe:
    """The DeiT recipe (timm ``--aa rand-m9-mstd0.5-inc1 --reprob 0.25 --mixup 0.8 --cutmix
    1.0 --mixup-switch-prob 0.5 --smoothing 0.1``): training images as ``_deit_train``;
    ``MixUpOrCutMix(num_classes, 0.8, 1.0, switch_prob=0.5, label_smoothing=0.1)``; eval
    ``Resize(256, "bicubic")`` + ``CenterCrop(224)`` + normalisation (crop_pct 0.875).

    Differences from timm: RandAugment is torchvision's (its op list: Identity instead of
    timm's Invert and SolarizeAdd, translation 150/331 of the side instead of 0.45); timm's
    m9 is 9 of 10 levels, so ``magnitude=9`` of ``num_magnitude_bins=11`` gives the same
    strength (torchvision's default 31 bins would make m9 a third as strong); the magnitude is
    fixed (timm's ``mstd0.5`` adds N(0, 0.5) noise per op); the ops interpolate bilinearly
    (timm: bicubic; torchvision's RandAugment offers nearest and bilinear). MixUp/CutMix are
    chosen, and λ drawn, per sample (DeiT: per batch). RandomErasing's noise for float input is
    standard normal, as timm's.

    Example:
        >>> import torch
        >>> from batchaug import recipes
        >>> r = recipes.deit(num_classes=10, size=32, eval_resize=36)
        >>> r.eval_augment(torch.zeros(2, 3, 40, 40, dtype=torch.uint8)).shape
        torch.Size([2, 3, 32, 32])
    """
    return TrainingRecipe(
        augment=_deit_train(size),
        mix=MixUpOrCutMix(num_classes, mixup_alpha=0.8, cutmix_alpha=1.0, switch_prob=0.5,
                          label_smoothing=0.1),
        eval_augment=Augment(Resize(eval_resize, interpolation="bicubic"), CenterCrop(size),
                             Normalize(IMAGENET_MEAN, IMAGENET_STD)),
    )


# also ``batchaug bench``'s batchaug contender where its recipe is the preset
# (``batchaug.bench.contenders.preset_augment``)
RECIPES: Dict[str, Callable[..., Augment]] = {
    "cifar10": cifar10,
    "imagenet": imagenet,
    "color": color,
    "simclr": simclr,
    # the image part of the training recipes (their mixing and eval: resnet50_v2(), deit())
    "resnet50_v2": _resnet50_v2_train,
    "deit": _deit_train,
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
