"""Colour kernels: per-sample brightness/contrast/saturation/hue, grayscale, invert, posterize,
solarize, sharpness, autocontrast, equalize.

Each follows the matching ``torchvision.transforms.v2.functional`` kernel (formula, clamping,
uint8 truncation), with one parameter per sample:

- uint8 is computed in float32 and converted back after every adjustment, as torchvision. Its
  blend ``a.mul(r).add_(b, alpha=1 - r)`` is one fused multiply-add on CPU, two roundings here
  with a per-sample ``r``: a uint8 result can differ by 1 at an integer boundary, a float by ~1e-7.
- float16/bfloat16 are computed in float32 and rounded once (hue stays free of NaN); float64
  stays float64.
- hue is a closed form of the HSV round trip (``_rotate_hue``): float within 2e-6 of torchvision,
  uint8 within 1.
- the ``*_u8f`` kernels take float32 holding uint8 values and truncate as the uint8 conversion
  would, so ``ColorJitter`` chains them with one conversion at each end (``mix_u8f_``: brightness,
  contrast and saturation in one form; ``rotate_hue_`` with ``u8f``), in place on its working
  buffer.
"""
from __future__ import annotations

import torch
import torch.nn.functional as nnf
from torch import Tensor

from ._misc import to_dtype
from ._utils import (_compute_dtype, _max_value, _needs_grad, cpu_chunk_size,
                     sharpness_chunk_bytes)


def _per_sample(factor: Tensor, dtype: torch.dtype) -> Tensor:
    return factor.to(dtype).view(-1, 1, 1, 1)


def check_rgb(x: Tensor, name: str) -> None:
    if x.shape[1] != 1 and x.shape[1] != 3:
        raise ValueError(
            "{}: expected 1 or 3 channels (grayscale or RGB), got {}".format(name, x.shape[1])
        )


def _gray(xf: Tensor) -> Tensor:
    """(N, 1, H, W) luma of a float RGB batch, with torchvision's weights and op order."""
    r, g, b = xf.unbind(1)
    return r.mul(0.2989).add_(g, alpha=0.587).add_(b, alpha=0.114).unsqueeze(1)


def _blend(a: Tensor, b: Tensor, factor: Tensor, bound: float) -> Tensor:
    return (a * factor + b * (1.0 - factor)).clamp(0.0, bound)


def rgb_to_grayscale(x: Tensor, num_output_channels: int = 1) -> Tensor:
    """torchvision's ``rgb_to_grayscale`` on a batch (1- or 3-channel input).

    Example:
        >>> rgb_to_grayscale(torch.zeros(2, 3, 4, 4), 3).shape
        torch.Size([2, 3, 4, 4])
    """
    check_rgb(x, "rgb_to_grayscale")
    if x.shape[1] == 1:
        return x.repeat(1, num_output_channels, 1, 1)
    gray = _gray(x.to(_compute_dtype(x))).to(x.dtype)
    return gray.expand(-1, num_output_channels, -1, -1).contiguous()


def grayscale_where(x: Tensor, mask: Tensor) -> Tensor:
    """Samples where the (N,) bool ``mask`` is true become gray (same channel count)."""
    if x.shape[1] == 1:
        return x.clone()
    gray = rgb_to_grayscale(x, x.shape[1])
    return torch.where(mask.view(-1, 1, 1, 1), gray, x)


def adjust_brightness(x: Tensor, factor: Tensor) -> Tensor:
    """``clamp(x * factor)`` with one factor >= 0 per sample ((N,) tensor)."""
    if x.dtype == torch.uint8:
        return u8f_to_uint8(brightness_u8f(x.to(torch.float32), factor))
    ct = _compute_dtype(x)
    y = (x.to(ct) * _per_sample(factor, ct)).clamp(0.0, _max_value(x.dtype))
    return y.to(x.dtype)


def adjust_contrast(x: Tensor, factor: Tensor) -> Tensor:
    """Blend each image with the mean of its grayscale (per-sample ``factor``, (N,))."""
    check_rgb(x, "adjust_contrast")
    if x.dtype == torch.uint8:
        return u8f_to_uint8(contrast_u8f(x.to(torch.float32), factor))
    ct = _compute_dtype(x)
    xf = x.to(ct)
    mean = (_gray(xf) if x.shape[1] == 3 else xf).mean(dim=(1, 2, 3), keepdim=True)
    return _blend(xf, mean, _per_sample(factor, ct), _max_value(x.dtype)).to(x.dtype)


