"""Geometry transforms: per-sample flips, crops and resized crop; padding, center crop and
resize. (Rotation, affine and perspective: ``_warps``.)

Each module validates its arguments in ``__init__`` (``ValueError``/``TypeError`` naming the
argument), draws per-sample parameters on the input's device in ``make_params`` (random ones),
and calls a pure kernel from :mod:`batchaug.functional`. Random transforms are the identity in
``eval()``; deterministic ones always run. All of them script with ``torch.jit.script``.
"""

import math
import numbers
from typing import Dict, List, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from .. import _random
from ..functional import _kernels as F
from ..functional import _sized as S
from ..functional._crop import pad_crop
from ..functional._targets import (check_flip_indices, check_mask_fill_for,
                                   flip_keypoint_indices, flip_masks, flip_matrix,
                                   image_as_masks, masks_as_image, move_targets,
                                   resized_crop_masks, resized_crop_matrix,
                                   resized_crop_matrix_each)
from ._base import GeometricTransform
from .._validation import (MAX_SIZE, PADDING_MODES, check_choice, check_fill, check_fill_for,
                           check_mask_fill, check_number, check_probability, check_range,
                           check_size)
from .._validation import check_bool


def _flip_index(indices: Optional[Sequence[int]]) -> Tensor:
    """``keypoint_flip_indices`` checked, as an int64 tensor (empty: no reordering)."""
    if indices is None:
        return torch.zeros(0, dtype=torch.int64)
    if not isinstance(indices, (list, tuple)) or not all(
            isinstance(i, numbers.Integral) and not isinstance(i, bool) for i in indices):
        raise TypeError("keypoint_flip_indices must be None or a sequence of ints (a "
                        f"permutation of 0..K-1), got {indices!r}")
    return torch.tensor(check_flip_indices(list(indices)), dtype=torch.int64)


def _reorder_flipped(out: Dict[str, Tensor], flipped: Tensor, flip_index: Tensor, name: str
                     ) -> Dict[str, Tensor]:
    """``keypoint_flip_indices`` applied to the flipped samples' keypoints."""
    if "keypoints" in out and flip_index.shape[0] > 0:
        if out["keypoints"].shape[1] != flip_index.shape[0]:
            raise ValueError(
                "{}: keypoint_flip_indices has {} entries but targets['keypoints'] has {} "
                "keypoints per sample".format(name, flip_index.shape[0],
                                              out["keypoints"].shape[1]))
        kps, valid = flip_keypoint_indices(out["keypoints"], out["keypoint_valid"], flipped,
                                           flip_index)
        out["keypoints"] = kps
        out["keypoint_valid"] = valid
    return out


def _shape_only(sizes: Tensor, channels: int) -> Tensor:
    """A uint8 batch of ``sizes.shape[0]`` images with ``channels`` and no pixels: all that the
    sized draws read of the images (batch size, device, dtype and channel count, for a fill
    check), so that a window can be drawn before any pixel is decoded."""
    return torch.empty((sizes.shape[0], channels, 0, 0), dtype=torch.uint8, device=sizes.device)


class _RandomFlip(GeometricTransform):
    """The two flips, one implementation: ``horizontal`` (a class constant, so TorchScript
    keeps only the branch of its axis) picks left-right or top-bottom."""

    __constants__ = GeometricTransform.__constants__ + ["horizontal"]
    horizontal: bool = True
    takes_sizes = True
    axis_aligned = True
    own_frame = True

    def __init__(self, p: float = 0.5,
                 keypoint_flip_indices: Optional[Sequence[int]] = None) -> None:
        super().__init__()
        self.p = check_probability(p, "p")
        self.register_buffer("flip_index", _flip_index(keypoint_flip_indices),
                             persistent=False)

    def make_params(self, x: Tensor, keys: Optional[Tensor] = None,
                    sizes: Optional[Tensor] = None) -> Tensor:
        """(N,) bool: which samples to flip, drawn on ``x.device`` (keyed: see ``_random``;
        a coin does not depend on the images' ``sizes``)."""
        return _random.bernoulli(x, self.p, keys=keys, draw=0)

    def apply_image(self, x: Tensor, params: Tensor, sizes: Optional[Tensor] = None) -> Tensor:
        """The chosen images flipped (within their own extent ``sizes``, when given)."""
        if sizes is not None:
            return S.flip(x, sizes, params, self.horizontal)
        if self.horizontal:
            return F.hflip_where(x, params)
        return F.vflip_where(x, params)

    def apply_masks(self, m: Tensor, params: Tensor, sizes: Optional[Tensor] = None) -> Tensor:
        """(N, K, H, W) mask labels flipped as their images (a flip moves labels exactly)."""
        return self.apply_image(m, params, sizes)

    def _axes(self, params: Tensor) -> Tuple[Tensor, Tensor]:
        # (horizontal, vertical) flags: the other axis all False
        none = torch.zeros_like(params)
        if self.horizontal:
            return params, none
        return none, params

    def target_matrix(self, params: Tensor, in_size: List[int], out_size: List[int],
                      sizes: Optional[Tensor] = None) -> Tensor:
        """(N, 3, 3) output -> input matrices (boxes' convention, ``x -> W - x`` or
        ``y -> H - y``), centred on each image: the same for every size (``own_frame``)."""
        h, v = self._axes(params)
        return flip_matrix(h, v)

    def keypoint_matrix(self, params: Tensor, in_size: List[int], out_size: List[int],
                        sizes: Optional[Tensor] = None) -> Tensor:
        """As :meth:`target_matrix` with torchvision's keypoint rule (``x -> W - 1 - x``)."""
        h, v = self._axes(params)
        return flip_matrix(h, v, keypoints=True)

    def apply_targets(self, targets: Dict[str, Tensor], params: Tensor, in_size: List[int],
                      out_size: List[int]) -> Dict[str, Tensor]:
        h, v = self._axes(params)
        masks: Optional[Tensor] = None
        if "masks" in targets:
            # one axis only: flipping the other by all-False flags would be a second full pass
            if self.horizontal:
                masks = flip_masks(targets["masks"], params, None)
            else:
                masks = flip_masks(targets["masks"], None, params)
        out = move_targets(targets, flip_matrix(h, v), in_size, out_size, self.mask_fill, masks,
                           flip_matrix(h, v, keypoints=True), axis_aligned=True)
        return self.reorder_keypoints(out, params)

    def reorder_keypoints(self, targets: Dict[str, Tensor], params: Tensor) -> Dict[str, Tensor]:
        return _reorder_flipped(targets, params, self.flip_index, self._name)

    def extra_repr(self) -> str:
        if self.flip_index.numel() > 0:
            return f"p={self.p}, keypoint_flip_indices={self.flip_index.tolist()}"
        return f"p={self.p}"


