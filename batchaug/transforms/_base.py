"""The transform protocol: one ``forward`` and one ``with_targets`` for every transform.

A transform is two steps. ``make_params(x, keys)`` draws its per-sample parameters on ``x``'s
device (tensors with the batch first; keyed draws with ``keys``, see :mod:`batchaug._random`),
and ``apply_image(x, params)`` applies them with a pure kernel from :mod:`batchaug.functional`.
The base's ``forward`` checks the batch and the keys, returns the input unchanged in ``eval()``
(random transforms; ``is_identity``), and runs the two steps. ``with_targets`` runs the same two
steps and gives the same ``params`` to ``apply_targets``, so masks, boxes and keypoints are
moved by exactly the geometry their image was.

:class:`Transform` leaves targets as they are (colour, erasing, normalisation: torchvision's
choice); :class:`GeometricTransform` moves them through the one generic path,
:func:`batchaug.functional.move_targets` (flips: torchvision's keypoint rule ``w - 1 - x``).

Why ``apply_targets`` is written in each geometric subclass and not once here: TorchScript
types a method's arguments from its annotations, and each transform's ``params`` has its own
type, so only the subclass can spell the method that receives them (subclasses whose
``params`` have one type share one: ``_Window`` for RandomCrop, Pad and CenterCrop).

Class attributes (constants, also for TorchScript; a subclass sets its own values):

- ``takes_keys``: ``forward(x, keys=None)`` takes per-sample keys, so containers pass them. Your
  own module opts in with ``takes_keys: typing.Final[bool] = True`` (``Final`` makes it a
  constant for TorchScript).
- ``random``: ``False`` for deterministic transforms (``Normalize``, ``Resize``...), which run
  in ``eval()`` too.
"""
from __future__ import annotations

import inspect
from typing import Dict, List, Optional, Tuple

import torch
from torch import Tensor, nn

from .._validation import check_batch, check_keys
from ..functional._sized import check_sizes, move_targets_sized, sizes_of, without_sizes
from ..functional._targets import (check_mask_fill_for, check_targets, image_as_masks,
                                   masks_as_image)