def adjust_saturation(x: Tensor, factor: Tensor) -> Tensor:
    """Blend each image with its grayscale (per-sample ``factor``, (N,)); 1 channel: identity."""
    check_rgb(x, "adjust_saturation")
    if x.shape[1] == 1:
        return x.clone()
    if x.dtype == torch.uint8:
        return u8f_to_uint8(saturation_u8f(x.to(torch.float32), factor))
    ct = _compute_dtype(x)
    xf = x.to(ct)
    return _blend(xf, _gray(xf), _per_sample(factor, ct), _max_value(x.dtype)).to(x.dtype)


def _hue_shift(factor: Tensor, xf: Tensor) -> Tensor:
    """(N, 3, 1, 1): the rotation ``6 * factor`` (sixths of a turn) minus each channel's hue
    centre c0 = 0, 2, 4 (R, G, B), reduced into [-5, 1) per sample and channel. Added to a hue
    q in [-1, 5] it gives d in [-6, 6), where ``||d| - 3|`` is 3 minus the circular distance
    from c0: the wrap costs one op per sample and channel instead of a per-pixel ``remainder``
    (and |d| up to 7 still gives the right value, the weight being flat there)."""
    c0 = torch.arange(0, 6, 2, dtype=xf.dtype, device=xf.device).view(1, 3)  # 0, 2, 4
    shift = (6.0 * factor).to(xf.dtype).view(-1, 1) - c0
    return shift.sub_(torch.floor((shift + 5.0) * (1.0 / 6.0)).mul_(6.0)).view(-1, 3, 1, 1)


def _rotate_hue(xf: Tensor, factor: Tensor) -> Tensor:
    """Hue rotation of a float RGB batch in [0, 1] by ``factor`` turns per sample, keeping HSV
    saturation and value; out of place, differentiable (``rotate_hue_``: in place).

    torchvision's RGB -> HSV -> RGB round trip in a closed form: hue q = num / chroma in
    sixths (num: g - b where r is the max, else b - r + 2 chroma where g is, else r - g + 4
    chroma), and channel c = min + chroma * clamp(||q + shift_c| - 3| - 1, 0, 1)
    (``_hue_shift``). The branch is picked by 0/1 masks from ``sign(max - c)``, exactly one of
    them 1, instead of ``where``/``==``/``remainder`` (slow on CPU, docs/performance.md,
    "Kernel choices"). Gradients as torchvision's (the masks carry none, as ``where``'s
    condition)."""
    r, g, b = xf[:, 0], xf[:, 1], xf[:, 2]
    maxc = torch.maximum(torch.maximum(r, g), b)
    minc = torch.minimum(torch.minimum(r, g), b)
    not_r = torch.sign(maxc - r)
    is_b = torch.sign(maxc - g) * not_r
    is_g = not_r - is_b
    is_r = 1.0 - (is_g + is_b)
    chroma = maxc - minc
    num = (g - b) * is_r
    num = torch.addcmul(num, is_g, torch.add(b - r, chroma, alpha=2.0))
    num = torch.addcmul(num, is_b, torch.add(r - g, chroma, alpha=4.0))
    # chroma 0 (gray): num is 0 and the divisor 1, hue 0 as torchvision; else exactly chroma
    divisor = (1.0 - torch.sign(chroma)) + chroma
    d = (num / divisor).unsqueeze(1) + _hue_shift(factor, xf)
    v = ((d.abs() - 3.0).abs() - 1.0).clamp(0.0, 1.0)
    return torch.addcmul(minc.unsqueeze(1), chroma.unsqueeze(1), v)


