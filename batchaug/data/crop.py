"""The loader's crop stage: per-sample geometric transforms on each image's own extent of a
ragged (padded) batch, ending in a fixed output size.

Images of different sizes travel as one padded ``(B, C, H, W)`` canvas plus their ``(B, 2)``
sizes. Flips, rotations, affine and perspective warps act on image ``i``'s own ``h_i x w_i``
pixels (centre and fill as torchvision on that image; the padding is never read), then a
size-fixing step (``RandomResizedCrop`` or ``TimmRandomResizedCrop``,
``RandomCrop(pad_if_needed=True)``, ``CenterCrop``,
``Resize((h, w))``, or ``Resize(int)`` + ``CenterCrop``/``RandomCrop``) draws its box from the
image's own size and returns a ``(B, C, oh, ow)`` batch for the model-side ``Augment``.

Each step runs as itself on the ragged batch (``with_sizes`` / ``with_targets`` with
``targets["sizes"]``: the transform protocol), drawing its per-sample parameters from each
image's own size (``make_params_sized``). Two implementations of every step, a kernel choice
inside each transform (``functional._sized``): batched kernels (``functional._ragged``;
accelerators, ``torch.compile``) and, on CPU in eager mode, one call of the fixed-size kernel
per image on a view of its extent (exactly what the fixed-size module does to that image, and
it touches only the image's own pixels, not the canvas). Two paths stay here: ``Resize(int)`` +
crop (one resized window per image) and, per image, rotation/affine then RandomResizedCrop
warping only the crop box.
"""
import copy
import math
from typing import Dict, List, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor, nn

from .. import _equivalents, _random
from .. import functional as F
from ..functional import _ragged as R
from .._validation import check_fill_for
from ..transforms import _geometry as G
from ..transforms._base import GeometricTransform
from ..transforms import _warps as W
from ..transforms._timm import TimmRandomResizedCrop

_WARPS = (G.RandomHorizontalFlip, G.RandomVerticalFlip, W.RandomRotation, W.RandomAffine,
          W.RandomPerspective)
# after the size-fixing step the batch has one size: any geometric module runs on it as it is
_POST = _WARPS + (G.RandomResizedCrop, G.RandomCrop, G.CenterCrop, G.Resize, G.Pad)
_SIZE_FIXING = "RandomResizedCrop (or TimmRandomResizedCrop), RandomCrop(pad_if_needed=True), " \
               "CenterCrop, Resize((h, w)) or Resize(int) followed by CenterCrop or RandomCrop"
_MOVE = ("it does not move pixels, so it gives the same result after the crop: move it into "
         "the model's Augment (it runs there on the fixed-size batch)")


def loops_per_sample(x: Tensor) -> bool:
    """Whether the crop stage calls the fixed-size kernels image by image (CPU, eager) rather
    than the batched ragged kernels. Per image, only the image's own pixels are touched (the
    batched warps sample the whole padded canvas) and the result is the fixed-size module's,
    bit for bit; ``benchmarks/bench_photos.py`` measures both paths."""
    return (x.device.type == "cpu" and not torch.compiler.is_compiling()
            and not torch.jit.is_scripting())


def _flatten(crop: nn.Module) -> List[nn.Module]:
    if isinstance(crop, nn.Sequential):  # Augment is one
        out: List[nn.Module] = []
        for m in crop:
            out.extend(_flatten(m))
        return out
    return [crop]


def _is_fixing(m: nn.Module) -> bool:
    if isinstance(m, (G.RandomResizedCrop, TimmRandomResizedCrop, G.RandomCrop, G.CenterCrop)):
        return True
    return isinstance(m, G.Resize) and len(m.size) == 2


def _is_warp(m: nn.Module) -> bool:
    """A step that may come before the size-fixing one: batchaug's flips and warps, or any
    geometric transform that runs on a ragged batch (``takes_sizes``, e.g. your own) and
    keeps each image's size."""
    if isinstance(m, _WARPS):
        return True
    return (isinstance(m, GeometricTransform) and bool(getattr(type(m), "takes_sizes", False))
            and not isinstance(m, (G.Resize, G.RandomResizedCrop, G.RandomCrop, G.CenterCrop))
            and not m.fixes_size())


