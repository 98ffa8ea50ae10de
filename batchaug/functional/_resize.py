"""Resize kernels: per-sample resized crop (box by box on CPU, batched separable matrices or
``grid_sample`` elsewhere) and resize for a whole batch.

Pure and TorchScript-compatible: tensors and per-sample parameter tensors in, tensor out, no
randomness, no state, no host sync (no ``.item()``/``.tolist()``). Output sizes are Python ints,
so every graph is static.

Dtypes: uint8 in gives uint8 out (computed in float32, rounded, clamped). Floating input gives the
same dtype out; float16/bfloat16 are computed in float32 (the sampling grid needs sub-pixel
precision that half types lack) and cast back, float64 is computed in float64.
"""

from __future__ import annotations

import os
import threading
from typing import List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from ._utils import _chunk_size, _chunked, _compute_dtype, _is_channels_last, small_tensor
from ._warp import _grid_sample_fill, _to_input_dtype


def _box_scale(length: Tensor, out_len: int, dtype: torch.dtype) -> Tensor:
    """``length / out_len`` per sample, rounded once to ``dtype`` (interpolate's scale), the
    same value on every device and backend. A division by a Python number is a multiplication
    by its reciprocal on CUDA (eager, and Inductor for constants) and Triton's float32 division
    is approximate: either can move the quotient by an ulp, and a nearest sample
    ``floor(j * scale)`` across a pixel boundary. float32: divided in float64 and rounded,
    which is the correctly rounded float32 quotient whatever the float64 division's last bit
    (integers below 2**24: a float32 rounding tie is never that close); float64: divided by a
    tensor, which CUDA divides exactly (compiled float64 graphs may still multiply)."""
    if dtype == torch.float64:
        return length.to(dtype) / small_tensor([float(out_len)], dtype, length.device)
    return (length.to(torch.float64) / float(out_len)).to(dtype)


def _crop_grid(top: Tensor, left: Tensor, height: Tensor, width: Tensor, oh: int, ow: int,
               in_h: int, in_w: int, interpolation: str, dtype: torch.dtype) -> Tensor:
    """``(B, oh, ow, 2)`` ``grid_sample`` grid of each sample's crop box resized to ``oh x ow``.

    Reproduces where ``F.interpolate`` samples when it resizes the cropped window (what
    ``v2.functional.resized_crop`` does): bilinear (align_corners=False) samples at
    ``(j + 0.5) * len / out - 0.5`` clamped to ``[0, len - 1]`` (the window's edge is repeated,
    nothing outside the window leaks in); nearest takes pixel ``floor(j * len / out)``.
    """
    coords: List[Tensor] = []  # normalised x (B, ow), then y (B, oh)
    for start, length, out_len, in_len in [(left, width, ow, in_w), (top, height, oh, in_h)]:
        # in the compute dtype, as interpolate's scale: float32, or float64 for float64 input
        j = torch.arange(out_len, device=start.device, dtype=dtype)
        len_f = length.to(dtype).unsqueeze(1)
        scale = _box_scale(length, out_len, dtype).unsqueeze(1)
        if interpolation == "nearest":
            src = torch.minimum(torch.floor(j * scale), len_f - 1.0)
        else:
            src = torch.minimum(((j + 0.5) * scale - 0.5).clamp_min(0.0), len_f - 1.0)
        src = src.to(dtype) + start.to(dtype).unsqueeze(1)
        # grid_sample (align_corners=False) unnormalises with ((g + 1) * in_len - 1) / 2
        coords.append((2.0 * src + 1.0) / float(in_len) - 1.0)
    gx, gy = coords[0], coords[1]
    n = gx.shape[0]
    # stacked as planes (B, 2, H, W) and viewed as (B, H, W, 2): a stack along the last dim
    # copies pairs, several times slower on CPU; grid_sample reads the view as fast
    return torch.stack(
        (gx.unsqueeze(1).expand(n, oh, ow), gy.unsqueeze(2).expand(n, oh, ow)), dim=1
    ).permute(0, 2, 3, 1)