def rotate_hue_(xf: Tensor, factor: Tensor, write_input: bool, u8f: bool = False) -> Tensor:
    """``_rotate_hue``'s values (the same ops, so equal bit for bit) in place on its own
    temporaries, and into ``xf`` when ``write_input`` (a copy its caller owns); for input
    autograd does not record: fewer fresh buffers, so faster on CPU. ``u8f``: ``xf`` holds
    integers in [0, 255] and the result is torchvision's float -> uint8 rule applied to the
    rotation (``x / 255 * 255.999``, truncated; the hue formula is scale-free)."""
    r, g, b = xf[:, 0], xf[:, 1], xf[:, 2]
    maxc = torch.maximum(r, g).clamp_(min=b)
    minc = torch.minimum(r, g).clamp_(max=b)
    not_r = (maxc - r).sign_()
    is_b = (maxc - g).sign_().mul_(not_r)
    is_g = not_r.sub_(is_b)
    is_r = torch.add(is_g, is_b).neg_().add_(1.0)
    chroma = maxc.sub_(minc)
    num = (g - b).mul_(is_r)
    t = torch.sub(b, r, out=is_r).add_(chroma, alpha=2.0)
    num.addcmul_(is_g, t)
    t = torch.sub(r, g, out=t).add_(chroma, alpha=4.0)
    num.addcmul_(is_b, t)
    divisor = chroma.sign().neg_().add_(1.0).add_(chroma)
    q = num.div_(divisor).unsqueeze(1)
    if write_input:  # r, g, b are no longer read
        d = torch.add(q, _hue_shift(factor, xf), out=xf)
    else:
        d = q + _hue_shift(factor, xf)
    v = d.abs_().sub_(3.0).abs_().sub_(1.0).clamp_(0.0, 1.0)
    if u8f:
        s = 255.999 / 255.0
        return v.mul_(chroma.mul_(s).unsqueeze(1)).add_(minc.mul_(s).unsqueeze(1)).floor_()
    return torch.addcmul(minc.unsqueeze(1), chroma.unsqueeze(1), v, out=v)


# ---- uint8 values held in float32 ("u8f"), see the module doc. In place on their own
# temporaries only, never on their input (``*_`` kernels: on their owner's buffer).


def u8f_to_uint8(xf: Tensor) -> Tensor:
    """Integers in [0, 255] held in float -> uint8 (via int16: float -> uint8 directly is not
    vectorised on CPU)."""
    return xf.to(torch.int16).to(torch.uint8)


def brightness_u8f(xf: Tensor, factor: Tensor) -> Tensor:
    return (xf * _per_sample(factor, xf.dtype)).clamp_(0.0, 255.0).floor_()


def _blend_u8f(a: Tensor, b: Tensor, factor: Tensor) -> Tensor:
    # the same products and sum as _blend (so the same float values), then truncation
    f = _per_sample(factor, a.dtype)
    return (a * f).add_(b * (1.0 - f)).clamp_(0.0, 255.0).floor_()


def contrast_u8f(xf: Tensor, factor: Tensor) -> Tensor:
    gray = _gray(xf).floor_() if xf.shape[1] == 3 else xf
    return _blend_u8f(xf, gray.mean(dim=(1, 2, 3), keepdim=True), factor)


def saturation_u8f(xf: Tensor, factor: Tensor) -> Tensor:
    if xf.shape[1] == 1:
        return xf.clone()
    return _blend_u8f(xf, _gray(xf).floor_(), factor)


def mix_u8f_(xf: Tensor, factor: Tensor, gray_weight: Tensor, mean_weight: Tensor) -> Tensor:
    """Brightness, contrast and saturation in one form, in place on ``xf``:
    ``floor(clamp(f * x + g * gray + m * mean(gray), 0, 255))`` with per-sample (N,)
    ``factor`` f, ``gray_weight`` g and ``mean_weight`` m, gray the truncated luma (1 channel:
    the channel). Brightness is (f, 0, 0), contrast (f, 0, 1 - f), saturation (f, 1 - f, 0),
    the identity (1, 0, 0), so one call serves samples doing different adjustments, with the
    values of ``brightness_u8f``/``contrast_u8f``/``saturation_u8f`` exactly (zero terms add
    +0, the others are the same products summed in the same order)."""
    if xf.shape[1] == 3:
        gray = _gray(xf).floor_()
        mean = gray.mean(dim=(1, 2, 3), keepdim=True)
        z = gray.mul_(_per_sample(gray_weight, xf.dtype))
    else:
        mean = xf.mean(dim=(1, 2, 3), keepdim=True)
        z = xf * _per_sample(gray_weight, xf.dtype)
    z = z.add_(mean.mul_(_per_sample(mean_weight, xf.dtype)))
    return xf.mul_(_per_sample(factor, xf.dtype)).add_(z).clamp_(0.0, 255.0).floor_()


