"""Basic transforms: per-sample flips and crops, center crop, normalize, dtype conversion.

Each module validates its arguments in ``__init__`` (``ValueError``/``TypeError`` naming the
argument), draws per-sample parameters on the input's device in ``make_params`` (random ones),
and calls a pure kernel from :mod:`batchaug.functional`. Random transforms are the identity in
``eval()``; deterministic ones always run. All of them script with ``torch.jit.script``.
"""
from __future__ import annotations

import math
import numbers
from typing import List, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor, nn

from .. import _random
from .. import functional as F
from ..functional._basic import normalize_affine, normalize_factors, pad_crop
from .._validation import (
    FLOAT_DTYPES,
    MAX_SIZE,
    PADDING_MODES,
    _dtype_range,
    check_batch,
    check_choice,
    check_dtype,
    check_fill,
    check_fill_for,
    check_probability,
    check_size,
)


class RandomHorizontalFlip(nn.Module):
    """Flip each image of a batch left-right with probability ``p``, independently per sample.

    torchvision's ``RandomHorizontalFlip`` applied to a batch tensor flips all or none of it;
    this one draws one coin per sample.

    Example:
        >>> aug = RandomHorizontalFlip(p=0.5)
        >>> aug(torch.zeros(8, 3, 32, 32, dtype=torch.uint8)).shape
        torch.Size([8, 3, 32, 32])
    """

    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        self.p = check_probability(p, "p")
        self._keyed = True

    def make_params(self, x: Tensor, keys: Optional[Tensor] = None) -> Tensor:
        """(N,) bool: which samples to flip, drawn on ``x.device`` (keyed: see ``_random``)."""
        return _random.bernoulli(x, self.p, keys=keys, draw=0)

    def forward(self, x: Tensor, keys: Optional[Tensor] = None) -> Tensor:
        check_batch(x, "RandomHorizontalFlip")
        if not self.training:
            return x
        return F.hflip_where(x, self.make_params(x, keys))

    def extra_repr(self) -> str:
        return f"p={self.p}"


class RandomVerticalFlip(nn.Module):
    """Flip each image of a batch top-bottom with probability ``p``, independently per sample.

    Example:
        >>> aug = RandomVerticalFlip(p=0.5)
        >>> aug(torch.zeros(8, 3, 32, 32)).shape
        torch.Size([8, 3, 32, 32])
    """

    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        self.p = check_probability(p, "p")
        self._keyed = True

    def make_params(self, x: Tensor, keys: Optional[Tensor] = None) -> Tensor:
        """(N,) bool: which samples to flip, drawn on ``x.device`` (keyed: see ``_random``)."""
        return _random.bernoulli(x, self.p, keys=keys, draw=0)

    def forward(self, x: Tensor, keys: Optional[Tensor] = None) -> Tensor:
        check_batch(x, "RandomVerticalFlip")
        if not self.training:
            return x
        return F.vflip_where(x, self.make_params(x, keys))

    def extra_repr(self) -> str:
        return f"p={self.p}"


def _check_padding(padding: Union[None, int, Sequence[int]]) -> List[int]:
    """torchvision's padding forms -> [left, top, right, bottom] (all >= 0)."""
    if padding is None:
        return [0, 0, 0, 0]
    if isinstance(padding, bool):
        raise TypeError("padding must be an int or a sequence of 1, 2 or 4 ints, got bool")
    if isinstance(padding, numbers.Integral):
        vals = [int(padding)] * 4
    elif isinstance(padding, (list, tuple)) and all(
        isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in padding
    ):
        if len(padding) == 1:
            vals = [int(padding[0])] * 4
        elif len(padding) == 2:  # (left/right, top/bottom), as torchvision
            vals = [int(padding[0]), int(padding[1]), int(padding[0]), int(padding[1])]
        elif len(padding) == 4:  # (left, top, right, bottom)
            vals = [int(v) for v in padding]
        else:
            raise ValueError(
                f"padding must have 1, 2 or 4 elements (left, top, right, bottom), got {padding!r}"
            )
    else:
        raise TypeError(f"padding must be an int or a sequence of 1, 2 or 4 ints, got {padding!r}")
    if any(v < 0 for v in vals):
        raise ValueError(f"padding must be non-negative, got {padding!r}")
    if any(v > MAX_SIZE for v in vals):
        raise ValueError(f"padding must be at most {MAX_SIZE} pixels, got {padding!r}")
    return vals


