"""Argument checks shared by every module.

Construction-time checks (`check_*` taking Python values) run in ``__init__`` so that bad
arguments fail with a ``ValueError``/``TypeError`` naming the argument, before any scripting.
``check_batch`` and ``check_keys`` run inside ``forward`` and are TorchScript-compatible
(scripted code turns the raise into ``torch.jit.Error`` with the same message).
"""
from __future__ import annotations

import math
import numbers
from typing import List, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

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


def check_fill(fill: Union[float, Sequence[float]], name: str = "fill") -> List[float]:
    """Return ``fill`` as a list of finite floats (one value, or one per channel).

    Whether the values fit the input's dtype is only known at call time: see
    :func:`check_fill_for`.
    """
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
    the range of ``x.dtype`` ([0, 255] for uint8; a non-integer uint8 fill is allowed and
    converted exactly as torchvision converts it: padding truncates, rotation rounds). The one
    rule for every transform with a ``fill`` (never a silent clamp or wrap-around);
    runs in ``forward`` (the dtype is known only there). Scriptable; ``name`` is the caller.
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


def _is_channel_count(c: int) -> bool:
    return c == 1 or c == 3 or c == 4


def check_batch(x: Tensor, name: str) -> None:
    """Raise unless ``x`` is an (N, C, H, W) uint8 or floating batch of non-empty images.
    Scriptable. An empty batch (N = 0) is fine; C, H or W = 0 is not.

    ``name`` is the calling transform, so the message says who rejected the input.
    """
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
    if _is_channel_count(x.shape[3]) and not _is_channel_count(x.shape[1]) and x.shape[2] > 4:
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
    """Raise unless ``keys`` is None or an int64 ``(N,)`` tensor with one key per image of the
    batch ``x`` (``N = x.shape[0]``): TypeError for another dtype, ValueError naming both
    lengths otherwise. The one keys check of every keyed ``forward`` (transforms, containers,
    policies, mixers, ``Augment``), so a wrong length never drops, repeats or broadcasts draws.
    Scriptable; under ``torch.compile`` and ``torch.export`` the length test compares the two
    symbolic sizes (a guard, or nothing when both share one ``Dim``), no Python int is taken
    from the batch size.
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


def check_mask_fill(mask_fill: int, limit: int) -> int:
    """``mask_fill`` at construction: an int (the label of mask pixels from outside the image)
    within +-``limit`` (every geometric transform carries any int64 label exactly:
    ``functional._target_masks.masks_as_image``)."""
    if isinstance(mask_fill, bool) or not isinstance(mask_fill, numbers.Integral):
        raise TypeError(f"mask_fill must be an int (the label of mask pixels from outside the "
                        f"image), got {mask_fill!r}")
    if abs(int(mask_fill)) > limit:
        raise ValueError(f"mask_fill must be within +-{limit} (labels this transform carries "
                         f"exactly), got {mask_fill!r}")
    return int(mask_fill)