def adjust_hue(x: Tensor, factor: Tensor) -> Tensor:
    """Rotate each image's hue by ``factor`` turns (per sample, (N,), in [-0.5, 0.5]) as
    torchvision's HSV round trip does; 1 channel: identity. Computed in float32 (float64 for
    float64), so float16 gives no NaN; rounding: see ``_rotate_hue``."""
    check_rgb(x, "adjust_hue")
    if x.shape[1] == 1:
        return x.clone()
    if x.dtype == torch.uint8:
        return u8f_to_uint8(rotate_hue_(x.to(torch.float32), factor, True, True))
    ct = _compute_dtype(x)
    if _needs_grad(x):  # autograd records: out of place
        return _rotate_hue(x.to(ct), factor).to(x.dtype)
    # a float16/bfloat16 input's float32 copy is ours to overwrite
    return rotate_hue_(x.to(ct), factor, x.dtype != ct).to(x.dtype)


def invert(x: Tensor) -> Tensor:
    """``bound - x`` (255 for uint8, 1 for floats)."""
    if x.dtype == torch.uint8:
        return x.bitwise_not()
    return 1.0 - x


def posterize(x: Tensor, bits: int) -> Tensor:
    """Keep the ``bits`` (0-8) most significant bits of each value, as torchvision."""
    if x.dtype == torch.uint8:
        if bits >= 8:
            return x.clone()
        return x & (((1 << bits) - 1) << (8 - bits))
    levels = 1 << bits
    return (x * levels).floor().clamp(0, levels - 1) * (1.0 / levels)


def solarize(x: Tensor, threshold: float) -> Tensor:
    """Invert the values ``>= threshold`` (in the input's value range)."""
    return torch.where(x >= threshold, invert(x), x)


def adjust_sharpness(x: Tensor, factor: Tensor) -> Tensor:
    """Blend each image with torchvision's 3x3 smoothed version of its interior by a per-sample
    ``factor`` ((N,)); the one-pixel border is kept, and images of height or width <= 2 are
    returned unchanged, as torchvision."""
    check_rgb(x, "adjust_sharpness")
    c, h, w = x.shape[1], x.shape[2], x.shape[3]
    if h <= 2 or w <= 2 or x.numel() == 0:
        return x.clone()
    if x.dtype == torch.uint8:
        # CPU chunks of a few samples keep the float temporaries in cache; the integer sum
        # replaces a depthwise conv2d, the slowest op of the policies on CPU
        n = x.shape[0]
        k = cpu_chunk_size(x, 16 * c * h * w, sharpness_chunk_bytes())
        if k >= n:
            return _sharpness_u8(x, factor)
        out = torch.empty_like(x)
        for s in range(0, n, k):
            out[s:s + k].copy_(_sharpness_u8(x[s:s + k], factor[s:s + k]))
        return out
    return _sharpness_conv(x, factor)


def _sharpness_u8(x: Tensor, factor: Tensor) -> Tensor:
    """uint8 ``adjust_sharpness`` without a convolution: the smoothing kernel's numerator
    (3x3 box sum + 4 x centre) is an exact integer in float32, summed separably, then divided by
    13 and rounded. torchvision's conv2d with weights 1/13 and 5/13 lands within float rounding
    (~1e-4) of the same quotient, which is never closer than 1/26 to a rounding boundary (13 is
    odd), so the rounded values, and everything after them, are equal."""
    xf = x.to(torch.float32)
    inner = xf[:, :, 1:-1, 1:-1]
    rows = xf[:, :, :, :-2] + xf[:, :, :, 1:-1]
    rows += xf[:, :, :, 2:]
    total = rows[:, :, :-2] + rows[:, :, 1:-1]
    total += rows[:, :, 2:]
    blurred = total.add_(inner, alpha=4.0).div_(13.0).round_()
    # the interior blended as _sharpness_conv does (same operations), the border kept
    inner.copy_(inner + (blurred - inner) * (1.0 - _per_sample(factor, torch.float32)))
    return xf.clamp_(0.0, 255.0).to(x.dtype)


