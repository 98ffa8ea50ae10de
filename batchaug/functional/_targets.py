"""Target kernels: move masks, boxes and keypoints by the same per-sample geometry as images.

The public ones are exported by :mod:`batchaug.functional` (with argument type checks).

The geometry of one sample is a 3x3 ``matrix`` from OUTPUT to INPUT coordinates, the
convention of ``matrix_grid`` (and torchvision's ``_get_inverse_affine_matrix``): a point is
measured from the image centre, i.e. ``(x - w / 2, y - h / 2)`` where ``x, y`` are torchvision's
box coordinates (pixel ``j`` spans ``[j, j + 1]``, a whole ``h x w`` image is the box
``[0, 0, w, h]``). So an affine image kernel's ``(B, 2, 3)`` matrix is the top two rows of the
target matrix, unchanged, and a rotation with ``expand`` only changes the output size. The last
row is ``(0, 0, 1)`` for affine maps and the perspective row otherwise. Composition: a
transform A followed by B has the matrix ``compose_matrices(m_a, m_b) = m_a @ m_b``.

Boxes and keypoints are moved by the inverse matrix (input -> output), computed in float64 by
the adjugate (no ``torch.linalg`` call: it scripts, compiles and exports, and a singular matrix
gives non-finite points, hence invalid targets, instead of an error).

Masks are moved by the same per-sample geometry as their images: every mask kernel samples
like an image kernel with nearest interpolation (``grid_sample`` on the same grid, or the
same ``F.interpolate`` rule), so a mask turned into an image and warped by the image kernel
with nearest interpolation equals the warped mask (co-registration). Every label is carried
exactly, by one rule (:func:`masks_as_image` / :func:`image_as_masks`, which every geometric
transform uses, dense or ragged): where the kernel's dtype could not hold the labels, the
kernel moves each pixel's source index and the labels are gathered from there in the mask's
own dtype; uint8 masks take the image kernels' uint8 path. ``fill`` (the label outside the
image) must fit the masks' dtype.

Bad values are not errors here (checking them would need a host sync): a box whose input is
not finite or has ``x2 < x1`` / ``y2 < y1``, or a non-finite keypoint, comes out invalid, and
every invalid box or keypoint is written as zeros, so nothing non-finite leaves a kernel.
"""

from __future__ import annotations

import math
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from ._crop import hflip_where, vflip_where
from ._resize import resized_crop
from ._utils import _chunk_size, _chunked, small_tensor
from ._warp import _grid_sample_fill, _warp_grid, matrix_grid, rotation_theta


# ---------------------------------------------------------------------------------------------
# Matrices (output -> input, centred coordinates): one builder per kind of geometric transform
# ---------------------------------------------------------------------------------------------

def _stack3x3(m00: Tensor, m01: Tensor, m02: Tensor, m10: Tensor, m11: Tensor, m12: Tensor,
              m20: Tensor, m21: Tensor, m22: Tensor) -> Tensor:
    return torch.stack((m00, m01, m02, m10, m11, m12, m20, m21, m22), dim=1).view(-1, 3, 3)


def identity_matrix(n_like: Tensor) -> Tensor:
    """``(N, 3, 3)`` float64 identities, one per sample of ``n_like`` (any ``(N, ...)`` tensor)."""
    z = torch.zeros(n_like.shape[0], dtype=torch.float64, device=n_like.device)
    o = z + 1.0
    return _stack3x3(o, z, z, z, o, z, z, z, o)


def affine_to_matrix(theta: Tensor) -> Tensor:
    """The ``(N, 3, 3)`` target matrix of an image kernel's inverse affine ``theta``
    ``(N, 2, 3)`` (from ``affine_matrix``): its rows, plus ``(0, 0, 1)``, in float64.

    Example:
        >>> affine_to_matrix(torch.tensor([[[1.0, 0.0, 2.0], [0.0, 1.0, -3.0]]]))
        tensor([[[ 1.,  0.,  2.],
                 [ 0.,  1., -3.],
                 [ 0.,  0.,  1.]]], dtype=torch.float64)
    """
    # the last row by arithmetic, not torch.tensor (a host -> device copy per call)
    t = theta.to(torch.float64)
    z = torch.zeros_like(t[:, 0, 0])
    return _stack3x3(t[:, 0, 0], t[:, 0, 1], t[:, 0, 2], t[:, 1, 0], t[:, 1, 1], t[:, 1, 2],
                     z, z, z + 1.0)


def rotation_matrix(angle: Tensor, height: int, width: int,
                    center: Optional[List[float]] = None) -> Tensor:
    """``(N, 3, 3)`` matrices of ``rotate(x, angle, center=center)`` (degrees, counter-clockwise),
    the theta ``rotation_grid`` builds, term for term. With ``expand`` the matrix is the same
    (coordinates are centred); only the output size differs.

    Example:
        >>> rotation_matrix(torch.tensor([90.0]), 8, 8).round().abs()
        tensor([[[0., 1., 0.],
                 [1., 0., 0.],
                 [0., 0., 1.]]], dtype=torch.float64)
    """
    t = rotation_theta(angle, height, width, center)
    z = torch.zeros_like(t[:, 0, 0])
    return _stack3x3(t[:, 0, 0], t[:, 0, 1], t[:, 0, 2], t[:, 1, 0], t[:, 1, 1], t[:, 1, 2],
                     z, z, z + 1.0)


def flip_matrix(horizontal: Tensor, vertical: Tensor, keypoints: bool = False) -> Tensor:
    """``(N, 3, 3)`` matrices flipping the samples where the ``(N,)`` bool ``horizontal`` /
    ``vertical`` are true. torchvision flips boxes (and images) as ``x -> w - x`` but
    keypoints as ``x -> w - 1 - x``; ``keypoints=True`` gives the keypoints' matrix.

    Example:
        >>> flip_matrix(torch.tensor([True]), torch.tensor([False]))
        tensor([[[-1.,  0.,  0.],
                 [ 0.,  1.,  0.],
                 [ 0.,  0.,  1.]]], dtype=torch.float64)
    """
    one = torch.ones(horizontal.shape[0], dtype=torch.float64, device=horizontal.device)
    z = torch.zeros_like(one)
    sx = torch.where(horizontal, -one, one)
    sy = torch.where(vertical, -one, one)
    shift = -1.0 if keypoints else 0.0
    tx = torch.where(horizontal, z + shift, z)
    ty = torch.where(vertical, z + shift, z)
    return _stack3x3(sx, z, tx, z, sy, ty, z, z, one)


def resized_crop_matrix(top: Tensor, left: Tensor, height: Tensor, width: Tensor,
                        in_size: List[int], out_size: List[int]) -> Tensor:
    """``(N, 3, 3)`` matrices of cropping the box ``(top, left, height, width)`` (``(N,)``
    tensors) of an ``in_size`` image and resizing it to ``out_size``. Special cases: a crop
    (``height, width = out_size``), a pad (negative ``top``/``left``, e.g. ``-pad_top``), a
    centre crop, a resize (``top = left = 0``, ``height, width = in_size``).

    Example:
        >>> one = torch.ones(1)
        >>> resized_crop_matrix(0 * one, 0 * one, 16 * one, 16 * one, [32, 32], [8, 8])
        tensor([[[ 2.,  0., -8.],
                 [ 0.,  2., -8.],
                 [ 0.,  0.,  1.]]], dtype=torch.float64)
    """
    h, w = in_size[0], in_size[1]
    oh, ow = out_size[0], out_size[1]
    sx = width.to(torch.float64) / float(ow)
    sy = height.to(torch.float64) / float(oh)
    tx = left.to(torch.float64) + width.to(torch.float64) * 0.5 - w * 0.5
    ty = top.to(torch.float64) + height.to(torch.float64) * 0.5 - h * 0.5
    z = torch.zeros_like(sx)
    return _stack3x3(sx, z, tx, z, sy, ty, z, z, z + 1.0)


