"""Kernels for ragged batches: images of different sizes padded into one ``(B, C, H, W)``
canvas, image ``i`` in ``x[i, :, :sizes[i, 0], :sizes[i, 1]]`` (the rest is padding whose values
are never read). ``sizes`` is a ``(B, 2)`` int64 tensor ``(h, w)`` on ``x``'s device.

Each kernel does what its fixed-size counterpart does on every image's own extent, batched:
warps sample through per-sample 3x3 maps in pixel-edge coordinates (pixel ``k`` spans
``[k, k + 1)``), with torchvision's fill rule at the image's own border; windows (centre and
random crops, with padding) and resize-then-window are gathers and per-sample filter matrices.
No randomness, no state, no Python loop over the batch.
"""
import math
from typing import List, Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from ._resize import _bmm_ieee, _cubic
from ._utils import _compute_dtype
from ._warp import _fill_tensor, _grid_sample_fill, _to_input_dtype, rotation_theta


def extent_mask(sizes: Tensor, height: int, width: int) -> Tensor:
    """``(B, 1, height, width)`` bool: True on each image's own pixels."""
    rows = torch.arange(height, device=sizes.device).view(1, 1, height, 1)
    cols = torch.arange(width, device=sizes.device).view(1, 1, 1, width)
    return (rows < sizes[:, 0].view(-1, 1, 1, 1)) & (cols < sizes[:, 1].view(-1, 1, 1, 1))


def flip_where(x: Tensor, sizes: Tensor, mask: Tensor, dim: int) -> Tensor:
    """Flip the images chosen by ``mask`` ((B,) bool) along ``dim`` (-1: left-right, -2:
    top-bottom) within their own extent."""
    n_axis = x.shape[dim]
    length = sizes[:, 1] if dim == -1 else sizes[:, 0]
    pos = torch.arange(n_axis, device=x.device).view(1, -1)
    src = torch.where(mask.view(-1, 1), length.view(-1, 1) - 1 - pos, pos)
    src = src.clamp(0, n_axis - 1)  # padding positions: any in-range index (undefined values)
    if dim == -1:
        index = src.view(-1, 1, 1, n_axis).expand(x.shape[0], x.shape[1], x.shape[2], n_axis)
        return x.gather(3, index)
    index = src.view(-1, 1, n_axis, 1).expand(x.shape[0], x.shape[1], n_axis, x.shape[3])
    return x.gather(2, index)


def centered_to_edge(matrix: Tensor, sizes: Tensor) -> Tensor:
    """torchvision's inverse affine ``(B, 2, 3)`` (output -> input, both relative to the image
    centre) as ``(B, 3, 3)`` float64 in pixel-edge coordinates of each image's own extent."""
    n = matrix.shape[0]
    m = matrix.to(torch.float64)
    half_w = sizes[:, 1].to(torch.float64) * 0.5
    half_h = sizes[:, 0].to(torch.float64) * 0.5
    # X = M (x - w/2, y - h/2, 1) + (w/2, h/2)
    t0 = m[:, 0, 2] - m[:, 0, 0] * half_w - m[:, 0, 1] * half_h + half_w
    t1 = m[:, 1, 2] - m[:, 1, 0] * half_w - m[:, 1, 1] * half_h + half_h
    zero = torch.zeros_like(t0)
    one = torch.ones_like(t0)
    return torch.stack((m[:, 0, 0], m[:, 0, 1], t0, m[:, 1, 0], m[:, 1, 1], t1, zero, zero, one),
                       dim=1).view(n, 3, 3)


def recenter(matrix: Tensor, center: List[float], sizes: Tensor) -> Tensor:
    """An inverse affine ``(B, 2, 3)`` built about the image centre, moved to turn about the
    pixel ``center`` (x, y) of each image instead (torchvision's ``center`` argument)."""
    m = matrix.to(torch.float64)
    cx = center[0] - sizes[:, 1].to(torch.float64) * 0.5
    cy = center[1] - sizes[:, 0].to(torch.float64) * 0.5
    # C M C^-1 with C a shift by (cx, cy): the translation column gains c - M c
    t0 = m[:, 0, 2] + cx - m[:, 0, 0] * cx - m[:, 0, 1] * cy
    t1 = m[:, 1, 2] + cy - m[:, 1, 0] * cx - m[:, 1, 1] * cy
    return torch.stack((m[:, 0, 0], m[:, 0, 1], t0, m[:, 1, 0], m[:, 1, 1], t1),
                       dim=1).view(-1, 2, 3)