def resized_crop(
    x: Tensor,
    top: Tensor,
    left: Tensor,
    height: Tensor,
    width: Tensor,
    size: List[int],
    interpolation: str = "bilinear",
    antialias: bool = False,
) -> Tensor:
    """Crop box ``(top[i], left[i], height[i], width[i])`` from sample ``i``, resize to ``size``.

    Boxes are ``(B,)`` integer tensors and must lie inside the image. Per sample the result is
    ``v2.functional.resized_crop(img, top, left, height, width, size, interpolation, antialias)``:

    * ``antialias=False`` (or nearest): one ``grid_sample`` call for the batch; each output pixel
      interpolates the 2x2 (bilinear) or 1 (nearest) nearest pixels of its box, so a strongly
      shrunk box can alias. Equal to torchvision up to float rounding (uint8: +-1).
    * ``antialias=True`` with bilinear: the box is low-pass filtered as it shrinks (PyTorch's
      antialiased bilinear, torchvision's default). On CPU in eager mode or TorchScript each box
      is resized by ``F.interpolate`` (torch's SIMD uint8 kernel for uint8, no float round trip):
      **exactly** torchvision's CPU result, for every dtype. Under ``torch.compile``/
      ``torch.export`` and on accelerators the same filter runs batched as two per-sample
      matrix products (float32, uint8 rounded), equal to torchvision's float result up to float
      rounding: uint8 may differ by 1 from torchvision's CPU uint8 kernel, which rounds its
      fixed-point weights. Both are differentiable.
    * ``"bicubic"`` (either ``antialias``): on CPU in eager mode or TorchScript the same per-box
      ``F.interpolate`` call, **exactly** torchvision's CPU result (uint8 through torch's native
      kernel). Elsewhere two per-sample matrix products with torch's weights: antialiased cubic
      (a = -0.5, stretched when shrinking) for ``antialias=True``, and for ``antialias=False``
      the 4-tap cubic convolution (a = -0.75) with taps clamped into the box (the edge repeats,
      as interpolate on the cropped box); a ``grid_sample`` would read pixels outside the box.
      Floats equal torchvision to float rounding and keep the overshoot. uint8 follows torch's
      CPU uint8 kernel: the width pass is rounded and clamped to [0, 255] before the height
      pass, so within 2 steps of torchvision on CPU; torchvision on GPU resizes uint8 in one
      float pass and differs from its own CPU result (and from ours) by up to ~30 steps at
      sharp edges where the overshoot is clamped.

    Example:
        >>> x = torch.randint(0, 256, (2, 3, 64, 64), dtype=torch.uint8)
        >>> t, l = torch.tensor([0, 10]), torch.tensor([0, 5])
        >>> h, w = torch.tensor([64, 30]), torch.tensor([64, 40])
        >>> y = resized_crop(x, t, l, h, w, [32, 32])  # (2, 3, 32, 32)
        >>> y = resized_crop(x, t, l, h, w, [32, 32], antialias=True)  # as torchvision's default
    """
    oh, ow = size[0], size[1]
    n = x.shape[0]
    if n == 0:
        return torch.empty((0, x.shape[1], oh, ow), dtype=x.dtype, device=x.device)
    if resized_crop_per_sample_applies(x, interpolation, antialias):
        return _resized_crop_per_sample(
            x, top, left, height, width, oh, ow, interpolation, antialias)
    if interpolation == "bicubic":
        return _resized_crop_aa_batched(
            x, top, left, height, width, oh, ow, "bicubic", antialias)
    if antialias and interpolation == "bilinear":
        return _resized_crop_aa_batched(x, top, left, height, width, oh, ow)
    ct = _compute_dtype(x)
    in_h, in_w = x.shape[-2], x.shape[-1]
    # Every sampling point lies inside the image, so no fill/mask is needed.
    if not _chunked(x) or _chunk_size(x, oh, ow) >= n:
        grid = _crop_grid(top, left, height, width, oh, ow, in_h, in_w, interpolation, ct)
        return _grid_sample_fill(x, grid, interpolation, None)
    k = _chunk_size(x, oh, ow)
    out = torch.empty((n, x.shape[1], oh, ow), dtype=x.dtype, device=x.device)
    for s in range(0, n, k):
        e = min(n, s + k)
        grid = _crop_grid(top[s:e], left[s:e], height[s:e], width[s:e], oh, ow, in_h, in_w,
                          interpolation, ct)
        out[s:e].copy_(_grid_sample_fill(x[s:e], grid, interpolation, None))
    return out


