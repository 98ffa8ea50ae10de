"""Geometric kernels on each image's own extent of a ragged batch (the transforms' ``sizes``).

A ragged batch is one ``(N, C, H, W)`` canvas with image ``i`` in
``x[i, :, :sizes[i, 0], :sizes[i, 1]]`` (the rest is padding, never read); ``sizes`` is an
``(N, 2)`` int64 tensor ``(h, w)`` on ``x``'s device. Each kernel does to every image what its
fixed-size counterpart does to an image of that size, by one of two implementations:

- per image (:func:`eager_cpu`: CPU in eager mode): the fixed-size kernel on a view of the
  image's own pixels, which is exactly the fixed-size transform on that image, bit for bit,
  and touches only its pixels;
- batched (accelerators, ``torch.compile``, ``torch.export``, TorchScript): per-sample maps,
  gathers and filter matrices, no host sync and no Python loop over the batch. Warps sample
  through per-sample 3x3 maps in pixel-edge coordinates (pixel ``k`` spans ``[k, k + 1)``,
  ``edge`` matrices) with torchvision's fill rule at the image's own border.

:func:`edge_to_centred` turns edge matrices into
:func:`batchaug.functional.move_targets`' convention on the canvas.
"""
import math
from typing import Dict, List, Optional

import torch
import torch.nn.functional as F
from torch import Tensor

from ._resize import _bmm_ieee, _cubic, _resized_crop_per_sample, resize, resized_crop
from ._targets import _move_points_of, move_targets
from . import _utils
from ._utils import _compute_dtype, select_samples
from ._warp import (_fill_tensor, _grid_sample_fill, _to_input_dtype, affine_matrix,
                    perspective, perspective_identity)
from ._warp import perspective_coefficients as _coefficients_alone
from ._warp import perspective_coefficients_each as perspective_coefficients
# the fixed-size rotation's inverse affine, as ``batchaug.data.roi_crop`` builds it per photo
from ._warp import rotation_theta as rotation_matrix
from ._warp import rotation_theta


def eager_cpu(x: Tensor) -> bool:
    """Whether the per-image implementation runs: a CPU batch in eager mode (not compiling,
    not scripted). There one fixed-size kernel call per image on its own pixels beats the
    batched kernels, which sample the whole canvas (``benchmarks/bench_photos.py``)."""
    return (x.device.type == "cpu" and not torch.compiler.is_compiling()
            and not torch.jit.is_scripting())


def check_sizes(sizes: Tensor, x: Tensor, name: str) -> None:
    """Raise unless ``sizes`` is an ``(N, 2)`` int64 tensor on ``x``'s device. On CPU the
    values are checked too (within ``1..(H, W)``): free there, a device sync elsewhere."""
    if sizes.dtype != torch.int64 or sizes.dim() != 2 or sizes.shape[1] != 2:
        raise ValueError("{}: sizes must be an (N, 2) int64 tensor of each image's (height, "
                         "width), got {} of shape {}".format(name, sizes.dtype,
                                                             list(sizes.shape)))
    if sizes.shape[0] != x.shape[0]:
        raise ValueError("{}: sizes has {} rows for a batch of {} images".format(
            name, sizes.shape[0], x.shape[0]))
    if sizes.device != x.device:
        raise ValueError("{}: sizes must be on the images' device {}, got {}".format(
            name, x.device, sizes.device))
    if eager_cpu(sizes) and sizes.numel() > 0:
        if bool((sizes < 1).any()) or bool((sizes[:, 0] > x.shape[2]).any()) \
                or bool((sizes[:, 1] > x.shape[3]).any()):
            raise ValueError("{}: every size must be within 1..(H, W) = ({}, {})".format(
                name, x.shape[2], x.shape[3]))