def resized_crop_matrix_each(top: Tensor, left: Tensor, height: Tensor, width: Tensor,
                             in_sizes: Tensor, out_sizes: Tensor) -> Tensor:
    """:func:`resized_crop_matrix` with per-sample ``(N, 2)`` ``(h, w)`` ``in_sizes`` and
    ``out_sizes`` (centred on each sample's own image, for a ragged batch's ``own_frame``): each
    row bit for bit ``resized_crop_matrix`` of that sample alone."""
    # the same float64 operations, per-sample sizes in place of the batch's
    box = torch.stack((left, top, width, height), dim=1).to(torch.float64)
    size_in = in_sizes.flip(1).to(torch.float64)  # (w, h)
    scale = box[:, 2:] / out_sizes.flip(1).to(torch.float64)
    shift = box[:, :2] + box[:, 2:] * 0.5 - size_in * 0.5
    z = torch.zeros_like(scale[:, 0])
    return _stack3x3(scale[:, 0], z, shift[:, 0], z, scale[:, 1], shift[:, 1], z, z, z + 1.0)


def perspective_to_matrix(coefficients: Tensor, height: int, width: int) -> Tensor:
    """``(N, 3, 3)`` matrices of the perspective ``coefficients`` ``(N, 8)`` (from
    ``perspective_coefficients``, which map output to input pixel coordinates measured from
    the top-left corner) in centred coordinates.

    Example:
        >>> shift = torch.tensor([[1.0, 0.0, 2.0, 0.0, 1.0, 0.0, 0.0, 0.0]])  # x_in = x_out + 2
        >>> perspective_to_matrix(shift, 8, 8)
        tensor([[[1., 0., 2.],
                 [0., 1., 0.],
                 [0., 0., 1.]]], dtype=torch.float64)
    """
    c = coefficients.to(torch.float64)
    return _perspective_matrix(c, torch.full_like(c[:, 0], width * 0.5),
                               torch.full_like(c[:, 0], height * 0.5))


def perspective_to_matrix_each(coefficients: Tensor, sizes: Tensor) -> Tensor:
    """:func:`perspective_to_matrix` with per-sample ``(N, 2)`` ``(h, w)`` ``sizes`` (centred
    on each sample's own image, for a ragged batch's ``own_frame``): each row bit for bit that
    sample's alone."""
    half = sizes.to(torch.float64) * 0.5
    return _perspective_matrix(coefficients.to(torch.float64), half[:, 1], half[:, 0])


def _perspective_matrix(c: Tensor, hw: Tensor, hh: Tensor) -> Tensor:
    one = torch.ones_like(c[:, 0])
    # to_centre @ p @ to_corner written out (no constant matrices: torch.tensor would be a
    # host -> device copy per call): to_corner moves the column of constants,
    # to_centre subtracts the centre times the last row from the first two
    q2 = c[:, 0] * hw + c[:, 1] * hh + c[:, 2]
    q5 = c[:, 3] * hw + c[:, 4] * hh + c[:, 5]
    q8 = c[:, 6] * hw + c[:, 7] * hh + one
    return _stack3x3(c[:, 0] - hw * c[:, 6], c[:, 1] - hw * c[:, 7], q2 - hw * q8,
                     c[:, 3] - hh * c[:, 6], c[:, 4] - hh * c[:, 7], q5 - hh * q8,
                     c[:, 6], c[:, 7], q8)


def compose_matrices(first: Tensor, second: Tensor) -> Tensor:
    """The ``(N, 3, 3)`` float64 matrix of ``first``'s transform followed by ``second``'s
    (both output -> input, so the product is ``first @ second``).

    Example:
        >>> flip = flip_matrix(torch.tensor([True]), torch.tensor([False]))
        >>> torch.equal(compose_matrices(flip, flip), torch.eye(3, dtype=torch.float64)[None])
        True
    """
    return torch.bmm(first.to(torch.float64), second.to(torch.float64))


def _inverse3(m: Tensor) -> Tensor:
    """Batched 3x3 inverse (float64) by the adjugate; singular -> non-finite entries."""
    a, b, c = m[:, 0, 0], m[:, 0, 1], m[:, 0, 2]
    d, e, f = m[:, 1, 0], m[:, 1, 1], m[:, 1, 2]
    g, h, i = m[:, 2, 0], m[:, 2, 1], m[:, 2, 2]
    c00 = e * i - f * h
    c01 = f * g - d * i
    c02 = d * h - e * g
    det = a * c00 + b * c01 + c * c02
    adj = _stack3x3(c00, c * h - b * i, b * f - c * e,
                    c01, a * i - c * g, c * d - a * f,
                    c02, b * g - a * h, a * e - b * d)
    return adj / det.view(-1, 1, 1)


def _move_points(points: Tensor, matrix: Tensor, in_wh: Tensor, out_wh: Tensor) -> Tensor:
    """``(N, P, 2)`` points (pixel coordinates from the top-left corner) of images of sizes
    ``in_wh`` (``(1 or N, 1, 2)`` float64 ``(w, h)``) moved by the inverse of the output -> input
    ``matrix`` (centred on each image) onto images of sizes ``out_wh``; float64."""
    fwd = _inverse3(matrix.to(torch.float64))
    n = fwd.shape[0]
    centred = points.to(torch.float64) - in_wh * 0.5
    x = centred[:, :, 0]
    y = centred[:, :, 1]
    r0 = fwd[:, 0].reshape(n, 3, 1)
    r1 = fwd[:, 1].reshape(n, 3, 1)
    r2 = fwd[:, 2].reshape(n, 3, 1)
    xo = r0[:, 0] * x + r0[:, 1] * y + r0[:, 2]
    yo = r1[:, 0] * x + r1[:, 1] * y + r1[:, 2]
    zo = r2[:, 0] * x + r2[:, 1] * y + r2[:, 2]  # exactly 1 for affine maps
    return torch.stack((xo / zo, yo / zo), dim=2) + out_wh * 0.5


# ---------------------------------------------------------------------------------------------
# Boxes and keypoints
# ---------------------------------------------------------------------------------------------

def affine_boxes(boxes: Tensor, valid: Tensor, matrix: Tensor, in_size: List[int],
                 out_size: List[int]) -> Tuple[Tensor, Tensor]:
    """Move XYXY pixel boxes ``(N, M, 4)`` of ``in_size`` ``[h, w]`` images by the per-sample
    output -> input ``matrix`` ``(N, 3, 3)`` onto ``out_size`` images, as torchvision v2 moves
    ``BoundingBoxes``: the enclosing box of the four moved corners, clamped to the output
    (torchvision's default "soft" clamping). Input boxes are clamped to their image first
    (torchvision's flips and resizes assume boxes inside the image and do not clamp). A box
    comes out valid where it was valid, finite with ``x1 <= x2, y1 <= y2`` on input, and
    ``SanitizeBoundingBoxes(min_size=1, min_area=1)`` would keep it on output; invalid boxes are zeros. Points are moved in float64, then cast
    to the boxes' dtype (torchvision rounds its matrix to float32 first: results may differ in
    the last float32 bits).

    Example:
        >>> b = torch.tensor([[[2.0, 3.0, 10.0, 8.0]]])
        >>> m = flip_matrix(torch.tensor([True]), torch.tensor([False]))
        >>> affine_boxes(b, torch.ones(1, 1, dtype=torch.bool), m, [16, 32], [16, 32])[0]
        tensor([[[22.,  3., 30.,  8.]]])
    """
    out = move_targets({"boxes": boxes, "box_valid": valid}, matrix, in_size, out_size)
    return out["boxes"], out["box_valid"]