def _refuse(m: object, where: str) -> None:
    name = type(m).__name__
    if not isinstance(m, nn.Module):
        raise TypeError(f"crop: {where} is {name}, not a transform module (nn.Module)")
    module = type(m).__module__
    if not module.startswith("batchaug") and isinstance(m, GeometricTransform):
        raise ValueError(f"crop: {where} is {name}, which does not run on images of different "
                         f"sizes: give it takes_sizes = True with make_params_sized, "
                         f"apply_sized and target_matrix_sized (see GeometricTransform), or "
                         f"move it into the model's Augment")
    if not module.startswith("batchaug"):
        twin = _equivalents.equivalent(name)
        instead = (f"use {twin} with the same arguments" if twin is not None
                   else _equivalents.hint(name))
        raise ValueError(f"crop: {where} is {module}.{name}; the crop stage takes batchaug's "
                         f"geometric transforms: {instead}")
    if module.endswith(("_color", "_misc", "_auto_augment", "_augment")):
        raise ValueError(f"crop: {where} is {name}: {_MOVE}")
    if module.endswith("_container"):
        raise ValueError(f"crop: {where} is {name}: the crop stage runs a fixed sequence; put "
                         f"random choices of geometric transforms in the model's Augment, after "
                         f"the crop")
    raise ValueError(f"crop: {where} is {name}, which the crop stage cannot run on images of "
                     f"different sizes (flips, RandomRotation, RandomAffine, RandomPerspective, "
                     f"then {_SIZE_FIXING})")