class RandomHorizontalFlip(_RandomFlip):
    """Flip each image of a batch left-right with probability ``p``, independently per sample.

    torchvision's ``RandomHorizontalFlip`` applied to a batch tensor flips all or none of it;
    this one draws one coin per sample. With :meth:`with_targets`, masks, boxes and keypoints
    flip with their image (torchvision's rules: boxes ``x -> W - x``, keypoints
    ``x -> W - 1 - x``). ``keypoint_flip_indices``: a permutation of the K keypoints applied
    to flipped samples, so a left eye becomes the right eye (COCO's 17 keypoints:
    ``[0, 2, 1, 4, 3, 6, 5, 8, 7, 10, 9, 12, 11, 14, 13, 16, 15]``).

    Example:
        >>> aug = RandomHorizontalFlip(p=0.5)
        >>> aug(torch.zeros(8, 3, 32, 32, dtype=torch.uint8)).shape
        torch.Size([8, 3, 32, 32])
    """

    horizontal = True


class RandomVerticalFlip(_RandomFlip):
    """Flip each image of a batch top-bottom with probability ``p``, independently per sample.
    Targets as :class:`RandomHorizontalFlip` (``keypoint_flip_indices`` for flipped samples).

    Example:
        >>> aug = RandomVerticalFlip(p=0.5)
        >>> aug(torch.zeros(8, 3, 32, 32)).shape
        torch.Size([8, 3, 32, 32])
    """

    horizontal = False


def _check_padding(padding: Union[None, int, Sequence[int]]) -> List[int]:
    """torchvision's padding forms -> [left, top, right, bottom] (all >= 0)."""
    if padding is None:
        return [0, 0, 0, 0]
    if isinstance(padding, bool):
        raise TypeError("padding must be an int or a sequence of 1, 2 or 4 ints, got bool")
    if isinstance(padding, numbers.Integral):
        vals = [int(padding)] * 4
    elif isinstance(padding, (list, tuple)) and all(
        isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in padding
    ):
        if len(padding) == 1:
            vals = [int(padding[0])] * 4
        elif len(padding) == 2:  # (left/right, top/bottom), as torchvision
            vals = [int(padding[0]), int(padding[1]), int(padding[0]), int(padding[1])]
        elif len(padding) == 4:  # (left, top, right, bottom)
            vals = [int(v) for v in padding]
        else:
            raise ValueError(
                f"padding must have 1, 2 or 4 elements (left, top, right, bottom), got {padding!r}"
            )
    else:
        raise TypeError(f"padding must be an int or a sequence of 1, 2 or 4 ints, got {padding!r}")
    if any(v < 0 for v in vals):
        raise ValueError(f"padding must be non-negative, got {padding!r}")
    if any(v > MAX_SIZE for v in vals):
        raise ValueError(f"padding must be at most {MAX_SIZE} pixels, got {padding!r}")
    return vals


def _dense_sizes(sizes: Tensor, height: int, width: int) -> Tensor:
    """(N, 2) int64, every row ``(height, width)``: the sizes after a size-fixing step."""
    return torch.stack((torch.full_like(sizes[:, 0], height),
                        torch.full_like(sizes[:, 1], width)), dim=1)


def _per_sample(value: int, x: Tensor) -> Tensor:
    """(N,) int64 on ``x.device``, all ``value``: a deterministic transform's parameter (one
    fill, the cheapest way to build it: docs/performance.md)."""
    return torch.full([x.shape[0]], value, dtype=torch.int64, device=x.device)


class _Window(GeometricTransform):
    """RandomCrop, Pad and CenterCrop: ``params`` are each sample's window corner
    ``(top, left)`` in input pixels (negative: padding). Targets move by ``target_matrix``;
    masks by the image's own integer kernel, ``apply_masks``, exactly."""

    takes_sizes = True
    axis_aligned = True
    own_frame = True

    def apply_masks(self, m: Tensor, params: Tuple[Tensor, Tensor],
                    sizes: Optional[Tensor] = None) -> Tensor:
        """(N, K, H, W) masks through the image's kernel, ``mask_fill`` as its fill."""
        raise NotImplementedError

    def apply_targets(self, targets: Dict[str, Tensor], params: Tuple[Tensor, Tensor],
                      in_size: List[int], out_size: List[int]) -> Dict[str, Tensor]:
        masks: Optional[Tensor] = None
        if "masks" in targets:
            # the kernels copy labels; masks_as_image takes over where their float fill rounds
            m = targets["masks"]
            fill = self.mask_fill
            image = self.apply_masks(masks_as_image(m, fill, m.dtype), params)
            masks = image_as_masks(image, m, fill, m.dtype)
        return move_targets(targets, self.target_matrix(params, in_size, out_size), in_size,
                            out_size, self.mask_fill, masks, axis_aligned=True)


class _FixedWindow(_Window):
    """RandomCrop and CenterCrop: a ``height x width`` window, so a ragged batch comes out
    dense (``fill`` and ``padding_mode`` where the window leaves the image)."""

    def is_identity(self, x: Tensor, sizes: Optional[Tensor] = None) -> bool:
        # eval() on a ragged batch: the centre window (the output size is fixed)
        return sizes is None and not self.training and self.random

    def _ragged_window(self, x: Tensor, params: Tuple[Tensor, Tensor], sizes: Tensor,
                       fill: List[float]) -> Tensor:
        """The window of each image's own extent (``params`` in its own pixels)."""
        return S.window(x, sizes, params[0], params[1], self.height, self.width, fill,
                        self.padding_mode)

    def window(self, sizes: Tensor, keys: Optional[Tensor] = None, channels: int = 3
               ) -> Tensor:
        """``(N, 4)`` int64 ``(top, left, height, width)``: the window :meth:`with_sizes` takes
        of each uint8 image of size ``sizes[i]`` (negative or past the edge: padding), with
        the same draws and the same random numbers consumed, but no pixels: a loader may
        decode only this part of a JPEG. ``channels``: the images' (the fill is checked
        against it).

        Example:
            >>> RandomCrop(16, pad_if_needed=True).window(torch.tensor([[40, 8]])).shape
            torch.Size([1, 4])
            >>> CenterCrop(16).window(torch.tensor([[40, 50]])).tolist()
            [[12, 17, 16, 16]]
        """
        top, left = self.make_params(_shape_only(sizes, channels), keys, sizes)
        return torch.stack((top, left, torch.full_like(top, self.height),
                            torch.full_like(left, self.width)), 1)

    def fixes_size(self) -> bool:
        return True

    def output_size(self, height: int, width: int) -> List[int]:
        return [self.height, self.width]

    def _own_matrix(self, params: Tuple[Tensor, Tensor], sizes: Tensor) -> Tensor:
        """Each window (in its image's own pixels) as a box of that image, centred on it."""
        top, left = params
        return resized_crop_matrix_each(top, left, torch.full_like(top, self.height),
                                        torch.full_like(left, self.width), sizes,
                                        _dense_sizes(sizes, self.height, self.width))