def _axis_scale_shift(matrix: Tensor) -> Tuple[Tensor, Tensor]:
    """``(N, 1, 2)`` scale and shift of the input -> output map of axis-aligned output -> input
    ``matrix`` (``[[sx, 0, tx], [0, sy, ty], [0, 0, 1]]`` with exact zeros and one, finite,
    ``sx, sy`` non-zero: flips, crops, pads, resizes): the entries ``_inverse3`` gives, by the
    same float64 operations (``sy / (sx * sy)``, ``-(tx * sy) / (sx * sy)``...; its other
    terms are products with exact zeros), so the moved points are bit for bit the generic
    ones (the zero terms only flip the sign of a zero, which adding the output's half size
    removes)."""
    m = matrix.to(torch.float64)
    s = torch.diagonal(m, 0, 1, 2)[:, :2]  # (sx, sy)
    t = m[:, :2, 2]  # (tx, ty)
    det = (s[:, 0] * s[:, 1]).view(-1, 1)
    swapped = s.flip([1])  # (sy, sx)
    n = m.shape[0]
    return (swapped / det).view(n, 1, 2), ((t * swapped).neg() / det).view(n, 1, 2)


def affine_keypoints(keypoints: Tensor, valid: Tensor, matrix: Tensor, in_size: List[int],
                     out_size: List[int]) -> Tuple[Tensor, Tensor]:
    """Move ``(N, K, 2)`` (x, y) keypoints of ``in_size`` images by the per-sample output ->
    input ``matrix`` onto ``out_size`` images, as torchvision v2 moves ``KeyPoints`` (not
    clamped; for flips pass ``flip_matrix(..., keypoints=True)``: torchvision flips keypoints
    by ``w - 1 - x``). A keypoint stays valid where it was valid and finite and
    ``SanitizeKeyPoints`` would keep it (``0 <= x < w``, ``0 <= y < h``); invalid ones are
    zeros.

    Example:
        >>> kp = torch.tensor([[[0.0, 5.0]]])
        >>> m = flip_matrix(torch.tensor([True]), torch.tensor([False]), keypoints=True)
        >>> affine_keypoints(kp, torch.ones(1, 1, dtype=torch.bool), m, [8, 8], [8, 8])[0]
        tensor([[[7., 5.]]])
    """
    out = move_targets({"keypoints": keypoints, "keypoint_valid": valid}, matrix, in_size,
                       out_size)
    return out["keypoints"], out["keypoint_valid"]


def flip_keypoint_indices(keypoints: Tensor, valid: Tensor, flipped: Tensor,
                          indices: Tensor) -> Tuple[Tensor, Tensor]:
    """Reorder the keypoints (and their valid flags) of the samples where the ``(N,)`` bool
    ``flipped`` is true by the ``(K,)`` permutation ``indices`` (slot ``k`` takes keypoint
    ``indices[k]``: after a left-right flip the left eye becomes the right eye). Checked by
    :func:`check_flip_indices`.

    Example:
        >>> kp = torch.tensor([[[1.0, 0.0], [2.0, 0.0]]])
        >>> flip_keypoint_indices(kp, torch.ones(1, 2, dtype=torch.bool), torch.tensor([True]),
        ...                       torch.tensor([1, 0]))[0]
        tensor([[[2., 0.],
                 [1., 0.]]])
    """
    kp = torch.where(flipped.view(-1, 1, 1), keypoints.index_select(1, indices), keypoints)
    ok = torch.where(flipped.view(-1, 1), valid.index_select(1, indices), valid)
    return kp, ok


def move_targets(targets: Dict[str, Tensor], matrix: Tensor, in_size: List[int],
                 out_size: List[int], mask_fill: int = 0, masks: Optional[Tensor] = None,
                 keypoint_matrix: Optional[Tensor] = None,
                 axis_aligned: bool = False) -> Dict[str, Tensor]:
    """The one generic path of every geometric transform: ``targets`` (checked by
    :func:`check_targets`) of ``in_size`` images moved by the per-sample output -> input
    ``matrix`` onto ``out_size`` images. Masks are resampled with nearest (``warp_masks``,
    outside pixels get ``mask_fill``) unless the transform passes ``masks`` already moved by an
    exact kernel; keypoints use ``keypoint_matrix`` where torchvision moves them differently
    from boxes (flips). Other keys (``labels``, ``box_labels``) pass through. A matrix is
    ``(N, 3, 3)`` from output to input pixel coordinates, both measured from the image centre
    (``(x - w / 2, y - h / 2)``, a whole image being the box ``[0, 0, w, h]``); its last row is
    ``(0, 0, 1)`` for affine maps. ``axis_aligned=True`` is the caller's promise that
    ``matrix`` and ``keypoint_matrix`` are ``[[sx, 0, tx], [0, sy, ty], [0, 0, 1]]`` (exact
    zeros and one, finite, as ``flip_matrix`` and ``resized_crop_matrix`` build them): boxes
    and keypoints then skip the corners, the 3x3 inverse and the perspective divide, with the
    same results bit for bit.

    Example:
        >>> t = {"boxes": torch.tensor([[[2.0, 3.0, 10.0, 8.0]]]),
        ...      "box_valid": torch.ones(1, 1, dtype=torch.bool)}
        >>> m = flip_matrix(torch.tensor([True]), torch.tensor([False]))
        >>> move_targets(t, m, [16, 32], [16, 32])["boxes"]
        tensor([[[22.,  3., 30.,  8.]]])
    """
    out: Dict[str, Tensor] = {}
    for key, value in targets.items():
        out[key] = value
    if "masks" in targets:
        if masks is None:
            out["masks"] = warp_masks(targets["masks"], matrix, out_size, mask_fill)
        else:
            out["masks"] = masks
    # (1, 1, 2) float64 (w, h) of every image
    in_wh = small_tensor([float(in_size[1]), float(in_size[0])], torch.float64,
                         matrix.device).view(1, 1, 2)
    out_wh = in_wh if out_size == in_size else small_tensor(
        [float(out_size[1]), float(out_size[0])], torch.float64, matrix.device).view(1, 1, 2)
    return _move_points_of(out, targets, matrix, in_wh, out_wh, keypoint_matrix, axis_aligned)