def _resized_crop_per_sample(
    x: Tensor, top: Tensor, left: Tensor, height: Tensor, width: Tensor, oh: int, ow: int,
    mode: str = "bilinear", antialias: bool = True,
) -> Tensor:
    """CPU eager/TorchScript path of the antialiased (bilinear) or bicubic :func:`resized_crop`:
    one ``F.interpolate`` per box, on a view of it, exactly as torchvision resizes one image.

    A Python loop over the batch, taken because it measured faster on CPU than every batched
    path (torch's uint8 antialiased kernel is SIMD and reads only the box; the batched filter
    is a dense matrix product over the whole image): RandomResizedCrop(224) + flip + normalize
    from 256x256, batch 256, one thread, see ``benchmarks/bench_transforms.py --recipes rrc``.
    Differentiable (slices, interpolate and copies into a fresh tensor are all tracked by autograd).
    """
    n, c = x.shape[0], x.shape[1]
    dtype = x.dtype
    # torchvision resizes uint8 (native kernel), float32 and float64 as they are, and other
    # floats in float32, cast back without rounding
    native = dtype == torch.uint8 or dtype == torch.float32 or dtype == torch.float64
    out = torch.empty((n, c, oh, ow), dtype=dtype, device=x.device)
    if _is_channels_last(x):
        out = out.contiguous(memory_format=torch.channels_last)
    # boxes as Python ints: a CPU tensor, so no device sync
    t_l: List[int] = top.tolist()
    l_l: List[int] = left.tolist()
    h_l: List[int] = height.tolist()
    w_l: List[int] = width.tolist()
    for i in range(n):
        t, l, h, w = t_l[i], l_l[i], h_l[i], w_l[i]
        y = _resize_box(x[i:i + 1, :, t:t + h, l:l + w], oh, ow, mode, antialias, native)
        out[i:i + 1].copy_(y)
    return out


def _resize_box(box: Tensor, oh: int, ow: int, mode: str, antialias: bool, native: bool
                ) -> Tensor:
    """A ``(N, C, h, w)`` box (one image's in :func:`_resized_crop_per_sample` and
    :func:`resize_each`, a uint8 CPU batch in :func:`resize`) resized to ``oh x ow`` as
    torchvision resizes an image."""
    dtype = box.dtype
    if box.shape[2] == oh and box.shape[3] == ow:
        return box  # torchvision returns a same-size image unchanged
    if native and not (dtype == torch.uint8 and oh * ow == 1):
        # a uint8 window of a larger NCHW tensor (rows of a crop box, the extent of a padded
        # image) is copied contiguous first: torch's SIMD uint8 resize reads a strided NCHW
        # view through a slower path, slower than the copy and the contiguous resize together
        # (docs/performance.md, "Photos of different sizes"); a box of a channels_last tensor
        # is as fast either way. The pixels are the same; the copy is tracked by autograd.
        if dtype == torch.uint8 and box.device.type == "cpu" and not box.is_contiguous() \
                and box.stride(-1) == 1:
            box = box.contiguous()
        return F.interpolate(box, size=[oh, ow], mode=mode, align_corners=False,
                             antialias=antialias)
    # (PyTorch's uint8 kernel fails an internal assert for a 1x1 output; torchvision
    # then fails too. Float32 + round (+ clamp: bicubic overshoots) is what its non-AVX
    # path does.)
    y = F.interpolate(box.to(torch.float32), size=[oh, ow], mode=mode,
                      align_corners=False, antialias=antialias)
    if dtype == torch.uint8:
        y = _to_input_dtype(y, dtype)
    return y