def perspective_to_edge(coefficients: Tensor) -> Tensor:
    """torchvision's 8 perspective coefficients (output pixel-edge coordinates -> input ones)
    as ``(B, 3, 3)`` float64."""
    c = coefficients.to(torch.float64)
    one = torch.ones_like(c[:, :1])
    return torch.cat((c, one), dim=1).view(-1, 3, 3)


def identity_coefficients(device: torch.device, dtype: torch.dtype) -> Tensor:
    """The 8 perspective coefficients of the identity ``(1, 0, 0, 0, 1, 0, 0, 0)``, built on
    ``device`` without a host copy."""
    return (torch.remainder(torch.arange(8, device=device), 4) == 0).to(dtype)


def _cross(a: Tensor, b: Tensor, c: Tensor) -> Tensor:
    # a module-level function, not a closure: TorchScript compiles no nested def
    return ((b[:, 0] - a[:, 0]) * (c[:, 1] - a[:, 1])
            - (b[:, 1] - a[:, 1]) * (c[:, 0] - a[:, 0]))


def perspective_coefficients(endpoints: Tensor, sizes: Tensor) -> Tensor:
    """``functional.perspective_coefficients`` with each image's own corners: ``endpoints``
    ``(B, 4, 2)`` (x, y), ``sizes`` ``(B, 2)``. Same solver and degenerate-case rule."""
    dev = endpoints.device
    # constants built on the device (torch.tensor(list, device=...) is a host->device copy)
    identity = identity_coefficients(dev, torch.float64)
    w1 = sizes[:, 1].to(torch.float64) - 1.0
    h1 = sizes[:, 0].to(torch.float64) - 1.0
    zero = torch.zeros_like(w1)
    sx = torch.stack((zero, w1, w1, zero), dim=1)  # (B, 4)
    sy = torch.stack((zero, zero, h1, h1), dim=1)
    start = torch.stack((sx, sy), dim=2)
    e = endpoints.to(torch.float64)
    p0, p1, p2, p3 = e[:, 0], e[:, 1], e[:, 2], e[:, 3]
    tiny = (sizes[:, 0] < 2) | (sizes[:, 1] < 2)  # corners collinear: no perspective
    degenerate = ((_cross(p0, p1, p2) == 0) | (_cross(p0, p1, p3) == 0)
                  | (_cross(p0, p2, p3) == 0) | (_cross(p1, p2, p3) == 0) | tiny).view(-1, 1, 1)
    # a solvable stand-in system where degenerate (its solution is discarded below)
    k = torch.arange(4, device=dev)
    unit = torch.stack((torch.remainder(torch.div(k + 1, 2, rounding_mode="floor"), 2),
                        torch.div(k, 2, rounding_mode="floor")), dim=1).to(torch.float64)
    e = torch.where(degenerate, unit, e)
    start = torch.where(degenerate, unit, start)
    ex, ey = e[:, :, 0], e[:, :, 1]
    sx, sy = start[:, :, 0], start[:, :, 1]
    one = torch.ones_like(ex)
    zeros = torch.zeros_like(ex)
    row_x = torch.stack((ex, ey, one, zeros, zeros, zeros, -sx * ex, -sx * ey), dim=2)
    row_y = torch.stack((zeros, zeros, zeros, ex, ey, one, -sy * ex, -sy * ey), dim=2)
    a = torch.stack((row_x, row_y), dim=2).reshape(-1, 8, 8)
    b = start.reshape(-1, 8)
    if torch.compiler.is_compiling() or dev.type != "cpu":
        # as functional.perspective_coefficients: off the CPU lstsq reads its error flags on
        # the host (a sync), and compiled graphs refuse its data-dependent shapes; LU without
        # the check (a failed solve is non-finite, replaced by the identity below)
        sol = torch.linalg.solve_ex(a, b)[0]
    else:
        sol = torch.linalg.lstsq(a, b.unsqueeze(2), driver="gels").solution.squeeze(2)
    ok = torch.isfinite(sol).all(dim=1, keepdim=True) & ~degenerate.view(-1, 1)
    return torch.where(ok, sol, identity).to(torch.float32)


