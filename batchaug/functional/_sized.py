"""Geometric kernels on each image's own extent of a padded batch (the transforms' ``sizes``).

A ragged batch is one ``(N, C, H, W)`` canvas with image ``i`` in
``x[i, :, :sizes[i, 0], :sizes[i, 1]]`` (the rest is padding, never read); ``sizes`` is an
``(N, 2)`` int64 tensor ``(h, w)`` on ``x``'s device. Each kernel does to every image what its
fixed-size counterpart does to an image of that size, by one of two implementations:

- per image (:func:`eager_cpu`: CPU in eager mode): the fixed-size kernel on a view of the
  image's own pixels, which is exactly the fixed-size transform on that image, bit for bit,
  and touches only its pixels;
- batched (accelerators, ``torch.compile``, ``torch.export``, TorchScript): the ragged kernels
  of :mod:`batchaug.functional._ragged` (per-sample maps, gathers), no host sync.

Geometry for targets is returned as ``(N, 3, 3)`` float64 output -> input maps in pixel-edge
coordinates of each image's own extent (``edge`` matrices); :func:`edge_to_centred` turns them
into :func:`batchaug.functional.move_targets`' convention on the canvas.
"""
import math
from typing import Dict, List, Optional

import torch
from torch import Tensor

from .. import _parallel
from . import _ragged as R
from ._resize import _resized_crop_per_sample, resize, resized_crop
from ._targets import move_targets, move_targets_each
from ._utils import select_samples
from ._warp import affine_matrix, perspective, perspective_coefficients, perspective_identity


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


def _size_list(sizes: Tensor) -> List[List[int]]:
    out: List[List[int]] = sizes.tolist()  # a CPU tensor: no device sync
    return out


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
        sl = _size_list(sizes)
        for i in range(len(flags)):
            if flags[i]:
                h, w = sl[i][0], sl[i][1]
                out[i, :, :h, :w] = x[i, :, :h, :w].flip(dim)
        return out
    return R.flip_where(x, sizes, flipped, dim)


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
        m = R.recenter(m, center, sizes)
    return R.centered_to_edge(m, sizes)


def _one_affine(angle: Tensor, translate: Tensor, scale: Tensor, shear: Tensor, rotation: bool,
                i: int, h: int, w: int, center: Optional[List[float]]) -> Tensor:
    """Image ``i``'s inverse affine ``(1, 2, 3)`` as the fixed-size module builds it for an
    ``h x w`` image."""
    if rotation:
        return R.rotation_matrix(angle[i:i + 1], h, w, center)
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
    return R.warp(x, sizes, edge, interpolation, fill)


@torch.jit.unused  # eager CPU only (eager_cpu); the thread loop does not script
def _affine_each(x: Tensor, sizes: Tensor, angle: Tensor, translate: Tensor, scale: Tensor,
                 shear: Tensor, rotation: bool, center: Optional[List[float]],
                 interpolation: str, fill: List[float]) -> Tensor:
    """:func:`affine` image by image, on the loader's threads (``_parallel.for_each``)."""
    out = torch.empty_like(x)
    sl = _size_list(sizes)

    def one(i: int) -> None:
        h, w = sl[i][0], sl[i][1]
        mat = _one_affine(angle, translate, scale, shear, rotation, i, h, w, center)
        out[i:i + 1, :, :h, :w] = R.warp_window(x[i:i + 1, :, :h, :w], mat, 0, 0, h, w,
                                                interpolation, fill)

    _parallel.for_each(one, len(sl))
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
        sl = _size_list(sizes)
        for i in range(len(sl)):
            h, w = sl[i][0], sl[i][1]
            img = x[i:i + 1, :, :h, :w]
            if flags[i]:
                coef = perspective_coefficients(endpoints[i:i + 1], h, w)
                if not bool(perspective_identity_rows(coef).all()):
                    img = perspective(img, coef, interpolation, fill)
            out[i:i + 1, :, :h, :w] = img
        return out
    coefficients = R.perspective_coefficients(endpoints, sizes)
    moves = mask & ~perspective_identity_rows(coefficients)
    warped = R.warp(x, sizes, R.perspective_to_edge(coefficients), interpolation, fill)
    return select_samples(moves, warped, x)