def resize_each(images: List[Tensor], size: List[int], modes: List[str], antialias: bool,
                out: Optional[Tensor] = None, flips: Optional[List[bool]] = None) -> Tensor:
    """``images[i]`` (``(C, h_i, w_i)``, sizes of their own, one dtype) resized to ``size``
    with ``modes[i]`` ("bilinear" or "bicubic"), written into one ``(N, C, *size)`` batch: per
    image exactly :func:`resized_crop` on a batch holding it (its CPU per-box path, the same
    ``F.interpolate`` call), so a crop window decoded on its own resizes to the same pixels as
    the window of the whole image. CPU eager (a loop over the images, as that path). ``out``:
    an ``(N, C, *size)`` tensor (a view is fine) to write into instead of a new one;
    ``flips``: write those images' results flipped left-right (a ``RandomHorizontalFlip``
    after the resize, fused: the same bytes, one pass less).

    Example:
        >>> ims = [torch.zeros(3, 40, 50, dtype=torch.uint8),
        ...        torch.zeros(3, 30, 20, dtype=torch.uint8)]
        >>> resize_each(ims, [16, 16], ["bilinear", "bicubic"], True).shape
        torch.Size([2, 3, 16, 16])
    """
    oh, ow = size[0], size[1]
    if len(images) == 0:
        raise ValueError("resize_each: images is empty (the channel count and dtype come "
                         "from its first image)")
    c, dtype = images[0].shape[0], images[0].dtype
    native = dtype == torch.uint8 or dtype == torch.float32 or dtype == torch.float64
    if out is None:
        out = torch.empty((len(images), c, oh, ow), dtype=dtype, device=images[0].device)
    for i, image in enumerate(images):
        y = _resize_box(image.unsqueeze(0), oh, ow, modes[i], antialias, native)
        out[i:i + 1].copy_(y.flip(-1) if flips is not None and flips[i] else y)
    return out


def resized_crop_per_sample_applies(x: Tensor, interpolation: str, antialias: bool) -> bool:
    """Whether :func:`resized_crop` resizes ``x`` box by box (see there): CPU eager or
    TorchScript, antialiased bilinear or bicubic."""
    return _chunked(x) and (interpolation == "bicubic"
                            or (antialias and interpolation == "bilinear"))


def _cubic(t: Tensor, a: float) -> Tensor:
    """Keys' cubic convolution kernel at distance ``t`` (ATen's cubic_convolution1/2)."""
    t = torch.abs(t)
    near = ((a + 2.0) * t - (a + 3.0)) * t * t + 1.0
    far = ((a * t - 5.0 * a) * t + 8.0 * a) * t - 4.0 * a
    return torch.where(t < 1.0, near, torch.where(t < 2.0, far, torch.zeros_like(t)))


def _aa_weights(
    start: Tensor, length: Tensor, out_len: int, in_len: int, dtype: torch.dtype,
    interpolation: str = "bilinear",
) -> Tensor:
    """``(B, out_len, in_len)`` weights of PyTorch's antialiased bilinear or bicubic resize of
    the window ``[start, start + length)`` of an axis (zero outside the window).

    As ``_compute_weights_aa`` in ATen's UpSampleKernel: scale = length / out, a triangle
    (bilinear) or cubic a = -0.5 (bicubic) filter of half-width 1 or 2, stretched by the scale
    when shrinking, taps from ``int(centre -+ support + 0.5)`` clipped to the window,
    normalised to sum 1.
    """
    ln = length.to(dtype).view(-1, 1, 1)
    scale = _box_scale(length, out_len, dtype).view(-1, 1, 1)
    stretch = torch.clamp(scale, min=1.0)
    half = 2.0 if interpolation == "bicubic" else 1.0
    support = stretch * half
    invscale = 1.0 / stretch
    centre = scale * (torch.arange(out_len, device=start.device, dtype=dtype).view(1, -1, 1) + 0.5)
    # taps relative to the window start
    k = (torch.arange(in_len, device=start.device, dtype=dtype).view(1, 1, -1)
         - start.to(dtype).view(-1, 1, 1))
    lo = torch.clamp(torch.trunc(centre - support + 0.5), min=0.0)
    hi = torch.minimum(torch.trunc(centre + support + 0.5), ln)
    if interpolation == "bicubic":
        w = _cubic((k - centre + 0.5) * invscale, -0.5)
    else:
        w = torch.clamp(1.0 - torch.abs((k - centre + 0.5) * invscale), min=0.0)
    w = torch.where((k >= lo) & (k < hi), w, torch.zeros_like(w))
    return w / w.sum(dim=2, keepdim=True)


