"""Argument checks shared by every module, and what a container accepts as a child.

Construction-time checks (`check_*` taking Python values) run in ``__init__`` so that bad
arguments fail with a ``ValueError``/``TypeError`` naming the argument, before any scripting.
``check_batch`` and ``check_keys`` run inside ``forward`` and are TorchScript-compatible
(scripted code turns the raise into ``torch.jit.Error`` with the same message).

``Augment`` and the containers (``RandomApply``, ``RandomChoice``, ``RandomOrder``) check the
modules they are given: :func:`check_transform` refuses random torchvision/kornia transforms
(naming batchaug's equivalent, from :mod:`batchaug._equivalents`) and label mixers;
:func:`check_target_children` refuses, before ``with_targets`` runs, a child that could move
pixels without moving its targets. A leaf: it imports no transform and no container.
"""
from __future__ import annotations

import math
import numbers
from typing import Iterable, Iterator, List, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor, nn

from . import _equivalents

INTERPOLATIONS = ("nearest", "bilinear")
PADDING_MODES = ("constant", "edge", "reflect", "symmetric")
FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)

# Bounds on "absurd" arguments. They are far outside any sensible use and keep every derived
# quantity finite in float32, where parameters are drawn and grids are computed.
MAX_SIZE = 1 << 16  # pixels per side for sizes and paddings: larger is not a batch of images
MAX_DEGREES = 1e5  # |angle|: float32 draws keep ~0.01 degree resolution up to here
MAX_COORDINATE = 1e6  # |center| in pixels


def _as_float(value: object, name: str, what: str) -> float:
    """``float(value)`` for a real number (not a bool), else TypeError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be {what}, got {type(value).__name__} {value!r}")
    try:
        return float(value)
    except OverflowError:  # a Python int beyond float range
        raise ValueError(f"{name} must be finite, got {value!r}") from None


def check_number(
    value: float,
    name: str,
    lower: float = -math.inf,
    upper: float = math.inf,
    lower_open: bool = False,
) -> float:
    """Return ``value`` as a finite float in ``[lower, upper]`` (``(lower, upper]`` when
    ``lower_open``), else raise naming ``name``: TypeError for non-numbers (bools included),
    ValueError for nan, infinities and values out of bounds."""
    v = _as_float(value, name, "a number")
    if not math.isfinite(v):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    if v < lower or v > upper or (lower_open and v == lower):
        lo = "(" if lower_open else "["
        raise ValueError(f"{name} must be in {lo}{lower:g}, {upper:g}], got {value!r}")
    return v


def check_bool(value: bool, name: str) -> bool:
    """Return ``value`` if it is a bool, else a TypeError naming ``name``."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__} {value!r}")
    return value