class CropStage(nn.Module):
    """Run a crop (see :func:`make_crop_stage`) on a padded ragged batch.

    ``forward(images, sizes, keys=None)``: ``images`` ``(B, C, H, W)`` (uint8 or float) with
    image ``i`` in ``images[i, :, :sizes[i, 0], :sizes[i, 1]]``; ``sizes`` ``(B, 2)`` int64
    ``(h, w)`` on the same device; ``keys`` ``(B,)`` int64 per-sample keys (a sample's crop then
    depends only on its key) or None. Returns ``(B, C, *output_size)``. Step ``i`` of the
    flattened crop draws from ``_random.substream(keys, i)``, as in an ``Augment``: on a batch
    whose images all have the batch's size the result equals ``Augment(*steps)`` on it.
    Random steps are the identity in ``eval()`` except the size-fixing one:
    ``RandomResizedCrop`` takes its eval box (see its doc; ``TimmRandomResizedCrop`` its first
    interpolation's) and ``RandomCrop`` the centre window.

    Example:
        >>> from batchaug import Augment, RandomResizedCrop, RandomRotation
        >>> stage = make_crop_stage(Augment(RandomRotation(30), RandomResizedCrop(224)))
        >>> x = torch.zeros(2, 3, 300, 400, dtype=torch.uint8)
        >>> stage(x, torch.tensor([[300, 400], [256, 341]])).shape
        torch.Size([2, 3, 224, 224])
    """

    output_size: Tuple[int, int]
    final_size: Tuple[int, int]  # after the size-fixing step (later steps may change it)

    def __init__(self, warps: Sequence[nn.Module], resize: Optional[nn.Module],
                 final: nn.Module, post: Sequence[nn.Module]) -> None:
        super().__init__()
        self.warps = nn.ModuleList(warps)
        self.resize = resize
        self.final = final
        self.post = nn.ModuleList(post)
        if isinstance(final, G.RandomResizedCrop):
            oh, ow = final.size[0], final.size[1]
        elif isinstance(final, TimmRandomResizedCrop):
            oh, ow = final.first.size[0], final.first.size[1]
        elif isinstance(final, G.Resize):
            oh, ow = final.size[0], final.size[1]
        else:
            oh, ow = final.height, final.width
        self.final_size = (int(oh), int(ow))
        # rotation/affine then RandomResizedCrop: the per-image path warps only the box
        self.fuse_last_warp = (len(warps) > 0 and isinstance(warps[-1], (W.RandomRotation,
                                                                          W.RandomAffine))
                               and isinstance(final, G.RandomResizedCrop))
        for m in post:
            oh, ow = _size_after(m, oh, ow)
        self.output_size = (int(oh), int(ow))

    # ------------------------------------------------------------------ fused per-image path
    def _warp_then_rrc(self, x: Tensor, sizes: Tensor, warp_keys: Optional[Tensor],
                       rrc_keys: Optional[Tensor], size_list: List[List[int]]) -> Tensor:
        """The last warp (rotation or affine) and RandomResizedCrop per image, warping only the
        crop box: each output pixel of a warp depends on its own position only, so the box of
        the warped image equals the warp computed on the box. The same draws in the same order
        as warping first, the same pixels (tested), a fraction of the warp's work."""
        t = self.warps[len(self.warps) - 1]
        rrc = self.final
        check_fill_for(t.fill, x, type(t).__name__)
        drawn = t.make_params_sized(x, sizes, warp_keys)  # the module's own draws
        params = [drawn] if isinstance(drawn, Tensor) else list(drawn)
        top, left, bh, bw = rrc.make_params_sized(x, sizes, rrc_keys)
        boxes: List[List[int]] = torch.stack((top, left, bh, bw), dim=1).tolist()
        oh, ow = self.final_size
        out = torch.empty((x.shape[0], x.shape[1], oh, ow), dtype=x.dtype, device=x.device)
        zero = torch.zeros(1, dtype=torch.int64)
        for i, (h, w) in enumerate(size_list):
            b_t, b_l, b_h, b_w = boxes[i]
            mat = _affine_matrix_one(t, params, i, size_list[i])
            box = R.warp_window(x[i:i + 1, :, :h, :w], mat, b_t, b_l, b_h, b_w,
                                t.interpolation, t.fill)
            out[i:i + 1] = F.resized_crop(box, zero, zero, zero + b_h, zero + b_w, rrc.size,
                                          rrc.interpolation, rrc.antialias)
        return out

    # ------------------------------------------------------------------ Resize(int) + crop
    def _resize_window(self, x: Tensor, sizes: Tensor, keys: Optional[Tensor],
                       size_list: Optional[List[List[int]]]) -> Tensor:
        """``Resize(int)`` then ``CenterCrop`` / ``RandomCrop`` per image, as one window of
        the resized image (drawn by the crop module from each resized size)."""
        t = self.final
        rs = self.resize
        oh, ow = self.final_size
        resized = R.resized_sizes(sizes, rs.size[0], rs.max_size)
        top, left = t.make_params_sized(x, resized, keys)
        fill = [0.0]
        mode = "constant"
        if isinstance(t, G.RandomCrop):
            fill = t.fill
            mode = t.padding_mode
        if size_list is None:
            if mode != "constant":
                raise ValueError("crop: Resize(int) + RandomCrop runs batched with "
                                 "padding_mode='constant' only")
            return R.resize_window(x, sizes, resized, top, left, oh, ow, rs.interpolation,
                                   rs.antialias, fill)
        out = torch.empty((x.shape[0], x.shape[1], oh, ow), dtype=x.dtype, device=x.device)
        r_list: List[List[int]] = resized.tolist()
        for i, (h, w) in enumerate(size_list):
            img = F.resize(x[i:i + 1, :, :h, :w], r_list[i], rs.interpolation, rs.antialias)
            out[i:i + 1] = R.window(img, resized[i:i + 1], top[i:i + 1], left[i:i + 1], oh, ow,
                                    fill, mode)
        return out

    def forward(self, images: Tensor, sizes: Tensor, keys: Optional[Tensor] = None) -> Tensor:
        _check_inputs(images, sizes, keys)
        x = self._fixed(images, sizes, keys)
        step = self._fixed_steps()
        for t in self.post:  # on the fixed-size batch: the modules themselves
            if hasattr(t, "takes_keys"):
                if t.takes_keys:
                    x = t(x, _random.substream(keys, step))
                else:
                    x = t(x)
            else:
                x = t(x)
            step += 1
        return x

    def _fixed_steps(self) -> int:
        """How many steps (keyed substreams) come before the ``post`` ones."""
        return len(self.warps) + (0 if self.resize is None else 1) + 1

    def with_masks(self, images: Tensor, masks: Tensor, sizes: Tensor,
                   keys: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
        """``forward`` on ``images`` and the same per-sample geometry on ``masks``
        ``(B, 1, H, W)`` integer (each image's mask on its extent): ``(images, masks)`` at the
        output size.

        The masks go through this stage's steps with the same draws (from the same ``keys``, or
        without keys from the same random state, restored between the two passes),
        resampled with nearest and filled with each step's ``mask_fill`` (0 by default):
        exactly the images' crop, co-registered pixel for pixel. Steps after the size-fixing
        one move masks through their ``with_targets``.

        Example:
            >>> from batchaug import RandomResizedCrop
            >>> stage = make_crop_stage(RandomResizedCrop(4))
            >>> x, m = stage.with_masks(torch.zeros(2, 3, 9, 9, dtype=torch.uint8),
            ...                         torch.ones(2, 1, 9, 9, dtype=torch.uint8),
            ...                         torch.tensor([[9, 9], [6, 8]]))
            >>> m.shape
            torch.Size([2, 1, 4, 4])
        """
        _check_inputs(images, sizes, keys)
        for t in self.post:
            if not hasattr(t, "with_targets"):
                raise ValueError(f"crop: {type(t).__name__} after the size-fixing step cannot "
                                 f"move masks; move it into the model's Augment")
        if self.resize is None:  # the steps' own with_targets on each image's extent
            _check_masks(images, masks)
            x, y = self._steps_with_targets(images, {"masks": masks[:, 0], "sizes": sizes},
                                            keys)
            return x, y["masks"].unsqueeze(1)
        x, m = self._with_masks_fixed(images, masks, sizes, keys)
        step = self._fixed_steps()
        for t in self.post:
            x, moved = t.with_targets(x, {"masks": m[:, 0]}, _random.substream(keys, step))
            m = moved["masks"].unsqueeze(1)
            step += 1
        return x, m

    def _with_masks_fixed(self, images: Tensor, masks: Tensor, sizes: Tensor,
                          keys: Optional[Tensor]) -> Tuple[Tensor, Tensor]:
        """``_fixed`` on the images and on the masks (their twin), with the same draws."""
        _check_masks(images, masks)
        dtype = masks.dtype
        # uint8 resamples as it is; wider ids (and bools) through float64, exact for them all
        m = masks if dtype == torch.uint8 else masks.to(torch.float64)
        twin = self._mask_twin()
        state = None if keys is not None else _rng_state(images.device)
        x = self._fixed(images, sizes, keys)
        if state is not None:
            after = _rng_state(images.device)
            _set_rng_state(images.device, state)
            m = twin._fixed(m, sizes, keys)
            _set_rng_state(images.device, after)
        else:
            m = twin._fixed(m, sizes, keys)
        return x, m.to(dtype)

    def with_boxes(self, images: Tensor, boxes: Tensor, box_valid: Tensor, sizes: Tensor,
                   keys: Optional[Tensor] = None, masks: Optional[Tensor] = None
                   ) -> Tuple[Tensor, Tensor, Tensor, Optional[Tensor]]:
        """``forward`` on ``images`` and the same per-sample geometry on XYXY ``boxes``
        ``(B, M, 4)`` (image ``i``'s pixel coordinates, its own ``sizes[i]``) with
        ``box_valid`` ``(B, M)`` bool, and on ``masks`` as :meth:`with_masks` when given:
        ``(images, boxes, box_valid, masks or None)`` at the output size.

        Each box is clamped to its own image, moved by exactly its image's crop box and
        resize (torchvision's ``resized_crop`` on ``BoundingBoxes``), clamped to the output,
        and marked invalid (zeros) where ``SanitizeBoundingBoxes(min_size=1, min_area=1)``
        would drop it; steps after the size-fixing one move boxes through their
        ``with_targets``. Warps before the size-fixing step are refused (``ValueError``).

        Example:
            >>> from batchaug import RandomResizedCrop
            >>> stage = make_crop_stage(RandomResizedCrop(4))
            >>> x, b, v, _ = stage.with_boxes(torch.zeros(2, 3, 9, 9, dtype=torch.uint8),
            ...                               torch.tensor([[[0.0, 0.0, 9.0, 9.0]]] * 2),
            ...                               torch.ones(2, 1, dtype=torch.bool),
            ...                               torch.tensor([[9, 9], [6, 8]]))
            >>> b.shape
            torch.Size([2, 1, 4])
        """
        self.check_boxes()
        _check_inputs(images, sizes, keys)
        n = images.shape[0]
        if not isinstance(boxes, Tensor) or boxes.dim() != 3 or boxes.shape[0] != n or \
                boxes.shape[2] != 4 or not boxes.is_floating_point():
            raise ValueError(f"crop stage: boxes must be a floating (B={n}, M, 4) XYXY tensor, "
                             f"got {getattr(boxes, 'dtype', type(boxes))} "
                             f"{list(getattr(boxes, 'shape', []))}")
        if not isinstance(box_valid, Tensor) or box_valid.dtype != torch.bool or \
                box_valid.shape != boxes.shape[:2]:
            raise ValueError(f"crop stage: box_valid must be a ({n}, {boxes.shape[1]}) bool "
                             f"tensor, got {getattr(box_valid, 'dtype', type(box_valid))} "
                             f"{list(getattr(box_valid, 'shape', []))}")
        if self.resize is None:  # the steps' own with_targets on each image's extent
            y: Dict[str, Tensor] = {"boxes": boxes, "box_valid": box_valid, "sizes": sizes}
            if masks is not None:
                _check_masks(images, masks)
                y["masks"] = masks[:, 0]
            x, y = self._steps_with_targets(images, y, keys)
            m_out = y["masks"].unsqueeze(1) if masks is not None else None
            return x, y["boxes"], y["box_valid"], m_out
        state = None if keys is not None else _rng_state(images.device)
        m = None
        if masks is not None:
            x, m = self._with_masks_fixed(images, masks, sizes, keys)
        else:
            x = self._fixed(images, sizes, keys)
        if state is not None:  # the final step's draws again, from the same random state
            after = _rng_state(images.device)
            _set_rng_state(images.device, state)
            top, left, bh, bw = self._final_box(images, sizes, keys)
            _set_rng_state(images.device, after)
        else:
            top, left, bh, bw = self._final_box(images, sizes, keys)
        # each box inside its own image; then, expressed from the corner, a crop box maps the
        # same for any canvas size: the canvas stands in for every image's in_size
        hw = sizes.flip(1).repeat(1, 2).unsqueeze(1).to(boxes.dtype)
        inside = torch.minimum(boxes.clamp_min(0.0), hw)
        canvas = [int(images.shape[2]), int(images.shape[3])]
        out_size = [self.final_size[0], self.final_size[1]]
        matrix = F.resized_crop_matrix(top, left, bh, bw, canvas, out_size)
        moved = F.move_targets({"boxes": inside, "box_valid": box_valid}, matrix, canvas,
                               out_size, axis_aligned=True)
        # validity as the stored box was given (finite, ordered): clamping kept both
        ok = moved["box_valid"] & (boxes.abs() < math.inf).all(dim=2)
        b = torch.where(ok.unsqueeze(2), moved["boxes"], 0.0)
        step = self._fixed_steps()
        for t in self.post:
            y: Dict[str, Tensor] = {"boxes": b, "box_valid": ok}
            if m is not None:
                y["masks"] = m[:, 0]
            x, y = t.with_targets(x, y, _random.substream(keys, step))
            b, ok = y["boxes"], y["box_valid"]
            if m is not None:
                m = y["masks"].unsqueeze(1)
            step += 1
        return x, b, ok, m

    def check_boxes(self) -> None:
        """``ValueError`` unless this stage can move boxes (:meth:`with_boxes`): no warps
        before ``Resize(int)`` + crop, every step after the size-fixing one with a
        ``with_targets``."""
        if len(self.warps) > 0 and self.resize is not None:
            raise ValueError(f"crop: boxes of a ragged or JPEG cache move through Resize(int) + "
                             f"crop only without warps before it; "
                             f"{[type(t).__name__ for t in self.warps]} before it cannot move "
                             f"them yet: put them after it (or in the model's Augment), or "
                             f"use RandomResizedCrop or Resize((h, w))")
        for t in self.post:
            if not hasattr(t, "with_targets"):
                raise ValueError(f"crop: {type(t).__name__} after the size-fixing step cannot "
                                 f"move boxes; move it into the model's Augment")

    def _steps_with_targets(self, images: Tensor, targets: Dict[str, Tensor],
                            keys: Optional[Tensor]) -> Tuple[Tensor, Dict[str, Tensor]]:
        """The steps' own ``with_targets`` in order (step ``i`` draws from
        ``substream(keys, i)``), ``targets["sizes"]`` making the ones before the size-fixing
        step act on each image's extent: the images equal :meth:`forward`'s."""
        steps: List[nn.Module] = list(self.warps) + [self.final] + list(self.post)
        for i, t in enumerate(steps):
            images, targets = t.with_targets(images, targets, _random.substream(keys, i))
        return images, targets

    def _final_box(self, x: Tensor, sizes: Tensor, keys: Optional[Tensor]
                   ) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
        """``Resize(int)`` + crop's box ``(top, left, height, width)`` (float64, in each
        image's own pixels) with the same draws as ``_resize_window``."""
        t = self.final
        keys = _random.substream(keys, self._fixed_steps() - 1)
        oh, ow = self.final_size
        h = sizes[:, 0].to(torch.float64)
        w = sizes[:, 1].to(torch.float64)
        rs = self.resize
        resized = R.resized_sizes(sizes, rs.size[0], rs.max_size)
        top, left = t.make_params_sized(x, resized, keys)
        # a window of the resized image is the window scaled back onto the image itself
        sy = h / resized[:, 0].to(torch.float64)
        sx = w / resized[:, 1].to(torch.float64)
        return top.to(torch.float64) * sy, left.to(torch.float64) * sx, oh * sy, ow * sx

    def _mask_twin(self) -> "CropStage":
        """This stage for masks: the same steps (so the same draws), resampling with nearest,
        without antialiasing, and filling with each step's ``mask_fill`` (default 0). Built per
        call, so that it follows the modules' current settings (``train()`` / ``eval()``)."""
        twin = copy.deepcopy(self)
        steps: List[nn.Module] = list(twin.warps) + [twin.final]
        if twin.resize is not None:
            steps.append(twin.resize)
        # modules(): a TimmRandomResizedCrop resamples through its branches' crops
        for t in [m for step in steps for m in step.modules()]:
            if hasattr(t, "interpolation"):
                t.interpolation = "nearest"
            if hasattr(t, "antialias"):
                t.antialias = False
            if hasattr(t, "fill"):
                t.fill = [float(getattr(t, "mask_fill", 0))]
        return twin

    def _fixed(self, images: Tensor, sizes: Tensor, keys: Optional[Tensor] = None) -> Tensor:
        """The steps up to and including the size-fixing one: each step's own ``with_sizes``
        (its kernels: per image on an eager CPU batch, batched elsewhere)."""
        x = images
        size_list: Optional[List[List[int]]] = None
        if loops_per_sample(x):
            size_list = sizes.tolist()  # a CPU tensor: no device sync
        n_warps = len(self.warps)
        fuse = (size_list is not None and n_warps > 0 and self.fuse_last_warp
                and self.warps[n_warps - 1].training)
        step = 0
        for t in self.warps:
            if not (fuse and step == n_warps - 1):
                x = t.with_sizes(x, sizes, _random.substream(keys, step))[0]
            step += 1
        if self.resize is not None:
            step += 1
        if fuse and size_list is not None:
            return self._warp_then_rrc(x, sizes, _random.substream(keys, n_warps - 1),
                                       _random.substream(keys, step), size_list)
        if self.resize is not None:
            return self._resize_window(x, sizes, _random.substream(keys, step), size_list)
        return self.final.with_sizes(x, sizes, _random.substream(keys, step))[0]

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


def _rng_state(device: torch.device) -> Tensor:
    """The default generator's state of ``device`` (where un-keyed draws come from)."""
    if device.type == "cuda":
        return torch.cuda.get_rng_state(device)
    return torch.get_rng_state()


def _set_rng_state(device: torch.device, state: Tensor) -> None:
    if device.type == "cuda":
        torch.cuda.set_rng_state(state, device)
    else:
        torch.set_rng_state(state)


def _affine_matrix_one(t: nn.Module, params: List[Tensor], i: int, size: List[int]) -> Tensor:
    """Image ``i``'s inverse affine ``(1, 2, 3)`` for its own ``(h, w)``, as the fixed-size
    module builds it for an image of that size."""
    h, w = size[0], size[1]
    if isinstance(t, W.RandomRotation):
        return R.rotation_matrix(params[0][i:i + 1], h, w, t.center)
    return F.affine_matrix(params[0][i:i + 1], params[1][i:i + 1], params[2][i:i + 1],
                           params[3][i:i + 1], h, w, t.center)


def _size_after(m: nn.Module, h: int, w: int) -> Tuple[int, int]:
    """The output size of a step after the size-fixing one, on an ``h x w`` batch (its
    constructor-time check: a RandomCrop that would not fit is refused here, not per batch)."""
    if isinstance(m, G.RandomResizedCrop):
        return m.size[0], m.size[1]
    if isinstance(m, G.CenterCrop):
        return m.height, m.width
    if isinstance(m, G.RandomCrop):
        m.padding_for(h, w)  # raises if the crop cannot fit
        return m.height, m.width
    if isinstance(m, G.Resize):
        out = F.resized_output_size(h, w, m.size, m.max_size)
        return out[0], out[1]
    if isinstance(m, G.Pad):
        return h + m.padding[1] + m.padding[3], w + m.padding[0] + m.padding[2]
    return h, w


def _check_masks(images: Tensor, masks: Tensor) -> None:
    if not isinstance(masks, Tensor) or masks.dim() != 4 or masks.shape[1] != 1 or \
            masks.shape[0] != images.shape[0] or masks.shape[2:] != images.shape[2:]:
        raise ValueError(f"crop stage: masks must be (B, 1, H, W) = ({images.shape[0]}, 1, "
                         f"{images.shape[2]}, {images.shape[3]}), got "
                         f"{list(getattr(masks, 'shape', []))}")
    if masks.is_floating_point() or masks.is_complex():
        raise TypeError(f"crop stage: masks must be integer or bool, got {masks.dtype}")


def _check_inputs(images: Tensor, sizes: Tensor, keys: Optional[Tensor]) -> None:
    if not isinstance(images, Tensor) or images.dim() != 4:
        raise ValueError("crop stage: images must be a (B, C, H, W) tensor")
    if not isinstance(sizes, Tensor) or sizes.dtype != torch.int64 or sizes.dim() != 2 \
            or sizes.shape[1] != 2 or sizes.shape[0] != images.shape[0]:
        raise ValueError(f"crop stage: sizes must be a (B, 2) int64 tensor of (height, width) "
                         f"with B = {images.shape[0]}, got "
                         f"{getattr(sizes, 'dtype', type(sizes))} "
                         f"{list(getattr(sizes, 'shape', []))}")
    if sizes.device != images.device:
        raise ValueError(f"crop stage: sizes must be on the images' device {images.device}, "
                         f"got {sizes.device}")
    if keys is not None and (keys.dtype != torch.int64 or keys.shape != (images.shape[0],)):
        raise ValueError(f"crop stage: keys must be (B,) int64, got {keys.dtype} "
                         f"{list(keys.shape)}")
    if images.device.type == "cpu" and sizes.numel() > 0:  # free on CPU; a sync elsewhere
        if bool((sizes < 1).any()) or bool((sizes[:, 0] > images.shape[2]).any()) \
                or bool((sizes[:, 1] > images.shape[3]).any()):
            raise ValueError(f"crop stage: every size must be within 1..(H, W) = "
                             f"{tuple(images.shape[2:])}")


def make_crop_stage(crop: Union[nn.Module, Sequence[nn.Module]]) -> CropStage:
    """Validate ``crop`` and wrap it as a :class:`CropStage` for the loader.

    ``crop`` is a batchaug geometric transform or an ``Augment`` (or list) of them that
    reaches a fixed size: any of ``RandomHorizontalFlip``, ``RandomVerticalFlip``,
    ``RandomRotation``, ``RandomAffine``, ``RandomPerspective``, then one of
    ``RandomResizedCrop``, ``TimmRandomResizedCrop`` (interpolation drawn per sample),
    ``RandomCrop(pad_if_needed=True)``, ``CenterCrop``,
    ``Resize((h, w))``, or ``Resize(int)`` + ``CenterCrop``/``RandomCrop``; any geometric
    transform may follow (it runs on the fixed-size batch as it is). Colour, erasing,
    normalisation and policies are refused (``ValueError`` saying to move them into the model's
    ``Augment``), as is a crop that never fixes the size.

    Example:
        >>> from batchaug import Augment, RandomResizedCrop, RandomRotation
        >>> stage = make_crop_stage(Augment(RandomRotation(30), RandomResizedCrop(224)))
        >>> stage.output_size
        (224, 224)
    """
    if isinstance(crop, (list, tuple)):
        steps: List[nn.Module] = []
        for m in crop:
            if not isinstance(m, nn.Module):
                raise TypeError(f"crop: every step must be a transform module, got "
                                f"{type(m).__name__}")
            steps.extend(_flatten(m))
    elif isinstance(crop, nn.Module):
        steps = _flatten(crop)
    else:
        raise TypeError(f"crop must be a batchaug geometric transform or an Augment of them, "
                        f"got {type(crop).__name__}")
    warps: List[nn.Module] = []
    resize: Optional[nn.Module] = None
    final: Optional[nn.Module] = None
    post: List[nn.Module] = []
    for i, m in enumerate(steps):
        where = f"step {i} ({type(m).__name__})"
        if final is None and _is_fixing(m):
            if isinstance(m, G.RandomCrop) and not m.pad_if_needed:
                raise ValueError(f"crop: {where}: RandomCrop needs pad_if_needed=True here, as "
                                 f"an image may be smaller than the crop")
            if resize is not None and not isinstance(m, (G.CenterCrop, G.RandomCrop)):
                raise ValueError(f"crop: {where} follows Resize(int); only CenterCrop or "
                                 f"RandomCrop may follow it")
            final = m
        elif final is None and isinstance(m, G.Resize) and len(m.size) == 1 and resize is None:
            resize = m
        elif final is not None and isinstance(m, _POST):
            post.append(m)
        elif _is_warp(m) and resize is None:
            warps.append(m)
        else:
            if isinstance(m, G.Resize):
                raise ValueError(f"crop: {where}: Resize(int) or Resize(max_size=...) keeps "
                                 f"the aspect ratio, so it must be followed directly by "
                                 f"CenterCrop or RandomCrop")
            if _is_warp(m):
                raise ValueError(f"crop: {where} follows Resize(int); put warps before the "
                                 f"Resize")
            _refuse(m, where)
    if final is None:
        raise ValueError(f"crop must end in a transform that fixes the output size "
                         f"({_SIZE_FIXING}); got {[type(m).__name__ for m in steps]}")
    try:
        return CropStage(warps, resize, final, post)
    except ValueError as exc:  # a step after the size-fixing one does not fit its input
        raise ValueError(f"crop: {exc}") from None




def rrc_boxes(t: G.RandomResizedCrop, x: Tensor, sizes: Tensor, keys: Optional[Tensor] = None
              ) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """``RandomResizedCrop``'s boxes ``(top, left, height, width)`` from each image's own size
    (in eval(): its eval boxes): ``t.make_params_sized(x, sizes, keys)``."""
    return t.make_params_sized(x, sizes, keys)


__all__ = ["CropStage", "loops_per_sample", "make_crop_stage", "rrc_boxes"]