#: Bytes of float temporaries a batched ragged kernel holds at once in eager mode: a larger
#: batch runs a chunk of samples at a time (each sample's result depends on it alone, so the
#: results are the same). A padded float32 canvas of 256 photos of 2000 px, plus a warp's
#: sampling grid, is tens of GB.
CHUNK_BYTES = 1 << 30


def _chunk_samples(n: int, per_sample: int) -> int:
    """How many samples of ``per_sample`` temporary bytes one chunk takes (``n``: all). Eager
    only: a compiled graph or an export keeps the batch whole (its size may be symbolic)."""
    if torch.compiler.is_compiling() or torch.jit.is_scripting():
        return n
    return max(1, min(n, CHUNK_BYTES // max(1, per_sample)))


def _row(xs: Tensor, ys: Tensor, m: Tensor, k: int) -> Tensor:
    """Row ``k`` of ``m`` (B, 3, 3) applied to the pixel centres ``xs`` / ``ys``."""
    return (xs * m[:, k, 0].view(-1, 1, 1) + ys * m[:, k, 1].view(-1, 1, 1)
            ) + m[:, k, 2].view(-1, 1, 1)


def warp(x: Tensor, sizes: Tensor, matrix: Tensor, interpolation: str,
         fill: Optional[List[float]]) -> Tensor:
    """Warp each image within its own extent by ``matrix`` ``(B, 3, 3)`` (output pixel-edge
    coordinates -> input ones, projective), sampling only the image's own pixels: points
    outside them get ``fill`` by torchvision's rule (nearest: mask < 0.5; bilinear: blended by
    the sampled coverage), exactly as ``grid_sample`` on the image alone with zero padding.
    Runs ``CHUNK_BYTES`` of temporaries at a time."""
    n, c, h, w = x.shape[0], x.shape[1], x.shape[2], x.shape[3]
    if n == 0:
        return x.clone()
    ct = _compute_dtype(x)
    # the float canvas with its coverage channel, its sample, the grid and its parts
    per_sample = (3 * (c + 1) + 8) * h * w * torch.empty((), dtype=ct).element_size()
    step = _chunk_samples(n, per_sample)
    if step >= n:
        return _warp(x, sizes, matrix, interpolation, fill)
    out = torch.empty_like(x)
    for a in range(0, n, step):
        out[a:a + step] = _warp(x[a:a + step], sizes[a:a + step], matrix[a:a + step],
                                interpolation, fill)
    return out


def _warp(x: Tensor, sizes: Tensor, matrix: Tensor, interpolation: str,
          fill: Optional[List[float]]) -> Tensor:
    n, c, h, w = x.shape[0], x.shape[1], x.shape[2], x.shape[3]
    ct = _compute_dtype(x)
    m = matrix.to(ct)
    xs = (torch.arange(w, device=x.device, dtype=ct) + 0.5).view(1, 1, w)
    ys = (torch.arange(h, device=x.device, dtype=ct) + 0.5).view(1, h, 1)
    den = _row(xs, ys, m, 2)
    gx = _row(xs, ys, m, 0) / den * (2.0 / w) - 1.0
    gy = _row(xs, ys, m, 1) / den * (2.0 / h) - 1.0
    grid = torch.stack((gx, gy), dim=3)
    # a perspective's horizon: no finite source point, so the fill (a point far outside)
    grid = torch.where(torch.isfinite(grid), grid, torch.full_like(grid, -4.0))
    inside = extent_mask(sizes, h, w)
    # the padding is zeroed (and counted as outside): grid_sample then reads exactly what it
    # reads from the image alone with padding_mode="zeros"
    img = torch.empty((n, c + 1, h, w), dtype=ct, device=x.device)
    img[:, :c].copy_(x)
    img[:, :c].masked_fill_(~inside, 0.0)
    img[:, c:].copy_(inside)
    out = F.grid_sample(img, grid, mode=interpolation, padding_mode="zeros", align_corners=False)
    mask = out[:, c:]
    fill_list = [0.0] if fill is None else fill
    fill_img = _fill_tensor(fill_list, c, ct, x.device)
    if interpolation == "nearest":
        res = torch.where(mask < 0.5, fill_img, out[:, :c])
    else:
        res = (out[:, :c] - fill_img) * mask + fill_img
    return _to_input_dtype(res, x.dtype)


def rotation_matrix(angle: Tensor, height: int, width: int,
                    center: Optional[List[float]] = None) -> Tensor:
    """The inverse affine ``(B, 2, 3)`` (float64) that ``functional.rotate`` builds for
    ``height x width`` images (torchvision's rotate: -angle after a remainder by 360)."""
    return rotation_theta(angle, height, width, center)


#: Pixels beyond a window's exact preimage that its sampling may read: bicubic's taps reach
#: 2 past the sample point, plus a pixel for float rounding of the grid.
_TAP_MARGIN = 3


def source_rect(matrix: List[List[float]], height: int, width: int, top: int, left: int,
                out_h: int, out_w: int) -> List[int]:
    """``[top, left, height, width]`` of the pixels of a ``height x width`` image that rows
    ``top..top+out_h`` and columns ``left..left+out_w`` of its warp by ``matrix`` (the
    ``(2, 3)`` inverse about the image centre, as :func:`warp_window` takes it) read: the
    bounding rectangle of the window's preimage (an affine map's extremes are at the
    corners) with every interpolation's taps, clipped to the image; ``[0, 0, 1, 1]`` when
    the window reads nothing of it.

    Example:
        >>> identity = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]
        >>> source_rect(identity, 100, 80, 10, 20, 30, 40)
        [7, 17, 36, 46]
    """
    ch, cw = (height - 1) * 0.5, (width - 1) * 0.5
    xs, ys = [], []
    for y in (top, top + out_h - 1):
        for x in (left, left + out_w - 1):
            xc, yc = x - cw, y - ch
            xs.append(matrix[0][0] * xc + matrix[0][1] * yc + matrix[0][2] + cw)
            ys.append(matrix[1][0] * xc + matrix[1][1] * yc + matrix[1][2] + ch)
    t0 = max(0, math.floor(min(ys)) - _TAP_MARGIN)
    t1 = min(height, math.floor(max(ys)) + _TAP_MARGIN + 1)
    l0 = max(0, math.floor(min(xs)) - _TAP_MARGIN)
    l1 = min(width, math.floor(max(xs)) + _TAP_MARGIN + 1)
    if t1 <= t0 or l1 <= l0:
        return [0, 0, 1, 1]
    return [t0, l0, t1 - t0, l1 - l0]


def warp_window(img: Tensor, matrix: Tensor, top: int, left: int, height: int, width: int,
                interpolation: str, fill: Optional[List[float]],
                placed: Optional[List[int]] = None) -> Tensor:
    """Rows ``top..top+height`` and columns ``left..left+width`` of the affine warp of ``img``
    ``(1, C, H, W)`` by ``matrix`` ``(1, 2, 3)`` (torchvision's inverse, about the image
    centre): the same grid values as ``functional.matrix_grid`` at those output pixels, so the
    same pixels as warping the whole image and cropping, for the window's area only.

    On the CPU only the pixels the window reads (:func:`source_rect`) are converted for the
    sampling. ``placed = [t, l, H, W]``: ``img`` is only the part at ``(t, l)`` of an ``H x W``
    image, which must hold ``source_rect`` of the window (a window-decoded part of a photo,
    ``batchaug.data.roi_crop``): the same pixels as from the whole image."""
    if placed is not None:
        h, w = placed[2], placed[3]
    else:
        h, w = img.shape[-2], img.shape[-1]
    ct = _compute_dtype(img)
    theta = matrix.to(ct)
    if img.device.type == "cpu" and not torch.jit.is_scripting():
        rect = source_rect(matrix[0].tolist(), h, w, top, left, height, width)
        if placed is None:
            img, placed = img[:, :, rect[0]:rect[0] + rect[2], rect[1]:rect[1] + rect[3]], \
                [rect[0], rect[1], h, w]
        elif not (placed[0] <= rect[0] and placed[1] <= rect[1]
                  and rect[0] + rect[2] <= placed[0] + img.shape[-2]
                  and rect[1] + rect[3] <= placed[1] + img.shape[-1]):
            raise ValueError(f"warp_window: the part {placed} of the image does not hold the "
                             f"pixels {rect} that the window reads")
    scale = torch.tensor([0.5 * w, 0.5 * h], dtype=ct, device=img.device)
    rescaled = theta.transpose(1, 2) / scale
    xs = torch.linspace((1.0 - w) * 0.5, (w - 1.0) * 0.5, steps=w, dtype=ct,
                        device=img.device)[left:left + width].view(1, 1, 1, width)
    ys = torch.linspace((1.0 - h) * 0.5, (h - 1.0) * 0.5, steps=h, dtype=ct,
                        device=img.device)[top:top + height].view(1, 1, height, 1)
    row_x = rescaled[:, 0].reshape(1, 2, 1, 1)
    row_y = rescaled[:, 1].reshape(1, 2, 1, 1)
    row_1 = rescaled[:, 2].reshape(1, 2, 1, 1)
    # grid_sample reads a contiguous (1, height, width, 2) grid faster than it copies a view:
    # each coordinate's sum is written straight into its place of one (the same sums as
    # functional.matrix_grid's, one pass fewer than building the planes and copying them)
    part_x, part_y = xs * row_x, ys * row_y + row_1
    grid = torch.empty((1, height, width, 2), dtype=ct, device=img.device)
    torch.add(part_x[:, 0], part_y[:, 0], out=grid[..., 0])
    torch.add(part_x[:, 1], part_y[:, 1], out=grid[..., 1])
    return _grid_sample_fill(img, grid, interpolation, fill, placed=placed)


def axis_index(start: Tensor, length: Tensor, out_len: int, mode: str):
    """Source positions ``(B, out_len)`` of a window ``start + [0, out_len)`` on axes of
    per-sample ``length``, folded by ``mode`` (constant, edge, reflect, symmetric as
    torchvision's padding), and where they are inside (for constant: the rest is fill)."""
    pos = start.view(-1, 1) + torch.arange(out_len, device=start.device).view(1, -1)
    n = length.view(-1, 1)
    valid = (pos >= 0) & (pos < n)
    if mode == "edge" or mode == "constant":
        idx = torch.minimum(pos.clamp_min(0), n - 1)
    elif mode == "reflect":
        period = torch.clamp(2 * (n - 1), min=1)
        r = torch.remainder(pos, period)
        idx = torch.where(r < n, r, period - r)
        idx = torch.where(n == 1, torch.zeros_like(idx), idx)
    else:  # symmetric
        r = torch.remainder(pos, 2 * n)
        idx = torch.where(r < n, r, 2 * n - 1 - r)
    if mode != "constant":
        valid = torch.ones_like(valid)
    return idx, valid


def window(x: Tensor, sizes: Tensor, top: Tensor, left: Tensor, height: int, width: int,
           fill: List[float], padding_mode: str = "constant") -> Tensor:
    """The ``height x width`` window at ``(top, left)`` (per sample, may start outside) of each
    image's own extent, padded by ``padding_mode`` (constant: ``fill``) where it leaves it."""
    n, c = x.shape[0], x.shape[1]
    rows, rv = axis_index(top, sizes[:, 0], height, padding_mode)
    cols, cv = axis_index(left, sizes[:, 1], width, padding_mode)
    out = x.gather(2, rows.view(n, 1, height, 1).expand(n, c, height, x.shape[3]))
    out = out.gather(3, cols.view(n, 1, 1, width).expand(n, c, height, width))
    if padding_mode == "constant":
        valid = (rv.view(n, 1, height, 1) & cv.view(n, 1, 1, width))
        fill_img = _fill_tensor(fill, c, x.dtype, x.device)
        out = torch.where(valid, out, fill_img)
    return out


def resized_sizes(sizes: Tensor, size: Optional[int], max_size: Optional[int]) -> Tensor:
    """``(B, 2)`` sizes after ``Resize(size, max_size=max_size)`` (the shorter side to
    ``size``; ``size`` None: the longer side to ``max_size``), torchvision's rule per image
    (its Python float arithmetic, in float64)."""
    h, w = sizes[:, 0], sizes[:, 1]
    portrait = w <= h
    short = torch.where(portrait, w, h).to(torch.float64)
    long = torch.where(portrait, h, w).to(torch.float64)
    if size is None:
        if max_size is None:
            raise ValueError("resized_sizes: size None needs max_size")
        new_h = torch.where(portrait, torch.full_like(long, float(max_size)),
                            torch.floor(max_size * short / long))
        new_w = torch.where(portrait, torch.floor(max_size * short / long),
                            torch.full_like(long, float(max_size)))
        return torch.stack((new_h, new_w), dim=1).to(torch.int64)
    new_short = torch.full_like(short, float(size))
    new_long = torch.floor(size * long / short)
    if max_size is not None:
        over = new_long > max_size
        new_short = torch.where(over, torch.floor(max_size * new_short / new_long), new_short)
        new_long = torch.where(over, torch.full_like(new_long, float(max_size)), new_long)
    new_h = torch.where(portrait, new_long, new_short)
    new_w = torch.where(portrait, new_short, new_long)
    return torch.stack((new_h, new_w), dim=1).to(torch.int64)


def _resize_weights(offset: Tensor, length: Tensor, resized: Tensor, out_len: int, in_len: int,
                    interpolation: str, antialias: bool, dtype: torch.dtype) -> Tensor:
    """``(B, out_len, in_len)`` weights of output positions ``offset + j`` of an axis of
    ``length`` pixels resized to ``resized`` (torch's interpolate weights, as in
    ``_resize._aa_weights``); rows outside ``[0, resized)`` are zero."""
    ln = length.to(dtype).view(-1, 1, 1)
    scale = ln / resized.to(dtype).view(-1, 1, 1)
    j = (torch.arange(out_len, device=offset.device, dtype=dtype).view(1, -1, 1)
         + offset.to(dtype).view(-1, 1, 1))
    k = torch.arange(in_len, device=offset.device, dtype=dtype).view(1, 1, -1)
    if interpolation == "nearest":
        src = torch.minimum(torch.floor(j * scale), ln - 1.0)
        w = (k == src).to(dtype)
    elif interpolation == "bicubic" and not antialias:
        src = scale * (j + 0.5) - 0.5
        base = torch.floor(src)
        frac = src - base
        w = torch.zeros((offset.shape[0], out_len, in_len), dtype=dtype, device=offset.device)
        for tap in range(4):
            idx = torch.minimum(torch.clamp(base + float(tap - 1), min=0.0), ln - 1.0)
            coef = _cubic(frac - float(tap - 1), -0.75)
            w = w + torch.where(k == idx, coef, torch.zeros_like(coef))
    else:
        stretch = torch.clamp(scale, min=1.0) if antialias else torch.ones_like(scale)
        half = 2.0 if interpolation == "bicubic" else 1.0
        support = stretch * half
        centre = scale * (j + 0.5)
        lo = torch.clamp(torch.trunc(centre - support + 0.5), min=0.0)
        hi = torch.minimum(torch.trunc(centre + support + 0.5), ln)
        t = (k - centre + 0.5) / stretch
        if interpolation == "bicubic":
            w = _cubic(t, -0.5)
        else:
            w = torch.clamp(1.0 - torch.abs(t), min=0.0)
        w = torch.where((k >= lo) & (k < hi), w, torch.zeros_like(w))
        w = w / w.sum(dim=2, keepdim=True).clamp_min(1e-30)
    inside = (j >= 0) & (j < resized.to(dtype).view(-1, 1, 1))
    return torch.where(inside, w, torch.zeros_like(w))


def resize_window(x: Tensor, sizes: Tensor, resized: Tensor, top: Tensor, left: Tensor,
                  height: int, width: int, interpolation: str, antialias: bool,
                  fill: List[float]) -> Tensor:
    """Resize each image's own extent to ``resized`` ``(B, 2)`` and take the ``height x width``
    window at ``(top, left)`` of the result (``fill`` where the window leaves it), without
    building the resized images: per-sample filter matrices ``Wy @ x @ Wx^T``. Runs
    ``CHUNK_BYTES`` of temporaries at a time."""
    n, c = x.shape[0], x.shape[1]
    if n == 0:
        return torch.empty((0, c, height, width), dtype=x.dtype, device=x.device)
    el = torch.empty((), dtype=_compute_dtype(x)).element_size()
    h, w = x.shape[2], x.shape[3]
    # the float canvas, the height pass, the weights
    per_sample = (c * h * w + c * height * (w + width) + height * h + width * w) * el
    step = _chunk_samples(n, per_sample)
    if step >= n:
        return _resize_window(x, sizes, resized, top, left, height, width, interpolation,
                              antialias, fill)
    out = torch.empty((n, c, height, width), dtype=x.dtype, device=x.device)
    for a in range(0, n, step):
        b = a + step
        out[a:b] = _resize_window(x[a:b], sizes[a:b], resized[a:b], top[a:b], left[a:b],
                                  height, width, interpolation, antialias, fill)
    return out


def _resize_window(x: Tensor, sizes: Tensor, resized: Tensor, top: Tensor, left: Tensor,
                   height: int, width: int, interpolation: str, antialias: bool,
                   fill: List[float]) -> Tensor:
    n, c, h, w = x.shape[0], x.shape[1], x.shape[2], x.shape[3]
    ct = _compute_dtype(x)
    wy = _resize_weights(top, sizes[:, 0], resized[:, 0], height, h, interpolation,
                         antialias, ct)  # (B, oh, H)
    wx = _resize_weights(left, sizes[:, 1], resized[:, 1], width, w, interpolation,
                         antialias, ct)  # (B, ow, W)
    # As functional._resize's separable passes: the height pass on the rows of all channels
    # side by side, (B, oh, H) @ (B, H, C * W) (a matmul of (B, 1, oh, H) with (B, C, H, W)
    # would materialise the weights over the channels), made in the copy that converts to
    # the compute dtype; both passes in full float32 even where the user let float32
    # matmuls use TF32 (~10 bits of the weights: uint8 pixels would move by several levels)
    xt = x.transpose(1, 2).to(ct, memory_format=torch.contiguous_format).contiguous()
    t = _bmm_ieee(wy, xt.view(n, h, c * w))  # (B, oh, C * W) = (B, oh * C, W)
    wxt = wx.transpose(1, 2).contiguous()
    y = _bmm_ieee(t.view(n, height * c, w), wxt).view(n, height, c, width).transpose(1, 2)
    rows = top.view(-1, 1) + torch.arange(height, device=x.device).view(1, -1)
    cols = left.view(-1, 1) + torch.arange(width, device=x.device).view(1, -1)
    valid = (((rows >= 0) & (rows < resized[:, :1])).view(n, 1, height, 1)
             & ((cols >= 0) & (cols < resized[:, 1:])).view(n, 1, 1, width))
    y = torch.where(valid, y, _fill_tensor(fill, c, ct, x.device))
    if x.dtype == torch.uint8:
        return _to_input_dtype(y, x.dtype, clamp=True)
    return y.to(x.dtype)


def round_half_even(v: Tensor) -> Tensor:
    """Python's ``round`` of float64 ``v`` as int64 (torch.round rounds half to even too)."""
    return torch.round(v).to(torch.int64)


def center_offset(length: Tensor, crop: int) -> Tensor:
    """Where torchvision's ``center_crop`` starts a ``crop`` window on an axis of ``length``
    (negative: the image is padded on that side)."""
    inner = round_half_even((length - crop).to(torch.float64) / 2.0)
    return torch.where(length >= crop, inner, -torch.div(crop - length, 2, rounding_mode="floor"))


__all__ = ["extent_mask", "flip_where", "rotation_matrix", "source_rect", "warp_window",
           "centered_to_edge",
           "recenter", "perspective_to_edge",
           "perspective_coefficients", "warp", "axis_index", "window", "resized_sizes",
           "resize_window", "round_half_even", "center_offset"]