def check_int(value: int, name: str, lower: int, upper: Optional[int] = None,
              upper_name: str = "") -> int:
    """Return ``value`` as an int in ``[lower, upper]`` (``>= lower`` when ``upper`` is None),
    else raise naming ``name``: TypeError for non-integers (bools included), ValueError out of
    bounds; ``upper_name`` names what the upper bound is (``"num_magnitude_bins - 1 = 30"``)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    v = int(value)
    if upper is None:
        if v < lower:
            raise ValueError(f"{name} must be >= {lower}, got {value!r}")
    elif not lower <= v <= upper:
        bound = f"{upper_name} = {upper}" if upper_name else f"{upper}"
        raise ValueError(f"{name} must be in [{lower}, {bound}], got {value!r}")
    return v


def check_probability(p: float, name: str = "p") -> float:
    """Return ``p`` as a float, or raise if it is not a number in [0, 1]."""
    v = _as_float(p, name, "a number in [0, 1]")
    if not 0.0 <= v <= 1.0:  # also rejects nan
        raise ValueError(f"{name} must be in [0, 1], got {p!r}")
    return v


def check_size(size: Union[int, Sequence[int]], name: str = "size") -> Tuple[int, int]:
    """Return ``(height, width)`` from an int or a sequence of one or two positive ints."""
    if isinstance(size, bool):
        raise TypeError(f"{name} must be an int or a sequence of 1 or 2 ints, got bool")
    if isinstance(size, numbers.Integral):
        vals = [int(size)]
    elif isinstance(size, (list, tuple)) and all(
        isinstance(s, numbers.Integral) and not isinstance(s, bool) for s in size
    ):
        vals = [int(s) for s in size]
    else:
        raise TypeError(f"{name} must be an int or a sequence of 1 or 2 ints, got {size!r}")
    if len(vals) == 1:
        vals = vals * 2
    if len(vals) != 2:
        raise ValueError(f"{name} must have 1 or 2 elements, got {len(vals)}: {size!r}")
    if vals[0] <= 0 or vals[1] <= 0:
        raise ValueError(f"{name} must be positive, got {size!r}")
    if vals[0] > MAX_SIZE or vals[1] > MAX_SIZE:
        raise ValueError(f"{name} must be at most {MAX_SIZE} pixels per side, got {size!r}")
    return vals[0], vals[1]


def check_choice(value: str, name: str, allowed: Sequence[str]) -> str:
    """Return ``value`` if it is one of ``allowed`` (strings), else raise naming the options."""
    # torchvision accepts InterpolationMode enums; their .value is the lowercase string we use.
    value = getattr(value, "value", value)
    if not isinstance(value, str) or value not in allowed:
        raise ValueError(f"{name} must be one of {list(allowed)}, got {value!r}")
    return value


def check_range(
    value: Sequence[float],
    name: str,
    lower: float = -math.inf,
    upper: float = math.inf,
    lower_open: bool = False,
    increasing: bool = True,
) -> Tuple[float, float]:
    """Return a ``(low, high)`` pair of finite floats within ``[lower, upper]`` (``(lower,
    upper]`` when ``lower_open``), with low <= high when ``increasing``."""
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise TypeError(f"{name} must be a sequence (min, max) of two numbers, got {value!r}")
    lo, hi = (_as_float(v, name, "a sequence (min, max) of two numbers") for v in value)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError(f"{name} values must be finite numbers, got {value!r}")
    if min(lo, hi) < lower or max(lo, hi) > upper or (lower_open and min(lo, hi) == lower):
        lo_b = "(" if lower_open else "["
        raise ValueError(f"{name} values must be in {lo_b}{lower:g}, {upper:g}], got {value!r}")
    if increasing and lo > hi:
        raise ValueError(f"{name} must be (min, max) with min <= max, got {value!r}")
    return lo, hi


def check_weights(weights: Sequence[float], k: int, name: str, per: str) -> List[float]:
    """Return ``weights`` as ``k`` finite non-negative floats, one per ``per``, with a positive,
    finite sum (not normalised: each caller divides as its reference does)."""
    if not isinstance(weights, (list, tuple)):
        raise TypeError(f"{name} must be a sequence of {k} weights, one per {per}, got "
                        f"{weights!r}")
    if len(weights) != k:
        raise ValueError(f"{name} must have one weight per {per} ({k}), got {len(weights)}: "
                         f"{weights!r}")
    vals = [_as_float(v, name, "a sequence of non-negative numbers") for v in weights]
    if not all(math.isfinite(v) and v >= 0 for v in vals):
        raise ValueError(f"{name} must contain finite non-negative weights, got {weights!r}")
    if not 0 < sum(vals) < math.inf:  # fsum would raise OverflowError
        raise ValueError(f"{name} must have a positive, finite sum, got {weights!r}")
    return vals


def check_fill(fill: Union[float, Sequence[float]], name: str = "fill") -> List[float]:
    """Return ``fill`` as a list of finite floats (one value, or one per channel); whether
    they fit the input's dtype is checked at call time (:func:`check_fill_for`)."""
    what = "a number or a non-empty sequence of numbers"
    if isinstance(fill, (list, tuple)) and len(fill) > 0:
        vals = [_as_float(f, name, what) for f in fill]
    elif isinstance(fill, bool) or not isinstance(fill, numbers.Real):
        raise TypeError(f"{name} must be {what}, got {type(fill).__name__} {fill!r}")
    else:
        vals = [_as_float(fill, name, what)]
    if not all(math.isfinite(v) for v in vals):
        raise ValueError(f"{name} must be finite, got {fill!r}")
    return vals


def _dtype_range(dtype: torch.dtype) -> Tuple[float, float]:
    """The values a uint8/floating tensor of ``dtype`` can hold (finite). Scriptable."""
    if dtype == torch.uint8:
        return 0.0, 255.0
    if dtype == torch.float16:
        return -65504.0, 65504.0
    if dtype == torch.bfloat16:
        return -3.3895313892515355e38, 3.3895313892515355e38
    if dtype == torch.float32:
        return -3.4028234663852886e38, 3.4028234663852886e38
    return -1.7976931348623157e308, 1.7976931348623157e308


def check_fill_for(fill: List[float], x: Tensor, name: str) -> None:
    """Raise unless ``fill`` suits the batch ``x``: one value or one per channel, each within
    the range of ``x.dtype`` (a non-integer uint8 fill is converted as torchvision does:
    padding truncates, rotation rounds), never a silent clamp or wrap-around. Runs in
    ``forward``, where the dtype is known. Scriptable; ``name`` is the caller.
    """
    if len(fill) != 1 and len(fill) != x.shape[1]:
        raise ValueError(
            "{}: fill has {} values but the input has {} channels; give one value or one "
            "per channel".format(name, len(fill), x.shape[1])
        )
    lo, hi = _dtype_range(x.dtype)
    for f in fill:
        if f < lo or f > hi:
            raise ValueError(
                "{}: fill {} is outside the range of {} input [{}, {}]".format(
                    name, fill, x.dtype, lo, hi
                )
            )