def edge_to_centred(edge: Tensor, in_size: List[int], out_size: List[int]) -> Tensor:
    """``(N, 3, 3)`` output -> input maps in pixel-edge coordinates (from the top-left corner)
    as ``move_targets``' matrices on ``in_size`` / ``out_size`` canvases (centred
    coordinates): ``shift(-in/2) @ edge @ shift(out/2)``."""
    m = edge.to(torch.float64)
    ih, iw = in_size[0] * 0.5, in_size[1] * 0.5
    oh, ow = out_size[0] * 0.5, out_size[1] * 0.5
    a = m[:, 0]
    b = m[:, 1]
    c = m[:, 2]
    # rows of edge @ shift(out/2): the constant column gains ow * col0 + oh * col1
    r0 = torch.stack((a[:, 0], a[:, 1], a[:, 2] + a[:, 0] * ow + a[:, 1] * oh), dim=1)
    r1 = torch.stack((b[:, 0], b[:, 1], b[:, 2] + b[:, 0] * ow + b[:, 1] * oh), dim=1)
    r2 = torch.stack((c[:, 0], c[:, 1], c[:, 2] + c[:, 0] * ow + c[:, 1] * oh), dim=1)
    # shift(-in/2) @ rows: the first two rows lose in/2 times the last row
    return torch.stack((r0 - iw * r2, r1 - ih * r2, r2), dim=1)


def flip_edge(flipped: Tensor, sizes: Tensor, horizontal: bool, keypoints: bool = False
              ) -> Tensor:
    """``(N, 3, 3)`` edge maps of flips within each extent: ``x -> w - x`` (boxes) or
    ``x -> w - 1 - x`` (keypoints, torchvision's rule), the identity where not ``flipped``."""
    length = sizes[:, 1] if horizontal else sizes[:, 0]
    shift = length.to(torch.float64) - (1.0 if keypoints else 0.0)
    z = torch.zeros_like(shift)
    one = z + 1.0
    s = torch.where(flipped, -one, one)
    t = torch.where(flipped, shift, z)
    if horizontal:
        rows = (s, z, t, z, one, z)
    else:
        rows = (one, z, z, z, s, t)
    return torch.stack(rows + (z, z, one), dim=1).view(-1, 3, 3)


def flip(x: Tensor, sizes: Tensor, flipped: Tensor, horizontal: bool) -> Tensor:
    """Flip the images chosen by ``flipped`` ((N,) bool) within their own extent."""
    dim = -1 if horizontal else -2
    if eager_cpu(x):
        out = x.clone()
        flags: List[bool] = flipped.tolist()
        sl: List[List[int]] = sizes.tolist()  # CPU: no device sync
        for i in range(len(flags)):
            if flags[i]:
                h, w = sl[i][0], sl[i][1]
                out[i, :, :h, :w] = x[i, :, :h, :w].flip(dim)
        return out
    return flip_where(x, sizes, flipped, dim)


def affine_centred(angle: Tensor, translate: Tensor, scale: Tensor, shear: Tensor,
                   rotation: bool) -> Tensor:
    """torchvision's inverse affine ``(N, 2, 3)`` about the image centre (``rotation``:
    ``rotate``'s, -angle after a remainder by 360; else ``affine``'s)."""
    if rotation:
        zeros = torch.zeros((angle.shape[0], 2), dtype=torch.float64, device=angle.device)
        return affine_matrix(-torch.remainder(angle.to(torch.float64), 360.0), zeros,
                             torch.ones_like(zeros[:, 0]), zeros, 0, 0, None)
    return affine_matrix(angle, translate, scale, shear, 0, 0, None)


def affine_edge(centred: Tensor, sizes: Tensor, center: Optional[List[float]]) -> Tensor:
    """``(N, 3, 3)`` edge maps of :func:`affine_centred`'s matrices on each extent (about the
    pixel ``center`` (x, y) where given, as torchvision)."""
    m = centred
    if center is not None:
        m = recenter(m, center, sizes)
    return centered_to_edge(m, sizes)


def _one_affine(angle: Tensor, translate: Tensor, scale: Tensor, shear: Tensor, rotation: bool,
                i: int, h: int, w: int, center: Optional[List[float]]) -> Tensor:
    """Image ``i``'s inverse affine ``(1, 2, 3)`` as the fixed-size module builds it for an
    ``h x w`` image."""
    if rotation:
        return rotation_theta(angle[i:i + 1], h, w, center)
    return affine_matrix(angle[i:i + 1], translate[i:i + 1], scale[i:i + 1], shear[i:i + 1],
                         h, w, center)