def _move_points_of(out: Dict[str, Tensor], targets: Dict[str, Tensor], matrix: Tensor,
                    in_wh: Tensor, out_wh: Tensor, keypoint_matrix: Optional[Tensor],
                    axis_aligned: bool) -> Dict[str, Tensor]:
    """``out`` with the boxes and keypoints of ``targets`` moved (see :func:`move_targets`,
    :func:`affine_boxes`, :func:`affine_keypoints`), images of sizes ``in_wh`` -> ``out_wh``
    (as ``_move_points``'). Axis-aligned matrices skip the corners, the 3x3 inverse and the
    perspective divide (the enclosing box of a scaled box is its two moved corners, ordered),
    bit for bit. Ops on tiny tensors, where the cost is their number, not their size."""
    scale_shift: Optional[Tuple[Tensor, Tensor]] = None
    if axis_aligned and ("boxes" in targets or "keypoints" in targets):
        scale_shift = _axis_scale_shift(matrix)  # shared by boxes and keypoints (one matrix)
    if "boxes" in targets:
        b = targets["boxes"]
        n, m = b.shape[0], b.shape[1]
        # clamped to [0, w] x [0, h] first (NaN stays NaN): torchvision assumes boxes inside
        # the image (its flips and resizes do not clamp), as ClampBoundingBoxes would, so
        # every transform sees the same box
        hi = in_wh.to(b.dtype).repeat(1, 1, 2)
        inside = torch.clamp(b, torch.zeros_like(hi), hi)
        if scale_shift is not None:
            shape = [in_wh.shape[0], 1, 1, 2]
            ends = (((inside.to(torch.float64).view(n, m, 2, 2) - in_wh.view(shape) * 0.5)
                     * scale_shift[0].view(n, 1, 1, 2) + scale_shift[1].view(n, 1, 1, 2))
                    + out_wh.view(shape) * 0.5)
            lo, hi = ends[:, :, 0], ends[:, :, 1]
            moved = torch.cat((torch.minimum(lo, hi), torch.maximum(lo, hi)), dim=2)
        else:
            x1, y1, x2, y2 = inside[:, :, 0], inside[:, :, 1], inside[:, :, 2], inside[:, :, 3]
            # corners in torchvision's order: (x1, y1), (x2, y1), (x2, y2), (x1, y2)
            corners = torch.stack((x1, y1, x2, y1, x2, y2, x1, y2), dim=2).reshape(n, m * 4, 2)
            pts = _move_points(corners, matrix, in_wh, out_wh).reshape(n, m, 4, 2)
            moved = torch.cat((pts.amin(dim=2), pts.amax(dim=2)), dim=2)
        hi = out_wh.to(b.dtype).repeat(1, 1, 2)
        moved = torch.clamp(moved.to(b.dtype), torch.zeros_like(hi), hi)
        wh = moved[:, :, 2:] - moved[:, :, :2]
        # |v| < inf is isfinite in two ops instead of four (NaN compares false). On the output,
        # width and height >= 1 also say "finite" (clamped: only NaN is left, and NaN >= 1 is
        # false) and "area >= 1" (a rounded product of two numbers >= 1 is >= 1)
        ok = (targets["box_valid"] & (b.abs() < math.inf).all(dim=2)
              & (b[:, :, 2:] >= b[:, :, :2]).all(dim=2) & (wh >= 1.0).all(dim=2))
        out["boxes"] = torch.where(ok.unsqueeze(2), moved, 0.0)
        out["box_valid"] = ok
    if "keypoints" in targets:
        k = targets["keypoints"]
        km = matrix if keypoint_matrix is None else keypoint_matrix
        if scale_shift is not None:
            if keypoint_matrix is not None:
                scale_shift = _axis_scale_shift(keypoint_matrix)
            moved = ((k.to(torch.float64) - in_wh * 0.5) * scale_shift[0] + scale_shift[1]
                     ) + out_wh * 0.5
        else:
            moved = _move_points(k, km, in_wh, out_wh)
        moved = moved.to(k.dtype)
        # a non-finite input gives a non-finite output (inf and NaN survive every product and
        # sum with finite numbers; inf * 0 is NaN), which fails 0 <= v < limit: no isfinite
        ok = (targets["keypoint_valid"] & (moved >= 0.0).all(dim=2)
              & (moved < out_wh.to(moved.dtype)).all(dim=2))
        out["keypoints"] = torch.where(ok.unsqueeze(2), moved, 0.0)
        out["keypoint_valid"] = ok
    return out


# ---------------------------------------------------------------------------------------------
# Masks (integer or bool labels, every one carried exactly)
# ---------------------------------------------------------------------------------------------

def _mask_range(dtype: torch.dtype) -> Tuple[int, int]:
    """The labels a ``dtype`` mask holds (within TorchScript's int64: ``+-(2**63 - 1)``,
    written as literals, as TorchScript reads no globals)."""
    if dtype == torch.bool:
        return 0, 1
    if dtype == torch.uint8:
        return 0, 255
    if dtype == torch.int8:
        return -128, 127
    if dtype == torch.int16:
        return -32768, 32767
    if dtype == torch.uint16:
        return 0, 65535
    if dtype == torch.int32:
        return -2147483648, 2147483647
    if dtype == torch.uint32:
        return 0, 4294967295
    if dtype == torch.uint64:
        return 0, 9223372036854775807
    return -9223372036854775807, 9223372036854775807


def check_mask_fill_for(fill: int, masks: Tensor, name: str) -> None:
    """``ValueError`` unless the label ``fill`` fits ``masks``' dtype (0/1 for bool, 0..255 for
    uint8, ...; every geometric transform carries any label of the dtype exactly,
    :func:`masks_as_image`): the kernels would otherwise wrap it around silently. Scriptable
    (reads the dtype only); ``name`` is the caller."""
    lo, hi = _mask_range(masks.dtype)
    if fill < lo or fill > hi:
        raise ValueError("{}: mask_fill {} is outside the labels a {} mask can hold [{}, {}]"
                         .format(name, fill, masks.dtype, lo, hi))


def _mask_route(masks: torch.dtype, fill: int, dtype: torch.dtype) -> int:
    """How :func:`masks_as_image` gives ``masks``-dtype labels to a kernel computing in
    ``dtype``: 0 as they are, 1 converted to ``dtype``, 2 as source indices."""
    if masks == dtype:  # the kernel copies pixels; only its float fill can round
        lo, hi = _mask_range(masks)
        exact = -9007199254740992 <= fill <= 9007199254740992
        return 2 if lo <= fill <= hi and not exact else 0
    if masks == torch.uint8 and dtype == torch.float32 and 0 <= fill <= 255:
        return 0  # the image kernels' uint8 path computes in float32: exact
    # float32 holds every label of these (|label| <= 2**24), float64 32-bit ones too
    if masks in [torch.bool, torch.uint8, torch.int8, torch.int16, torch.uint16] or (
            dtype == torch.float64 and masks in [torch.int32, torch.uint32]):
        return 1
    return 2


