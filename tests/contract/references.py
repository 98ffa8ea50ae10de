"""torchvision references: for each transform class, the same per-sample parameters
applied by torchvision's functional (_REFERENCES; the gradient checks compare with them).
"""
from __future__ import annotations

from typing import Callable, List

import torch
from torch import Tensor, nn

from tests.contract import timm_reference as _timm_ref


def _mode(m: nn.Module):
    """``m.interpolation`` (a string here) as torchvision's ``InterpolationMode``: torchvision
    0.26 refuses strings, later releases take both."""
    from torchvision.transforms import InterpolationMode

    return InterpolationMode(m.interpolation)


def _tv_pad(m: nn.Module, x: Tensor, pad: List[int]) -> Tensor:
    import torchvision.transforms.v2.functional as TF

    fill = m.fill[0] if len(m.fill) == 1 else list(m.fill)
    return TF.pad(x, pad, fill=fill, padding_mode=m.padding_mode)


def _ref_hflip(m: nn.Module, x: Tensor, mask: Tensor) -> Tensor:
    return torch.stack([x[i].flip(-1) if bool(mask[i]) else x[i] for i in range(x.shape[0])])


def _ref_vflip(m: nn.Module, x: Tensor, mask: Tensor) -> Tensor:
    return torch.stack([x[i].flip(-2) if bool(mask[i]) else x[i] for i in range(x.shape[0])])


def _ref_random_crop(m: nn.Module, x: Tensor, params) -> Tensor:
    import torchvision.transforms.v2.functional as TF

    top, left = params
    pad = m.padding_for(x.shape[2], x.shape[3])
    out = []
    for i in range(x.shape[0]):
        xi = _tv_pad(m, x[i], pad) if sum(pad) else x[i]
        out.append(TF.crop(xi, int(top[i]), int(left[i]), m.height, m.width))
    return torch.stack(out)


def _ref_rotation(m: nn.Module, x: Tensor, params) -> Tensor:
    import torchvision.transforms.v2.functional as TF

    angle = params[0]  # RandomRotation is an affine of angle only: (angle, translate, ...)
    fill = None if m.fill is None else list(m.fill)
    return torch.stack([
        TF.rotate(x[i], float(angle[i]), _mode(m), False, m.center, fill)
        for i in range(x.shape[0])
    ])


def _ref_affine(m: nn.Module, x: Tensor, params) -> Tensor:
    import torchvision.transforms.v2.functional as TF

    angle, translate, scale, shear = params
    fill = m.fill[0] if len(m.fill) == 1 else list(m.fill)
    return torch.stack([
        TF.affine(x[i], float(angle[i]), [int(translate[i, 0]), int(translate[i, 1])],
                  float(scale[i]), [float(shear[i, 0]), float(shear[i, 1])], _mode(m),
                  fill, m.center)
        for i in range(x.shape[0])
    ])


def _ref_perspective(m: nn.Module, x: Tensor, params) -> Tensor:
    import torchvision.transforms.v2.functional as TF

    mask, ends = params
    h, w = x.shape[-2], x.shape[-1]
    start = [[0, 0], [w - 1, 0], [w - 1, h - 1], [0, h - 1]]
    fill = m.fill[0] if len(m.fill) == 1 else list(m.fill)
    return torch.stack([
        TF.perspective(x[i], start, ends[i].tolist(), _mode(m), fill) if bool(mask[i])
        else x[i] for i in range(x.shape[0])])


def _ref_resized_crop(m: nn.Module, x: Tensor, params) -> Tensor:
    import torchvision.transforms.v2.functional as TF

    t, l, h, w = params
    return torch.stack([
        TF.resized_crop(x[i], int(t[i]), int(l[i]), int(h[i]), int(w[i]), list(m.size),
                        _mode(m), antialias=m.antialias)
        for i in range(x.shape[0])
    ])


def _ref_center_crop(m: nn.Module, x: Tensor, params) -> Tensor:
    import torchvision.transforms.v2.functional as TF

    return TF.center_crop(x, [m.height, m.width])


def _ref_pad(m: nn.Module, x: Tensor, params) -> Tensor:
    return _tv_pad(m, x, list(m.padding))


def _ref_resize(m: nn.Module, x: Tensor, params) -> Tensor:
    import torchvision.transforms.v2.functional as TF

    size = list(m.size) if len(m.size) else None
    return TF.resize(x, size, _mode(m), max_size=m.max_size, antialias=m.antialias)


def _ref_normalize(m: nn.Module, x: Tensor, params) -> Tensor:
    import torchvision.transforms.v2.functional as TF

    c = x.shape[1]
    mean = m.mean.tolist() * (c if m.mean.numel() == 1 else 1)
    std = m.std.tolist() * (c if m.std.numel() == 1 else 1)
    return TF.normalize(x, mean, std).to(m.out_dtype())