def affine(x: Tensor, sizes: Tensor, angle: Tensor, translate: Tensor, scale: Tensor,
           shear: Tensor, rotation: bool, center: Optional[List[float]], interpolation: str,
           fill: List[float]) -> Tensor:
    """Rotate (``rotation``) or affine-warp each image within its own extent by its
    parameters (those of ``RandomRotation`` / ``RandomAffine``'s ``make_params``)."""
    if eager_cpu(x):
        return _affine_each(x, sizes, angle, translate, scale, shear, rotation, center,
                            interpolation, fill)
    edge = affine_edge(affine_centred(angle, translate, scale, shear, rotation), sizes, center)
    return warp(x, sizes, edge, interpolation, fill)


@torch.jit.unused  # eager CPU only (eager_cpu); the thread loop does not script
def _affine_each(x: Tensor, sizes: Tensor, angle: Tensor, translate: Tensor, scale: Tensor,
                 shear: Tensor, rotation: bool, center: Optional[List[float]],
                 interpolation: str, fill: List[float]) -> Tensor:
    """:func:`affine` image by image, on the loader's threads (``_utils.for_each``)."""
    out = torch.empty_like(x)
    sl: List[List[int]] = sizes.tolist()  # CPU: no device sync

    def one(i: int) -> None:
        h, w = sl[i][0], sl[i][1]
        mat = _one_affine(angle, translate, scale, shear, rotation, i, h, w, center)
        out[i:i + 1, :, :h, :w] = warp_window(x[i:i + 1, :, :h, :w], mat, 0, 0, h, w,
                                              interpolation, fill)

    _utils.for_each(one, len(sl))
    return out


def perspective_identity_rows(coefficients: Tensor) -> Tensor:
    """(N,) bool: the samples whose coefficients are the identity (returned exactly)."""
    identity = perspective_identity(coefficients.dtype, coefficients.device)  # no host copy
    return (coefficients == identity).all(dim=1)


def perspective_warp(x: Tensor, sizes: Tensor, mask: Tensor, endpoints: Tensor,
                     interpolation: str, fill: List[float]) -> Tensor:
    """Each image chosen by ``mask`` warped within its own extent by the perspective moving
    its corners to ``endpoints`` ``(N, 4, 2)`` (torchvision's solver per image); identity
    coefficients leave the image exactly as it is."""
    if eager_cpu(x):
        out = torch.empty_like(x)
        flags: List[bool] = mask.tolist()
        sl: List[List[int]] = sizes.tolist()  # CPU: no device sync
        for i in range(len(sl)):
            h, w = sl[i][0], sl[i][1]
            img = x[i:i + 1, :, :h, :w]
            if flags[i]:
                coef = _coefficients_alone(endpoints[i:i + 1], h, w)
                if not bool(perspective_identity_rows(coef).all()):
                    img = perspective(img, coef, interpolation, fill)
            out[i:i + 1, :, :h, :w] = img
        return out
    coefficients = perspective_coefficients(endpoints, sizes)
    moves = mask & ~perspective_identity_rows(coefficients)
    warped = warp(x, sizes, perspective_to_edge(coefficients), interpolation, fill)
    return select_samples(moves, warped, x)


def resized_boxes(x: Tensor, top: Tensor, left: Tensor, height: Tensor, width: Tensor,
                  size: List[int], interpolation: str, antialias: bool) -> Tensor:
    """:func:`resized_crop` of boxes inside each image's own extent, each image equal to
    torchvision's resize of it alone whatever ``antialias``: on an eager CPU batch, bilinear
    without antialias (a batched ``grid_sample`` in :func:`resized_crop`, within 1 uint8
    level of torchvision) runs box by box as the antialiased one does. Dense batches keep
    :func:`resized_crop` as it is."""
    if eager_cpu(x) and interpolation == "bilinear" and not antialias and x.shape[0] > 0:
        return _resized_crop_per_sample(x, top, left, height, width, size[0], size[1],
                                        interpolation, antialias)
    return resized_crop(x, top, left, height, width, size, interpolation, antialias)


