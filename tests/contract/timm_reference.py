"""Per-sample torchvision references for the timm policy modules (the contract's
``_REFERENCES``): each op through ``torchvision.transforms.v2.functional`` with the module's
drawn arguments, one image at a time."""
import math

import torch
from torch import Tensor, nn

# functional._auto_augment.TIMM_OPS, written out: the reference does not read the module under test
_NAMES = ["Identity", "ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness",
          "Color", "Contrast", "Sharpness", "Posterize", "Solarize", "SolarizeAdd",
          "AutoContrast", "Equalize", "Invert"]


def tv_timm_op(m: nn.Module, xi: Tensor, op: int, arg: float) -> Tensor:
    import torchvision.transforms.v2.functional as TF
    from torchvision.transforms import InterpolationMode

    name = _NAMES[op]
    u8 = xi.dtype == torch.uint8
    fill = [f if u8 else float(torch.tensor(f / 255.0, dtype=torch.float32)) for f in m.fill]
    if xi.shape[0] == 1:
        fill = fill[:1]
    mode = InterpolationMode(m.interpolation)
    if name == "Identity":
        return xi
    if name in ("ShearX", "ShearY"):  # PIL's (1, s, 0, 0, 1, 0): torchvision's shear at [0, 0]
        deg = math.degrees(math.atan(arg))
        shear = [deg, 0.0] if name == "ShearX" else [0.0, deg]
        return TF.affine(xi, angle=0.0, translate=[0.0, 0.0], scale=1.0, shear=shear,
                         interpolation=mode, fill=fill, center=[0.0, 0.0])
    if name in ("TranslateX", "TranslateY"):  # PIL samples at x + arg: content moves by -arg
        move = [-arg, 0.0] if name == "TranslateX" else [0.0, -arg]
        return TF.affine(xi, angle=0.0, translate=move, scale=1.0, shear=[0.0, 0.0],
                         interpolation=mode, fill=fill)
    if name == "Rotate":
        return TF.rotate(xi, arg, interpolation=mode, fill=fill)
    if name == "Brightness":
        return TF.adjust_brightness(xi, arg)
    if name == "Color":
        return TF.adjust_saturation(xi, arg)
    if name == "Contrast":
        return TF.adjust_contrast(xi, arg)
    if name == "Sharpness":
        return TF.adjust_sharpness(xi, arg)
    if name == "Posterize":
        return TF.posterize(xi, int(arg))
    if name == "Solarize":
        t = arg if u8 else arg / 255.0
        return xi if t > (255 if u8 else 1.0) else TF.solarize(xi, t)
    if name == "SolarizeAdd":
        if u8:
            return torch.where(xi < 128, (xi.to(torch.int32) + int(arg)).clamp(max=255)
                               .to(torch.uint8), xi)
        return torch.where(xi < 128 / 255.0, (xi + arg / 255.0).clamp(max=1.0), xi)
    if name == "AutoContrast":
        return TF.autocontrast(xi)
    if name == "Equalize":
        return TF.equalize(xi)
    return TF.invert(xi)


def ref_timm_ops(m: nn.Module, x: Tensor, params) -> Tensor:
    """TimmRandAugment / TimmAutoAugment: each sample's ops in order."""
    op, arg = params
    out = []
    for i in range(x.shape[0]):
        xi = x[i]
        for s in range(op.shape[1]):
            xi = tv_timm_op(m, xi, int(op[i, s]), float(arg[i, s]))
        out.append(xi)
    return torch.stack(out)


def ref_timm_augmix(m: nn.Module, x: Tensor, params) -> Tensor:
    """timm's AugMix ending (float32 weighted sum, clip, uint8 truncation, PIL blend) over the
    torchvision ops of each sample's chains."""
    weights, mix_w, op, arg = params
    ct = torch.float64 if x.dtype == torch.float64 else torch.float32
    bound = 255.0 if x.dtype == torch.uint8 else 1.0
    out = []
    for i in range(x.shape[0]):
        mixed = torch.zeros(x[i].shape, dtype=ct)
        for c in range(op.shape[1]):
            aug = x[i]
            for s in range(op.shape[2]):
                aug = tv_timm_op(m, aug, int(op[i, c, s]), float(arg[i, c, s]))
            mixed = mixed + weights[i, c].to(ct) * aug.to(ct)
        mixed = mixed.clamp(0.0, bound)
        if x.dtype == torch.uint8:
            mixed = mixed.floor()
        xi = x[i].to(ct)
        y = xi + mix_w[i].to(ct) * (mixed - xi)
        out.append(y.floor().clamp(0, 255).to(torch.uint8) if x.dtype == torch.uint8
                   else y.to(x.dtype))
    return torch.stack(out)


def ref_timm_erasing(m: nn.Module, x: Tensor, boxes) -> Tensor:
    """TimmRandomErasing(mode="const"): each sample's boxes erased to 0 in order."""
    import torchvision.transforms.v2.functional as TF

    out = []
    for i in range(x.shape[0]):
        xi = x[i]
        for k in range(boxes.shape[1]):
            top, left, h, w = boxes[i, k].tolist()
            if h > 0 and w > 0:
                xi = TF.erase(xi, top, left, h, w, torch.zeros(1, 1, 1, dtype=x.dtype))
        out.append(xi)
    return torch.stack(out)


def ref_timm_resized_crop(m: nn.Module, x: Tensor, params) -> Tensor:
    """TimmRandomResizedCrop under keys: each sample's box is its branch's RandomResizedCrop
    draw for its own key (keyed draws depend on the key alone), cropped and resized by
    torchvision with that branch's interpolation."""
    import torchvision.transforms.v2.functional as TF
    from torchvision.transforms import InterpolationMode

    from batchaug import _random

    branch, keys = params
    out = []
    for i in range(x.shape[0]):
        b = int(branch[i])
        crop = m.choice.transforms[b]
        sub = _random.substream(keys[i:i + 1], b)
        t, l, h, w = crop.make_params(x[i:i + 1], sub)
        out.append(TF.resized_crop(x[i], int(t[0]), int(l[0]), int(h[0]), int(w[0]),
                                   list(crop.size), InterpolationMode(m.interpolations[b]),
                                   antialias=crop.antialias))
    return torch.stack(out)
