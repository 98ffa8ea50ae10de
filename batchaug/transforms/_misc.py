"""Normalize, ToDtype, GaussianBlur with a per-sample sigma and RandomErasing with one box per
sample (kernels: ``functional._misc``)."""
from __future__ import annotations

import math
import numbers
import struct
from typing import List, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from .. import _random
from ..functional import _kernels as F
from ..functional import _misc as FM
from ..functional._misc import normalize_affine, normalize_factors
from ..functional._utils import on_device
from ._base import Transform
from .._validation import (
    FLOAT_DTYPES,
    MAX_SIZE,
    _dtype_range,
    check_dtype,
    check_fill,
    check_fill_for,
    check_probability,
    check_range,
)
from .._validation import check_bool

MIN_SIGMA = 1e-30  # float32 keeps it non-zero: t / sigma stays defined at t = 0
MAX_SIGMA = 1e30


def _check_kernel_size(kernel_size: Union[int, Sequence[int]]) -> Tuple[int, int]:
    what = "an odd positive int or a sequence of two"
    if isinstance(kernel_size, bool):
        raise TypeError(f"kernel_size must be {what}, got bool")
    if isinstance(kernel_size, numbers.Integral):
        vals = [int(kernel_size)] * 2
    elif isinstance(kernel_size, (list, tuple)) and all(
        isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in kernel_size
    ):
        vals = [int(v) for v in kernel_size]
        if len(vals) == 1:
            vals = vals * 2
        if len(vals) != 2:
            raise ValueError(f"kernel_size must have 1 or 2 elements, got {kernel_size!r}")
    else:
        raise TypeError(f"kernel_size must be {what}, got {kernel_size!r}")
    if any(v <= 0 or v % 2 == 0 for v in vals):
        raise ValueError(f"kernel_size must be odd and positive, got {kernel_size!r}")
    if any(v > 2 * MAX_SIZE + 1 for v in vals):
        raise ValueError(f"kernel_size must be at most {2 * MAX_SIZE + 1}, got {kernel_size!r}")
    return vals[0], vals[1]


class GaussianBlur(Transform):
    """Blur each image with a Gaussian whose ``sigma`` is drawn per sample from ``sigma``
    (a number: fixed; (min, max): uniform), as ``v2.GaussianBlur``: ``kernel_size`` is an odd
    int or (x, y) pair, same kernel formula and reflect padding. Differences: one sigma per
    sample (torchvision: one per call); computed as two 1-D passes (float results within
    ~1e-6 of torchvision's 2-D convolution, uint8 within 1). The padding needs each image
    larger than half the kernel (``ValueError`` at call time otherwise).

    Example (SimCLR at 224 px):
        >>> GaussianBlur(23, sigma=(0.1, 2.0))(torch.zeros(4, 3, 32, 32)).shape
        torch.Size([4, 3, 32, 32])
    """

    def __init__(
        self, kernel_size: Union[int, Sequence[int]],
        sigma: Union[float, Sequence[float]] = (0.1, 2.0),
    ) -> None:
        super().__init__()
        self.kernel_size: List[int] = list(_check_kernel_size(kernel_size))
        if not isinstance(sigma, (list, tuple)):
            sigma = [sigma, sigma]
        elif len(sigma) == 1:
            sigma = [sigma[0], sigma[0]]
        self.sigma_min, self.sigma_max = check_range(sigma, "sigma", MIN_SIGMA, MAX_SIGMA)

    def make_params(self, x: Tensor, keys: Optional[Tensor] = None) -> Tensor:
        """(N,) float32 sigma per sample, drawn on ``x.device``."""
        if self.kernel_size[0] // 2 >= x.shape[3] or self.kernel_size[1] // 2 >= x.shape[2]:
            raise ValueError(
                "GaussianBlur: kernel_size {} needs images larger than half the kernel "
                "(reflect padding), got {}x{}".format(self.kernel_size, x.shape[2], x.shape[3])
            )
        return _random.uniform(x, self.sigma_min, self.sigma_max, keys=keys, draw=0)

    def apply_image(self, x: Tensor, params: Tensor) -> Tensor:
        return FM.gaussian_blur(x, self.kernel_size, params)

    def extra_repr(self) -> str:
        return f"kernel_size={tuple(self.kernel_size)}, sigma=({self.sigma_min}, {self.sigma_max})"