def window(x: Tensor, sizes: Tensor, top: Tensor, left: Tensor, height: int, width: int,
           fill: List[float], padding_mode: str = "constant") -> Tensor:
    """The ``height x width`` window at ``(top, left)`` of each image's own extent (padded by
    ``padding_mode`` where it leaves it): :func:`_ragged.window`, one gather for the batch."""
    return R.window(x, sizes, top, left, height, width, fill, padding_mode)


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
    :func:`_ragged.resize_window` (per-sample filter matrices, constant padding only)."""
    if eager_cpu(x):
        return resized_window_loop(x, sizes, resized, top, left, height, width, interpolation,
                                   antialias, fill, padding_mode)
    if padding_mode != "constant":
        raise ValueError("Resize(int) then RandomCrop on a ragged batch runs batched (an "
                         "accelerator, compile or export) with padding_mode='constant' only, "
                         "got {!r}".format(padding_mode))
    return R.resize_window(x, sizes, resized, top, left, height, width, interpolation,
                           antialias, fill)


@torch.jit.unused  # eager CPU only (eager_cpu); the thread loop does not script
def resized_window_loop(x: Tensor, sizes: Tensor, resized: Tensor, top: Tensor, left: Tensor,
                        height: int, width: int, interpolation: str, antialias: bool,
                        fill: List[float], padding_mode: str) -> Tensor:
    """Per image: resize its extent to ``resized`` then take the window (eager CPU)."""
    out = torch.empty((x.shape[0], x.shape[1], height, width), dtype=x.dtype, device=x.device)
    sl = _size_list(sizes)
    rl = _size_list(resized)

    def one(i: int) -> None:
        h, w = sl[i][0], sl[i][1]
        img = resize(x[i:i + 1, :, :h, :w], rl[i], interpolation, antialias)
        out[i:i + 1] = R.window(img, resized[i:i + 1], top[i:i + 1], left[i:i + 1], height,
                                width, fill, padding_mode)

    _parallel.for_each(one, len(sl))
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
    sl = _size_list(sizes)
    boxes: List[List[int]] = torch.stack((top, left, height, width), dim=1).tolist()
    zero = torch.zeros(1, dtype=torch.int64)

    def one(i: int) -> None:
        h, w = sl[i][0], sl[i][1]
        b_t, b_l, b_h, b_w = boxes[i][0], boxes[i][1], boxes[i][2], boxes[i][3]
        mat = _one_affine(angle, translate, scale, shear, rotation, i, h, w, center)
        box = R.warp_window(x[i:i + 1, :, :h, :w], mat, b_t, b_l, b_h, b_w, interpolation,
                            fill)
        out[i:i + 1] = resized_crop(box, zero, zero, zero + b_h, zero + b_w, size,
                                    crop_interpolation, antialias)

    _parallel.for_each(one, n)  # on the loader's threads (``_parallel.image_threads``)
    return out


def move_targets_sized(targets: Dict[str, Tensor], matrix: Tensor, in_sizes: Tensor,
                       out_sizes: Tensor, in_size: List[int], out_size: List[int],
                       masks: Optional[Tensor], keypoint_matrix: Optional[Tensor] = None,
                       axis_aligned: bool = False, own_frame: bool = False
                       ) -> Dict[str, Tensor]:
    """``move_targets`` on a ragged batch, ``masks`` already moved. ``own_frame``: ``matrix``
    (and ``keypoint_matrix``) are centred on each image's own extent, as the transform builds
    them for that image alone, and each image's boxes and keypoints are bit for bit those of
    the image alone (``move_targets_each``): on its own edges, rounding decides as alone.
    Else they are in ``move_targets``' convention on the ``in_size`` / ``out_size`` canvases
    (edge maps through :func:`edge_to_centred`). Each box is
    clamped to its own image first (``in_sizes``) and to its own output extent after
    (``out_sizes``); a keypoint is valid only inside its own output extent. From the corner, a
    map of one image is the same for any canvas size, so the canvases stand in for every
    image's size. Validity as ``move_targets`` (the box as given: finite and ordered)."""
    if own_frame:
        return move_targets_each(targets, matrix, in_sizes, out_sizes, masks,
                                 keypoint_matrix, axis_aligned)
    given: Dict[str, Tensor] = {}
    for key, value in targets.items():
        given[key] = value
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


__all__ = ["eager_cpu", "check_sizes", "edge_to_centred", "flip_edge", "flip",
           "affine_centred", "affine_edge", "affine", "perspective_identity_rows",
           "perspective_warp", "window", "resized_boxes", "resized_window",
           "resized_window_loop", "affine_resized_crop", "move_targets_sized",
           "without_sizes", "sizes_of"]