class RandomCrop(nn.Module):
    """Crop a random ``size`` window from each image, independently per sample.

    Same arguments and meaning as ``torchvision.transforms.v2.RandomCrop``: ``padding`` is an
    int (all sides), a 2-sequence (left/right, top/bottom) or a 4-sequence (left, top, right,
    bottom); ``pad_if_needed`` pads an image smaller than ``size`` by the missing amount on both
    sides of that axis; ``fill`` (one value or one per channel) is used by
    ``padding_mode="constant"``; the other modes are "edge", "reflect" and "symmetric".
    Differences: each sample gets its own window; reflect/symmetric padding wider than the image
    repeats the image periodically instead of raising; a ``fill`` the input's dtype cannot hold
    (e.g. 300 or -1 for uint8) is a ``ValueError`` at call time, as in every transform with a
    ``fill``. Sizes and paddings are at most 65536 pixels.

    Example (the CIFAR-10 crop):
        >>> aug = RandomCrop(32, padding=4)
        >>> aug(torch.zeros(8, 3, 32, 32, dtype=torch.uint8)).shape
        torch.Size([8, 3, 32, 32])
    """

    def __init__(
        self,
        size: Union[int, Sequence[int]],
        padding: Union[None, int, Sequence[int]] = None,
        pad_if_needed: bool = False,
        fill: Union[float, Sequence[float]] = 0,
        padding_mode: str = "constant",
    ) -> None:
        super().__init__()
        self.height, self.width = check_size(size, "size")
        self.padding: List[int] = _check_padding(padding)
        if not isinstance(pad_if_needed, bool):
            raise TypeError(f"pad_if_needed must be a bool, got {pad_if_needed!r}")
        self.pad_if_needed = pad_if_needed
        self.fill: List[float] = check_fill(fill, "fill")
        self.padding_mode: str = check_choice(padding_mode, "padding_mode", PADDING_MODES)
        self._keyed = True

    def _full_padding(self, h: int, w: int) -> List[int]:
        """[left, top, right, bottom] for an h x w input, including pad_if_needed."""
        left, top, right, bottom = self.padding[0], self.padding[1], self.padding[2], self.padding[3]
        if self.pad_if_needed:
            ph = h + top + bottom
            if ph < self.height:
                top += self.height - ph
                bottom += self.height - ph
            pw = w + left + right
            if pw < self.width:
                left += self.width - pw
                right += self.width - pw
        if h + top + bottom < self.height or w + left + right < self.width:
            raise ValueError(
                "RandomCrop: crop size ({}, {}) is larger than the padded image ({}, {}); "
                "use pad_if_needed=True or more padding".format(
                    self.height, self.width, h + top + bottom, w + left + right
                )
            )
        return [left, top, right, bottom]

    def make_params(self, x: Tensor, keys: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
        """(top, left) int64 tensors of shape (N,), offsets into the padded image, on x.device."""
        pad = self._full_padding(x.shape[2], x.shape[3])
        ph = x.shape[2] + pad[1] + pad[3]
        pw = x.shape[3] + pad[0] + pad[2]
        top = _random.integers(x, 0, ph - self.height + 1, keys=keys, draw=0)
        left = _random.integers(x, 0, pw - self.width + 1, keys=keys, draw=1)
        return top, left

    def forward(self, x: Tensor, keys: Optional[Tensor] = None) -> Tensor:
        check_batch(x, "RandomCrop")
        if not self.training:
            return x
        if self.padding_mode == "constant":
            check_fill_for(self.fill, x, "RandomCrop")
        pad = self._full_padding(x.shape[2], x.shape[3])
        top, left = self.make_params(x, keys)
        return pad_crop(x, top, left, self.height, self.width, pad, self.fill, self.padding_mode)

    def extra_repr(self) -> str:
        return (
            f"size=({self.height}, {self.width}), padding={self.padding}, "
            f"pad_if_needed={self.pad_if_needed}, fill={self.fill}, "
            f"padding_mode={self.padding_mode!r}"
        )


class Pad(nn.Module):
    """Pad every image of a batch by the same ``padding``, as ``torchvision.transforms.v2.Pad``.

    ``padding`` is an int (all sides), a 1-sequence, a 2-sequence (left/right, top/bottom) or a
    4-sequence (left, top, right, bottom); ``fill`` (one value or one per channel) is used by
    ``padding_mode="constant"``; the other modes are "edge", "reflect" and "symmetric".
    Deterministic: runs in train and eval. Differences: reflect/symmetric padding wider than
    the image continues the mirror pattern periodically (torchvision raises); ``fill`` is
    ignored outside "constant" mode (torchvision raises for a per-channel one); a ``fill`` the
    input's dtype cannot hold is a ``ValueError`` at call time; paddings are at most 65536
    pixels; always returns a new tensor (also for zero padding).

    Example:
        >>> Pad([1, 2, 3, 4], padding_mode="reflect")(torch.zeros(8, 3, 32, 32)).shape
        torch.Size([8, 3, 38, 36])
    """

    def __init__(
        self,
        padding: Union[int, Sequence[int]],
        fill: Union[float, Sequence[float]] = 0,
        padding_mode: str = "constant",
    ) -> None:
        super().__init__()
        if padding is None:
            raise TypeError("padding must be an int or a sequence of 1, 2 or 4 ints, got None")
        self.padding: List[int] = _check_padding(padding)
        self.fill: List[float] = check_fill(fill, "fill")
        self.padding_mode: str = check_choice(padding_mode, "padding_mode", PADDING_MODES)

    def forward(self, x: Tensor) -> Tensor:
        check_batch(x, "Pad")
        if self.padding_mode == "constant":
            check_fill_for(self.fill, x, "Pad")
        return F.pad(x, self.padding, self.fill, self.padding_mode)

    def extra_repr(self) -> str:
        return f"padding={self.padding}, fill={self.fill}, padding_mode={self.padding_mode!r}"


class CenterCrop(nn.Module):
    """Crop the center ``size`` of every image (zero-padding where ``size`` exceeds the image),
    exactly as ``torchvision.transforms.v2.CenterCrop``. Deterministic: runs in train and eval.

    Example:
        >>> CenterCrop(24)(torch.zeros(8, 3, 32, 32)).shape
        torch.Size([8, 3, 24, 24])
    """

    def __init__(self, size: Union[int, Sequence[int]]) -> None:
        super().__init__()
        self.height, self.width = check_size(size, "size")

    def forward(self, x: Tensor) -> Tensor:
        check_batch(x, "CenterCrop")
        return F.center_crop(x, self.height, self.width)

    def extra_repr(self) -> str:
        return f"size=({self.height}, {self.width})"


def _check_stats(value: Sequence[float], name: str) -> List[float]:
    """One number or a non-empty sequence of numbers -> list of finite floats."""
    if isinstance(value, Tensor):
        value = value.flatten().tolist()  # construction time only
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, (list, tuple)) or len(value) == 0 or not all(
        isinstance(v, numbers.Real) and not isinstance(v, bool) for v in value
    ):
        raise TypeError(f"{name} must be a non-empty sequence of numbers, got {value!r}")
    try:
        vals = [float(v) for v in value]
    except OverflowError:  # an int beyond float range
        raise ValueError(f"{name} must contain finite numbers, got {value!r}") from None
    if not all(math.isfinite(v) for v in vals):
        raise ValueError(f"{name} must contain finite numbers, got {value!r}")
    return vals