def masks_as_image(masks: Tensor, fill: int, dtype: torch.dtype = torch.float32) -> Tensor:
    """``(N, H, W)`` / ``(N, K, H, W)`` integer or bool masks as an ``(N, C, H, W)`` image that
    an image kernel moves exactly (nearest sampling, copies, gathers, padding; ``float(fill)``
    or 0 written outside the image), for :func:`image_as_masks` to turn back: the one rule by
    which every geometric transform, dense or ragged, carries every label of every integer
    dtype exactly, and any ``fill`` the dtype holds.

    ``dtype`` is what the kernel computes in: a float dtype for kernels that sample, or
    ``masks.dtype`` for kernels that copy pixels of any dtype. Labels go as they are where the
    kernel holds them (uint8 to float32 kernels: the image kernels' uint8 path computes in
    float32; any dtype to a kernel that copies it), converted where the float holds every
    label (bool to 16-bit ints in float32, 32-bit ones too in float64). Otherwise (int64 ids,
    or a fill a float64 would round) the image is each pixel's source: its flat index + 1,
    in float32 for float32 kernels (sampled on the grid their images are, so co-registered;
    (row + 1, column + 1) pairs from 2**24 pixels on), else float64; its sign is opposite to
    ``fill``'s, so that neither the fill nor 0 reads as a source. :func:`image_as_masks`
    gathers the labels from those sources in their own dtype.

    Example:
        >>> m = torch.tensor([[[2 ** 62 + 1, 7]]])
        >>> y = torch.nn.functional.pad(masks_as_image(m, 2 ** 62 + 3), [0, 1], value=2.0 ** 62)
        >>> image_as_masks(y, m, 2 ** 62 + 3).tolist() == [[[2 ** 62 + 1, 7, 2 ** 62 + 3]]]
        True
    """
    m4 = masks.unsqueeze(1) if masks.dim() == 3 else masks
    route = _mask_route(m4.dtype, fill, dtype)
    if route == 0:
        return m4
    if route == 1:
        return m4.to(dtype)
    # materialised: a kernel may view or write its input as it would an image
    return _index_image(m4, fill, dtype, 16777216).contiguous()


def _index_image(m4: Tensor, fill: int, dtype: torch.dtype, flat_limit: int) -> Tensor:
    """:func:`masks_as_image`'s source indices of ``(N, K, H, W)`` masks (an expanded view):
    ``(N, 1, H, W)`` flat index + 1, or from ``flat_limit`` pixels on in float32
    ``(N, 2, H, W)`` (row + 1, column + 1), each exact; negative where ``fill`` is positive."""
    n, h, w = m4.shape[0], m4.shape[2], m4.shape[3]
    # float32 stays float32, so that the kernel samples the indices on the grid it samples
    # float32 and uint8 images on (co-registration); kernels that copy take float64
    it = torch.float32 if dtype == torch.float32 else torch.float64
    step = -1.0 if fill > 0 else 1.0
    if it == torch.float32 and h * w >= flat_limit:
        rows = torch.arange(1, h + 1, dtype=it, device=m4.device).view(h, 1).expand(h, w)
        cols = torch.arange(1, w + 1, dtype=it, device=m4.device).view(1, w).expand(h, w)
        index = torch.stack((rows, cols)) * step
        return index.view(1, 2, h, w).expand(n, 2, h, w)
    index = torch.arange(1, h * w + 1, dtype=it, device=m4.device) * step
    return index.view(1, 1, h, w).expand(n, 1, h, w)


def image_as_masks(y: Tensor, masks: Tensor, fill: int,
                   dtype: torch.dtype = torch.float32) -> Tensor:
    """The masks behind ``y``, the image :func:`masks_as_image` made of ``masks`` (same
    ``fill`` and ``dtype``) after a kernel moved it: ``masks``' shape rank and dtype, every
    label exact, ``fill`` where the kernel wrote its fill."""
    route = _mask_route(masks.dtype, fill, dtype)
    if route == 0:
        out = y
    elif route == 1:
        out = y != 0.0 if masks.dtype == torch.bool else y.to(masks.dtype)
    else:
        m4 = masks.unsqueeze(1) if masks.dim() == 3 else masks
        out = _gather_labels(m4, y, fill, fill > 0)
    return out.squeeze(1) if masks.dim() == 3 else out


def _gather_labels(m4: Tensor, y: Tensor, fill: int, negative: bool) -> Tensor:
    """``(N, K, oh, ow)``: the labels of ``m4`` ``(N, K, H, W)`` (in their own dtype) at the
    sources that the index image ``y`` ``(N, 1 or 2, oh, ow)`` holds after a kernel moved it
    (:func:`_index_image`'s, ``negative`` as it was made); ``fill`` where ``y`` holds the fill
    (of the opposite sign, or 0). What a ragged kernel left in the padding (never read) is
    clamped to some source."""
    n, k, h, w = m4.shape[0], m4.shape[1], m4.shape[2], m4.shape[3]
    p = y.shape[2] * y.shape[3]
    # 1 + the flat source of each pixel, 0 for the fill
    if y.shape[1] == 2:  # (row + 1, column + 1)
        rc = y.reshape(n, 2, p).to(torch.int64)
        if negative:
            rc = rc.neg()
        r, c = rc[:, 0].clamp(0, h), rc[:, 1].clamp(0, w)
        flat = torch.where((r > 0) & (c > 0), (r - 1) * w + c, torch.zeros_like(r))
    else:
        flat = y.reshape(n, p).to(torch.int64)
        if negative:
            flat = flat.neg()
        flat = flat.clamp(0, h * w)
    # the fill label at index 0: one gather, no select afterwards
    src = torch.cat((torch.full((n, k, 1), fill, dtype=m4.dtype, device=m4.device),
                     m4.reshape(n, k, h * w)), dim=2)
    at = flat.view(n, 1, p).expand(n, k, p)
    shape = [n, k, y.shape[2], y.shape[3]]
    # torch 2.11's CPU gather has no uint32/uint64 kernel: gather their bits as int32/int64
    # (dtype literals: TorchScript reads a dtype variable in view() as a shape)
    if m4.dtype == torch.uint32:
        return src.view(torch.int32).gather(2, at).view(torch.uint32).view(shape)
    if m4.dtype == torch.uint64:
        return src.view(torch.int64).gather(2, at).view(torch.uint64).view(shape)
    return src.gather(2, at).view(shape)


def _sample_masks(m4: Tensor, grid: Tensor, fill: int, flat_limit: int = 16777216) -> Tensor:
    """Nearest-sample ``(N, K, H, W)`` integer/bool masks on a ``grid_sample`` ``grid``
    ``(N, oh, ow, 2)`` with ``fill`` outside the image, every label exact: the masks as
    :func:`masks_as_image` gives them to a kernel computing in the grid's dtype, through
    ``grid_sample`` as images (the image kernels' fill rule). Source indices need no fill:
    ``grid_sample``'s zero padding reads as outside (``flat_limit``: see :func:`_index_image`)."""
    if _mask_route(m4.dtype, fill, grid.dtype) == 2:
        # positive sources: grid_sample's zero padding is the fill
        index = _index_image(m4, 0, grid.dtype, flat_limit)
        y = F.grid_sample(index, grid, mode="nearest", padding_mode="zeros",
                          align_corners=False)
        return _gather_labels(m4, y, fill, False)
    y = _grid_sample_fill(masks_as_image(m4, fill, grid.dtype), grid, "nearest",
                          [float(fill)])
    return image_as_masks(y, m4, fill, grid.dtype)


def _target_grid(matrix: Tensor, in_size: List[int], out_size: List[int],
                 dtype: torch.dtype) -> Tensor:
    """``matrix_grid`` of the affine rows (the last row is ignored) with an output size of its
    own: for ``out_size == in_size`` bit for bit the image kernels' grid."""
    return matrix_grid(matrix[:, :2], in_size[0], in_size[1], dtype, out_size[0], out_size[1])


