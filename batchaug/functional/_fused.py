"""Fused kernels: two consecutive transforms in one pass, for the pair table's CPU rules
(``batchaug/_fusion.py``). ``rotate_normalize`` is ``RandomRotation`` then ``Normalize`` without
the cast to uint8 and back between them: pure, TorchScript-compatible and equal bit for bit to
the two kernels one after the other, which it runs wherever the fast path does not apply.
"""
from __future__ import annotations

from typing import List, Optional

import torch
from torch import Tensor

from ._misc import normalize_affine
from ._warp import _warp


def rotate_normalize(
    x: Tensor,
    angle: Tensor,
    interpolation: str,
    fill: Optional[List[float]],
    center: Optional[List[float]],
    factor: Tensor,
    shift: Tensor,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """``normalize_affine(rotate(x, angle, interpolation, fill, center), factor, shift, dtype)``
    (``factor``/``shift`` from ``normalize_factors`` for the rotation's output dtype, float32).

    For uint8 ``x`` the rotation's result is rounded in float32 and normalised there: the same
    values as casting it to uint8 and converting back (they are integers in [0, 255]), so the
    same output bit for bit, minus two casts and a conversion over the batch.

    Example:
        >>> x = torch.randint(0, 256, (2, 3, 8, 8), dtype=torch.uint8)
        >>> f, s = torch.full((1, 3, 1, 1), 1 / 255), torch.zeros(1, 3, 1, 1)
        >>> y = rotate_normalize(x, torch.tensor([10.0, -5.0]), "bilinear", [0.0], None, f, s)
        >>> y.dtype, y.shape
        (torch.float32, torch.Size([2, 3, 8, 8]))
    """
    if x.dtype != torch.uint8 or factor.dtype != torch.float32:
        rotated = _warp(x, angle, "rotation", center, interpolation, fill)
        return normalize_affine(rotated, factor, shift, dtype)
    y = _warp(x, angle, "rotation", center, interpolation, fill, True)
    y = y.mul_(factor).add_(shift)  # normalize_affine's two roundings, on our own buffer
    if dtype != torch.float32:
        y = y.to(dtype)
    return y