def check_dtype(dtype: torch.dtype, name: str = "dtype") -> torch.dtype:
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"{name} must be a torch.dtype, got {dtype!r}")
    if dtype != torch.uint8 and dtype not in FLOAT_DTYPES:
        raise ValueError(f"{name} must be torch.uint8 or a floating dtype, got {dtype}")
    return dtype


def check_batch(x: Tensor, name: str) -> None:
    """Raise unless ``x`` is an (N, C, H, W) uint8 or floating batch of non-empty images
    (N = 0 is fine; C, H or W = 0 is not); ``name``, the caller, heads the message.
    Scriptable."""
    if x.dim() != 4:
        raise ValueError(
            "{}: expected an (N, C, H, W) batch, got a tensor with {} dims of shape {}".format(
                name, x.dim(), x.shape
            )
        )
    if x.dtype != torch.uint8 and not x.is_floating_point():
        raise TypeError(
            "{}: expected a uint8 or floating tensor, got {}".format(name, x.dtype)
        )
    # An (N, H, W, C) batch read as (N, C, H, W) would be transformed along the wrong axes
    # without any error (a flip swaps RGB to BGR). Images 1-4 pixels wide are not a use case,
    # so "last dim looks like channels, second and third do not" is taken to mean NHWC.
    if x.shape[3] in [1, 3, 4] and x.shape[1] not in [1, 3, 4] and x.shape[2] > 4:
        raise ValueError(
            "{}: expected an (N, C, H, W) batch, got shape {}, which looks like "
            "(N, H, W, C) channels-last; use x.permute(0, 3, 1, 2) (add "
            ".contiguous(memory_format=torch.channels_last) to keep the NHWC memory "
            "layout)".format(name, x.shape)
        )
    if x.shape[1] == 0 or x.shape[2] == 0 or x.shape[3] == 0:
        raise ValueError(
            "{}: images must have C, H and W > 0, got a batch of shape {}".format(name, x.shape)
        )


def check_keys(keys: Optional[Tensor], x: Tensor, name: str) -> None:
    """Raise unless ``keys`` is None or an int64 ``(N,)`` tensor, one key per image of ``x``
    (TypeError for another dtype, ValueError otherwise), so a wrong length never drops,
    repeats or broadcasts draws. Scriptable; under compile and export the length test
    compares symbolic sizes (a guard), taking no Python int from the batch size.
    """
    if keys is None:
        return
    if keys.dtype != torch.int64:
        raise TypeError(
            "{}: keys must be an int64 tensor (one key per image, e.g. from sample_keys), "
            "got {}".format(name, keys.dtype)
        )
    if keys.dim() != 1:
        raise ValueError(
            "{}: keys must be a 1-D tensor of shape (N,), one key per image, got shape "
            "{}".format(name, keys.shape)
        )
    if keys.shape[0] != x.shape[0]:
        raise ValueError(
            "{}: keys must have one key per image: got {} keys for a batch of {} "
            "images".format(name, keys.shape[0], x.shape[0])
        )


def check_mask_fill(mask_fill: int) -> int:
    """``mask_fill`` at construction: an int (the label of mask pixels from outside the image)
    within the int64 range (every geometric transform carries any int64 label exactly:
    ``functional._targets.masks_as_image``)."""
    limit = 2 ** 63 - 1
    if isinstance(mask_fill, bool) or not isinstance(mask_fill, numbers.Integral):
        raise TypeError(f"mask_fill must be an int (the label of mask pixels from outside the "
                        f"image), got {mask_fill!r}")
    if abs(int(mask_fill)) > limit:
        raise ValueError(f"mask_fill must be within +-{limit} (labels this transform carries "
                         f"exactly), got {mask_fill!r}")
    return int(mask_fill)


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


def check_target_children(children: Iterable[nn.Module], owner: str, where: str) -> None:
    """Raise a ``TypeError`` naming the first module in ``children`` (and, inside batchaug's
    containers among them, in theirs) that has no ``with_targets`` and may move pixels: its
    targets could not follow the image. Eager check, before anything runs."""
    for i, t in enumerate(children):
        if hasattr(t, "with_targets"):
            # batchaug's containers: Augment itself (an nn.Sequential; only asked of modules
            # with with_targets), RandomApply/RandomChoice/RandomOrder's .transforms
            inner = getattr(t, "transforms", None)
            if isinstance(t, nn.Sequential):
                check_target_children(list(t), owner, f"{where}[{i}]")
            elif type(t).__module__.startswith("batchaug.") and isinstance(inner, nn.ModuleList):
                check_target_children(list(inner), owner, f"{where}[{i}].transforms")
        elif not _moves_no_pixels(t):
            raise TypeError(
                f"{owner}.with_targets: {where}[{i}] ({type(t).__name__}) has no with_targets, "
                f"so its targets could not follow the images; give the module a "
                f"with_targets(images, targets, keys=None) method, or, if it never moves a "
                f"pixel, the class attribute moves_targets = False")
