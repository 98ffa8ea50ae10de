"""Per-sample parameters of the crop stage's steps, drawn from each image's own size: the
draws the fixed-size modules make (same words from the same keys, same formulas), with the
image's height and width as tensors instead of the batch's shape."""
from typing import List, Optional, Tuple

import torch
from torch import Tensor, nn

from .. import _random
from .._validation import check_fill_for
from ..functional import _ragged as R
from ..transforms import _geometry as G
from ..transforms import _warps as W


def affine_params(t: nn.Module, x: Tensor, sizes: Tensor, keys: Optional[Tensor]
                  ) -> List[Tensor]:
    """RandomRotation's angle, or RandomAffine's (angle, translate, scale, shear), drawn
    per sample as the module draws them, from each image's own size."""
    name = "RandomRotation" if isinstance(t, W.RandomRotation) else "RandomAffine"
    check_fill_for(t.fill, x, name)
    angle = _random.uniform(x, t.degrees[0], t.degrees[1], keys=keys, draw=0)
    if isinstance(t, W.RandomRotation):
        return [angle]
    translate = torch.zeros((x.shape[0], 2), dtype=torch.float32, device=x.device)
    tr = t.translate
    if tr is not None:
        # uniform(-m, m) as RandomAffine draws it, with m = fraction * the image's side
        m_x = tr[0] * sizes[:, 1].to(torch.float64)
        m_y = tr[1] * sizes[:, 0].to(torch.float64)
        u_x = _random.uniform(x, 0.0, 1.0, keys=keys, draw=1)
        u_y = _random.uniform(x, 0.0, 1.0, keys=keys, draw=2)
        translate = torch.stack(
            ((u_x * (2 * m_x).to(torch.float32) + (-m_x).to(torch.float32)).round(),
             (u_y * (2 * m_y).to(torch.float32) + (-m_y).to(torch.float32)).round()),
            dim=1)
    scale = torch.ones_like(angle)
    if t.scale is not None:
        scale = _random.uniform(x, t.scale[0], t.scale[1], keys=keys, draw=3)
    shear = torch.zeros((x.shape[0], 2), dtype=torch.float32, device=x.device)
    sh = t.shear
    if sh is not None:
        shear = torch.stack((_random.uniform(x, sh[0], sh[1], keys=keys, draw=4),
                             _random.uniform(x, sh[2], sh[3], keys=keys, draw=5)), dim=1)
    return [angle, translate, scale, shear]


def integers_below(x: Tensor, high: Tensor, size: Optional[int], keys: Optional[Tensor],
                   draw: int) -> Tensor:
    """``(B,)`` or ``(B, size)`` int64 uniform in ``[0, high_i)`` per sample: keyed, the same
    words and formula as ``_random.integers`` (so an image of the batch's size draws what the
    fixed-size module draws from its key)."""
    h = high if size is None else high.view(-1, 1)
    if keys is None:
        r = torch.rand(h.shape if size is None else (x.shape[0], size), device=x.device,
                       dtype=torch.float64)
        return torch.minimum((r * h.to(torch.float64)).floor().to(torch.int64), h - 1)
    return (_random._words(keys.to(x.device), draw, size) * h) >> 32


def random_offset(t: nn.Module, x: Tensor, length: Tensor, crop: int, before: int, after: int,
                   keys: Optional[Tensor], draw: int) -> Tensor:
    """RandomCrop's window start on one axis, in the (resized) image's coordinates: its padding
    (``pad_if_needed`` adds the missing amount on both sides, per image), then a uniform offset
    into the padded axis (eval: the centre)."""
    pad_before = t.padding[before]
    pad_after = t.padding[after]
    padded = length + pad_before + pad_after
    extra = torch.clamp(crop - padded, min=0)
    pad_before = pad_before + extra
    padded = padded + 2 * extra
    if not t.training:
        return R.center_offset(padded, crop) - pad_before
    return integers_below(x, padded - crop + 1, None, keys, draw) - pad_before