class Transform(nn.Module):
    """Base of batchaug's transforms (see the module doc). Targets pass through unchanged.

    A subclass defines ``make_params(x, keys=None)`` and ``apply_image(x, params)``; the base
    gives it ``forward`` and ``with_targets``.

    Example:
        >>> class Invert(Transform):
        ...     def make_params(self, x, keys=None):
        ...         return batchaug._random.bernoulli(x, 0.5, keys=keys, draw=0)
        ...     def apply_image(self, x, params):
        ...         return torch.where(params.view(-1, 1, 1, 1), 255 - x, x)
        >>> Invert()(torch.zeros(4, 3, 8, 8, dtype=torch.uint8)).shape
        torch.Size([4, 3, 8, 8])
    """

    __constants__ = ["takes_keys", "random", "takes_sizes"]
    takes_keys: bool = True
    random: bool = True
    # takes_sizes: runs on ragged batches (``with_sizes``, ``targets["sizes"]``): pointwise
    # photometric transforms (the padding is never read), geometric ones with a sized path
    takes_sizes: bool = False

    def __init__(self) -> None:
        super().__init__()
        self._name: str = type(self).__name__
        self._constants = {}  # name -> (values, dtype)

    def _constant(self, name: str, values: list, dtype: torch.dtype) -> None:
        """``values`` as the buffer ``name``: it follows ``.to(device)`` (nothing is copied per
        call) and stays exact ``dtype`` under any cast (``_apply``)."""
        self._constants[name] = (values, dtype)
        self.register_buffer(name, torch.tensor(values, dtype=dtype), persistent=False)

    def _apply(self, fn, recurse=True):  # type: ignore[override]
        super()._apply(fn, recurse)
        for name, (values, dtype) in self._constants.items():
            device = getattr(self, name).device
            setattr(self, name, torch.tensor(values, dtype=dtype, device=device))
        return self

    # constructor arguments the generic repr shows only when they differ from their default
    # (mask_fill: the label most users never set)
    _repr_when_set = ("mask_fill",)
    # constructor arguments stored under another name (group_by_branch -> self.group)
    _repr_attrs = {"group_by_branch": "group"}

    def extra_repr(self) -> str:
        """``name=value`` for each ``__init__`` parameter stored as a plain attribute of the
        same name (``_repr_attrs``: of another), in the signature's order, so ``print(aug)``
        reads like the code that built it (torchvision v2's ``Transform.extra_repr``)."""
        parts: List[str] = []
        for name, param in inspect.signature(type(self).__init__).parameters.items():
            value = self.__dict__.get(self._repr_attrs.get(name, name), inspect.Parameter.empty)
            if value is inspect.Parameter.empty or not _plain(value):
                continue
            if name in self._repr_when_set and value == param.default:
                continue
            parts.append(f"{name}={value!r}")
        return ", ".join(parts)

    def check_input(self, x: Tensor) -> None:
        """Raise unless ``x`` is a batch this transform takes (default: any (N, C, H, W)
        uint8 or float batch; a subclass adds its own conditions)."""
        check_batch(x, self._name)

    def is_identity(self, x: Tensor, sizes: Optional[Tensor] = None) -> bool:
        """Whether this call returns ``x`` as it is, without drawing: a random transform in
        ``eval()`` (a subclass adds its own cases, e.g. zero ops). ``sizes``: the ragged
        batch's (``with_sizes``), passed only to a transform that ``takes_sizes`` (a
        size-fixing step still fixes the size in ``eval()``)."""
        return not self.training and self.random

    def forward(self, x: Tensor, keys: Optional[Tensor] = None) -> Tensor:
        self.check_input(x)
        check_keys(keys, x, self._name)
        if self.is_identity(x):
            return x
        return self.apply_image(x, self.make_params(x, keys))

    @torch.jit.export
    def with_sizes(self, images: Tensor, sizes: Tensor, keys: Optional[Tensor] = None
                   ) -> Tuple[Tensor, Tensor]:
        """``(images, sizes)`` for a padded batch of images of different sizes: image ``i``
        is ``images[i, :, :sizes[i, 0], :sizes[i, 1]]`` (``sizes``: ``(N, 2)`` int64 on the
        images' device; the rest is padding, never read). Geometric transforms act on each
        image's own extent (draws from its own size, centre and fill as on that image alone);
        one that fixes the output size (``RandomResizedCrop``, ``CenterCrop``,
        ``RandomCrop(pad_if_needed=True)``, ``Resize((h, w))``) returns a dense batch and
        every size equal to it. Same draws as ``forward``: it is
        ``with_targets(images, {"sizes": sizes}, keys)``, whose targets keep ``"sizes"`` while
        the batch is ragged (a size-fixing step returns them without it).

        Example:
            >>> from batchaug import RandomResizedCrop
            >>> x = torch.zeros(2, 3, 40, 50, dtype=torch.uint8)
            >>> y, s = RandomResizedCrop(16).with_sizes(x, torch.tensor([[40, 50], [30, 20]]))
            >>> y.shape, s.tolist()
            (torch.Size([2, 3, 16, 16]), [[16, 16], [16, 16]])
        """
        out, targets = self.with_targets(images, {"sizes": sizes}, keys)
        return out, sizes_of(out, targets)

    @torch.jit.export
    def with_targets(self, images: Tensor, targets: Dict[str, Tensor],
                     keys: Optional[Tensor] = None) -> Tuple[Tensor, Dict[str, Tensor]]:
        """``(images, targets)`` transformed with one draw of parameters per sample.

        ``targets`` as in :meth:`GeometricTransform.with_targets`; this transform moves no
        pixel, so they come back as they are (with the valid flags filled in).
        """
        targets = check_targets(targets, list(images.shape), self.takes_sizes)
        return self.forward(images, keys), targets


def _plain(value: object) -> bool:
    if isinstance(value, (list, tuple)):
        return all(_plain(v) for v in value)
    return value is None or isinstance(value, (bool, int, float, str, torch.dtype))