def warp_masks(masks: Tensor, matrix: Tensor, out_size: List[int], fill: int = 0) -> Tensor:
    """Resample ``(N, H, W)`` or ``(N, K, H, W)`` integer/bool masks by the per-sample affine
    output -> input ``matrix`` (its last row is taken as ``(0, 0, 1)``) onto ``out_size``, with
    nearest sampling and ``fill`` outside the image: the image kernels' nearest path
    (``grid_sample`` on ``matrix_grid``'s grid, float32, torchvision's fill rule), so masks stay
    co-registered with images warped by ``affine`` / ``rotate``. Other image kernels sample
    differently (resized crops, perspective) or need no float round trip (flips, crops,
    pads): for those, move the masks with the same kernel as the image where it takes integer
    tensors (``hflip_where``, ``crop``, ``pad``...) and pass them to ``move_targets(...,
    masks=...)``.

    Example:
        >>> m = torch.tensor([[[1, 2], [3, 4]]], dtype=torch.uint8)
        >>> hflip = torch.tensor([[[-1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]])
        >>> warp_masks(m, hflip, [2, 2])
        tensor([[[2, 1],
                 [4, 3]]], dtype=torch.uint8)
    """
    x = masks.unsqueeze(1) if masks.dim() == 3 else masks
    oh, ow = out_size[0], out_size[1]
    if masks.shape[0] == 0:
        return torch.empty([0] + list(masks.shape[1:-2]) + [oh, ow], dtype=masks.dtype,
                           device=masks.device)
    in_size = [x.shape[2], x.shape[3]]
    n = x.shape[0]
    # CPU eager/TorchScript: chunks of samples converted and warped one at a time, as the image
    # kernels (_warp) do, so big buffers are recycled instead of page-faulted in
    if not _chunked(x) or _chunk_size(x, oh, ow) >= n:
        return _warp_mask_chunk(x, matrix, in_size, out_size, fill, masks.dim())
    k = _chunk_size(x, oh, ow)
    shape = [n, oh, ow] if masks.dim() == 3 else [n, masks.shape[1], oh, ow]
    out = torch.empty(shape, dtype=masks.dtype, device=masks.device)
    for s in range(0, n, k):
        e = min(n, s + k)
        out[s:e].copy_(_warp_mask_chunk(x[s:e], matrix[s:e], in_size, out_size, fill,
                                        masks.dim()))
    return out


def _warp_mask_chunk(x: Tensor, matrix: Tensor, in_size: List[int], out_size: List[int],
                     fill: int, dim: int) -> Tensor:
    grid = _target_grid(matrix, in_size, out_size, torch.float32)
    y = _sample_masks(x, grid, fill)
    return y.squeeze(1) if dim == 3 else y


def warp_with_masks(x: Tensor, masks: Tensor, matrix: Tensor, interpolation: str = "nearest",
                    fill: Optional[List[float]] = None, mask_fill: int = 0
                    ) -> Tuple[Tensor, Tensor]:
    """``(affine(x, matrix[:, :2], interpolation, fill), warp_masks(masks, matrix, size,
    mask_fill))`` with one sampling grid per sample for both (the grid is a third of a
    1-channel warp's cost). Nearest with uint8 images and masks: the masks ride along as extra
    channels of the image's own ``grid_sample`` call. Masks of float64 images are sampled on
    the float64 grid those images use, so they stay co-registered with them.

    Example:
        >>> x = torch.zeros(2, 3, 8, 8, dtype=torch.uint8)
        >>> import math
        >>> c, s = math.cos(0.3), math.sin(0.3)  # a rotation about the centre
        >>> m = torch.tensor([[c, s, 0.0], [-s, c, 0.0], [0.0, 0.0, 1.0]]).expand(2, 3, 3)
        >>> y, mk = warp_with_masks(x, torch.ones(2, 8, 8, dtype=torch.uint8), m)
        >>> y.shape, mk.shape
        (torch.Size([2, 3, 8, 8]), torch.Size([2, 8, 8]))
    """
    return _warp_with_masks(x, masks, matrix[:, :2], "matrix", interpolation, fill, mask_fill)


def perspective_with_masks(x: Tensor, masks: Tensor, coefficients: Tensor,
                           interpolation: str = "bilinear", fill: Optional[List[float]] = None,
                           mask_fill: int = 0) -> Tuple[Tensor, Tensor]:
    """``perspective(x, coefficients, interpolation, fill)`` and the masks moved by the same
    perspective (nearest, ``mask_fill`` outside), with one sampling grid per sample for both, as
    :func:`warp_with_masks` does for affine warps (the perspective grid, with its division,
    costs more than an affine one). Masks of float64 images are sampled on their float64 grid.

    Example:
        >>> x = torch.zeros(2, 3, 8, 8, dtype=torch.uint8)
        >>> c = torch.tensor([[1.1, 0.05, -0.3, 0.02, 1.0, 0.1, 0.01, 0.0]]).expand(2, 8)
        >>> y, mk = perspective_with_masks(x, torch.ones(2, 8, 8, dtype=torch.uint8), c)
        >>> y.shape, mk.shape
        (torch.Size([2, 3, 8, 8]), torch.Size([2, 8, 8]))
    """
    return _warp_with_masks(x, masks, coefficients, "perspective", interpolation, fill,
                            mask_fill)


def _warp_with_masks(x: Tensor, masks: Tensor, params: Tensor, kind: str, interpolation: str,
                     fill: Optional[List[float]], mask_fill: int) -> Tuple[Tensor, Tensor]:
    m4 = masks.unsqueeze(1) if masks.dim() == 3 else masks
    n, c, h, w = x.shape[0], x.shape[1], x.shape[2], x.shape[3]
    if n == 0:
        return x.clone(), masks.clone()
    theta = params
    ride = (interpolation == "nearest" and x.dtype == torch.uint8 and m4.dtype == torch.uint8
            and 0 <= mask_fill <= 255)
    fills: List[float] = [0.0] * c if fill is None else fill
    if ride and len(fills) == 1:
        fills = [fills[0]] * c
    k = _chunk_size(x, h, w) if _chunked(x) else n
    if k >= n:
        return _warp_pair(x, m4, theta, kind, interpolation, fill, fills, mask_fill, ride,
                          masks.dim())
    y = torch.empty_like(x)
    out = torch.empty_like(masks)
    for s in range(0, n, k):
        e = min(n, s + k)
        a, b = _warp_pair(x[s:e], m4[s:e], theta[s:e], kind, interpolation, fill, fills,
                          mask_fill, ride, masks.dim())
        y[s:e].copy_(a)
        out[s:e].copy_(b)
    return y, out


def _warp_pair(x: Tensor, m4: Tensor, theta: Tensor, kind: str, interpolation: str,
               fill: Optional[List[float]], fills: List[float], mask_fill: int, ride: bool,
               dim: int) -> Tuple[Tensor, Tensor]:
    c = x.shape[1]
    ct = torch.float64 if x.dtype == torch.float64 else torch.float32
    # the image kernels' grids (_warp): "matrix" (affine rows) or "perspective" coefficients
    grid = _warp_grid(kind, theta, x.shape[2], x.shape[3], None, ct)
    if ride:
        both = _grid_sample_fill(torch.cat((x, m4), dim=1), grid, "nearest",
                                 fills + [float(mask_fill)] * m4.shape[1])
        y, mk = both[:, :c], both[:, c:]
    else:
        y = _grid_sample_fill(x, grid, interpolation, fill)
        mk = _sample_masks(m4, grid, mask_fill)
    return y, (mk.squeeze(1) if dim == 3 else mk)