def _ref_to_dtype(m: nn.Module, x: Tensor, params) -> Tensor:
    import torchvision.transforms.v2.functional as TF

    return TF.to_dtype(x, m.dtype, scale=m.scale)


# --- colour / misc / container references (issue 9) ---

def _per_sample_ref(mask: Tensor, x: Tensor, fn: Callable[[Tensor], Tensor]) -> Tensor:
    return torch.stack([fn(x[i]) if bool(mask[i]) else x[i] for i in range(x.shape[0])])


def _tv_adjust(xi: Tensor, op: int, factor: float) -> Tensor:
    import torchvision.transforms.v2.functional as TF

    if op == 3 and xi.dtype == torch.float64 and xi.shape[0] == 3:
        # adjust_hue rounds through float32; its own HSV round trip, kept in float64
        from torchvision.transforms.v2.functional._color import _hsv_to_rgb, _rgb_to_hsv

        hsv = _rgb_to_hsv(xi)
        h = (hsv[0] + factor).remainder(1.0)
        return _hsv_to_rgb(torch.stack((h, hsv[1], hsv[2])))
    fns = [TF.adjust_brightness, TF.adjust_contrast, TF.adjust_saturation, TF.adjust_hue]
    return fns[op](xi, factor)


def _ref_color_jitter(m: nn.Module, x: Tensor, params) -> Tensor:
    factors, order = params
    out = []
    for i in range(x.shape[0]):
        xi = x[i]
        for op in order[i].tolist():
            xi = _tv_adjust(xi, op, float(factors[i, op]))
        out.append(xi)
    return torch.stack(out)


def _ref_grayscale(m: nn.Module, x: Tensor, params) -> Tensor:
    import torchvision.transforms.v2.functional as TF

    return TF.rgb_to_grayscale(x, m.num_output_channels)


def _ref_random_grayscale(m: nn.Module, x: Tensor, mask: Tensor) -> Tensor:
    import torchvision.transforms.v2.functional as TF

    return _per_sample_ref(mask, x, lambda t: TF.rgb_to_grayscale(t, t.shape[0]))


def _ref_invert(m: nn.Module, x: Tensor, mask: Tensor) -> Tensor:
    import torchvision.transforms.v2.functional as TF

    return _per_sample_ref(mask, x, TF.invert)


def _ref_posterize(m: nn.Module, x: Tensor, mask: Tensor) -> Tensor:
    import torchvision.transforms.v2.functional as TF

    return _per_sample_ref(mask, x, lambda t: TF.posterize(t, m.bits))


def _ref_solarize(m: nn.Module, x: Tensor, mask: Tensor) -> Tensor:
    import torchvision.transforms.v2.functional as TF

    return _per_sample_ref(mask, x, lambda t: TF.solarize(t, m.threshold))


def _ref_sharpness(m: nn.Module, x: Tensor, mask: Tensor) -> Tensor:
    import torchvision.transforms.v2.functional as TF

    return _per_sample_ref(mask, x, lambda t: TF.adjust_sharpness(t, m.sharpness_factor))


def _ref_autocontrast(m: nn.Module, x: Tensor, mask: Tensor) -> Tensor:
    import torchvision.transforms.v2.functional as TF

    return _per_sample_ref(mask, x, TF.autocontrast)


def _ref_equalize(m: nn.Module, x: Tensor, mask: Tensor) -> Tensor:
    import torchvision.transforms.v2.functional as TF

    return _per_sample_ref(mask, x, TF.equalize)


def _ref_gaussian_blur(m: nn.Module, x: Tensor, sigma: Tensor) -> Tensor:
    import torchvision.transforms.v2.functional as TF

    return torch.stack([TF.gaussian_blur(x[i], list(m.kernel_size), [float(sigma[i])] * 2)
                        for i in range(x.shape[0])])


def _ref_erasing(m: nn.Module, x: Tensor, params) -> Tensor:
    import torchvision.transforms.v2.functional as TF

    top, left, h, w = params[:4]  # params[4]: the module's value (the reference builds its own)
    v = torch.tensor(m.value, dtype=x.dtype).view(-1, 1, 1)
    return torch.stack([
        TF.erase(x[i], int(top[i]), int(left[i]), int(h[i]), int(w[i]), v) if int(h[i]) > 0
        else x[i] for i in range(x.shape[0])])


def _ref_seq(ts, xi: Tensor) -> Tensor:
    """Inner transforms that are deterministic in effect (Random*(p=1.0), Grayscale) through
    their torchvision functionals, one sample at a time."""
    import torchvision.transforms.v2.functional as TF

    for t in ts:
        name = type(t).__name__
        if name == "RandomInvert":
            xi = TF.invert(xi)
        elif name == "Grayscale":
            xi = TF.rgb_to_grayscale(xi, t.num_output_channels)
        elif name == "RandomHorizontalFlip":
            xi = xi.flip(-1)
        elif name == "CenterCrop":
            xi = TF.center_crop(xi, [t.height, t.width])
        else:
            raise AssertionError(f"no reference for {name} inside a container")
    return xi


