"""What a batchaug container accepts as a child, and which children targets can pass.

The rules ``Augment`` and the containers (``RandomApply``, ``RandomChoice``, ``RandomOrder``)
apply to the modules they are given: :func:`check_transform` refuses random torchvision/kornia
transforms (naming batchaug's equivalent, from :mod:`batchaug._equivalents`) and label mixers;
:func:`check_target_children` refuses, before ``with_targets`` runs, a child that could move
pixels without moving its targets. A leaf: it imports no transform and no container, so both
import it.
"""
from __future__ import annotations

from typing import Iterable, Iterator, List, Tuple

from torch import nn

from . import _equivalents

# The batchaug equivalent of a torchvision/kornia random transform is looked up in
# _equivalents (derived from batchaug's exports). On a batch tensor torchvision's draw ONE set of
# parameters for the whole batch (the problem batchaug exists to remove); kornia's draw per
# sample but still augment in eval() and do not script.
_AFTER_AUGMENT = ("it mixes labels, so it goes after the Augment in the training step: "
                  "images, targets = mix(augment(x), labels)")
# torchvision transforms that draw random parameters but whose names do not start with "Rand"
_TORCHVISION_RANDOM = {
    "AugMix", "AutoAugment", "ColorJitter", "CutMix", "ElasticTransform", "GaussianNoise",
    "MixUp", "ScaleJitter", "TrivialAugmentWide",
}
# kornia.augmentation is almost all random; these are its deterministic ones
_KORNIA_DETERMINISTIC = {
    "CenterCrop", "CenterCrop3D", "Denormalize", "LongestMaxSize", "Normalize", "PadTo",
    "Resize", "SmallestMaxSize",
}


def _is_fixed_range(value: object) -> bool:
    """A (lo, hi) parameter range that can only draw one value (GaussianBlur sigma, JPEG
    quality), or a single number."""
    if isinstance(value, (list, tuple)):
        return len(value) == 0 or all(v == value[0] for v in value)
    return True


def _random_library_transforms(t: nn.Module, where: str) -> Iterator[Tuple[str, str]]:
    """Yield ``(where, qualified class name)`` for random torchvision/kornia transforms in ``t``
    (looking into torchvision's ``Compose`` and kornia's containers)."""
    cls = type(t)
    module, name = cls.__module__, cls.__name__
    if module.startswith("torchvision.transforms"):
        if name == "Compose":
            for i, sub in enumerate(getattr(t, "transforms", [])):
                if isinstance(sub, nn.Module):
                    yield from _random_library_transforms(sub, f"{where}.transforms[{i}]")
            return
        random = name.startswith("Rand") or name in _TORCHVISION_RANDOM
        if name == "GaussianBlur":
            random = not _is_fixed_range(getattr(t, "sigma", None))
        elif name == "JPEG":
            random = not _is_fixed_range(getattr(t, "quality", None))
        if random:
            yield where, f"torchvision.transforms.{name}"
    elif module.startswith("kornia.augmentation"):
        if module.startswith("kornia.augmentation.container"):
            for i, sub in enumerate(t.children()):
                yield from _random_library_transforms(sub, f"{where}[{i}]")
            return
        if name not in _KORNIA_DETERMINISTIC:
            yield where, f"kornia.augmentation.{name}"


def check_transform(t: object, where: str, owner: str = "Augment") -> None:
    if not isinstance(t, nn.Module):
        hint = ""
        if type(t).__module__.startswith("torchvision.transforms"):
            hint = (" (torchvision's v1 transforms and Compose are not modules: pass the "
                    "transforms themselves, batchaug's for the random ones)")
        raise TypeError(
            f"{owner} takes nn.Module transforms, {where} is {type(t).__name__}{hint}"
        )
    if getattr(t, "_mixes_labels", False):  # batchaug.MixUp and co.: (images, labels) in
        raise TypeError(f"{owner}: {where} is {type(t).__name__}: {_AFTER_AUGMENT}")
    for at, qualname in _random_library_transforms(t, where):
        name = qualname.rsplit(".", 1)[1]
        if qualname.startswith("torchvision"):
            why = "on a batch it draws ONE set of random parameters for all the images"
        else:
            why = "it still augments in eval() and does not script or export with the model"
        equivalent = _equivalents.equivalent(name)
        if equivalent is not None and _equivalents.mixes_labels(name):
            fix = f"use {equivalent}, which draws per sample; {_AFTER_AUGMENT}"
        elif equivalent is not None:
            fix = f"use {equivalent}, which draws per sample"
        else:
            fix = (f"{_equivalents.hint(name)}; apply it per sample in your Dataset, before "
                   f"the batch is formed")
        raise TypeError(f"{owner}: {at} is {qualname}: {why}; {fix}")


# torchvision v2 transforms that are deterministic and photometric: they never move a pixel, so
# targets pass a container untouched (the random ones are refused by _check_transform anyway)
_TORCHVISION_PHOTOMETRIC = {
    "Normalize", "ToDtype", "ConvertImageDtype", "Grayscale", "RGB", "GaussianBlur", "JPEG",
    "ToPureTensor", "Identity",
}


def _moves_no_pixels(t: nn.Module) -> bool:
    """Whether a module without ``with_targets`` is known to leave every pixel where it is, so
    a container may run it on the images only: ``moves_targets = False`` on its class,
    ``nn.Identity``, or a deterministic photometric torchvision v2 transform."""
    cls = type(t)
    if getattr(cls, "moves_targets", True) is False or cls is nn.Identity:
        return True
    return (cls.__module__.startswith("torchvision.transforms.v2")
            and cls.__name__ in _TORCHVISION_PHOTOMETRIC)


def _inner_sequence(t: nn.Module) -> Tuple[List[nn.Module], str]:
    # batchaug's containers (Augment itself, RandomApply/RandomChoice/RandomOrder's
    # .transforms) and how their children are named in a message
    if isinstance(t, nn.Sequential):  # Augment (only asked of modules with with_targets)
        return list(t), ""
    inner = getattr(t, "transforms", None)
    if type(t).__module__.startswith("batchaug.") and isinstance(inner, nn.ModuleList):
        return list(inner), ".transforms"
    return [], ""


def check_target_children(children: Iterable[nn.Module], owner: str, where: str) -> None:
    """Raise a ``TypeError`` naming the first module in ``children`` (and, inside batchaug's
    containers among them, in theirs) that has no ``with_targets`` and may move pixels: its
    targets could not follow the image. Eager check, before anything runs."""
    for i, t in enumerate(children):
        if hasattr(t, "with_targets"):
            inner, attr = _inner_sequence(t)
            check_target_children(inner, owner, f"{where}[{i}]{attr}")
        elif not _moves_no_pixels(t):
            raise TypeError(
                f"{owner}.with_targets: {where}[{i}] ({type(t).__name__}) has no with_targets, "
                f"so its targets could not follow the images; give the module a "
                f"with_targets(images, targets, keys=None) method, or, if it never moves a "
                f"pixel, the class attribute moves_targets = False")