def _cubic_weights(
    start: Tensor, length: Tensor, out_len: int, in_len: int, dtype: torch.dtype
) -> Tensor:
    """``(B, out_len, in_len)`` weights of PyTorch's non-antialiased bicubic resize
    (align_corners=False) of the window ``[start, start + length)``: 4 taps around
    ``(j + 0.5) * scale - 0.5`` (not clamped at 0, as ATen's cubic source index), weights of
    the a = -0.75 cubic, tap indices clamped into the window (its edge repeats)."""
    ln = length.to(dtype).view(-1, 1, 1)
    scale = _box_scale(length, out_len, dtype).view(-1, 1, 1)
    src = scale * (torch.arange(out_len, device=start.device, dtype=dtype).view(1, -1, 1) + 0.5)
    src = src - 0.5
    base = torch.floor(src)
    frac = src - base
    k = torch.arange(in_len, device=start.device, dtype=dtype).view(1, 1, -1)
    s0 = start.to(dtype).view(-1, 1, 1)
    w = torch.zeros((start.shape[0], out_len, in_len), dtype=dtype, device=start.device)
    for tap in range(4):
        idx = torch.minimum(torch.clamp(base + float(tap - 1), min=0.0), ln - 1.0) + s0
        coef = _cubic(frac - float(tap - 1), -0.75)
        w = w + torch.where(k == idx, coef, torch.zeros_like(coef))
    return w


def _resized_crop_aa_batched(
    x: Tensor, top: Tensor, left: Tensor, height: Tensor, width: Tensor, oh: int, ow: int,
    interpolation: str = "bilinear", antialias: bool = True,
) -> Tensor:
    """Batched antialiased (bilinear) or bicubic resized crop (accelerators, torch.compile,
    torch.export): the separable filter as per-sample matrices, ``Wy @ x @ Wx^T``. Dense over
    the whole image, which a GPU does in batched GEMMs; no Python int depends on the batch
    size.

    Each pass is one ``bmm`` of a sample's weights with all of its channels side by side
    (``(B, oh, H) @ (B, H, C * W)``), not a ``matmul`` of ``(B, 1, oh, H)`` with
    ``(B, C, H, W)``, which would materialise the weights broadcast over the channels (176 MB
    at batch 256 to 224 px); the products are the same dot products. The passes run in full
    float32 even where float32 matmuls may use TF32 or bfloat16 (``_bmm_ieee``)."""
    dtype = x.dtype
    ct = _compute_dtype(x)
    n, c, h, w = x.shape[0], x.shape[1], x.shape[2], x.shape[3]
    if interpolation == "bicubic" and not antialias:
        wy = _cubic_weights(top, height, oh, h, ct)
        wx = _cubic_weights(left, width, ow, w, ct)
    else:
        wy = _aa_weights(top, height, oh, h, ct, interpolation)
        wx = _aa_weights(left, width, ow, w, ct, interpolation)
    # wy: (B, oh, H), wx: (B, ow, W)
    # dense (B, W, ow): BLAS sums a transposed operand in another order (float64 last bits)
    wxt = wx.transpose(1, 2).contiguous()
    if dtype == torch.uint8 and interpolation == "bicubic":
        # torch's CPU uint8 kernel (torchvision's CPU path, and our per-box one) resizes the
        # width first and stores that pass as uint8: clamping the overshoot there moves sharp
        # edges by up to ~30 steps against one float pass. The same two passes keep this
        # within 2 steps of it (fixed-point vs float weights, rounded twice).
        xw = _bmm_ieee(x.to(ct, memory_format=torch.contiguous_format).view(n, c * h, w), wxt)
        xw = xw.round_().clamp_(0.0, 255.0).view(n, c, h, ow)
        # height pass: rows of all channels side by side, (B, H, C * ow)
        y = _bmm_ieee(wy, xw.transpose(1, 2).reshape(n, h, c * ow))
        y = y.view(n, oh, c, ow).transpose(1, 2)
    else:
        # height pass first (as before), on the image transposed to (B, H, C, W) in the
        # same copy that converts it to the compute dtype
        # (.to returns its input unchanged when the dtype already matches: then .contiguous
        # makes the one copy)
        xt = x.transpose(1, 2).to(ct, memory_format=torch.contiguous_format).contiguous()
        t = _bmm_ieee(wy, xt.view(n, h, c * w))  # (B, oh, C * W) = (B, oh * C, W)
        y = _bmm_ieee(t.view(n, oh * c, w), wxt).view(n, oh, c, ow).transpose(1, 2)
    # y: (B, C, oh, ow) as a view of (B, oh, C, ow) memory
    if _is_channels_last(x):
        y = y.contiguous(memory_format=torch.channels_last)
    else:
        y = y.contiguous()
    if dtype == torch.uint8:
        # bilinear weights are convex: the result stays in [0, 255]; cubic ones overshoot
        return _to_input_dtype(y, dtype, clamp=interpolation == "bicubic")
    return y.to(dtype)