def _ref_augment(m: nn.Module, x: Tensor, params) -> Tensor:
    return torch.stack([_ref_seq(list(m), x[i]) for i in range(x.shape[0])])


def _ref_random_apply(m: nn.Module, x: Tensor, mask: Tensor) -> Tensor:
    return _per_sample_ref(mask, x, lambda t: _ref_seq(m.transforms, t))


def _ref_random_choice(m: nn.Module, x: Tensor, branch: Tensor) -> Tensor:
    return torch.stack([_ref_seq([m.transforms[int(branch[i])]], x[i])
                        for i in range(x.shape[0])])


def _ref_random_order(m: nn.Module, x: Tensor, order: Tensor) -> Tensor:
    return torch.stack([_ref_seq([m.transforms[j] for j in order[i].tolist()], x[i])
                        for i in range(x.shape[0])])



# --- automatic augmentation references (issue 10): torchvision's own op application ---

def _tv_auto_op(m: nn.Module, xi: Tensor, op: int, magnitude: float) -> Tensor:
    """torchvision's ``_apply_image_or_video_transform`` of op id ``op`` on one image."""
    from torchvision.transforms import v2

    from batchaug.functional._auto_augment import OPS

    fill = m.fill
    tv = v2.TrivialAugmentWide(fill=None if fill is None else (
        fill[0] if len(fill) == 1 else list(fill)))
    return tv._apply_image_or_video_transform(xi, OPS[op], magnitude, _mode(m), tv._fill)


def _ref_auto_ops(m: nn.Module, x: Tensor, params) -> Tensor:
    """TrivialAugmentWide / RandAugment / AutoAugment: each sample's ops in order."""
    op, mag = params
    if op.dim() == 1:
        op, mag = op.unsqueeze(1), mag.unsqueeze(1)
    out = []
    for i in range(x.shape[0]):
        xi = x[i]
        for s in range(op.shape[1]):
            xi = _tv_auto_op(m, xi, int(op[i, s]), float(mag[i, s]))
        out.append(xi)
    return torch.stack(out)


def _ref_augmix(m: nn.Module, x: Tensor, params) -> Tensor:
    """torchvision's AugMix.forward on one image with this sample's weights, ops, magnitudes."""
    weights, op, mag = params
    out = []
    for i in range(x.shape[0]):
        mix = weights[i, 0].view(1, 1, 1) * x[i]
        for c in range(op.shape[1]):
            aug = x[i]
            for s in range(op.shape[2]):
                aug = _tv_auto_op(m, aug, int(op[i, c, s]), float(mag[i, c, s]))
            mix = mix + weights[i, c + 1].view(1, 1, 1) * aug
        out.append(mix.to(x.dtype))
    return torch.stack(out)


# Per transform class: reference(module, x, make_params(x) or None) -> output, built from
# torchvision.transforms.v2.functional one sample at a time with the module's own parameters.
_REFERENCES = {
    "RandomHorizontalFlip": _ref_hflip,
    "RandomVerticalFlip": _ref_vflip,
    "RandomCrop": _ref_random_crop,
    "CenterCrop": _ref_center_crop,
    "Pad": _ref_pad,
    "Normalize": _ref_normalize,
    "ToDtype": _ref_to_dtype,
    "RandomRotation": _ref_rotation,
    "RandomAffine": _ref_affine,
    "RandomPerspective": _ref_perspective,
    "RandomResizedCrop": _ref_resized_crop,
    "Resize": _ref_resize,
    "ColorJitter": _ref_color_jitter,
    "Grayscale": _ref_grayscale,
    "RandomGrayscale": _ref_random_grayscale,
    "RandomInvert": _ref_invert,
    "RandomPosterize": _ref_posterize,
    "RandomSolarize": _ref_solarize,
    "RandomAdjustSharpness": _ref_sharpness,
    "RandomAutocontrast": _ref_autocontrast,
    "RandomEqualize": _ref_equalize,
    "GaussianBlur": _ref_gaussian_blur,
    "RandomErasing": _ref_erasing,
    "RandomApply": _ref_random_apply,
    "RandomChoice": _ref_random_choice,
    "RandomOrder": _ref_random_order,
    "Augment": _ref_augment,
    "TrivialAugmentWide": _ref_auto_ops,
    "RandAugment": _ref_auto_ops,
    "AutoAugment": _ref_auto_ops,
    "AugMix": _ref_augmix,
    "TimmRandAugment": _timm_ref.ref_timm_ops,
    "TimmAutoAugment": _timm_ref.ref_timm_ops,
    "TimmAugMix": _timm_ref.ref_timm_augmix,
    "TimmRandomErasing": _timm_ref.ref_timm_erasing,
    "TimmRandomResizedCrop": _timm_ref.ref_timm_resized_crop,
}