def _check_normalize_range(mean_l: List[float], std_l: List[float], dtype: torch.dtype) -> None:
    """Raise unless every image in [0, 1] normalises to a finite value of ``dtype``.

    The kernel computes in float32: a std that is 0 there divides by zero. Half the dtype's
    maximum leaves room for float32 rounding, which bounds mean/std from both sides.
    """
    out_max = 0.5 * min(_dtype_range(dtype)[1], _dtype_range(torch.float32)[1])
    f32_max = _dtype_range(torch.float32)[1]
    for which, vals in (("mean", mean_l), ("std", std_l)):
        if any(abs(v) > f32_max for v in vals):
            raise ValueError(f"{which} must fit in float32 (|value| <= {f32_max:.4g}), "
                             f"got {vals}")
    for m, s32 in zip(mean_l, torch.tensor(std_l, dtype=torch.float32).tolist()):
        if s32 == 0.0:
            raise ValueError(
                f"std must not contain zeros (division by zero in float32), got {std_l}"
            )
        if (abs(m) + 1.0) / abs(s32) > out_max:
            raise ValueError(
                f"mean/std too large a ratio: (|mean| + 1) / |std| = "
                f"{(abs(m) + 1.0) / abs(s32):.3g} overflows {dtype} (at most {out_max:.3g}); "
                f"got mean {mean_l}, std {std_l}"
            )