def _is_size(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


class GeometricTransform(Transform):
    """Base of the transforms that move pixels: targets move with the image.

    A subclass also defines ``apply_targets(targets, params, in_size, out_size)``, normally
    ``move_targets(targets, self.target_matrix(params, ...), in_size, out_size, ...)`` from
    :mod:`batchaug.functional`, where ``target_matrix`` is ``(N, 3, 3)`` float64,
    output -> input pixel coordinates (centred), and an exact mask kernel is passed where the
    image uses one. ``mask_fill`` is the label given to mask pixels from outside the image.

    One set of methods serves dense and ragged batches: with ``takes_sizes = True``,
    ``make_params``, ``apply_image``, ``target_matrix`` and ``is_identity`` take ``sizes`` (an
    ``(N, 2)`` int64 tensor of each image's extent in a padded batch, None for a dense one),
    ``apply_masks(m, params, sizes)`` moves mask labels and ``window(sizes, keys, channels)``
    (the size-fixing crops) draws without pixels.
    """

    # fused_targets: the subclass moves images and masks in one call on a dense batch,
    # ``apply_with_targets(images, targets, params)`` (the warps: one sampling grid), instead of
    # apply_image then apply_targets. A constant, so TorchScript drops the branch not taken.
    __constants__ = ["takes_keys", "random", "fused_targets", "takes_sizes", "axis_aligned",
                     "own_frame"]
    fused_targets: bool = False
    # axis_aligned: target_matrix only scales and shifts (flips, crops, pads, resizes), so a
    # box moves by its two corners; False (warps): by its four
    axis_aligned: bool = False
    # own_frame: with ``sizes``, target_matrix (and the flips' keypoint_matrix) is centred on
    # each image's own extent, so its boxes and keypoints are bit for bit the image's alone
    # (move_targets_sized); False: on the batch's canvas (edge_to_centred), where rounding at
    # an image's own right or bottom edge may differ
    own_frame: bool = False

    def __init__(self) -> None:
        super().__init__()
        self.mask_fill: int = 0

    @torch.jit.export
    def with_targets(self, images: Tensor, targets: Dict[str, Tensor],
                     keys: Optional[Tensor] = None) -> Tuple[Tensor, Dict[str, Tensor]]:
        """``(images, targets)`` transformed with one draw of parameters per sample: each
        sample's masks, boxes and keypoints are moved by exactly its image's geometry.

        ``targets`` holds any of ``"masks"`` ((N, H, W) or (N, K, H, W) integer or bool, the
        images' H and W), ``"boxes"`` ((N, M, 4) float XYXY pixels) with ``"box_valid"``
        ((N, M) bool, optional: all valid), ``"keypoints"`` ((N, K, 2) float x, y) with
        ``"keypoint_valid"`` ((N, K) bool, optional), ``"labels"`` / ``"box_labels"``,
        passed through, and ``"sizes"`` ((N, 2) int64: a ragged batch, see
        :meth:`with_sizes`). Semantics are torchvision v2's on ``tv_tensors`` per sample; a
        box or keypoint that torchvision's sanitizers would drop comes back zero with its
        flag False.

        On a dense batch ``apply_targets`` (or ``apply_with_targets``) moves the targets; on
        a ragged one (``takes_sizes``, see the class doc) ``apply_masks`` and
        ``target_matrix`` do.
        """
        self.check_input(images)
        check_keys(keys, images, self._name)
        targets = check_targets(targets, list(images.shape), True)
        sizes: Optional[Tensor] = None
        if "sizes" in targets:
            sizes = targets["sizes"]
            check_sizes(sizes, images, self._name)
        in_size = [images.shape[2], images.shape[3]]
        if self.takes_sizes:  # a constant: TorchScript compiles one branch per subclass
            if self.is_identity(images, sizes):
                return images, targets
            params = self.make_params(images, keys, sizes)
            if sizes is None:
                if self.fused_targets:
                    return self.apply_with_targets(images, targets, params)
                out = self.apply_image(images, params)
                return out, self.apply_targets(targets, params, in_size,
                                               [out.shape[2], out.shape[3]])
            out = self.apply_image(images, params, sizes)
            new_sizes = self.sizes_after(out, sizes)
            masks: Optional[Tensor] = None
            if "masks" in targets:
                m = targets["masks"]
                check_mask_fill_for(self.mask_fill, m, self._name)
                image = self.apply_masks(masks_as_image(m, self.mask_fill), params, sizes)
                masks = image_as_masks(image, m, self.mask_fill)
            if masks is not None or "boxes" in targets or "keypoints" in targets:
                out_size = [out.shape[2], out.shape[3]]
                kp_matrix: Optional[Tensor] = None
                if hasattr(self, "flip_index"):  # flips: torchvision's keypoint rule
                    kp_matrix = self.keypoint_matrix(params, in_size, out_size, sizes)
                moved = move_targets_sized(targets, self.target_matrix(params, in_size,
                                                                       out_size, sizes),
                                           sizes, new_sizes, in_size, out_size, masks,
                                           kp_matrix, self.axis_aligned, self.own_frame)
            else:  # only the sizes (and labels): no geometry to build per batch
                moved = without_sizes(targets)
            if hasattr(self, "flip_index"):  # flips: keypoint_flip_indices
                moved = self.reorder_keypoints(moved, params)
            if self.fixes_size():
                # a dense batch: the steps after this one run as on any batch (no "sizes")
                return out, without_sizes(moved)
            moved["sizes"] = new_sizes
            return out, moved
        if sizes is not None:
            raise ValueError("{} does not take sizes (a ragged batch): it has no "
                             "takes_sizes = True with make_params(x, keys, sizes) and "
                             "apply_image(x, params, sizes)".format(self._name))
        if self.is_identity(images):
            return images, targets
        params = self.make_params(images, keys)
        if self.fused_targets:
            return self.apply_with_targets(images, targets, params)
        out = self.apply_image(images, params)
        return out, self.apply_targets(targets, params, in_size, [out.shape[2], out.shape[3]])

    def fixes_size(self) -> bool:
        """Whether this step returns a dense batch from a ragged one (its targets then have
        no ``"sizes"``: the ragged part of a pipeline ends here)."""
        return False

    def sizes_after(self, out: Tensor, sizes: Tensor) -> Tensor:
        """The output extents: the input's, or the output's size for a size-fixing step."""
        if self.fixes_size():
            return torch.stack((torch.full_like(sizes[:, 0], out.shape[2]),
                                torch.full_like(sizes[:, 1], out.shape[3])), dim=1)
        return sizes

    def output_size(self, height: int, width: int) -> List[int]:
        """``[height, width]`` of this step's output in ``train()`` on a dense ``height x
        width`` batch, known before any draw (``DeviceLoader`` sets ``crop_size`` with it);
        ``ValueError`` where the step cannot run on that size. Default: the input's size; a
        size-fixing step (:meth:`fixes_size`) gives its own whatever the input (the loader
        asks with ``(0, 0)``), read from an attribute ``size = (h, w)`` (or ``height`` and
        ``width``) unless it overrides this.

        Example:
            >>> from batchaug import RandomRotation, RandomResizedCrop
            >>> RandomRotation(30).output_size(240, 320), RandomResizedCrop(224).output_size(0, 0)
            ([240, 320], [224, 224])
        """
        if not self.fixes_size():
            return [height, width]
        size = getattr(self, "size", None)
        if isinstance(size, (list, tuple)) and len(size) == 2 and all(_is_size(v) for v in size):
            return [int(size[0]), int(size[1])]
        h, w = getattr(self, "height", None), getattr(self, "width", None)
        if _is_size(h) and _is_size(w):
            return [int(h), int(w)]  # type: ignore[arg-type]
        raise ValueError(f"{self._name} fixes the output size (fixes_size() is True), but "
                         f"which size cannot be told before drawing: give it an attribute "
                         f"size = (height, width) of two positive ints, or height and width, "
                         f"or override output_size(height, width)")