def _bmm_ieee(a: Tensor, b: Tensor) -> Tensor:
    """``torch.bmm(a, b)`` in full float32 precision even where the user let float32 matmuls
    run in TF32 or bfloat16 (``torch.set_float32_matmul_precision("high"/"medium")``, which
    keep ~10 or 8 bits of the weights: uint8 results would move by several steps). Eager
    only: TorchScript and compiled graphs follow the global setting."""
    if a.dtype != torch.float32 or torch.jit.is_scripting() or torch.compiler.is_compiling():
        return torch.bmm(a, b)
    return _bmm_ieee_eager(a, b)


# Held while a float32 matmul setting is overridden: two threads (a loader's reader thread and
# the training thread) would otherwise interleave their save/override/restore, one launching
# its product after the other restored the user's TF32 setting, or restoring the override.
_PRECISION_LOCK = threading.Lock()
if hasattr(os, "register_at_fork"):
    # a fork (a DataLoader worker) waits for an override to end: the child gets the user's
    # setting and a free lock, not a copy of a lock held by a thread that does not exist there
    os.register_at_fork(before=_PRECISION_LOCK.acquire,
                        after_in_parent=_PRECISION_LOCK.release,
                        after_in_child=_PRECISION_LOCK.release)


def _matmul_precisions() -> Tuple[Optional[str], str, str]:
    try:
        legacy: Optional[str] = torch.get_float32_matmul_precision()
    except RuntimeError:  # the user mixed the legacy and new APIs: nothing to restore there
        legacy = None
    return (legacy, torch.backends.cuda.matmul.fp32_precision,
            torch.backends.mkldnn.matmul.fp32_precision)