def rrc_boxes(t: G.RandomResizedCrop, x: Tensor, sizes: Tensor, keys: Optional[Tensor] = None
              ) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """``RandomResizedCrop``'s boxes ``(top, left, height, width)`` drawn from each image's own
    size ``sizes`` ``(B, 2)``: torchvision's ``get_params`` rule (area fraction uniform in
    ``scale``, log aspect uniform in ``log(ratio)``, the first of 10 attempts that fits, else
    the whole image narrowed to ``ratio``, centred), vectorised, with the module's draws."""
    height = sizes[:, 0].view(-1, 1)
    width = sizes[:, 1].view(-1, 1)
    k = t.attempts
    area = (height * width).to(torch.float32)
    target_area = area * _random.uniform(x, t.scale[0], t.scale[1], k, keys=keys, draw=0)
    aspect = torch.exp(_random.uniform(x, t.log_ratio[0], t.log_ratio[1], k, keys=keys, draw=1))
    ws = torch.sqrt(target_area * aspect).round().to(torch.int64)
    hs = torch.sqrt(target_area / aspect).round().to(torch.int64)
    fits = (ws > 0) & (ws <= width) & (hs > 0) & (hs <= height)
    first = fits.to(torch.int32).argmax(dim=1, keepdim=True)
    found = fits.any(dim=1)
    height = height.view(-1)
    width = width.view(-1)
    fb_h, fb_w = _fallback_boxes(t, height, width)
    h = torch.where(found, hs.gather(1, first).squeeze(1), fb_h)
    w = torch.where(found, ws.gather(1, first).squeeze(1), fb_w)
    top = torch.floor(_random.uniform(x, 0.0, 1.0, keys=keys, draw=2)
                      * (height - h + 1).to(torch.float32))
    left = torch.floor(_random.uniform(x, 0.0, 1.0, keys=keys, draw=3)
                       * (width - w + 1).to(torch.float32))
    top = torch.minimum(top.to(torch.int64), height - h)
    left = torch.minimum(left.to(torch.int64), width - w)
    top = torch.where(found, top, torch.div(height - h, 2, rounding_mode="floor"))
    left = torch.where(found, left, torch.div(width - w, 2, rounding_mode="floor"))
    return top, left, h, w


def timm_rrc_params(t: nn.Module, x: Tensor, sizes: Tensor, keys: Optional[Tensor] = None
                    ) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """``TimmRandomResizedCrop.crop_params`` from each image's own size: ``(branch, top, left,
    height, width)``, the branch (interpolation) drawn first, then branch ``k``'s boxes from
    ``substream(keys, k)`` as the module draws them (keyed, the same boxes per sample)."""
    branch = t.make_params(x, keys)
    z = torch.zeros_like(branch)
    top, left, height, width = z, z, z, z
    for k, crop in enumerate(t.choice.transforms):
        b_t, b_l, b_h, b_w = rrc_boxes(crop, x, sizes, _random.substream(keys, k))
        pick = branch == k
        top = torch.where(pick, b_t, top)
        left = torch.where(pick, b_l, left)
        height = torch.where(pick, b_h, height)
        width = torch.where(pick, b_w, width)
    return branch, top, left, height, width


def _fallback_boxes(t: G.RandomResizedCrop, height: Tensor, width: Tensor
                    ) -> Tuple[Tensor, Tensor]:
    """torchvision's fallback per image (its Python float arithmetic, in float64)."""
    hf = height.to(torch.float64)
    wf = width.to(torch.float64)
    in_ratio = wf / hf
    narrow = in_ratio < t.ratio[0]
    wide = in_ratio > t.ratio[1]
    h = torch.where(narrow, R.round_half_even(wf / t.ratio[0]), height)
    w = torch.where(wide, R.round_half_even(hf * t.ratio[1]), width)
    return h.clamp_min(1), w.clamp_min(1)


def rrc_eval_boxes(t: G.RandomResizedCrop, sizes: Tensor
                   ) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
    """``RandomResizedCrop.eval_box`` per image (an image already of the output size: the
    whole image, returned as it is)."""
    height, width = sizes[:, 0], sizes[:, 1]
    pct = 1.0 if t.eval_crop_pct is None else t.eval_crop_pct
    oh, ow = t.size[0], t.size[1]
    hf = height.to(torch.float64)
    wf = width.to(torch.float64)
    wide = width * oh >= height * ow
    bh = torch.where(wide, hf, wf * oh / ow)
    bw = torch.where(wide, hf * ow / oh, wf)
    h = torch.minimum(R.round_half_even(bh * pct), height).clamp_min(1)
    w = torch.minimum(R.round_half_even(bw * pct), width).clamp_min(1)
    same = (height == oh) & (width == ow)
    if t.eval_crop_pct is None:
        same = torch.ones_like(same)
    h = torch.where(same, height, h)
    w = torch.where(same, width, w)
    top = R.round_half_even((height - h).to(torch.float64) / 2.0)
    left = R.round_half_even((width - w).to(torch.float64) / 2.0)
    return top, left, h, w


__all__ = ["affine_params", "integers_below", "random_offset", "rrc_boxes", "rrc_eval_boxes",
           "timm_rrc_params"]