def _sharpness_conv(x: Tensor, factor: Tensor) -> Tensor:
    """``adjust_sharpness`` by torchvision's depthwise 3x3 ``conv2d`` (floats; differentiable)."""
    c, h, w = x.shape[1], x.shape[2], x.shape[3]
    ct = _compute_dtype(x)
    # integer weights divided in ct, made by device ops (a host list would be copied to the
    # device each call) and divided by a tensor, which CUDA, unlike a Python divisor, does not
    # turn into a multiplication by 1/13: the same weights as on the CPU
    kernel = torch.ones(3, 3, dtype=ct, device=x.device)
    # fill_, not ``kernel[1, 1] = 5.0``: on CUDA that copies a host scalar (a blocking copy)
    kernel.narrow(0, 1, 1).narrow(1, 1, 1).fill_(5.0)
    kernel = kernel / torch.full([1, 1], 13.0, dtype=ct, device=x.device)
    xf = x.to(ct)
    blurred = nnf.conv2d(xf, kernel.expand(c, 1, 3, 3), groups=c)
    if x.dtype == torch.uint8:  # the plain path of uint8 input (tests compare it)
        blurred = blurred.round()
    # out of place (autograd): blend the interior, keep the one-pixel border
    blurred = nnf.pad(blurred, [1, 1, 1, 1])
    rows = torch.arange(h, device=x.device).view(h, 1)
    cols = torch.arange(w, device=x.device).view(1, w)
    border = (rows == 0) | (rows == h - 1) | (cols == 0) | (cols == w - 1)
    out = torch.where(border, xf, xf + (blurred - xf) * (1.0 - _per_sample(factor, ct)))
    return out.clamp(0.0, _max_value(x.dtype)).to(x.dtype)


def autocontrast(x: Tensor) -> Tensor:
    """Stretch each image's channels to the full range (per image and channel), as torchvision."""
    check_rgb(x, "autocontrast")
    bound = _max_value(x.dtype)
    ct = _compute_dtype(x)
    xf = x.to(ct)
    minimum = xf.amin(dim=(2, 3), keepdim=True)
    maximum = xf.amax(dim=(2, 3), keepdim=True)
    eq = maximum == minimum
    inv_scale = torch.where(eq, torch.ones_like(maximum), (maximum - minimum) * (1.0 / bound))
    minimum = torch.where(eq, torch.zeros_like(minimum), minimum)
    return ((xf - minimum) / inv_scale).clamp(0.0, bound).to(x.dtype)


def equalize(x: Tensor) -> Tensor:
    """Histogram-equalize each image and channel (PIL's rule, as torchvision): one batched
    256-bin histogram per (sample, channel) with ``scatter_add_``, no loop over samples.
    Floating input is binned through uint8 and scaled back (not differentiable)."""
    if x.numel() == 0:
        return x.clone()
    img = x if x.dtype == torch.uint8 else to_dtype(x, torch.uint8, True)
    n, c, h, w = img.shape[0], img.shape[1], img.shape[2], img.shape[3]
    flat = img.reshape(n * c, h * w).to(torch.int64)
    hist = torch.zeros(n * c, 256, dtype=torch.int32, device=x.device)
    hist.scatter_add_(1, flat, torch.ones_like(flat, dtype=torch.int32))
    cum = hist.cumsum(dim=1)
    # the last non-empty bin is the first to reach the maximum of the cumulative histogram
    last = cum.argmax(dim=1, keepdim=True)
    step = torch.div(h * w - hist.gather(1, last), 255, rounding_mode="floor")
    valid = step != 0
    lut = torch.div(cum[:, :-1] + torch.div(step, 2, rounding_mode="floor"),
                    step.clamp(min=1), rounding_mode="floor").clamp(0, 255).to(torch.uint8)
    lut = torch.cat([torch.zeros_like(lut[:, :1]), lut], dim=1)
    eq = lut.gather(1, flat).view(n, c, h, w)
    out = torch.where(valid.view(n, c, 1, 1), eq, img)
    if x.dtype == torch.uint8:
        return out
    return to_dtype(out, x.dtype, True)
