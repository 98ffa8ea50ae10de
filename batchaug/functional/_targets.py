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
gives non-finite points, hence invalid targets, instead of an error). Masks are resampled in
``_target_masks`` with the image kernels' own nearest paths (co-registration).

Bad values are not errors here (checking them would need a host sync): a box whose input is
not finite or has ``x2 < x1`` / ``y2 < y1``, or a non-finite keypoint, comes out invalid, and
every invalid box or keypoint is written as zeros, so nothing non-finite leaves a kernel.
"""

from __future__ import annotations

import math
from typing import Dict, List, Optional, Tuple

import torch
from torch import Tensor

from ._target_masks import resized_crop_masks, warp_masks
from ._utils import small_tensor
from ._warp import rotation_theta


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
    ``out_sizes`` (centred on each sample's own image, for :func:`move_targets_each`): each
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
    on each sample's own image, for :func:`move_targets_each`): each row bit for bit that
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


def _wh(size: List[int], device: torch.device) -> Tensor:
    """``(1, 1, 2)`` float64 ``(w, h)`` of one ``[h, w]`` size for every sample."""
    return small_tensor([float(size[1]), float(size[0])], torch.float64, device).view(1, 1, 2)


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
    return _affine_boxes(boxes, valid, matrix, _wh(in_size, boxes.device),
                         _wh(out_size, boxes.device))


def _affine_boxes(boxes: Tensor, valid: Tensor, matrix: Tensor, in_wh: Tensor, out_wh: Tensor
                  ) -> Tuple[Tensor, Tensor]:
    n, m = boxes.shape[0], boxes.shape[1]
    inside = _clamp_to(boxes, in_wh)
    x1, y1, x2, y2 = inside[:, :, 0], inside[:, :, 1], inside[:, :, 2], inside[:, :, 3]
    # corners in torchvision's order: (x1, y1), (x2, y1), (x2, y2), (x1, y2)
    corners = torch.stack((x1, y1, x2, y1, x2, y2, x1, y2), dim=2).reshape(n, m * 4, 2)
    moved = _move_points(corners, matrix, in_wh, out_wh).reshape(n, m, 4, 2)
    out = torch.cat((moved.amin(dim=2), moved.amax(dim=2)), dim=2).to(boxes.dtype)
    return _finish_boxes(boxes, valid, out, out_wh)


def _clamp_to(boxes: Tensor, wh: Tensor) -> Tensor:
    """XYXY ``boxes`` clamped to ``[0, w] x [0, h]`` of their image (``wh``: as
    ``_move_points``'; NaN stays NaN). Input boxes are clamped to their image first: torchvision
    assumes boxes inside it (its flips and resizes do not clamp), as ClampBoundingBoxes
    would, so every transform sees the same box."""
    hi = wh.to(boxes.dtype).repeat(1, 1, 2)
    return torch.clamp(boxes, torch.zeros_like(hi), hi)


def _finish_boxes(boxes: Tensor, valid: Tensor, out: Tensor, out_wh: Tensor
                  ) -> Tuple[Tensor, Tensor]:
    """Moved boxes ``out`` clamped to the output, and the valid flags (see affine_boxes).
    Pairs of coordinates are compared at once: these are tiny tensors, where the cost is the
    number of ops, not their size."""
    out = _clamp_to(out, out_wh)
    wh = out[:, :, 2:] - out[:, :, :2]
    # |v| < inf is isfinite in two ops instead of four (NaN compares false). On the output,
    # width and height >= 1 also say "finite" (clamped: only NaN is left, and NaN >= 1 is
    # false) and "area >= 1" (a rounded product of two numbers >= 1 is >= 1)
    ok = (valid & (boxes.abs() < math.inf).all(dim=2)
          & (boxes[:, :, 2:] >= boxes[:, :, :2]).all(dim=2) & (wh >= 1.0).all(dim=2))
    return torch.where(ok.unsqueeze(2), out, 0.0), ok


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


def _axis_move(points: Tensor, scale: Tensor, shift: Tensor, in_wh: Tensor, out_wh: Tensor
               ) -> Tensor:
    """``(N, ..., 2)`` float64 points moved by ``_axis_scale_shift``'s map (pixel coordinates
    from the top-left corner; ``scale`` and ``shift`` shaped to broadcast)."""
    shape = [in_wh.shape[0]] + [1] * (points.dim() - 2) + [2]
    return ((points - in_wh.view(shape) * 0.5) * scale + shift) + out_wh.view(shape) * 0.5


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
    return _affine_keypoints(keypoints, valid, matrix, _wh(in_size, keypoints.device),
                             _wh(out_size, keypoints.device))


def _affine_keypoints(keypoints: Tensor, valid: Tensor, matrix: Tensor, in_wh: Tensor,
                      out_wh: Tensor) -> Tuple[Tensor, Tensor]:
    out = _move_points(keypoints, matrix, in_wh, out_wh).to(keypoints.dtype)
    return _finish_keypoints(valid, out, out_wh)


def _finish_keypoints(valid: Tensor, out: Tensor, out_wh: Tensor) -> Tuple[Tensor, Tensor]:
    limit = out_wh.to(out.dtype)
    # a non-finite input gives a non-finite output (inf and NaN survive every product and
    # sum with finite numbers; inf * 0 is NaN), which fails 0 <= v < limit: no isfinite
    ok = valid & (out >= 0.0).all(dim=2) & (out < limit).all(dim=2)
    return torch.where(ok.unsqueeze(2), out, 0.0), ok


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
    in_wh = _wh(in_size, matrix.device)
    out_wh = in_wh if out_size == in_size else _wh(out_size, matrix.device)
    return _move_points_of(out, targets, matrix, in_wh, out_wh, keypoint_matrix, axis_aligned)


def move_targets_each(targets: Dict[str, Tensor], matrix: Tensor, in_sizes: Tensor,
                      out_sizes: Tensor, masks: Optional[Tensor] = None,
                      keypoint_matrix: Optional[Tensor] = None,
                      axis_aligned: bool = False) -> Dict[str, Tensor]:
    """:func:`move_targets` with each sample on an image of its own size: ``in_sizes`` /
    ``out_sizes`` ``(N, 2)`` ``(h, w)`` (a ragged batch), ``matrix`` (and
    ``keypoint_matrix``) centred on each sample's own image, ``masks`` already moved (or
    passed through). Each sample's boxes and keypoints are bit for bit ``move_targets`` of
    that sample alone on its own sizes with its own matrix: the same float64 operations,
    per-sample sizes in place of the batch's.

    Example:
        >>> t = {"keypoints": torch.tensor([[[2.0, 1.0]], [[2.0, 1.0]]])}
        >>> m = flip_matrix(torch.tensor([True, True]), torch.tensor([False, False]), True)
        >>> sizes = torch.tensor([[4, 8], [4, 3]])
        >>> move_targets_each(check_targets(t, [2, 3, 4, 8]), m, sizes, sizes)["keypoints"]
        tensor([[[5., 1.]],
        <BLANKLINE>
                [[0., 1.]]])
    """
    out: Dict[str, Tensor] = {}
    for key, value in targets.items():
        out[key] = value
    if masks is not None:
        out["masks"] = masks
    in_wh = in_sizes.flip(1).to(torch.float64).view(-1, 1, 2)  # (N, 1, 2) (w, h)
    out_wh = out_sizes.flip(1).to(torch.float64).view(-1, 1, 2)
    return _move_points_of(out, targets, matrix, in_wh, out_wh, keypoint_matrix, axis_aligned)


def _move_points_of(out: Dict[str, Tensor], targets: Dict[str, Tensor], matrix: Tensor,
                    in_wh: Tensor, out_wh: Tensor, keypoint_matrix: Optional[Tensor],
                    axis_aligned: bool) -> Dict[str, Tensor]:
    """``out`` with the boxes and keypoints of ``targets`` moved (see :func:`move_targets`),
    images of sizes ``in_wh`` -> ``out_wh`` (as ``_move_points``')."""
    scale_shift: Optional[Tuple[Tensor, Tensor]] = None
    if axis_aligned and ("boxes" in targets or "keypoints" in targets):
        scale_shift = _axis_scale_shift(matrix)  # shared by boxes and keypoints (one matrix)
    if "boxes" in targets:
        b = targets["boxes"]
        if scale_shift is not None:
            # affine_boxes bit for bit without corners, 3x3 inverse or perspective divide: the
            # enclosing box of a scaled box is its two moved corners, ordered
            n, m = b.shape[0], b.shape[1]
            inside = _clamp_to(b, in_wh).to(torch.float64).view(n, m, 2, 2)
            moved = _axis_move(inside, scale_shift[0].view(n, 1, 1, 2),
                               scale_shift[1].view(n, 1, 1, 2), in_wh, out_wh)
            lo, hi = moved[:, :, 0], moved[:, :, 1]
            out_b = torch.cat((torch.minimum(lo, hi), torch.maximum(lo, hi)), dim=2).to(b.dtype)
            boxes, valid = _finish_boxes(b, targets["box_valid"], out_b, out_wh)
        else:
            boxes, valid = _affine_boxes(targets["boxes"], targets["box_valid"], matrix,
                                         in_wh, out_wh)
        out["boxes"] = boxes
        out["box_valid"] = valid
    if "keypoints" in targets:
        km = matrix if keypoint_matrix is None else keypoint_matrix
        if scale_shift is not None:
            if keypoint_matrix is not None:
                scale_shift = _axis_scale_shift(keypoint_matrix)
            k = targets["keypoints"]
            moved = _axis_move(k.to(torch.float64), scale_shift[0], scale_shift[1], in_wh,
                               out_wh)
            kps, kvalid = _finish_keypoints(targets["keypoint_valid"], moved.to(k.dtype), out_wh)
        else:
            kps, kvalid = _affine_keypoints(targets["keypoints"], targets["keypoint_valid"],
                                            km, in_wh, out_wh)
        out["keypoints"] = kps
        out["keypoint_valid"] = kvalid
    return out


def resized_crop_targets(targets: Dict[str, Tensor], top: Tensor, left: Tensor, height: Tensor,
                         width: Tensor, in_size: List[int], out_size: List[int],
                         mask_fill: int = 0) -> Dict[str, Tensor]:
    """Targets of a per-sample box ``(top, left, height, width)`` cropped and resized to
    ``out_size`` (RandomResizedCrop, Resize: the whole image as the box, timm's resized crop):
    masks by the nearest resize rule (``resized_crop_masks``), boxes and keypoints by the
    axis-aligned path of :func:`move_targets`."""
    masks: Optional[Tensor] = None
    if "masks" in targets:
        masks = resized_crop_masks(targets["masks"], top, left, height, width, out_size)
    return move_targets(targets, resized_crop_matrix(top, left, height, width, in_size, out_size),
                        in_size, out_size, mask_fill, masks, axis_aligned=True)


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
