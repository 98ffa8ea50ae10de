"""Argument checks shared by every module.

Construction-time checks (`check_*` taking Python values) run in ``__init__`` so that bad
arguments fail with a ``ValueError``/``TypeError`` naming the argument, before any scripting.
``check_batch`` runs inside ``forward`` and is TorchScript-compatible (scripted code turns the
raise into ``torch.jit.Error`` with the same message).
"""
from __future__ import annotations

import math
import numbers
from typing import List, Sequence, Tuple, Union

import torch
from torch import Tensor

INTERPOLATIONS = ("nearest", "bilinear")
PADDING_MODES = ("constant", "edge", "reflect", "symmetric")
FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def check_probability(p: float, name: str = "p") -> float:
    """Return ``p`` as a float, or raise if it is not a number in [0, 1]."""
    if isinstance(p, bool) or not isinstance(p, numbers.Real):
        raise TypeError(f"{name} must be a number in [0, 1], got {type(p).__name__} {p!r}")
    p = float(p)
    if not 0.0 <= p <= 1.0 or math.isnan(p):
        raise ValueError(f"{name} must be in [0, 1], got {p}")
    return p


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
    return vals[0], vals[1]


def check_choice(value: str, name: str, allowed: Sequence[str]) -> str:
    """Return ``value`` if it is one of ``allowed`` (strings), else raise naming the options."""
    # torchvision accepts InterpolationMode enums; their .value is the lowercase string we use.
    value = getattr(value, "value", value)
    if not isinstance(value, str) or value not in allowed:
        raise ValueError(f"{name} must be one of {list(allowed)}, got {value!r}")
    return value


def check_range(
    value: Sequence[float], name: str, lower: float = -math.inf, increasing: bool = True
) -> Tuple[float, float]:
    """Return a ``(low, high)`` pair of floats, both >= ``lower``, with low <= high."""
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise TypeError(f"{name} must be a sequence of two numbers, got {value!r}")
    lo, hi = (float(v) for v in value)
    if any(math.isnan(v) for v in (lo, hi)) or lo < lower or hi < lower:
        raise ValueError(f"{name} values must be >= {lower}, got {value!r}")
    if increasing and lo > hi:
        raise ValueError(f"{name} must be (min, max) with min <= max, got {value!r}")
    return lo, hi


def check_fill(fill: Union[float, Sequence[float]], name: str = "fill") -> List[float]:
    """Return ``fill`` as a list of floats (one value, or one per channel)."""
    if isinstance(fill, bool):
        raise TypeError(f"{name} must be a number or a sequence of numbers, got bool")
    if isinstance(fill, numbers.Real):
        return [float(fill)]
    if isinstance(fill, (list, tuple)) and len(fill) > 0 and all(
        isinstance(f, numbers.Real) and not isinstance(f, bool) for f in fill
    ):
        return [float(f) for f in fill]
    raise TypeError(f"{name} must be a number or a non-empty sequence of numbers, got {fill!r}")


def check_dtype(dtype: torch.dtype, name: str = "dtype") -> torch.dtype:
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"{name} must be a torch.dtype, got {dtype!r}")
    if dtype != torch.uint8 and dtype not in FLOAT_DTYPES:
        raise ValueError(f"{name} must be torch.uint8 or a floating dtype, got {dtype}")
    return dtype


def check_batch(x: Tensor, name: str) -> None:
    """Raise unless ``x`` is an (N, C, H, W) uint8 or floating tensor. Scriptable.

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