def resized_window(x: Tensor, sizes: Tensor, resized: Tensor, top: Tensor, left: Tensor,
                   height: int, width: int, interpolation: str, antialias: bool,
                   fill: List[float], padding_mode: str = "constant") -> Tensor:
    """Each image's extent resized to ``resized`` ``(N, 2)`` (``Resize(int)``: sizes known
    per image only), then the ``height x width`` window at ``(top, left)`` of it (padded by
    ``padding_mode`` where it leaves it): a dense batch. Per image on an eager CPU batch
    (the fixed-size resize of its own pixels, then the window), else one batched call of
    :func:`resize_window` (per-sample filter matrices, constant padding only)."""
    if eager_cpu(x):
        return resized_window_loop(x, sizes, resized, top, left, height, width, interpolation,
                                   antialias, fill, padding_mode)
    if padding_mode != "constant":
        raise ValueError("Resize(int) then RandomCrop on a ragged batch runs batched (an "
                         "accelerator, compile or export) with padding_mode='constant' only, "
                         "got {!r}".format(padding_mode))
    return resize_window(x, sizes, resized, top, left, height, width, interpolation,
                         antialias, fill)


@torch.jit.unused  # eager CPU only (eager_cpu); the thread loop does not script
def resized_window_loop(x: Tensor, sizes: Tensor, resized: Tensor, top: Tensor, left: Tensor,
                        height: int, width: int, interpolation: str, antialias: bool,
                        fill: List[float], padding_mode: str) -> Tensor:
    """Per image: resize its extent to ``resized`` then take the window (eager CPU)."""
    out = torch.empty((x.shape[0], x.shape[1], height, width), dtype=x.dtype, device=x.device)
    sl: List[List[int]] = sizes.tolist()  # CPU: no device sync
    rl: List[List[int]] = resized.tolist()

    def one(i: int) -> None:
        h, w = sl[i][0], sl[i][1]
        img = resize(x[i:i + 1, :, :h, :w], rl[i], interpolation, antialias)
        out[i:i + 1] = window(img, resized[i:i + 1], top[i:i + 1], left[i:i + 1], height,
                              width, fill, padding_mode)

    _utils.for_each(one, len(sl))
    return out


@torch.jit.unused  # eager CPU only (a pair of steps on a ragged batch, never scripted)
def affine_resized_crop(x: Tensor, sizes: Tensor, angle: Tensor, translate: Tensor,
                        scale: Tensor, shear: Tensor, rotation: bool,
                        center: Optional[List[float]], interpolation: str, fill: List[float],
                        top: Tensor, left: Tensor, height: Tensor, width: Tensor,
                        size: List[int], crop_interpolation: str, antialias: bool) -> Tensor:
    """:func:`affine` then the resized crop of each box ``(top, left, height, width)`` to
    ``size``, per image (eager CPU), warping only the box: each output pixel of a warp
    depends on its own position only, so the box of the warped image is the warp computed on
    the box; the same pixels (tested) for a fraction of the warp's work."""
    n = x.shape[0]
    out = torch.empty((n, x.shape[1], size[0], size[1]), dtype=x.dtype, device=x.device)
    sl: List[List[int]] = sizes.tolist()  # CPU: no device sync
    boxes: List[List[int]] = torch.stack((top, left, height, width), dim=1).tolist()
    zero = torch.zeros(1, dtype=torch.int64)

    def one(i: int) -> None:
        h, w = sl[i][0], sl[i][1]
        b_t, b_l, b_h, b_w = boxes[i][0], boxes[i][1], boxes[i][2], boxes[i][3]
        mat = _one_affine(angle, translate, scale, shear, rotation, i, h, w, center)
        box = warp_window(x[i:i + 1, :, :h, :w], mat, b_t, b_l, b_h, b_w, interpolation,
                          fill)
        out[i:i + 1] = resized_crop(box, zero, zero, zero + b_h, zero + b_w, size,
                                    crop_interpolation, antialias)

    _utils.for_each(one, n)  # on the loader's threads (``_utils.image_threads``)
    return out