class Normalize(nn.Module):
    """``(x - mean) / std`` per channel; uint8 input is scaled to [0, 1] first.

    Unlike ``torchvision.transforms.v2.Normalize`` (float input only), this takes the raw uint8
    batch and does ``ToDtype(float32, scale=True)`` + ``Normalize`` in one pass. A single
    mean/std value applies to every channel. Differentiable in a floating input.

    Output dtype: with ``dtype=None`` (the default) it is float32 and follows the module's
    floating dtype like a layer's parameters: after ``.to(torch.bfloat16)``, ``.half()`` or
    ``.double()`` of this module or of a model containing it (e.g. an ``AugmentedModel``), the
    output has that dtype, so the model's first layer gets its own dtype. An explicit ``dtype``
    fixes the output dtype; ``.to()`` does not change it. Either way the arithmetic is float32
    (float64 for a float64 output) with the exact ``mean``/``std``, rounded once to the output
    dtype: ``mean``/``std`` are float64 buffers that follow ``.to(device)`` but are never cast.

    Example:
        >>> norm = Normalize([0.4914, 0.4822, 0.4465], [0.2470, 0.2435, 0.2616])
        >>> norm(torch.zeros(8, 3, 32, 32, dtype=torch.uint8)).dtype
        torch.float32
        >>> norm.to(torch.bfloat16)(torch.zeros(8, 3, 32, 32, dtype=torch.uint8)).dtype
        torch.bfloat16
    """

    def __init__(
        self,
        mean: Sequence[float],
        std: Sequence[float],
        dtype: Union[torch.dtype, None] = None,
    ) -> None:
        super().__init__()
        # dtype=None: float32 output that follows .to(dtype) casts (see the class doc).
        self.follow_dtype = dtype is None
        if dtype is None:
            dtype = torch.float32
        mean_l = _check_stats(mean, "mean")
        std_l = _check_stats(std, "std")
        if len(mean_l) != len(std_l):
            raise ValueError(
                f"mean and std must have the same length, got {len(mean_l)} and {len(std_l)}"
            )
        if not isinstance(dtype, torch.dtype):
            raise TypeError(f"dtype must be a torch.dtype, got {dtype!r}")
        if dtype not in FLOAT_DTYPES:
            raise ValueError(f"dtype must be a floating dtype {list(FLOAT_DTYPES)}, got {dtype}")
        _check_normalize_range(mean_l, std_l, dtype)
        self.dtype = dtype
        self.channels = len(mean_l)
        # Buffers follow .to(device), so the kernel never copies host lists to the device.
        # They are float64 (exact) and _apply keeps them so; _dtype_ref (empty) takes the casts.
        self._mean_values = mean_l
        self._std_values = std_l
        self.register_buffer("mean", torch.tensor(mean_l, dtype=torch.float64), persistent=False)
        self.register_buffer("std", torch.tensor(std_l, dtype=torch.float64), persistent=False)
        self.register_buffer("_dtype_ref", torch.empty(0, dtype=dtype), persistent=False)
        # float32 copies for the float32 arithmetic (converting per call cost ~7 us at batch 8)
        self.register_buffer("_mean32", self.mean.float(), persistent=False)
        self.register_buffer("_std32", self.std.float(), persistent=False)
        # and the float32 factors for uint8 and floating input, computed as normalize() does
        # (building them per call cost ~40 us: 5% of the CIFAR recipe at batch 256)
        self.register_buffer("_factor_u8", self._std32, persistent=False)
        self.register_buffer("_factor_float", self._std32, persistent=False)
        self.register_buffer("_shift32", self._std32, persistent=False)
        self._set_factors()

    def _set_factors(self) -> None:
        self._factor_u8, self._shift32 = normalize_factors(self._mean32, self._std32, torch.uint8)
        self._factor_float, _ = normalize_factors(self._mean32, self._std32, torch.float32)

    def _apply(self, fn, recurse=True):  # type: ignore[override]
        # nn.Module.to(dtype)/.half()/.double() cast every floating buffer: let them (the empty
        # _dtype_ref records the module's dtype), then put back the exact float64 statistics
        # on the buffers' new device.
        super()._apply(fn, recurse)
        if self.follow_dtype:
            # a cast to a narrower dtype (.half()) must not make the output overflow silently
            _check_normalize_range(self._mean_values, self._std_values, self._dtype_ref.dtype)
        device = self.mean.device
        self.mean = torch.tensor(self._mean_values, dtype=torch.float64, device=device)
        self.std = torch.tensor(self._std_values, dtype=torch.float64, device=device)
        self._mean32 = self.mean.float()
        self._std32 = self.std.float()
        self._set_factors()
        return self

    def out_dtype(self) -> torch.dtype:
        """The output dtype: ``dtype`` if given, else the module's (float32 unless cast)."""
        if self.follow_dtype:
            return self._dtype_ref.dtype
        return self.dtype

    def forward(self, x: Tensor) -> Tensor:
        check_batch(x, "Normalize")
        if self.channels != 1 and x.shape[1] != self.channels:
            raise ValueError(
                "Normalize: mean/std have {} values but the input has {} channels".format(
                    self.channels, x.shape[1]
                )
            )
        dtype = self.out_dtype()
        if dtype == torch.float64:
            return F.normalize(x, self.mean, self.std, dtype)
        factor = self._factor_u8 if x.dtype == torch.uint8 else self._factor_float
        return normalize_affine(x, factor, self._shift32, dtype)

    def extra_repr(self) -> str:
        mean = [round(v, 4) for v in self.mean.tolist()]
        std = [round(v, 4) for v in self.std.tolist()]
        dtype = "None" if self.follow_dtype else str(self.dtype)
        return f"mean={mean}, std={std}, dtype={dtype}"


class ToDtype(nn.Module):
    """Convert the batch to ``dtype`` (uint8 or floating), like ``v2.ToDtype``.

    With ``scale=True`` values are rescaled between uint8 [0, 255] and float [0, 1] by
    torchvision's rules. Deterministic: runs in train and eval. Always returns a new tensor.

    Example:
        >>> ToDtype(torch.float32, scale=True)(torch.zeros(8, 3, 4, 4, dtype=torch.uint8)).dtype
        torch.float32
    """

    def __init__(self, dtype: torch.dtype, scale: bool = False) -> None:
        super().__init__()
        self.dtype = check_dtype(dtype, "dtype")
        if not isinstance(scale, bool):
            raise TypeError(f"scale must be a bool, got {scale!r}")
        self.scale = scale

    def forward(self, x: Tensor) -> Tensor:
        check_batch(x, "ToDtype")
        return F.to_dtype(x, self.dtype, self.scale)

    def extra_repr(self) -> str:
        return f"dtype={self.dtype}, scale={self.scale}"
