"""Mask kernels: integer/bool masks moved by the same per-sample geometry as their images.

``warp_masks`` is exported by :mod:`batchaug.functional`. Every kernel samples like an
image kernel with nearest interpolation (``grid_sample`` on the same grid, or the same
``F.interpolate`` rule), so a mask turned into an image and warped by the image kernel with
nearest interpolation equals the warped mask (co-registration). Every label is carried exactly,
by one rule (:func:`masks_as_image` / :func:`image_as_masks`, which every geometric transform
uses, dense or ragged): where the kernel's dtype could not hold the labels, the kernel moves
each pixel's source index and the labels are gathered from there in the mask's own dtype;
uint8 masks take the image kernels' uint8 path. ``fill`` (the label outside the image) must
fit the masks' dtype.
"""

from __future__ import annotations

from typing import List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from ._crop import hflip_where, vflip_where
from ._resize import resized_crop
from ._utils import _chunk_size, _chunked
from ._warp import _grid_sample_fill, _warp_grid, matrix_grid


# the warp kernels carry every label of every integer dtype exactly (_sample_masks): the
# fill's only limit is the dtype's (and TorchScript's int64)
MAX_MASK_FILL = 2 ** 63 - 1


def _mask_range(dtype: torch.dtype) -> Tuple[int, int]:
    """The labels a ``dtype`` mask holds (within TorchScript's int64: ``+-MAX_MASK_FILL``,
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
        out = _gather_labels(m4, _sources(y, m4.shape[2], m4.shape[3], fill > 0), fill)
        out = out.view(m4.shape[0], m4.shape[1], y.shape[2], y.shape[3])
    return out.squeeze(1) if masks.dim() == 3 else out


def _sources(y: Tensor, h: int, w: int, negative: bool) -> Tensor:
    """``(N, P)`` int64: 1 + the source of each pixel of an index image ``y`` that a kernel
    moved (:func:`_index_image`'s, ``negative`` as it was made), 0 for the fill (of the
    opposite sign, or 0); what a ragged kernel left in the padding (never read) is clamped to
    some source."""
    n, p = y.shape[0], y.shape[2] * y.shape[3]
    if y.shape[1] == 2:  # (row + 1, column + 1)
        rc = y.reshape(n, 2, p).to(torch.int64)
        if negative:
            rc = rc.neg()
        r, c = rc[:, 0].clamp(0, h), rc[:, 1].clamp(0, w)
        return torch.where((r > 0) & (c > 0), (r - 1) * w + c, torch.zeros_like(r))
    flat = y.reshape(n, p).to(torch.int64)
    if negative:
        flat = flat.neg()
    return flat.clamp(0, h * w)


def _gather_labels(m4: Tensor, flat: Tensor, fill: int) -> Tensor:
    """``(N, K, P)``: the labels of ``m4`` ``(N, K, H, W)`` at each sample's ``flat`` ``(N, P)``
    int64 source indices + 1 (0: ``fill``), in their own dtype."""
    n, k, p = m4.shape[0], m4.shape[1], flat.shape[1]
    # the fill label at index 0: one gather, no select afterwards
    src = torch.cat((torch.full((n, k, 1), fill, dtype=m4.dtype, device=m4.device),
                     m4.reshape(n, k, m4.shape[2] * m4.shape[3])), dim=2)
    at = flat.view(n, 1, p).expand(n, k, p)
    # torch 2.11's CPU gather has no uint32/uint64 kernel: gather their bits as int32/int64
    # (dtype literals: TorchScript reads a dtype variable in view() as a shape)
    if m4.dtype == torch.uint32:
        return src.view(torch.int32).gather(2, at).view(torch.uint32)
    if m4.dtype == torch.uint64:
        return src.view(torch.int64).gather(2, at).view(torch.uint64)
    return src.gather(2, at)


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
        out = _gather_labels(m4, _sources(y, m4.shape[2], m4.shape[3], False), fill)
        return out.view(m4.shape[0], m4.shape[1], grid.shape[1], grid.shape[2])
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
    ``(0, 0, H, W)``.

    On CPU (eager or TorchScript), ``F.interpolate``'s nearest indices gather
    the integer masks directly (no float round trip, every label exact; faster than
    ``F.interpolate`` per box and than the batched path); under
    compile/export and on accelerators, the ``resized_crop`` image kernel
    (nearest), batched, for labels float32 holds (the gathers for wider dtypes). Same labels.
    """
    if _mask_route(masks.dtype, 0, torch.float32) == 2 or (_chunked(masks)
                                                           and masks.shape[0] > 0):
        return _resized_crop_masks_gather(masks, top, left, height, width, size)
    return _resized_crop_masks_batched(masks, top, left, height, width, size)


def _resized_crop_masks_batched(masks: Tensor, top: Tensor, left: Tensor, height: Tensor,
                                width: Tensor, size: List[int]) -> Tensor:
    y = resized_crop(masks_as_image(masks, 0), top, left, height, width, size, "nearest", False)
    return image_as_masks(y, masks, 0)


def _resized_crop_masks_gather(masks: Tensor, top: Tensor, left: Tensor, height: Tensor,
                               width: Tensor, size: List[int]) -> Tensor:
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