def move_targets_sized(targets: Dict[str, Tensor], matrix: Tensor, in_sizes: Tensor,
                       out_sizes: Tensor, in_size: List[int], out_size: List[int],
                       masks: Optional[Tensor], keypoint_matrix: Optional[Tensor] = None,
                       axis_aligned: bool = False, own_frame: bool = False
                       ) -> Dict[str, Tensor]:
    """``move_targets`` on a ragged batch, ``masks`` already moved. ``own_frame``: ``matrix``
    (and ``keypoint_matrix``) are centred on each image's own extent, as the transform builds
    them for that image alone, and each image's boxes and keypoints are bit for bit those of
    the image alone (the same float64 operations, per-sample sizes in place of the batch's):
    on its own edges, rounding decides as alone. Else they are in ``move_targets``'
    convention on the ``in_size`` / ``out_size`` canvases (edge maps through
    :func:`edge_to_centred`). Each box is clamped to its own image first (``in_sizes``) and
    to its own output extent after (``out_sizes``); a keypoint is valid only inside its own
    output extent. From the corner, a map of one image is the same for any canvas size, so
    the canvases stand in for every image's size. Validity as ``move_targets`` (the box as
    given: finite and ordered)."""
    given: Dict[str, Tensor] = {}
    for key, value in targets.items():
        given[key] = value
    if own_frame:
        if masks is not None:
            given["masks"] = masks
        in_wh = in_sizes.flip(1).to(torch.float64).view(-1, 1, 2)  # (N, 1, 2) (w, h)
        out_wh = out_sizes.flip(1).to(torch.float64).view(-1, 1, 2)
        return _move_points_of(given, targets, matrix, in_wh, out_wh, keypoint_matrix,
                               axis_aligned)
    if "boxes" in targets:
        b = targets["boxes"]
        hw = in_sizes.flip(1).repeat(1, 2).unsqueeze(1).to(b.dtype)
        given["boxes"] = torch.minimum(b.clamp_min(0.0), hw)
    out = move_targets(given, matrix, in_size, out_size, 0, masks, keypoint_matrix,
                       axis_aligned)
    if "boxes" in targets:
        b = targets["boxes"]
        ohw = out_sizes.flip(1).repeat(1, 2).unsqueeze(1).to(b.dtype)
        moved = torch.minimum(out["boxes"], ohw)
        wh = moved[:, :, 2:] - moved[:, :, :2]
        ok = out["box_valid"] & (b.abs() < math.inf).all(dim=2) & (wh >= 1.0).all(dim=2)
        out["boxes"] = torch.where(ok.unsqueeze(2), moved, 0.0)
        out["box_valid"] = ok
    if "keypoints" in targets:
        k = out["keypoints"]
        limit = out_sizes.flip(1).unsqueeze(1).to(k.dtype)
        ok = out["keypoint_valid"] & (k < limit).all(dim=2)
        out["keypoints"] = torch.where(ok.unsqueeze(2), k, 0.0)
        out["keypoint_valid"] = ok
    return out


def without_sizes(targets: Dict[str, Tensor]) -> Dict[str, Tensor]:
    """``targets`` less ``"sizes"`` (the batch is dense again)."""
    out: Dict[str, Tensor] = {}
    for key, value in targets.items():
        if key != "sizes":
            out[key] = value
    return out


def sizes_of(images: Tensor, targets: Dict[str, Tensor]) -> Tensor:
    """``targets["sizes"]``, or for a dense batch (no ``"sizes"``) every image's size."""
    if "sizes" in targets:
        return targets["sizes"]
    n = images.shape[0]
    full = torch.ones((n, 2), dtype=torch.int64, device=images.device)
    return torch.stack((full[:, 0] * images.shape[2], full[:, 1] * images.shape[3]), dim=1)


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


def center_offset(length: Tensor, crop: int) -> Tensor:
    """Where torchvision's ``center_crop`` starts a ``crop`` window on an axis of ``length``
    (negative: the image is padded on that side)."""
    inner = torch.round((length - crop).to(torch.float64) / 2.0).to(torch.int64)
    return torch.where(length >= crop, inner, -torch.div(crop - length, 2, rounding_mode="floor"))


__all__ = ["eager_cpu", "check_sizes", "edge_to_centred", "flip_edge", "flip",
           "affine_centred", "affine_edge", "affine", "perspective_identity_rows",
           "perspective_warp", "resized_boxes", "resized_window", "resized_window_loop",
           "affine_resized_crop", "move_targets_sized", "without_sizes", "sizes_of",
           "extent_mask", "flip_where", "rotation_matrix", "source_rect", "warp_window",
           "centered_to_edge", "recenter", "perspective_to_edge", "perspective_coefficients",
           "warp", "axis_index", "window", "resized_sizes", "resize_window",
           "center_offset"]