@torch.jit.unused
def _bmm_ieee_eager(a: Tensor, b: Tensor) -> Tensor:
    # The precision is a process-wide setting read when the kernel is launched (cuBLAS on
    # CUDA, oneDNN on CPU): override it for this launch only, under a lock, and restore it.
    # The override goes through the legacy API ("highest"), which sets the new API's backends
    # to "ieee" too: overriding only the new API's backend would leave the legacy one at
    # "high", and every legacy read meanwhile (torch.backends.cuda.matmul.allow_tf32, which
    # dynamo reads) raises that the two disagree. Other threads' own matmuls launched during
    # the override run in full precision too (slower, never less exact).
    backend = torch.backends.cuda.matmul if a.is_cuda else torch.backends.mkldnn.matmul
    with _PRECISION_LOCK:
        legacy, cuda, mkldnn = _matmul_precisions()
        own = backend.fp32_precision
        # "none": nothing set for this backend, the legacy setting decides
        if own != "ieee" and not (own == "none" and legacy == "highest"):
            torch.set_float32_matmul_precision("highest")
            try:
                return torch.bmm(a, b)
            finally:
                if legacy is not None:
                    torch.set_float32_matmul_precision(legacy)
                torch.backends.cuda.matmul.fp32_precision = cuda
                torch.backends.mkldnn.matmul.fp32_precision = mkldnn
    # the user's setting is full precision already (other threads' overrides restore it, and
    # override only to full precision): no need to hold the lock through a long CPU product
    return torch.bmm(a, b)


def resize(
    x: Tensor, size: List[int], interpolation: str = "bilinear", antialias: bool = True
) -> Tensor:
    """Resize the whole batch to ``size`` = ``[height, width]``, like ``v2.functional.resize``.

    ``interpolation``: "nearest", "bilinear" or "bicubic"; ``antialias`` applies to bilinear
    and bicubic (as in torchvision). uint8 bilinear/bicubic on CPU uses PyTorch's native uint8
    path (what torchvision picks: always for bicubic, on AVX2/AVX-512 and ARM CPUs for
    bilinear); otherwise uint8 is resized in float32, clamped (bicubic overshoots), rounded and
    cast back, as torchvision does on GPU. Floating bicubic output keeps its overshoot, as
    torchvision's. Same size in returns ``x`` itself.

    Example:
        >>> y = resize(torch.zeros(8, 3, 64, 48, dtype=torch.uint8), [32, 24])
    """
    oh, ow = size[0], size[1]
    if x.shape[-2] == oh and x.shape[-1] == ow:
        return x
    if x.shape[0] == 0:
        return torch.empty((0, x.shape[1], oh, ow), dtype=x.dtype, device=x.device)
    dtype = x.dtype
    if interpolation == "nearest":
        # nearest is exact on every dtype; no float round trip needed for uint8
        if dtype == torch.uint8 or dtype == torch.float32 or dtype == torch.float64:
            return F.interpolate(x, size=[oh, ow], mode="nearest")
        return F.interpolate(x.float(), size=[oh, ow], mode="nearest").to(dtype)
    # (PyTorch 2.14's native uint8 path fails an internal assert for a 1x1 output of a
    # 3-channel batch, so that case takes the float path)
    if dtype == torch.uint8 and x.device.type == "cpu" and oh * ow > 1:
        return _resize_box(x, oh, ow, interpolation, antialias, True)
    ct = _compute_dtype(x)
    y = F.interpolate(
        x.to(ct), size=[oh, ow], mode=interpolation, align_corners=False, antialias=antialias
    )
    return _to_input_dtype(y, dtype)


def resized_output_size(
    height: int, width: int, size: List[int], max_size: Optional[int] = None
) -> List[int]:
    """Output ``[h, w]`` for ``size`` as torchvision reads it: ``[h, w]``; one int = the
    shorter side, the longer one then capped at ``max_size`` (both scaled down, as
    torchvision); an empty ``size`` (torchvision's ``None``) = the longer side is ``max_size``.
    """
    if len(size) == 2:
        return [size[0], size[1]]
    short, long = (width, height) if width <= height else (height, width)
    if len(size) == 0:
        if max_size is None:
            raise ValueError("resized_output_size: an empty size needs max_size")
        new_short, new_long = int(max_size * short / long), max_size
    else:
        new_short, new_long = size[0], int(size[0] * long / short)
        if max_size is not None and new_long > max_size:
            new_short, new_long = int(max_size * new_short / new_long), max_size
    if width <= height:
        return [new_long, new_short]
    return [new_short, new_long]