def flip_masks(masks: Tensor, horizontal: Optional[Tensor],
               vertical: Optional[Tensor] = None) -> Tensor:
    """Flip masks where the ``(N,)`` bools say (``None``: no flips along that axis), with the
    image's integer flip kernels (no float round trip): equal to ``warp_masks`` with
    ``flip_matrix(horizontal, vertical)``. Pass ``None`` rather than all-False: each given
    axis costs a pass over the masks.

    On CPU in eager mode each sample is copied once, flipped or not (faster than the batched
    flip-and-blend); TorchScript, compile,
    export and accelerators run the batched kernels. Same labels.

    Example:
        >>> m = torch.tensor([[[1, 2]], [[3, 4]]], dtype=torch.uint8)
        >>> flip_masks(m, torch.tensor([True, False]))
        tensor([[[2, 1]],
        <BLANKLINE>
                [[3, 4]]], dtype=torch.uint8)
    """
    x = masks.unsqueeze(1) if masks.dim() == 3 else masks
    if not torch.jit.is_scripting():
        # eager CPU only (the per-sample flags are read as Python values, free there); never
        # under compile/export, never on an accelerator
        if x.device.type == "cpu" and not torch.compiler.is_compiling() and x.shape[0] > 0:
            y = _flip_masks_per_sample(x, horizontal, vertical)
            return y.squeeze(1) if masks.dim() == 3 else y
    y = x
    if horizontal is not None:
        y = hflip_where(y, horizontal)
    if vertical is not None:
        y = vflip_where(y, vertical)
    if horizontal is None and vertical is None:
        y = x.clone()
    return y.squeeze(1) if masks.dim() == 3 else y


@torch.jit.unused
def _flip_masks_per_sample(x: Tensor, horizontal: Optional[Tensor],
                           vertical: Optional[Tensor]) -> Tensor:
    n = x.shape[0]
    hs = [False] * n if horizontal is None else horizontal.tolist()  # CPU: no device sync
    vs = [False] * n if vertical is None else vertical.tolist()
    out = torch.empty_like(x)
    for i in range(n):
        dims = ([2] if hs[i] else []) + ([1] if vs[i] else [])  # of one (K, H, W) sample
        out[i].copy_(x[i].flip(dims) if dims else x[i])
    return out


def resized_crop_masks(masks: Tensor, top: Tensor, left: Tensor, height: Tensor,
                       width: Tensor, size: List[int]) -> Tensor:
    """Per-sample resized crop of masks with the image kernel's nearest rule (that of
    ``F.interpolate``, torchvision's ``resize_mask``): boxes ``(top, left, height, width)``
    (``(N,)`` integer tensors inside the image) resized to ``size``. A plain resize is the box
    ``(0, 0, H, W)``. Values of any dtype are copied, so it also moves the image
    :func:`masks_as_image` makes of masks (a ragged batch's, ``_ResizedBox.apply_masks``).

    On CPU (eager or TorchScript), ``F.interpolate``'s nearest indices gather
    the integer masks directly (no float round trip, every label exact; faster than
    ``F.interpolate`` per box and than the batched path); under
    compile/export and on accelerators, the ``resized_crop`` image kernel
    (nearest), batched, for labels float32 holds (the gathers for wider dtypes). Same labels.
    """
    gather = _mask_route(masks.dtype, 0, torch.float32) == 2 or (_chunked(masks)
                                                                 and masks.shape[0] > 0)
    if not gather:
        return _resized_crop_masks_batched(masks, top, left, height, width, size)
    # F.interpolate's nearest rule as two gathers of the integer masks (any dtype, no float
    # round trip): the rows of every sample's box, then its columns. A gather along the last
    # dim with a broadcast index beats index_select there
    x = masks.unsqueeze(1) if masks.dim() == 3 else masks
    n, k, w = x.shape[0], x.shape[1], x.shape[3]
    oh, ow = size[0], size[1]
    # F.interpolate's nearest indices (mode="nearest", no scale_factor), as its kernel's
    # nearest_idx computes them in float32: min(floor(i * (float32(size) / out)), size - 1)
    # (its special cases out == size and out == 2 * size give the same indices)
    i = torch.arange(oh, dtype=torch.float32, device=height.device).view(1, oh)
    scale = height.to(torch.float32).view(-1, 1) / float(oh)
    rows = top.view(-1, 1) + torch.minimum((i * scale).floor().to(torch.int64),
                                           height.view(-1, 1) - 1)  # (N, oh)
    i = torch.arange(ow, dtype=torch.float32, device=width.device).view(1, ow)
    scale = width.to(torch.float32).view(-1, 1) / float(ow)
    cols = left.view(-1, 1) + torch.minimum((i * scale).floor().to(torch.int64),
                                            width.view(-1, 1) - 1)  # (N, ow)
    # rows: whole-row copies (index_select on the flattened rows); columns: one gather
    planes = torch.arange(n * k, dtype=torch.int64, device=x.device).view(n, k, 1) * x.shape[2]
    flat = (planes + rows.view(n, 1, oh)).view(n * k * oh)
    y = x.reshape(n * x.shape[1] * x.shape[2], w).index_select(0, flat).view(n, k * oh, w)
    y = y.gather(2, cols.view(n, 1, ow).expand(n, k * oh, ow)).view(n, k, oh, ow)
    return y.squeeze(1) if masks.dim() == 3 else y


def _resized_crop_masks_batched(masks: Tensor, top: Tensor, left: Tensor, height: Tensor,
                                width: Tensor, size: List[int]) -> Tensor:
    y = resized_crop(masks_as_image(masks, 0), top, left, height, width, size, "nearest", False)
    return image_as_masks(y, masks, 0)


# ---------------------------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------------------------

def check_flip_indices(indices: List[int], name: str = "keypoint_flip_indices") -> List[int]:
    """``indices`` as a list if it is a permutation of ``0..K-1``, else ``ValueError``."""
    got = [int(i) for i in indices]
    if sorted(got) != list(range(len(got))):
        raise ValueError(
            "{} must be a permutation of 0..K-1 (each keypoint index exactly once), got {}"
            .format(name, got))
    return got


def _shape_error(key: str, expected: str, t: Tensor) -> str:
    return "targets['{}'] must be {}, got shape {} and dtype {}".format(
        key, expected, list(t.shape), t.dtype)


@torch.jit.unused
def check_targets_type(targets: Dict[str, Tensor]) -> None:
    """``TypeError`` unless ``targets`` is a dict (eager and compile; TorchScript's own types
    refuse anything else): a list such as ``[mask]`` would otherwise fail deep inside with
    "'list' object has no attribute 'items'"."""
    if not isinstance(targets, dict):
        raise TypeError("with_targets: targets must be a dict of tensors keyed by kind, e.g. "
                        "{{'masks': masks}} or {{'boxes': boxes, 'labels': labels}}, got {}"
                        .format(type(targets).__name__))
    for key, t in targets.items():
        if not isinstance(t, torch.Tensor):
            hint = (" (with_sizes: sizes must be an (N, 2) int64 tensor of (height, width), "
                    "e.g. torch.tensor(sizes))" if key == "sizes" else "")
            raise TypeError("with_targets: targets['{}'] must be a tensor, got {}{}".format(
                key, type(t).__name__, hint))