class RandomErasing(Transform):
    """Erase one random box per sample with probability ``p``, as ``v2.RandomErasing``: the box
    area is a ``scale`` fraction of the image, its aspect ratio log-uniform in ``ratio``; of
    10 candidate boxes the first that fits strictly inside the image is used (none fits: the
    sample is unchanged). ``value`` is a number, one number per channel, or ``"random"``
    (standard normal noise for float input, as torchvision; uniform bytes 0-255 for uint8,
    where torchvision casts the normal noise). Never in place (torchvision's ``inplace`` is
    not offered). Differences: one box per sample (torchvision: one per call).

    Example:
        >>> RandomErasing(p=0.5, value="random")(torch.zeros(8, 3, 32, 32)).shape
        torch.Size([8, 3, 32, 32])
    """

    def __init__(
        self,
        p: float = 0.5,
        scale: Sequence[float] = (0.02, 0.33),
        ratio: Sequence[float] = (0.3, 3.3),
        value: Union[float, Sequence[float], str] = 0,
    ) -> None:
        super().__init__()
        self.p = check_probability(p, "p")
        self.attempts = 10  # torchvision's number of candidate boxes
        self.scale: Tuple[float, float] = check_range(scale, "scale", 0.0, 1.0)
        self.ratio: Tuple[float, float] = check_range(ratio, "ratio", 1e-6, 1e6)
        self.log_ratio: Tuple[float, float] = (math.log(self.ratio[0]), math.log(self.ratio[1]))
        if isinstance(value, str):
            if value != "random":
                raise ValueError(f"value must be a number, a sequence or 'random', got {value!r}")
            self.random_value = True
            self.value: List[float] = [0.0]
        else:
            self.random_value = False
            self.value = check_fill(value, "value")
        # float32 (1, C, 1, 1) (uint8's truncation at call time), a buffer: it follows
        # .to(device) and nothing is copied per call
        self.register_buffer("_value", self._value_tensor(torch.device("cpu")),
                             persistent=False)

    def _value_tensor(self, device: torch.device) -> Tensor:
        return torch.tensor(self.value, dtype=torch.float32, device=device).view(1, -1, 1, 1)

    def _apply(self, fn, recurse=True):  # type: ignore[override]
        super()._apply(fn, recurse)
        self._value = self._value_tensor(self._value.device)
        return self

    def make_params(self, x: Tensor, keys: Optional[Tensor] = None
                    ) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        """``(top, left, height, width, value)``: int64 (N,) boxes, height = width = 0 for
        samples not erased (coin lost, or no candidate box fits), and the erasing value per
        sample: float32 (N, C, 1, 1) (or (N, 1, 1, 1); one value broadcast, not copied),
        truncated for uint8 input, or, with ``value="random"``, noise shaped like ``x`` in its
        dtype. Every draw of a training forward, in its order."""
        if not self.random_value:
            check_fill_for(self.value, x, "RandomErasing")
        h, w = x.shape[2], x.shape[3]
        apply = _random.bernoulli(x, self.p, keys=keys, draw=0)
        area = _random.uniform(x, self.scale[0], self.scale[1], self.attempts,
                               keys=keys, draw=1) * float(h * w)
        aspect = torch.exp(_random.uniform(x, self.log_ratio[0], self.log_ratio[1],
                                           self.attempts, keys=keys, draw=2))
        bh, bw = FM.fitting_boxes(area, aspect, h, w, apply)
        top = _random.integers_below(h - bh + 1, keys=keys, draw=3)
        left = _random.integers_below(w - bw + 1, keys=keys, draw=4)
        if self.random_value:
            value = _random.noise_like(x, keys=keys, draw=5)  # draws 5 and 6
        else:
            value = on_device(self._value, x)
            if x.dtype == torch.uint8:
                value = value.trunc()  # torchvision assigns the float value: truncation
            value = value.expand(x.shape[0], -1, -1, -1)
        return top, left, bh, bw, value

    def apply_image(self, x: Tensor, params: Tuple[Tensor, Tensor, Tensor, Tensor, Tensor]
                    ) -> Tensor:
        """``x`` with each sample's box set to the value (a new tensor, never in place)."""
        top, left, bh, bw, value = params
        return FM.erase(x, top, left, bh, bw, value)

    def extra_repr(self) -> str:
        value = "'random'" if self.random_value else str(self.value)
        return f"p={self.p}, scale={self.scale}, ratio={self.ratio}, value={value}"


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
    """Raise unless every image in [0, 1] normalises to a finite value of ``dtype`` (the kernel
    computes in float32: a std 0 there divides by zero; half the dtype's maximum leaves room
    for float32 rounding)."""
    out_max = 0.5 * min(_dtype_range(dtype)[1], _dtype_range(torch.float32)[1])
    f32_max = _dtype_range(torch.float32)[1]
    for which, vals in (("mean", mean_l), ("std", std_l)):
        if any(abs(v) > f32_max for v in vals):
            raise ValueError(f"{which} must fit in float32 (|value| <= {f32_max:.4g}), "
                             f"got {vals}")
    # float32 rounding without a tensor: .to(device) runs this inside fake-tensor modes too
    for m, s32 in zip(mean_l, [struct.unpack("f", struct.pack("f", s))[0] for s in std_l]):
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