class RandomCrop(_FixedWindow):
    """Crop a random ``size`` window from each image, independently per sample.

    Same arguments and meaning as ``torchvision.transforms.v2.RandomCrop``: ``padding`` is an
    int (all sides), a 2-sequence (left/right, top/bottom) or a 4-sequence (left, top, right,
    bottom); ``pad_if_needed`` pads an image smaller than ``size`` by the missing amount on both
    sides of that axis; ``fill`` (one value or one per channel) is used by
    ``padding_mode="constant"``; the other modes are "edge", "reflect" and "symmetric".
    Differences: each sample gets its own window; reflect/symmetric padding wider than the image
    repeats the image periodically instead of raising; a ``fill`` the input's dtype cannot hold
    (e.g. 300 or -1 for uint8) is a ``ValueError`` at call time, as in every transform with a
    ``fill``. Sizes and paddings are at most 65536 pixels.

    Targets (:meth:`with_targets`): masks are padded (same ``padding_mode``; ``mask_fill``,
    default 0, in constant mode) and cropped with the image's own integer kernel, boxes and
    keypoints are shifted by each sample's window, as torchvision v2 moves ``tv_tensors``
    (which pads masks with ``fill`` unless given a per-type fill, and refuses boxes and
    keypoints with a non-constant ``padding_mode``: here they are shifted by the padding as in
    constant mode).

    Example (the CIFAR-10 crop; then a segmentation batch):
        >>> aug = RandomCrop(32, padding=4)
        >>> aug(torch.zeros(8, 3, 32, 32, dtype=torch.uint8)).shape
        torch.Size([8, 3, 32, 32])
        >>> x = torch.zeros(2, 3, 40, 40, dtype=torch.uint8)
        >>> targets = {"masks": torch.zeros(2, 40, 40, dtype=torch.int64),
        ...            "boxes": torch.tensor([[[2.0, 2.0, 30.0, 20.0]]]).expand(2, 1, 4)}
        >>> y, t = RandomCrop(32).with_targets(x, targets)
        >>> t["masks"].shape, t["boxes"].shape, t["box_valid"].shape
        (torch.Size([2, 32, 32]), torch.Size([2, 1, 4]), torch.Size([2, 1]))
    """

    def __init__(
        self,
        size: Union[int, Sequence[int]],
        padding: Union[None, int, Sequence[int]] = None,
        pad_if_needed: bool = False,
        fill: Union[float, Sequence[float]] = 0,
        padding_mode: str = "constant",
        *,
        mask_fill: int = 0,
    ) -> None:
        super().__init__()
        self.height, self.width = check_size(size, "size")
        self.padding: List[int] = _check_padding(padding)
        self.pad_if_needed = check_bool(pad_if_needed, "pad_if_needed")
        self.fill: List[float] = check_fill(fill, "fill")
        self.padding_mode: str = check_choice(padding_mode, "padding_mode", PADDING_MODES)
        self.mask_fill = check_mask_fill(mask_fill)

    def output_size(self, height: int, width: int) -> List[int]:
        """``[height, width]`` of the crop; ``ValueError`` when it cannot fit a ``height x
        width`` input (with ``pad_if_needed`` it always fits)."""
        self.padding_for(height, width)
        return [self.height, self.width]

    def padding_for(self, h: int, w: int) -> List[int]:
        """``[left, top, right, bottom]`` padding of an ``h x w`` input, including
        ``pad_if_needed``; ``ValueError`` when the crop cannot fit the padded image."""
        left, top, right, bottom = self.padding[0], self.padding[1], self.padding[2], self.padding[3]
        if self.pad_if_needed:
            ph = h + top + bottom
            if ph < self.height:
                top += self.height - ph
                bottom += self.height - ph
            pw = w + left + right
            if pw < self.width:
                left += self.width - pw
                right += self.width - pw
        if h + top + bottom < self.height or w + left + right < self.width:
            raise ValueError(
                "RandomCrop: crop size ({}, {}) is larger than the padded image ({}, {}); "
                "use pad_if_needed=True or more padding".format(
                    self.height, self.width, h + top + bottom, w + left + right
                )
            )
        return [left, top, right, bottom]

    def make_params(self, x: Tensor, keys: Optional[Tensor] = None,
                    sizes: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
        """(top, left) int64 tensors of shape (N,) on x.device: offsets into the padded batch,
        or with ``sizes`` each window in its own image's pixels (negative: padding), drawn
        from each image's padded size (eval: the centre window)."""
        # the first step of forward and with_targets: the fill is checked against the dtype,
        # which is known only here
        if self.padding_mode == "constant":
            check_fill_for(self.fill, x, "RandomCrop")
        if sizes is not None:
            # per-image bounds draw through integers_below (float64 uniforms): another
            # stream of numbers than the dense torch.randint, so the dense rule stays
            if not self.pad_if_needed:
                raise ValueError("RandomCrop on a ragged batch (sizes) needs "
                                 "pad_if_needed=True, as an image may be smaller than the crop")
            top = self._offset(sizes[:, 0], self.height, self.padding[1], self.padding[3],
                               keys, 0)
            left = self._offset(sizes[:, 1], self.width, self.padding[0], self.padding[2],
                                keys, 1)
            return top, left
        pad = self.padding_for(x.shape[2], x.shape[3])
        ph = x.shape[2] + pad[1] + pad[3]
        pw = x.shape[3] + pad[0] + pad[2]
        top = _random.integers(x, 0, ph - self.height + 1, keys=keys, draw=0)
        left = _random.integers(x, 0, pw - self.width + 1, keys=keys, draw=1)
        return top, left

    def apply_image(self, x: Tensor, params: Tuple[Tensor, Tensor],
                    sizes: Optional[Tensor] = None) -> Tensor:
        if sizes is not None:
            return self._ragged_window(x, params, sizes, self.fill)
        pad = self.padding_for(x.shape[2], x.shape[3])
        return pad_crop(x, params[0], params[1], self.height, self.width, pad, self.fill,
                        self.padding_mode)

    def target_matrix(self, params: Tuple[Tensor, Tensor], in_size: List[int],
                      out_size: List[int], sizes: Optional[Tensor] = None) -> Tensor:
        """(N, 3, 3) output -> input matrices: the window as a box of the input (padding:
        negative offsets; each image's own with ``sizes``)."""
        if sizes is not None:
            return self._own_matrix(params, sizes)
        top, left = params
        pad = self.padding_for(in_size[0], in_size[1])  # offsets into the padded batch
        return resized_crop_matrix(top - pad[1], left - pad[0],
                                   torch.full_like(top, self.height),
                                   torch.full_like(left, self.width), in_size, out_size)

    def apply_masks(self, m: Tensor, params: Tuple[Tensor, Tensor],
                    sizes: Optional[Tensor] = None) -> Tensor:
        if self.padding_mode == "constant":
            check_mask_fill_for(self.mask_fill, m, "RandomCrop")
        if sizes is not None:
            return self._ragged_window(m, params, sizes, [float(self.mask_fill)])
        pad = self.padding_for(m.shape[2], m.shape[3])
        return pad_crop(m, params[0], params[1], self.height, self.width, pad,
                        [float(self.mask_fill)], self.padding_mode)

    def _offset(self, length: Tensor, crop: int, before: int, after: int,
                keys: Optional[Tensor], draw: int) -> Tensor:
        padded = length + before + after
        extra = torch.clamp(crop - padded, min=0)  # pad_if_needed, on both sides
        pad_before = extra + before
        padded = padded + 2 * extra
        if not self.training:
            return S.center_offset(padded, crop) - pad_before
        return _random.integers_below(padded - crop + 1, keys, draw) - pad_before

    def extra_repr(self) -> str:
        mask_fill = f", mask_fill={self.mask_fill}" if self.mask_fill != 0 else ""
        return (
            f"size=({self.height}, {self.width}), padding={self.padding}, "
            f"pad_if_needed={self.pad_if_needed}, fill={self.fill}, "
            f"padding_mode={self.padding_mode!r}{mask_fill}"
        )


class Pad(_Window):
    """Pad every image of a batch by the same ``padding``, as ``torchvision.transforms.v2.Pad``.

    ``padding`` is an int (all sides), a 1-sequence, a 2-sequence (left/right, top/bottom) or a
    4-sequence (left, top, right, bottom); ``fill`` (one value or one per channel) is used by
    ``padding_mode="constant"``; the other modes are "edge", "reflect" and "symmetric".
    Deterministic: runs in train and eval. Differences: reflect/symmetric padding wider than
    the image continues the mirror pattern periodically (torchvision raises); ``fill`` is
    ignored outside "constant" mode (torchvision raises for a per-channel one); a ``fill`` the
    input's dtype cannot hold is a ``ValueError`` at call time; paddings are at most 65536
    pixels; always returns a new tensor (also for zero padding).

    Targets (:meth:`with_targets`): masks are padded with the image's kernel and
    ``padding_mode`` (``mask_fill``, default 0, in constant mode), boxes and keypoints are
    shifted by the left/top padding (for every mode: torchvision refuses boxes and keypoints
    with a non-constant one).

    Example:
        >>> Pad([1, 2, 3, 4], padding_mode="reflect")(torch.zeros(8, 3, 32, 32)).shape
        torch.Size([8, 3, 38, 36])
    """

    random = False
    takes_keys = False

    def __init__(
        self,
        padding: Union[int, Sequence[int]],
        fill: Union[float, Sequence[float]] = 0,
        padding_mode: str = "constant",
        *,
        mask_fill: int = 0,
    ) -> None:
        super().__init__()
        if padding is None:
            raise TypeError("padding must be an int or a sequence of 1, 2 or 4 ints, got None")
        self.padding: List[int] = _check_padding(padding)
        self.fill: List[float] = check_fill(fill, "fill")
        self.padding_mode: str = check_choice(padding_mode, "padding_mode", PADDING_MODES)
        self.mask_fill = check_mask_fill(mask_fill)

    def make_params(self, x: Tensor, keys: Optional[Tensor] = None,
                    sizes: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
        """(top, left) int64 (N,): the output's corner in input pixels, ``-padding`` (the
        same for every sample, whatever its size)."""
        if self.padding_mode == "constant":
            check_fill_for(self.fill, x, "Pad")  # the dtype is known only at the call
        return _per_sample(-self.padding[1], x), _per_sample(-self.padding[0], x)

    def apply_image(self, x: Tensor, params: Tuple[Tensor, Tensor],
                    sizes: Optional[Tensor] = None) -> Tensor:
        if sizes is not None:
            return self._ragged_pad(x, params, sizes, self.fill)
        # params hold -padding for every sample: the kernel takes it as ints (no device sync)
        return F.pad(x, self.padding, self.fill, self.padding_mode)

    def _ragged_pad(self, x: Tensor, params: Tuple[Tensor, Tensor], sizes: Tensor,
                    fill: List[float]) -> Tensor:
        """Each image padded on its own extent: the window at ``-padding`` of the padded
        canvas's size."""
        p = self.padding
        return S.window(x, sizes, params[0], params[1], x.shape[2] + p[1] + p[3],
                        x.shape[3] + p[0] + p[2], fill, self.padding_mode)

    def target_matrix(self, params: Tuple[Tensor, Tensor], in_size: List[int],
                      out_size: List[int], sizes: Optional[Tensor] = None) -> Tensor:
        """(N, 3, 3) output -> input matrices: the output as a box of the input (of each
        image's own with ``sizes``)."""
        top, left = params
        if sizes is not None:
            out_sizes = self.sizes_after(sizes, sizes)
            return resized_crop_matrix_each(top, left, out_sizes[:, 0], out_sizes[:, 1], sizes,
                                            out_sizes)
        return resized_crop_matrix(top, left, torch.full_like(top, out_size[0]),
                                   torch.full_like(left, out_size[1]), in_size, out_size)

    def apply_masks(self, m: Tensor, params: Tuple[Tensor, Tensor],
                    sizes: Optional[Tensor] = None) -> Tensor:
        if self.padding_mode == "constant":
            check_mask_fill_for(self.mask_fill, m, "Pad")
        if sizes is not None:
            return self._ragged_pad(m, params, sizes, [float(self.mask_fill)])
        return F.pad(m, self.padding, [float(self.mask_fill)], self.padding_mode)

    def output_size(self, height: int, width: int) -> List[int]:
        p = self.padding
        return [height + p[1] + p[3], width + p[0] + p[2]]

    def sizes_after(self, out: Tensor, sizes: Tensor) -> Tensor:
        p = self.padding
        return torch.stack((sizes[:, 0] + (p[1] + p[3]), sizes[:, 1] + (p[0] + p[2])), dim=1)


def _center_crop_anchor(size: int, crop: int) -> int:
    """Where ``F.center_crop``'s window starts in input coordinates (negative: padding)."""
    pad_before = (crop - size) // 2 if crop > size else 0
    pad_after = (crop - size + 1) // 2 if crop > size else 0
    padded = size + pad_before + pad_after
    d = padded - crop  # torchvision's anchor on the padded image: round half to even
    k = d // 2
    if d % 2 == 1 and k % 2 == 1:
        k += 1
    return k - pad_before


class CenterCrop(_FixedWindow):
    """Crop the center ``size`` of every image (zero-padding where ``size`` exceeds the image),
    exactly as ``torchvision.transforms.v2.CenterCrop``. Deterministic: runs in train and eval.

    Targets (:meth:`with_targets`): masks are cropped (zero-padded) by the same kernel, boxes
    and keypoints shifted by the window, as torchvision v2; where the crop exceeds the image
    by 3, 7, 11... pixels torchvision shifts boxes and keypoints one pixel further than its
    image and mask, here they follow the image.

    Example:
        >>> CenterCrop(24)(torch.zeros(8, 3, 32, 32)).shape
        torch.Size([8, 3, 24, 24])
    """

    random = False
    takes_keys = False

    def __init__(self, size: Union[int, Sequence[int]]) -> None:
        super().__init__()
        self.height, self.width = check_size(size, "size")
        # torchvision's padding where the crop exceeds the image (the ragged path's window)
        self.fill: List[float] = [0.0]
        self.padding_mode: str = "constant"

    def make_params(self, x: Tensor, keys: Optional[Tensor] = None,
                    sizes: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
        """(top, left) int64 (N,): the window's corner in input pixels (negative: padding),
        torchvision's rule on the batch's size or on each image's own ``sizes``."""
        if sizes is not None:
            return (S.center_offset(sizes[:, 0], self.height),
                    S.center_offset(sizes[:, 1], self.width))
        # one size: the anchor in Python ints, one fill per tensor (fewer kernels)
        return (_per_sample(_center_crop_anchor(x.shape[2], self.height), x),
                _per_sample(_center_crop_anchor(x.shape[3], self.width), x))

    def apply_image(self, x: Tensor, params: Tuple[Tensor, Tensor],
                    sizes: Optional[Tensor] = None) -> Tensor:
        if sizes is not None:
            return self._ragged_window(x, params, sizes, self.fill)
        # params hold the same window for every sample: the kernel takes it as ints
        return F.center_crop(x, self.height, self.width)

    def target_matrix(self, params: Tuple[Tensor, Tensor], in_size: List[int],
                      out_size: List[int], sizes: Optional[Tensor] = None) -> Tensor:
        """(N, 3, 3) output -> input matrices: the window as a box of the input (of each
        image's own with ``sizes``)."""
        if sizes is not None:
            return self._own_matrix(params, sizes)
        top, left = params
        return resized_crop_matrix(top, left, torch.full_like(top, self.height),
                                   torch.full_like(left, self.width), in_size, out_size)

    def apply_masks(self, m: Tensor, params: Tuple[Tensor, Tensor],
                    sizes: Optional[Tensor] = None) -> Tensor:
        if sizes is not None:
            return self._ragged_window(m, params, sizes, [float(self.mask_fill)])
        return F.center_crop(m, self.height, self.width)

    def extra_repr(self) -> str:
        return f"size=({self.height}, {self.width})"


# RandomResizedCrop's scale and ratio: far beyond any use, and keeps areas/aspects finite in
# float32 (the box draw). scale above 1 only lowers the chance that an attempt fits.
_MIN_RRC, _MAX_RRC = 1e-6, 1e6


def _check_positive_range(value: Sequence[float], name: str) -> Tuple[float, float]:
    return check_range(value, name, _MIN_RRC, _MAX_RRC)


class _ResizedBox(GeometricTransform):
    """Shared by RandomResizedCrop and Resize, whose ``params`` are a box per sample
    ``(top, left, height, width)`` resized to the output: their targets."""

    takes_sizes = True
    axis_aligned = True
    own_frame = True

    def target_matrix(self, params: Tuple[Tensor, Tensor, Tensor, Tensor], in_size: List[int],
                      out_size: List[int], sizes: Optional[Tensor] = None) -> Tensor:
        """(N, 3, 3) output -> input matrices of each sample's box resized to the output
        (centred on each image's own extent with ``sizes``)."""
        top, left, h, w = params
        if sizes is not None:
            return resized_crop_matrix_each(top, left, h, w, sizes,
                                            _dense_sizes(sizes, out_size[0], out_size[1]))
        return resized_crop_matrix(top, left, h, w, in_size, out_size)

    def apply_targets(self, targets: Dict[str, Tensor],
                      params: Tuple[Tensor, Tensor, Tensor, Tensor], in_size: List[int],
                      out_size: List[int]) -> Dict[str, Tensor]:
        """Masks by the nearest resize rule (``resized_crop_masks``), boxes and keypoints by
        the axis-aligned path of ``move_targets``."""
        top, left, h, w = params
        masks: Optional[Tensor] = None
        if "masks" in targets:
            masks = resized_crop_masks(targets["masks"], top, left, h, w, out_size)
        return move_targets(targets, resized_crop_matrix(top, left, h, w, in_size, out_size),
                            in_size, out_size, self.mask_fill, masks, axis_aligned=True)

    def apply_masks(self, m: Tensor, params: Tuple[Tensor, Tensor, Tensor, Tensor],
                    sizes: Optional[Tensor] = None) -> Tensor:
        """(N, K, H, W) mask labels: each box resized by the masks' nearest rule, as
        :meth:`apply_targets` resizes them (no padding is read)."""
        top, left, h, w = params
        return resized_crop_masks(m, top, left, h, w,
                                  self.output_size(m.shape[2], m.shape[3]))

    def fixes_size(self) -> bool:
        return True

    def output_size(self, height: int, width: int) -> List[int]:
        return [self.size[0], self.size[1]]


class RandomResizedCrop(_ResizedBox):
    """Crop a random box from each image (its own box per sample) and resize it to ``size``.

    Boxes are drawn as torchvision's ``RandomResizedCrop.get_params`` draws them: area fraction
    uniform in ``scale``, log aspect ratio uniform in ``log(ratio)``, up to 10 attempts, and the
    same centre-crop fallback when none fits. Here the 10 attempts are drawn for every sample at
    once and the first one that fits is picked with tensor ops (no host sync).

    Differences from torchvision:

    * Training honours ``antialias`` (bilinear, bicubic; see
      :func:`batchaug.functional.resized_crop`
      for which path runs where). ``True`` (default, as torchvision): on CPU (eager or
      TorchScript) each box is resized by torch's antialiased kernel, **exactly**
      ``v2.functional.resized_crop(img, top, left, h, w, size, antialias=True)`` per sample (uint8
      stays uint8: no float round trip); under ``torch.compile``/``torch.export`` and on GPU the
      same filter runs batched in float32 (uint8 within 1 of torchvision's CPU uint8 result).
      ``False``: one batched ``grid_sample``; each output pixel interpolates the nearest 2x2
      pixels of its box, so a strongly shrunk box can alias (torchvision's ``antialias=False``
      up to float rounding).
    * ``interpolation="bicubic"`` (either ``antialias``): on CPU (eager or TorchScript) each
      box goes through torch's bicubic ``F.interpolate``, **exactly** torchvision's
      ``resized_crop(..., interpolation=BICUBIC)`` per sample; under compile/export and on GPU
      the same weights (antialiased cubic a = -0.5, or the a = -0.75 cubic convolution without
      antialias) run batched in float32: floats equal torchvision's to float rounding; uint8
      rounds and clamps between the width and height passes as torch's CPU uint8 kernel does
      (within 2 of torchvision on CPU; torchvision on GPU skips that clamp and differs from
      its own CPU result by up to ~30 steps at sharp edges).
    * **eval() returns images of ``size``**, so the model sees the same size in training and
      evaluation (and an exported eval model takes raw images of the stored size). An input
      that already has the output size is returned as it is (the identity, as every random
      transform in eval): a cache built with ``--resize 256 --center-crop 224`` is not cropped
      a second time. Any other input gets a deterministic centre crop + resize: the largest
      centred box with the output's aspect ratio, shrunk to ``eval_crop_pct`` of each side
      (0.875: the usual ``Resize(256)`` + ``CenterCrop(224)`` evaluation recipe, whatever the
      stored size), resized with ``antialias``; it equals ``v2.functional.resized_crop`` with
      that box. Pass ``eval_crop_pct=None`` to make eval() the identity for every input size.

    Targets (:meth:`with_targets`): masks are cropped and resized with nearest by
    ``F.interpolate``'s rule (torchvision's ``resize_mask``), boxes and keypoints by the
    sample's box and scale, as ``v2.functional.resized_crop`` moves ``tv_tensors``; in eval()
    they follow the eval box (or stay as they are where eval() is the identity).

    Example:
        >>> aug = RandomResizedCrop(224)
        >>> aug(torch.zeros(4, 3, 256, 256, dtype=torch.uint8)).shape
        torch.Size([4, 3, 224, 224])
    """

    eval_crop_pct: Optional[float]

    def __init__(
        self,
        size: Union[int, Sequence[int]],
        scale: Sequence[float] = (0.08, 1.0),
        ratio: Sequence[float] = (3.0 / 4.0, 4.0 / 3.0),
        interpolation: str = "bilinear",
        antialias: bool = True,
        *,
        eval_crop_pct: Optional[float] = 0.875,
    ) -> None:
        super().__init__()
        self.size = list(check_size(size, "size"))
        self.scale = _check_positive_range(scale, "scale")
        self.ratio = _check_positive_range(ratio, "ratio")
        self.interpolation = check_choice(interpolation, "interpolation", _RESIZE_INTERPOLATIONS)
        self.antialias = check_bool(antialias, "antialias")
        if eval_crop_pct is not None:
            eval_crop_pct = check_number(eval_crop_pct, "eval_crop_pct", 0.0, 1.0, lower_open=True)
        self.eval_crop_pct = eval_crop_pct
        self.log_ratio = (math.log(self.ratio[0]), math.log(self.ratio[1]))
        self.attempts = 10  # as torchvision's get_params

    def is_identity(self, x: Tensor, sizes: Optional[Tensor] = None) -> bool:
        """eval() is the identity with ``eval_crop_pct=None`` or an input of the output size
        (otherwise it crops the eval box); on a ragged batch (``sizes``) never: each image
        comes out at ``size``."""
        return sizes is None and not self.training and (self.eval_crop_pct is None or (
            x.shape[-2] == self.size[0] and x.shape[-1] == self.size[1]))

    def make_params(self, x: Tensor, keys: Optional[Tensor] = None,
                    sizes: Optional[Tensor] = None) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
        """Per-sample boxes ``(top, left, height, width)``, each (N,) int64 on ``x.device``
        (in eval(): every sample's :meth:`eval_box`), drawn from the batch's size or each
        image's own ``sizes``."""
        if not self.training:
            if sizes is not None:
                return self._eval_boxes(sizes)
            t, l, bh, bw = self.eval_box(x.shape[-2], x.shape[-1])
            return (_per_sample(t, x), _per_sample(l, x), _per_sample(bh, x),
                    _per_sample(bw, x))
        if sizes is None:
            height = _per_sample(x.shape[-2], x).view(-1, 1)
            width = _per_sample(x.shape[-1], x).view(-1, 1)
        else:
            height = sizes[:, 0].view(-1, 1)
            width = sizes[:, 1].view(-1, 1)
        k = self.attempts
        area = (height * width).to(torch.float32)
        target_area = area * _random.uniform(x, self.scale[0], self.scale[1], k, keys=keys,
                                             draw=0)
        aspect = torch.exp(_random.uniform(x, self.log_ratio[0], self.log_ratio[1], k,
                                           keys=keys, draw=1))
        ws = torch.sqrt(target_area * aspect).round().to(torch.int64)
        hs = torch.sqrt(target_area / aspect).round().to(torch.int64)
        fits = (ws > 0) & (ws <= width) & (hs > 0) & (hs <= height)
        # argmax returns the first maximum: the first attempt that fits, as torchvision's loop
        first = fits.to(torch.int32).argmax(dim=1, keepdim=True)
        found = fits.any(dim=1)
        height = height.view(-1)
        width = width.view(-1)
        # torchvision's fallback when no attempt fits (its Python float arithmetic, in
        # float64): the whole image narrowed to ``ratio``, at least one pixel (torchvision can
        # round a side to 0, e.g. a 1x1 image with ratio (0.5, 0.5), and then fail)
        hf = height.to(torch.float64)
        wf = width.to(torch.float64)
        in_ratio = wf / hf
        # (torch.round: half to even, as Python's round)
        fb_h = torch.where(in_ratio < self.ratio[0],
                           torch.round(wf / self.ratio[0]).to(torch.int64), height).clamp_min(1)
        fb_w = torch.where(in_ratio > self.ratio[1],
                           torch.round(hf * self.ratio[1]).to(torch.int64), width).clamp_min(1)
        h = torch.where(found, hs.gather(1, first).squeeze(1), fb_h)
        w = torch.where(found, ws.gather(1, first).squeeze(1), fb_w)
        # uniform offsets as torch.randint(0, H - h + 1); the min() guards float rounding at 1.0
        top = torch.floor(_random.uniform(x, 0.0, 1.0, keys=keys, draw=2)
                          * (height - h + 1).to(torch.float32))
        left = torch.floor(_random.uniform(x, 0.0, 1.0, keys=keys, draw=3)
                           * (width - w + 1).to(torch.float32))
        top = torch.minimum(top.to(torch.int64), height - h)
        left = torch.minimum(left.to(torch.int64), width - w)
        top = torch.where(found, top, torch.div(height - h, 2, rounding_mode="floor"))
        left = torch.where(found, left, torch.div(width - w, 2, rounding_mode="floor"))
        return top, left, h, w

    def eval_box(self, height: int, width: int) -> Tuple[int, int, int, int]:
        """The fixed ``(top, left, height, width)`` box used in eval() (see the class doc)."""
        pct = self.eval_crop_pct
        if pct is None:
            pct = 1.0
        oh, ow = self.size[0], self.size[1]
        if width * oh >= height * ow:  # image wider than the output: full height
            bh = float(height)
            bw = height * ow / oh
        else:
            bw = float(width)
            bh = width * oh / ow
        # round: half to even, eager and scripted (where it returns a float)
        h = max(1, min(height, int(round(bh * pct))))
        w = max(1, min(width, int(round(bw * pct))))
        # offsets as torchvision's center_crop
        return int(round((height - h) / 2.0)), int(round((width - w) / 2.0)), h, w

    def apply_image(self, x: Tensor, params: Tuple[Tensor, Tensor, Tensor, Tensor],
                    sizes: Optional[Tensor] = None) -> Tensor:
        if sizes is not None:
            top, left, h, w = params
            return S.resized_boxes(x, top, left, h, w, self.size, self.interpolation,
                                   self.antialias)
        if not self.training:
            # the eval box is the same for every sample (params hold it per sample): resize one
            # slice of the batch, with the box as ints (no device sync)
            t, l, h, w = self.eval_box(x.shape[-2], x.shape[-1])
            return F.resize(
                x[:, :, t:t + h, l:l + w], self.size, self.interpolation, self.antialias
            )
        top, left, h, w = params
        return F.resized_crop(
            x, top, left, h, w, self.size, self.interpolation, self.antialias
        )

    def window(self, sizes: Tensor, keys: Optional[Tensor] = None, channels: int = 3
               ) -> Tensor:
        """``(N, 4)`` int64 ``(top, left, height, width)``: the box of each image (of size
        ``sizes[i]``) that :meth:`with_sizes` resizes to ``size``, with the same draws and the
        same random numbers consumed (:meth:`make_params` with ``sizes``), but no pixels: a
        loader decodes only these boxes of its JPEGs (``batchaug.data.roi_crop``).
        ``channels``: the images' (unused here; as :meth:`RandomCrop.window`).

        Example:
            >>> box = RandomResizedCrop(16).window(torch.tensor([[40, 50], [30, 20]]))
            >>> box.shape
            torch.Size([2, 4])
        """
        return torch.stack(self.make_params(_shape_only(sizes, channels), keys, sizes), 1)

    def _eval_boxes(self, sizes: Tensor) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
        """:meth:`eval_box` per image (an image already of the output size, or any image with
        ``eval_crop_pct=None``: the whole image)."""
        height, width = sizes[:, 0], sizes[:, 1]
        pct = self.eval_crop_pct
        if pct is None:
            pct = 1.0
        oh, ow = self.size[0], self.size[1]
        hf = height.to(torch.float64)
        wf = width.to(torch.float64)
        wide = width * oh >= height * ow
        bh = torch.where(wide, hf, wf * oh / ow)
        bw = torch.where(wide, hf * ow / oh, wf)
        h = torch.minimum(torch.round(bh * pct).to(torch.int64), height).clamp_min(1)
        w = torch.minimum(torch.round(bw * pct).to(torch.int64), width).clamp_min(1)
        same = (height == oh) & (width == ow)
        if self.eval_crop_pct is None:
            same = torch.ones_like(same)
        h = torch.where(same, height, h)
        w = torch.where(same, width, w)
        top = torch.round((height - h).to(torch.float64) / 2.0).to(torch.int64)
        left = torch.round((width - w).to(torch.float64) / 2.0).to(torch.int64)
        return top, left, h, w

    def extra_repr(self) -> str:
        return (
            f"size={tuple(self.size)}, scale={self.scale}, ratio=({self.ratio[0]:.4g}, "
            f"{self.ratio[1]:.4g}), interpolation={self.interpolation!r}, "
            f"antialias={self.antialias}, eval_crop_pct={self.eval_crop_pct}"
        )


def _check_resize_size(size: Union[int, Sequence[int]]) -> List[int]:
    if isinstance(size, bool):
        raise TypeError("size must be an int or a sequence of 1 or 2 ints, got bool")
    if isinstance(size, numbers.Integral):
        size = [int(size)]
    if (
        not isinstance(size, (list, tuple))
        or len(size) not in (1, 2)
        or not all(isinstance(s, numbers.Integral) and not isinstance(s, bool) for s in size)
    ):
        raise TypeError(f"size must be an int or a sequence of 1 or 2 ints, got {size!r}")
    if any(s <= 0 for s in size):
        raise ValueError(f"size must be positive, got {size!r}")
    if any(s > MAX_SIZE for s in size):
        raise ValueError(f"size must be at most {MAX_SIZE} pixels per side, got {size!r}")
    return [int(s) for s in size]


# torchvision offers bicubic for tensors in resize and resized_crop (not in its grid-sampled
# warps)
_RESIZE_INTERPOLATIONS = ("nearest", "bilinear", "bicubic")


class Resize(_ResizedBox):
    """Resize every image of the batch to ``size`` (deterministic, runs in train and eval).

    As ``torchvision.transforms.v2.Resize``: ``size`` is ``(h, w)``, or one int (or a 1-element
    sequence) for the shorter side, keeping the aspect ratio (so the output shape follows the
    input shape). ``max_size`` caps the longer side when ``size`` is one int (both sides are
    scaled down, torchvision's rule), or sets it when ``size`` is None. ``interpolation``:
    "nearest", "bilinear" or "bicubic"; ``antialias`` (bilinear and bicubic) defaults to True as
    in torchvision. Output equals ``v2.functional.resize`` on the
    batch. Targets (:meth:`with_targets`): masks are resized with nearest by
    ``F.interpolate``'s rule (torchvision's ``resize_mask``), boxes and keypoints scaled, as
    ``v2.functional.resize`` moves ``tv_tensors``.

    Example:
        >>> Resize(16)(torch.zeros(2, 3, 32, 64, dtype=torch.uint8)).shape
        torch.Size([2, 3, 16, 32])
    """

    max_size: Optional[int]
    random = False
    takes_keys = False

    def __init__(
        self,
        size: Union[None, int, Sequence[int]],
        interpolation: str = "bilinear",
        max_size: Optional[int] = None,
        antialias: bool = True,
    ) -> None:
        super().__init__()
        if max_size is not None:
            if isinstance(max_size, bool) or not isinstance(max_size, numbers.Integral):
                raise TypeError(f"max_size must be None or an int, got {max_size!r}")
            if not 1 <= max_size <= MAX_SIZE:
                raise ValueError(f"max_size must be in [1, {MAX_SIZE}], got {max_size!r}")
            max_size = int(max_size)
        self.max_size = max_size
        if size is None:
            if max_size is None:
                raise ValueError("size can be None only with max_size (the longer side)")
            self.size: List[int] = []
        else:
            self.size = _check_resize_size(size)
            if max_size is not None:
                if len(self.size) != 1:
                    raise ValueError(
                        "max_size needs size to be one int (the shorter side) or None, got "
                        f"size={size!r}"
                    )
                if max_size <= self.size[0]:
                    raise ValueError(
                        f"max_size = {max_size} must be greater than the shorter side's size "
                        f"{self.size[0]}"
                    )
        self.interpolation = check_choice(interpolation, "interpolation", _RESIZE_INTERPOLATIONS)
        self.antialias = check_bool(antialias, "antialias")

    def output_size(self, h: int, w: int) -> List[int]:
        """``[height, width]`` of the output for an ``h x w`` input (``ValueError`` when a side
        would be empty)."""
        out = F.resized_output_size(h, w, self.size, self.max_size)
        if out[0] < 1 or out[1] < 1:
            raise ValueError(
                "Resize: a {}x{} image would become {}x{}; the aspect ratio is too extreme for "
                "size={} and max_size={}".format(h, w, out[0], out[1], self.size,
                                                 self.max_size))
        return out

    def fixes_size(self) -> bool:
        """``size=(h, w)`` makes a ragged batch dense; one int or ``max_size`` keeps each
        image's aspect ratio (on a ragged batch only directly before a crop, as one window)."""
        return len(self.size) == 2

    def make_params(self, x: Tensor, keys: Optional[Tensor] = None,
                    sizes: Optional[Tensor] = None) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
        """The whole image as every sample's box ``(top, left, height, width)``, (N,) int64
        (a resize is a resized crop of that box): each image's own extent with ``sizes``."""
        if sizes is not None:
            # each image's own extent; the batch's one size stays Python ints below (one fill
            # per tensor, and Resize(int)'s output size follows from it)
            if len(self.size) != 2:
                raise ValueError("Resize on a ragged batch (sizes) needs size=(h, w): one int "
                                 "or max_size keeps each image's aspect ratio, so the output "
                                 "would still be ragged (follow it with CenterCrop or "
                                 "RandomCrop in an Augment, not scripted: one window of each "
                                 "resized image)")
            zero = torch.zeros_like(sizes[:, 0])
            return zero, zero, sizes[:, 0], sizes[:, 1]
        self.output_size(x.shape[-2], x.shape[-1])  # refuse an empty output before anything
        zero = _per_sample(0, x)
        return zero, zero, _per_sample(x.shape[-2], x), _per_sample(x.shape[-1], x)

    def apply_image(self, x: Tensor, params: Tuple[Tensor, Tensor, Tensor, Tensor],
                    sizes: Optional[Tensor] = None) -> Tensor:
        if sizes is not None:
            top, left, h, w = params
            return S.resized_boxes(x, top, left, h, w, self.size, self.interpolation,
                                   self.antialias)
        return F.resize(x, self.output_size(x.shape[-2], x.shape[-1]), self.interpolation,
                        self.antialias)

    def extra_repr(self) -> str:
        size = self.size[0] if len(self.size) == 1 else (
            None if len(self.size) == 0 else tuple(self.size))
        return (f"size={size}, interpolation={self.interpolation!r}, max_size={self.max_size}, "
                f"antialias={self.antialias}")