def check_targets(targets: Dict[str, Tensor], image_shape: List[int],
                  takes_sizes: bool = False) -> Dict[str, Tensor]:
    """Check a ``targets`` dict against a batch of images of shape ``image_shape``
    ``[N, C, H, W]`` and return a new dict with ``box_valid`` / ``keypoint_valid`` filled in
    (all valid) where boxes or keypoints come without them. ``ValueError`` on an unknown key
    (naming the allowed ones), float masks, masks of another size, wrong shapes or dtypes.
    Values are not inspected (that would sync with the device): NaN or inverted boxes and NaN
    keypoints come out of the kernels invalid. ``"sizes"`` ((N, 2) int64: a ragged batch, see
    :meth:`batchaug.Augment.with_sizes`) is refused unless the caller acts on each image's own
    extent (``takes_sizes``).

    Example:
        >>> t = check_targets({"boxes": torch.zeros(2, 3, 4)}, [2, 3, 32, 32])
        >>> t["box_valid"].shape
        torch.Size([2, 3])
    """
    if not torch.jit.is_scripting():
        check_targets_type(targets)
    n, h, w = image_shape[0], image_shape[2], image_shape[3]
    # a local list: TorchScript reads no global one
    allowed = ["masks", "boxes", "box_valid", "keypoints", "keypoint_valid", "labels",
               "box_labels", "sizes"]
    out: Dict[str, Tensor] = {}
    for key, t in targets.items():
        if key not in allowed:
            raise ValueError("targets has an unknown key '{}'; the allowed keys are {}".format(
                key, ", ".join(allowed)))
        if t.dim() == 0 or t.shape[0] != n:
            raise ValueError("targets['{}'] must have the images' batch size {} first, got "
                             "shape {}".format(key, n, list(t.shape)))
        out[key] = t
    if "masks" in out:
        m = out["masks"]
        if m.is_floating_point() or m.is_complex():
            raise ValueError(_shape_error("masks", "an integer or bool tensor (a mask holds "
                                          "labels; float masks are refused)", m))
        if m.dim() != 3 and m.dim() != 4:
            raise ValueError(_shape_error("masks", "(N, H, W) or (N, K, H, W)", m))
        if m.shape[-2] != h or m.shape[-1] != w:
            raise ValueError("targets['masks'] must have the images' size {}x{}, got {}x{}"
                             .format(h, w, m.shape[-2], m.shape[-1]))
    if "sizes" in out:
        if not takes_sizes:
            raise ValueError("targets['sizes'] (a ragged batch) given to a transform that cannot "
                             "run on one: only the geometric transforms, pointwise photometric "
                             "ones (Normalize, ToDtype...) and the containers act on each "
                             "image's own extent")
        s = out["sizes"]
        if s.dtype != torch.int64 or s.dim() != 2 or s.shape[1] != 2:
            raise ValueError(_shape_error("sizes", "an int64 tensor of shape (N, 2) (each "
                                          "image's height and width)", s))
    if "box_labels" in out:
        bl = out["box_labels"]
        if bl.dim() != 2 or bl.is_floating_point() or bl.is_complex():
            raise ValueError(_shape_error("box_labels", "an integer tensor of shape (N, M)", bl))
        if "boxes" not in out or out["boxes"].dim() < 2 or \
                out["boxes"].shape[1] != bl.shape[1]:
            raise ValueError("targets['box_labels'] needs targets['boxes'] with the same number "
                             "of slots M, got box_labels of shape {}".format(list(bl.shape)))
    for key, valid_key, last in (("boxes", "box_valid", 4), ("keypoints", "keypoint_valid", 2)):
        if valid_key in out and key not in out:
            raise ValueError("targets['{}'] given without targets['{}']".format(valid_key, key))
        if key in out:
            t = out[key]
            if t.dim() != 3 or t.shape[2] != last or not t.is_floating_point():
                raise ValueError(_shape_error(
                    key, "a float tensor of shape (N, {}, {})".format(
                        "M" if key == "boxes" else "K", last), t))
            if valid_key in out:
                v = out[valid_key]
                if v.dtype != torch.bool or v.dim() != 2 or v.shape[1] != t.shape[1]:
                    raise ValueError(_shape_error(
                        valid_key, "a bool tensor of shape {}".format(list(t.shape[:2])), v))
            else:
                out[valid_key] = torch.ones(t.shape[0], t.shape[1], dtype=torch.bool,
                                            device=t.device)
    return out


# ---------------------------------------------------------------------------------------------
# Per-sample choices (the containers): targets travel with their samples
# ---------------------------------------------------------------------------------------------

def zero_invalid_targets(targets: Dict[str, Tensor]) -> Dict[str, Tensor]:
    """``targets`` (checked, valid flags present) with the moving kernels' output rules applied
    where nothing moves them: a box that is not finite or has ``x2 < x1`` / ``y2 < y1`` and a
    keypoint that is not finite become invalid, and every invalid box or keypoint is written as
    zeros. Valid ones are kept as they are (no clamping: a sample left alone keeps its targets,
    as torchvision does). A container applies it, so the samples it leaves alone (or gives to a
    transform that moves no pixel) follow the same rules as the ones it moves."""
    out: Dict[str, Tensor] = {}
    for key, value in targets.items():
        out[key] = value
    if "boxes" in targets:
        b = targets["boxes"]
        ok = targets["box_valid"] & torch.isfinite(b).all(dim=2) \
            & (b[:, :, 2] >= b[:, :, 0]) & (b[:, :, 3] >= b[:, :, 1])
        out["boxes"] = torch.where(ok.unsqueeze(2), b, torch.zeros_like(b))
        out["box_valid"] = ok
    if "keypoints" in targets:
        k = targets["keypoints"]
        ok = targets["keypoint_valid"] & torch.isfinite(k).all(dim=2)
        out["keypoints"] = torch.where(ok.unsqueeze(2), k, torch.zeros_like(k))
        out["keypoint_valid"] = ok
    return out


def select_targets(mask: Tensor, a: Dict[str, Tensor], b: Dict[str, Tensor]) -> Dict[str, Tensor]:
    """Per sample, ``a``'s targets where the ``(N,)`` bool ``mask`` is true, else ``b``'s (the
    static path of a per-sample choice; ``a`` and ``b`` hold the same keys and shapes)."""
    out: Dict[str, Tensor] = {}
    for key, v in b.items():
        shape = [-1]
        for _ in range(v.dim() - 1):
            shape.append(1)
        out[key] = torch.where(mask.view(shape), a[key], v)
    return out


def take_targets(targets: Dict[str, Tensor], idx: Tensor) -> Dict[str, Tensor]:
    """The targets of the samples ``idx`` (``index_select`` on every key)."""
    out: Dict[str, Tensor] = {}
    for key, v in targets.items():
        out[key] = v.index_select(0, idx)
    return out


def put_targets(targets: Dict[str, Tensor], idx: Tensor,
                moved: Dict[str, Tensor]) -> Dict[str, Tensor]:
    """``targets`` with the samples ``idx`` replaced by ``moved``'s (``index_copy``)."""
    out: Dict[str, Tensor] = {}
    for key, v in targets.items():
        out[key] = v.index_copy(0, idx, moved[key])
    return out


def cat_targets(parts: List[Dict[str, Tensor]],
                order: Optional[Tensor] = None) -> Dict[str, Tensor]:
    """The ``parts`` (same keys) concatenated along the batch, then, with ``order``,
    ``index_select(0, order)`` (which puts grouped samples back in their places)."""
    out: Dict[str, Tensor] = {}
    for key in parts[0].keys():
        values: List[Tensor] = []
        for p in parts:
            values.append(p[key])
        v = torch.cat(values)
        if order is not None:
            v = v.index_select(0, order)
        out[key] = v
    return out
