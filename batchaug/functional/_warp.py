"""Warp kernels: per-sample rotate, affine and perspective (their sampling grids and matrices)
and the ``grid_sample`` fill rule shared with the resize kernels, under the same rules as
those (``_resize``'s docstring): pure, scriptable, no host sync, static output sizes; uint8
computed in float32 and rounded back, half types in float32, float64 in float64.
"""

from __future__ import annotations

import math
from typing import List, Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from ._utils import _chunk_size, _chunked, _compute_dtype, small_tensor


def _to_input_dtype(y: Tensor, dtype: torch.dtype, clamp: bool = True) -> Tensor:
    """Cast a float result we own back to ``dtype`` (in place where possible: big CPU
    allocations cost page faults, so fewer temporaries is measurably faster)."""
    if dtype == torch.uint8:
        # round-half-to-even, as torchvision does
        y = y.round_()
        if clamp:
            y = y.clamp_(0.0, 255.0)
        # via int16 (exact for 0..255): float32 -> uint8 directly is not vectorised on CPU
        return y.to(torch.int16).to(torch.uint8)
    return y.to(dtype)


def _fill_tensor(
    fill: List[float], channels: int, dtype: torch.dtype, device: torch.device
) -> Tensor:
    if len(fill) != 1 and len(fill) != channels:
        raise ValueError(
            "fill has {} values but the batch has {} channels; give one value or one per "
            "channel".format(len(fill), channels)
        )
    return small_tensor(fill, dtype, device).view(1, -1, 1, 1)


def _grid_sample_fill(
    x: Tensor, grid: Tensor, interpolation: str, fill: Optional[List[float]],
    as_float: bool = False, placed: Optional[List[int]] = None,
) -> Tensor:
    """``grid_sample`` with zero padding, then torchvision's fill rule.

    Mirrors ``torchvision.transforms.v2.functional._geometry._apply_grid_transform`` with one
    grid per sample: a ones channel rides along through ``grid_sample`` to tell how much of each
    output pixel came from inside the image; nearest replaces pixels whose mask < 0.5 by ``fill``,
    bilinear blends ``mask * (img - fill) + fill``. (For bilinear this attenuates the image near
    the border even when fill is 0, exactly as torchvision does.) Where the mask cannot change
    the result (nearest with an all-zero fill, or no fill) it is skipped.

    ``placed = [top, left, H, W]``: ``x`` is only the part at ``(top, left)`` of ``H x W``
    images, and ``grid`` reads (taps included) only inside that part or outside the images:
    only the part is converted, into an uninitialised ``H x W`` buffer whose other pixels are
    never read, so the result is the whole images' bit for bit (``_sized.warp_window``).
    """
    dtype = x.dtype
    ct = _compute_dtype(x)
    n, c, h, w = x.shape[0], x.shape[1], x.shape[2], x.shape[3]
    top, left = 0, 0
    if placed is not None:
        top, left, h, w = placed[0], placed[1], placed[2], placed[3]
    ph, pw = x.shape[2], x.shape[3]
    zero_fill = True
    in_range = True
    integral = True
    if fill is not None:
        for f in fill:
            if f != 0.0:
                zero_fill = False
            if f < 0.0 or f > 255.0:
                in_range = False
            if f != math.floor(f):
                integral = False
    use_mask = fill is not None and not (interpolation == "nearest" and zero_fill)
    if use_mask:
        # one buffer instead of convert + cat: the mask channel rides along in the same call
        img = torch.empty((n, c + 1, h, w), dtype=ct, device=x.device)
        img[:, :c, top:top + ph, left:left + pw].copy_(x)
        img[:, c, top:top + ph, left:left + pw].fill_(1.0)
    elif placed is not None:
        img = torch.empty((n, c, h, w), dtype=ct, device=x.device)
        img[:, :, top:top + ph, left:left + pw].copy_(x)
    else:
        img = x.to(ct)
    out = F.grid_sample(img, grid, mode=interpolation, padding_mode="zeros", align_corners=False)
    if fill is not None and use_mask:
        mask = out[:, c:]
        if interpolation == "nearest":
            fill_img = _fill_tensor(fill, c, ct, out.device)
            out = torch.where(mask < 0.5, fill_img, out[:, :c])
        elif zero_fill:
            if torch.is_grad_enabled() and (x.requires_grad or grid.requires_grad):
                out = out[:, :c] * mask  # == (img - 0) * mask + 0, bit for bit
            else:  # the same product into grid_sample's own result: no new buffer
                out = out[:, :c].mul_(mask)
        else:
            fill_img = _fill_tensor(fill, c, ct, out.device)
            out = (out[:, :c] - fill_img).mul_(mask).add_(fill_img)
    if as_float and dtype == torch.uint8:
        # the uint8 result's values, still in float32 (for a fused Normalize; see _warp)
        # (out is always a fresh result here: grid_sample's, or the fill rule's)
        out = out.round_()
        return out.clamp_(0.0, 255.0) if not in_range else out
    if dtype == torch.uint8 and interpolation == "nearest" and in_range and integral:
        # nearest copies integers: nothing to round (int16: see _to_input_dtype)
        return out.to(torch.int16).to(torch.uint8)
    # bilinear results are convex blends of pixels and in-range fills: clamping is a no-op then
    return _to_input_dtype(out, dtype, clamp=not in_range)