class Normalize(Transform):
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

    takes_sizes = True  # pointwise: on a ragged batch the padding is never read

    random = False
    takes_keys = False

    def __init__(
        self,
        mean: Sequence[float],
        std: Sequence[float],
        dtype: Union[torch.dtype, None] = None,
    ) -> None:
        super().__init__()
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
        # buffers follow .to(device); float64 (exact), kept so by _apply; the empty _dtype_ref
        # takes the casts
        self._mean_values = mean_l
        self._std_values = std_l
        self.register_buffer("mean", torch.tensor(mean_l, dtype=torch.float64), persistent=False)
        self.register_buffer("std", torch.tensor(std_l, dtype=torch.float64), persistent=False)
        self.register_buffer("_dtype_ref", torch.empty(0, dtype=dtype), persistent=False)
        # float32 factors for uint8 and floating input, made once (see normalize_factors)
        self.register_buffer("_factor_u8", self.mean, persistent=False)
        self.register_buffer("_factor_float", self.mean, persistent=False)
        self.register_buffer("_shift32", self.mean, persistent=False)
        self._set_factors()

    def _set_factors(self) -> None:
        mean32, std32 = self.mean.float(), self.std.float()
        self._factor_u8, self._shift32 = normalize_factors(mean32, std32, torch.uint8)
        self._factor_float, _ = normalize_factors(mean32, std32, torch.float32)

    def _apply(self, fn, recurse=True):  # type: ignore[override]
        # casts reach every floating buffer: _dtype_ref records the module's dtype, the exact
        # statistics are put back (a narrower dtype must not make the output overflow silently)
        super()._apply(fn, recurse)
        if self.follow_dtype:
            _check_normalize_range(self._mean_values, self._std_values, self._dtype_ref.dtype)
        device = self.mean.device
        self.mean = torch.tensor(self._mean_values, dtype=torch.float64, device=device)
        self.std = torch.tensor(self._std_values, dtype=torch.float64, device=device)
        self._set_factors()
        return self

    def out_dtype(self) -> torch.dtype:
        """The output dtype: ``dtype`` if given, else the module's (float32 unless cast)."""
        if self.follow_dtype:
            return self._dtype_ref.dtype
        return self.dtype

    def make_params(self, x: Tensor, keys: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
        """``(scale, shift)`` for ``x``'s dtype: ``apply_image`` computes ``x * scale + shift``
        in their dtype and rounds once to :meth:`out_dtype`. Each is (1, C, 1, 1) (or
        (1, 1, 1, 1) for one mean/std value), float32 (float64 when the output is float64),
        on the module's device; for uint8 input ``scale`` has the 1/255 folded in
        (``scale = 1 / (255 * std)``, ``shift = -mean / std``). Checks the channel count."""
        if self.channels != 1 and x.shape[1] != self.channels:
            raise ValueError(
                "Normalize: mean/std have {} values but the input has {} channels".format(
                    self.channels, x.shape[1]
                )
            )
        if self.out_dtype() == torch.float64:
            return normalize_factors(self.mean, self.std, x.dtype, torch.float64)
        if x.dtype == torch.uint8:
            return self._factor_u8, self._shift32
        return self._factor_float, self._shift32

    def apply_image(self, x: Tensor, params: Tuple[Tensor, Tensor]) -> Tensor:
        """``x * scale + shift`` (``params`` from :meth:`make_params`), in :meth:`out_dtype`."""
        scale, shift = params
        return normalize_affine(x, scale, shift, self.out_dtype())

    def extra_repr(self) -> str:
        mean = [round(v, 4) for v in self.mean.tolist()]
        std = [round(v, 4) for v in self.std.tolist()]
        dtype = "None" if self.follow_dtype else str(self.dtype)
        return f"mean={mean}, std={std}, dtype={dtype}"


class ToDtype(Transform):
    """Convert the batch to ``dtype`` (uint8 or floating), like ``v2.ToDtype``.

    With ``scale=True`` values are rescaled between uint8 [0, 255] and float [0, 1] by
    torchvision's rules. Deterministic: runs in train and eval. Always returns a new tensor.

    Example:
        >>> ToDtype(torch.float32, scale=True)(torch.zeros(8, 3, 4, 4, dtype=torch.uint8)).dtype
        torch.float32
    """

    takes_sizes = True  # pointwise: on a ragged batch the padding is never read

    random = False
    takes_keys = False

    def __init__(self, dtype: torch.dtype, scale: bool = False) -> None:
        super().__init__()
        self.dtype = check_dtype(dtype, "dtype")
        self.scale = check_bool(scale, "scale")

    def make_params(self, x: Tensor, keys: Optional[Tensor] = None) -> torch.dtype:
        """The output dtype."""
        return self.dtype

    def apply_image(self, x: Tensor, params: torch.dtype) -> Tensor:
        return F.to_dtype(x, params, self.scale)