def rotation_theta(angle: Tensor, height: int, width: int,
                   center: Optional[List[float]] = None) -> Tensor:
    """The ``(B, 2, 3)`` float64 inverse affine of torchvision's ``rotate`` for each angle
    (degrees, counter-clockwise) on ``height x width`` images, relative to the image centre:
    the one definition ``rotation_grid``, the ragged crop stage and the target kernels use."""
    a = torch.remainder(angle.to(torch.float64), 360.0)
    # torchvision: "due to current incoherence of rotation angle direction between affine and
    # rotate implementations we need to set -angle"
    rot = -a * (math.pi / 180.0)
    cos_r = torch.cos(rot)
    sin_r = torch.sin(rot)
    if center is None:
        cx, cy = 0.0, 0.0
    else:
        cx = center[0] - width * 0.5
        cy = center[1] - height * 0.5
    # inverse of a pure rotation about (cx, cy): [cos, sin, tx; -sin, cos, ty]
    tx = cx - cos_r * cx - sin_r * cy
    ty = cy + sin_r * cx - cos_r * cy
    return torch.stack((cos_r, sin_r, tx, -sin_r, cos_r, ty), dim=1).view(-1, 2, 3)


def rotation_grid(
    angle: Tensor, height: int, width: int, center: Optional[List[float]] = None,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """The ``(B, height, width, 2)`` ``grid_sample`` grid that rotates each sample by ``angle``
    (a view of ``(B, 2, height, width)`` planes; ``.contiguous()`` it if you need dense pairs).

    Builds the same inverse affine matrix as torchvision's ``rotate`` (in float64, then cast to
    ``dtype``, as torchvision computes it in Python floats) and the same normalised grid.
    """
    return matrix_grid(rotation_theta(angle, height, width, center), height, width, dtype)


def matrix_grid(
    matrix: Tensor, height: int, width: int, dtype: torch.dtype = torch.float32,
    out_height: Optional[int] = None, out_width: Optional[int] = None,
) -> Tensor:
    """The ``(B, height, width, 2)`` ``grid_sample`` grid of per-sample inverse affine
    matrices ``(B, 2, 3)`` in torchvision's convention (output pixel -> input pixel, both
    relative to the image centre), as torchvision's ``_affine_grid`` builds it; a view of
    ``(B, 2, height, width)`` planes. The matrix is cast to ``dtype`` first (torchvision
    computes it in Python floats and casts it to the image's float dtype). ``out_height`` /
    ``out_width`` (default: the input's) give an output of another size over the same input
    (the targets' resized warps); the arithmetic is the same.
    """
    oh = height if out_height is None else out_height
    ow = width if out_width is None else out_width
    theta = matrix.to(dtype)
    scale = small_tensor([0.5 * width, 0.5 * height], dtype, matrix.device)
    rescaled = theta.transpose(1, 2) / scale  # (B, 3, 2): the x, y and 1 rows of the map
    # grid[b, i, j] = xs[j] * row_x[b] + (ys[i] * row_y[b] + row_1[b]): torchvision's
    # base_grid @ rescaled, as one broadcast add of a (B, 2, 1, W) and a (B, 2, H, 1) term into
    # planes (B, 2, H, W), returned as a (B, H, W, 2) view, which grid_sample reads as fast.
    # (On CPU the batched (B, HW, 3) @ (3, 2) bmm costs more than grid_sample itself, and a
    # broadcast whose innermost dim is the pair is slower than these planes: docs/performance.md, "Kernel choices".
    # Sums may round in the last bit differently from torchvision's matmul.)
    xs = torch.linspace((1.0 - ow) * 0.5, (ow - 1.0) * 0.5, steps=ow,
                        dtype=dtype, device=matrix.device).view(1, 1, 1, ow)
    ys = torch.linspace((1.0 - oh) * 0.5, (oh - 1.0) * 0.5, steps=oh,
                        dtype=dtype, device=matrix.device).view(1, 1, oh, 1)
    n = rescaled.shape[0]
    row_x = rescaled[:, 0].reshape(n, 2, 1, 1)
    row_y = rescaled[:, 1].reshape(n, 2, 1, 1)
    row_1 = rescaled[:, 2].reshape(n, 2, 1, 1)
    return ((xs * row_x) + (ys * row_y + row_1)).permute(0, 2, 3, 1)


def affine_matrix(
    angle: Tensor,
    translate: Tensor,
    scale: Tensor,
    shear: Tensor,
    height: int,
    width: int,
    center: Optional[List[float]] = None,
) -> Tensor:
    """Per-sample inverse affine matrices ``(B, 2, 3)`` (float64), torchvision's
    ``_get_inverse_affine_matrix`` for ``v2.functional.affine(img, angle, translate, scale,
    shear, center=center)`` on ``height x width`` images, one row of parameters per sample:
    ``angle`` (B,) degrees, ``translate`` (B, 2) pixels (x, y), ``scale`` (B,), ``shear``
    (B, 2) degrees (x, y). The explicit per-sample transform: :func:`matrix_grid` turns it into
    a sampling grid, and boxes or keypoints can be moved by the same matrices.

    Example:
        >>> m = affine_matrix(torch.tensor([30.0]), torch.zeros(1, 2), torch.ones(1),
        ...                   torch.zeros(1, 2), 32, 32)
        >>> m.shape
        torch.Size([1, 2, 3])
    """
    deg = math.pi / 180.0  # math.radians
    rot = angle.to(torch.float64) * deg
    sx = shear[:, 0].to(torch.float64) * deg
    sy = shear[:, 1].to(torch.float64) * deg
    if center is None:
        cx, cy = 0.0, 0.0
    else:
        cx = center[0] - width * 0.5
        cy = center[1] - height * 0.5
    s = scale.to(torch.float64)
    cos_sy = torch.cos(sy)
    tan_sx = torch.tan(sx)
    rot_minus_sy = rot - sy
    cx_plus_tx = translate[:, 0].to(torch.float64) + cx
    cy_plus_ty = translate[:, 1].to(torch.float64) + cy
    # rotate-scale-shear without the scale; its determinant is 1, so the inverse is cheap
    a = torch.cos(rot_minus_sy) / cos_sy
    b = -(a * tan_sx + torch.sin(rot))
    c = torch.sin(rot_minus_sy) / cos_sy
    d = torch.cos(rot) - c * tan_sx
    m0 = d / s
    m1 = -b / s
    m3 = -c / s
    m4 = a / s
    # C * RSS^-1 * C^-1 * T^-1, in torchvision's order of operations
    m2 = cx - m0 * cx_plus_tx - m1 * cy_plus_ty
    m5 = cy - m3 * cx_plus_tx - m4 * cy_plus_ty
    return torch.stack((m0, m1, m2, m3, m4, m5), dim=1).view(-1, 2, 3)


def _warp_grid(
    kind: str, params: Tensor, h: int, w: int, center: Optional[List[float]], dtype: torch.dtype
) -> Tensor:
    """The per-sample sampling grid of a ``kind`` of warp from its ``(B, ...)`` parameters.
    (A string switch rather than a grid-builder argument: TorchScript takes no functions.)"""
    if kind == "rotation":
        return rotation_grid(params, h, w, center, dtype)
    if kind == "matrix":
        return matrix_grid(params, h, w, dtype)
    return perspective_grid(params, h, w, dtype)


def _warp(
    x: Tensor,
    params: Tensor,
    kind: str,
    center: Optional[List[float]],
    interpolation: str,
    fill: Optional[List[float]],
    as_float: bool = False,
) -> Tensor:
    """Warp each sample of ``x`` by its own parameters: one ``grid_sample`` for the batch, or on
    CPU (eager/TorchScript) per chunk of samples (``_chunk_size``), building each chunk's grid
    from its slice of ``params`` so the whole batch's grid never exists at once.

    ``as_float`` (uint8 ``x``): return float32 holding exactly the values of the uint8 result,
    without the casts to uint8 and back that a following Normalize would make."""
    n, h, w = x.shape[0], x.shape[-2], x.shape[-1]
    out_dtype = torch.float32 if as_float and x.dtype == torch.uint8 else x.dtype
    if n == 0:
        return x.to(out_dtype, copy=True)
    ct = _compute_dtype(x)
    # (no Python int from the batch size unless chunking: see _chunked)
    if not _chunked(x) or _chunk_size(x, h, w) >= n:
        return _grid_sample_fill(x, _warp_grid(kind, params, h, w, center, ct), interpolation,
                                 fill, as_float)
    k = _chunk_size(x, h, w)
    out = torch.empty((n, x.shape[1], h, w), dtype=out_dtype, device=x.device)
    for s in range(0, n, k):
        e = min(n, s + k)
        grid = _warp_grid(kind, params[s:e], h, w, center, ct)
        out[s:e].copy_(_grid_sample_fill(x[s:e], grid, interpolation, fill, as_float))
    return out


def affine(
    x: Tensor,
    matrix: Tensor,
    interpolation: str = "nearest",
    fill: Optional[List[float]] = None,
) -> Tensor:
    """Warp each image of ``x`` by its own inverse affine ``matrix`` (``(B, 2, 3)``, from
    :func:`affine_matrix`), with torchvision's grid and fill rule (``fill``: one value or one
    per channel, ``None`` = plain zero padding); one ``grid_sample`` call per CPU chunk.

    Example:
        >>> x = torch.randint(0, 256, (2, 3, 32, 32), dtype=torch.uint8)
        >>> m = affine_matrix(torch.tensor([0.0, 30.0]), torch.tensor([[2.0, 0.0], [0.0, -3.0]]),
        ...                   torch.tensor([1.0, 0.8]), torch.zeros(2, 2), 32, 32)
        >>> affine(x, m, "bilinear", [0.0]).shape
        torch.Size([2, 3, 32, 32])
    """
    return _warp(x, matrix, "matrix", None, interpolation, fill)


def _cross(a: Tensor, b: Tensor, c: Tensor) -> Tensor:
    """z of (b - a) x (c - a) for (B, 2) points: 0 when the three are collinear (exact for
    integer coordinates)."""
    return (b[:, 0] - a[:, 0]) * (c[:, 1] - a[:, 1]) - (b[:, 1] - a[:, 1]) * (c[:, 0] - a[:, 0])


def perspective_coefficients(endpoints: Tensor, height: int, width: int) -> Tensor:
    """Per-sample perspective coefficients ``(B, 8)`` (float32, as torchvision rounds them)
    mapping the output corners ``endpoints`` ``(B, 4, 2)`` (x, y; top-left, top-right,
    bottom-right, bottom-left) back to the image corners, torchvision's
    ``_get_perspective_coeffs(startpoints, endpoints)`` with startpoints the corners of a
    ``height x width`` image. The 8x8 systems are solved batched in float64 with torchvision's
    solver on the CPU (``torch.linalg.lstsq``, driver "gels"); under ``torch.compile``/
    ``torch.export`` (whose graphs refuse lstsq's data-dependent shapes) and on other devices
    (where lstsq reads its error flags on the host, a sync) ``torch.linalg.solve_ex``, which
    may differ in the 1e-15 residues of coefficients that should be 0. A non-finite solution
    gives the identity coefficients, as do corners of which three are collinear (torchvision
    raises).

    Example:
        >>> ends = torch.tensor([[[1, 0], [30, 2], [31, 31], [0, 29]]])
        >>> perspective_coefficients(ends, 32, 32).shape
        torch.Size([1, 8])
    """
    ones = torch.ones((endpoints.shape[0], 1), dtype=torch.int64, device=endpoints.device)
    return perspective_coefficients_each(endpoints, torch.cat((ones * height, ones * width), 1))


def perspective_coefficients_each(endpoints: Tensor, sizes: Tensor) -> Tensor:
    """:func:`perspective_coefficients` with each image's own corners: ``endpoints``
    ``(B, 4, 2)`` (x, y), ``sizes`` ``(B, 2)`` int64 ``(h, w)``."""
    dev = endpoints.device
    # constants built on the device (torch.tensor(list, device=...) is a host->device copy)
    identity = perspective_identity(torch.float64, dev)
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
        # lstsq's outputs have data-dependent shapes, which compile/export refuse, and off the
        # CPU lstsq (and linalg.solve) read the solver's error flags on the host: LU without
        # the check (a failed solve gives non-finite values, replaced by the identity below)
        sol = torch.linalg.solve_ex(a, b)[0]
    else:
        # torchvision's solver (QR least squares), not LU: coefficients that should be 0 come
        # out as different 1e-15 residues, which move nearest samples on a pixel boundary
        sol = torch.linalg.lstsq(a, b.unsqueeze(2), driver="gels").solution.squeeze(2)
    ok = torch.isfinite(sol).all(dim=1, keepdim=True) & ~degenerate.view(-1, 1)
    return torch.where(ok, sol, identity).to(torch.float32)


def perspective_identity(dtype: torch.dtype, device: torch.device) -> Tensor:
    """(8,) the identity perspective coefficients ``[1, 0, 0, 0, 1, 0, 0, 0]``, made by device
    ops (the first 8 entries of a flattened 3x3 identity), not copied from the host."""
    return torch.eye(3, dtype=dtype, device=device).view(9)[:8]


def perspective_grid(
    coefficients: Tensor, height: int, width: int, dtype: torch.dtype = torch.float32
) -> Tensor:
    """The ``(B, height, width, 2)`` ``grid_sample`` grid of per-sample perspective
    ``coefficients`` ``(B, 8)``, torchvision's ``_perspective_grid``: output pixel centre
    (x, y) samples ``((c0 x + c1 y + c2), (c3 x + c4 y + c5)) / (c6 x + c7 y + 1)``."""
    c = coefficients.to(dtype)
    n = c.shape[0]
    scale = small_tensor([0.5 * width, 0.5 * height], dtype, c.device)
    rescaled = c[:, :6].reshape(n, 2, 3).transpose(1, 2) / scale  # (B, 3, 2)
    xs = torch.linspace(0.5, width - 0.5, steps=width, dtype=dtype,
                        device=c.device).view(1, 1, 1, width)
    ys = torch.linspace(0.5, height - 0.5, steps=height, dtype=dtype,
                        device=c.device).view(1, 1, height, 1)
    # (x * c0 + y * c1) + c2: the order of torchvision's matmul. Nearest sampling on an
    # integer-cornered perspective lands many points exactly on pixel boundaries, where the
    # last bit decides the pixel
    num = (xs * rescaled[:, 0].reshape(n, 2, 1, 1) + ys * rescaled[:, 1].reshape(n, 2, 1, 1)
           ) + rescaled[:, 2].reshape(n, 2, 1, 1)
    den = (xs * c[:, 6].reshape(n, 1, 1, 1) + ys * c[:, 7].reshape(n, 1, 1, 1)) + 1.0
    grid = num / den - 1.0
    # Where the horizon of the perspective crosses the image (a crossed quadrilateral, drawn
    # at distortion_scale near 1 on even sides) den is 0: torchvision samples nan there. Such
    # pixels get the fill: a point far outside the image.
    grid = torch.where(torch.isfinite(grid), grid, torch.full_like(grid, -4.0))
    return grid.permute(0, 2, 3, 1)


def perspective(
    x: Tensor,
    coefficients: Tensor,
    interpolation: str = "bilinear",
    fill: Optional[List[float]] = None,
) -> Tensor:
    """Warp each image of ``x`` by its own perspective ``coefficients`` ``(B, 8)`` (from
    :func:`perspective_coefficients`), as ``v2.functional.perspective(img, None, None,
    interpolation, fill, coefficients=...)`` per sample.

    Example:
        >>> x = torch.rand(1, 3, 32, 32)
        >>> ends = torch.tensor([[[1, 0], [30, 2], [31, 31], [0, 29]]])
        >>> perspective(x, perspective_coefficients(ends, 32, 32), "bilinear", [0.0]).shape
        torch.Size([1, 3, 32, 32])
    """
    return _warp(x, coefficients, "perspective", None, interpolation, fill)


def rotate(
    x: Tensor,
    angle: Tensor,
    interpolation: str = "nearest",
    fill: Optional[List[float]] = None,
    center: Optional[List[float]] = None,
) -> Tensor:
    """Rotate each image of ``x`` by its own ``angle`` (degrees, ``(B,)``), counter-clockwise.

    Same geometry and fill rule as ``torchvision.transforms.v2.functional.rotate`` with
    ``expand=False``: ``center`` is ``(x, y)`` in pixel coordinates (default: the image centre),
    pixels from outside the image get ``fill`` (one value or one per channel; ``None`` = plain
    zero padding), ``interpolation`` is ``"nearest"`` or ``"bilinear"``. One ``grid_sample``
    call for the whole batch.

    Example:
        >>> x = torch.randint(0, 256, (4, 3, 32, 32), dtype=torch.uint8)
        >>> y = rotate(x, torch.tensor([0.0, 90.0, -15.0, 30.0]), "bilinear", [0.0])
    """
    return _warp(x, angle, "rotation", center, interpolation, fill)
