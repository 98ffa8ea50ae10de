"""with_targets of RandomCrop, Pad, CenterCrop, Resize and RandomResizedCrop against
torchvision v2 on tv_tensors (Mask, BoundingBoxes XYXY, KeyPoints), one sample at a time with
the sample's own parameters: masks exact, crop/pad boxes and keypoints exact, resized ones and
padded crops to the last float32 bit (torchvision multiplies by a float32 ratio, and pads then
crops in two float32 steps; we move once in float64), validity
as torchvision's SanitizeBoundingBoxes(min_size=1, min_area=1) / SanitizeKeyPoints decide it.
Parameters come from the module's draws (keys), pinned ranges or deterministic transforms; the
references are torchvision's functional ops."""
import pytest
import torch
import torchvision.transforms.v2.functional as TF
from hypothesis import given, settings
from hypothesis import strategies as st
from torchvision import tv_tensors

import batchaug.transforms as T

H, W = 20, 26  # not square: catches swapped axes
MODES = ["constant", "edge", "reflect", "symmetric"]


def _batch(n=4, m=5, k=6, h=H, w=W, seed=0, mask_dtype=torch.int64, mask_k=None):
    """Images, and targets with integral and fractional boxes (some sticking out of the image,
    some tiny: sanitized away after a crop) and keypoints."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (n, 3, h, w), dtype=torch.uint8, generator=g)
    shape = (n, h, w) if mask_k is None else (n, mask_k, h, w)
    if mask_dtype == torch.bool:
        masks = torch.rand(shape, generator=g) < 0.5
    else:
        masks = torch.randint(0, 7, shape, generator=g).to(mask_dtype)
    p = torch.rand(n, m, 2, 2, generator=g) * 1.2 - 0.1
    xy = p * torch.tensor([w, h], dtype=torch.float32)
    xy[:, : m // 2] = xy[:, : m // 2].round()
    boxes = torch.cat((xy.amin(dim=2), xy.amax(dim=2)), dim=2)
    kp = torch.rand(n, k, 2, generator=g) * torch.tensor([w - 1e-3, h - 1e-3])
    kp[:, : k // 2] = kp[:, : k // 2].floor()
    box_valid = torch.rand(n, m, generator=g) < 0.9
    kp_valid = torch.rand(n, k, generator=g) < 0.9
    targets = {"masks": masks, "boxes": boxes, "box_valid": box_valid, "keypoints": kp,
               "keypoint_valid": kp_valid, "labels": torch.arange(n)}
    return x, targets


def _keys(n, seed=0):
    return torch.arange(n, dtype=torch.int64) * 7919 + seed


def _tv(targets, i, canvas):
    """Sample i's targets as tv_tensors (boxes clamped to the image first: our input rule)."""
    boxes = tv_tensors.BoundingBoxes(targets["boxes"][i], format="XYXY",
                                     canvas_size=tuple(canvas))
    return (tv_tensors.Mask(targets["masks"][i]), TF.clamp_bounding_boxes(boxes),
            tv_tensors.KeyPoints(targets["keypoints"][i], canvas_size=tuple(canvas)))


def _check_sample(out, targets, i, ref_mask, ref_boxes, ref_kp, exact=True):
    """Sample i of our output against torchvision's moved tv_tensors and its sanitizers."""
    assert torch.equal(out["masks"][i], ref_mask.as_subclass(torch.Tensor)), i
    assert out["masks"].dtype == targets["masks"].dtype
    if not exact:
        # torchvision's resize does not clamp: its float32 ratio can put a border box one ulp
        # outside the image, which its sanitizer then drops; clamp that last bit away
        clamped = TF.clamp_bounding_boxes(ref_boxes)
        assert (clamped.as_subclass(torch.Tensor) - ref_boxes.as_subclass(torch.Tensor)
                ).abs().max() < 1e-5
        ref_boxes = clamped
    rb = ref_boxes.as_subclass(torch.Tensor)
    _, keep = TF.sanitize_bounding_boxes(ref_boxes, min_size=1, min_area=1)
    keep = keep & targets["box_valid"][i]
    ob, ov = out["boxes"][i], out["box_valid"][i]
    rk = ref_kp.as_subclass(torch.Tensor)
    _, kkeep = TF.sanitize_keypoints(ref_kp)
    kkeep = kkeep & targets["keypoint_valid"][i]
    ok, okv = out["keypoints"][i], out["keypoint_valid"][i]
    if exact:
        assert torch.equal(ov, keep), (i, ov, keep)
        assert torch.equal(ob[keep], rb[keep]), i
        assert torch.equal(okv, kkeep), i
        assert torch.equal(ok[kkeep], rk[kkeep]), i
    else:
        # float32 last bit: a threshold (width 1, the border) may fall either side of it
        rw, rh = rb[:, 2] - rb[:, 0], rb[:, 3] - rb[:, 1]
        sure = ((rw - 1).abs() > 1e-4) & ((rh - 1).abs() > 1e-4) & ((rw * rh - 1).abs() > 1e-4)
        assert torch.equal(ov[sure], keep[sure]), i
        both = ov & keep
        torch.testing.assert_close(ob[both], rb[both], rtol=2.4e-7, atol=1e-6)
        ksure = ((rk - torch.tensor([0.0, 0.0])).abs() > 1e-4).all(1) & (
            (rk - torch.tensor(list(ref_kp.canvas_size[::-1]), dtype=rk.dtype)).abs() > 1e-4
        ).all(1)
        assert torch.equal(okv[ksure], kkeep[ksure]), i
        kboth = okv & kkeep
        torch.testing.assert_close(ok[kboth], rk[kboth], rtol=2.4e-7, atol=1e-6)
    assert (ob[~ov] == 0).all() and (ok[~okv] == 0).all()
    assert torch.equal(out["labels"], targets["labels"])


def _tv_padding(crop, h, w):
    """torchvision v2 RandomCrop's padding [left, top, right, bottom] (its make_params rule)."""
    left, top, right, bottom = crop.padding
    if crop.pad_if_needed:
        if h + top + bottom < crop.height:
            d = crop.height - (h + top + bottom)
            top, bottom = top + d, bottom + d
        if w + left + right < crop.width:
            d = crop.width - (w + left + right)
            left, right = left + d, right + d
    return [left, top, right, bottom]


# ---------------------------------------------------------------------------------------------
# RandomCrop and Pad: every padding mode, pad_if_needed, mask_fill
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kwargs", [
    dict(size=(12, 16), padding=3),
    dict(size=(24, 30), padding=[1, 2, 0, 3], pad_if_needed=True),
    dict(size=(H, W)),  # no padding: windows equal the image
    dict(size=(16, W), padding=4),  # as wide as the image: pad_crop's flat path
])
def test_random_crop_matches_torchvision(mode, kwargs):
    m = T.RandomCrop(**kwargs, padding_mode=mode, fill=9, mask_fill=5)
    x, targets = _batch(seed=len(str(kwargs)))
    keys = _keys(x.shape[0])
    top, left = m.make_params(x, keys)
    y, out = m.with_targets(x, targets, keys)
    pad = _tv_padding(m, H, W)
    assert m.padding_for(H, W) == pad
    assert torch.equal(y, m(x, keys))
    for i in range(x.shape[0]):
        t, l = int(top[i]), int(left[i])
        img = TF.crop(TF.pad(tv_tensors.Image(x[i]), pad, fill=9, padding_mode=mode), t, l,
                      m.height, m.width)
        assert torch.equal(y[i], img.as_subclass(torch.Tensor))
        mask, boxes, kp = _tv(targets, i, (H, W))
        mask = TF.crop(TF.pad(mask, pad, fill=5, padding_mode=mode), t, l, m.height, m.width)
        # torchvision refuses boxes/keypoints with a non-constant mode; they move as in constant
        boxes = TF.crop(TF.pad(boxes, pad), t, l, m.height, m.width)
        kp = TF.crop(TF.pad(kp, pad), t, l, m.height, m.width)
        # torchvision rounds twice (pad, then crop) in float32, we once: the last bit may differ
        _check_sample(out, targets, i, mask, boxes, kp, exact=sum(pad) == 0)


def test_torchvision_refuses_boxes_with_a_non_constant_padding_mode():
    """Why our reference moves boxes with constant padding for every mode."""
    b = tv_tensors.BoundingBoxes(torch.zeros(1, 4), format="XYXY", canvas_size=(4, 4))
    with pytest.raises(ValueError):
        TF.pad(b, [1, 1, 1, 1], padding_mode="reflect")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("padding", [[1, 2, 3, 4], 0, (5, 2)])
def test_pad_matches_torchvision(mode, padding):
    m = T.Pad(padding, fill=3, padding_mode=mode, mask_fill=2)
    x, targets = _batch(seed=1)
    y, out = m.with_targets(x, targets)
    assert torch.equal(y, m(x))
    for i in range(x.shape[0]):
        pad = [padding] * 4 if isinstance(padding, int) else list(padding)
        img = TF.pad(tv_tensors.Image(x[i]), pad, fill=3, padding_mode=mode)
        assert torch.equal(y[i], img.as_subclass(torch.Tensor))
        mask, boxes, kp = _tv(targets, i, (H, W))
        _check_sample(out, targets, i, TF.pad(mask, pad, fill=2, padding_mode=mode),
                      TF.pad(boxes, pad), TF.pad(kp, pad))


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int32, torch.bool])
@pytest.mark.parametrize("mask_k", [None, 3])
def test_crop_and_pad_masks_keep_dtype_and_stack(dtype, mask_k):
    """(N, H, W) and (N, K, H, W) masks of every integer kind, through the same kernels."""
    x, targets = _batch(mask_dtype=dtype, mask_k=mask_k)
    keys = _keys(x.shape[0])
    for m in (T.RandomCrop(14, padding=4, mask_fill=1), T.Pad(3, padding_mode="reflect"),
              T.CenterCrop((25, 12))):
        _, out = m.with_targets(x, targets, keys if m.takes_keys else None)
        assert out["masks"].dtype == dtype and out["masks"].dim() == targets["masks"].dim()
        for i in range(x.shape[0]):
            ref, _, _ = _tv(targets, i, (H, W))
            if isinstance(m, T.RandomCrop):
                top, left = m.make_params(x, keys)
                ref = TF.crop(TF.pad(ref, [4] * 4, fill=1), int(top[i]), int(left[i]), 14, 14)
            elif isinstance(m, T.Pad):
                ref = TF.pad(ref, [3] * 4, padding_mode="reflect")
            else:
                ref = TF.center_crop(ref, [25, 12])
            assert torch.equal(out["masks"][i], ref.as_subclass(torch.Tensor))


def test_mask_fill_checks():
    for cls in (T.RandomCrop, T.Pad):
        with pytest.raises(TypeError, match="mask_fill"):
            cls(4, mask_fill=1.5)
        with pytest.raises(TypeError, match="mask_fill"):
            cls(4, mask_fill=True)
        with pytest.raises(TypeError):
            cls(4, 0, "constant", 3)  # keyword-only
    x, targets = _batch(mask_dtype=torch.uint8)
    with pytest.raises(ValueError, match="mask_fill 300 .*uint8"):
        T.Pad(2, mask_fill=300).with_targets(x, targets)
    with pytest.raises(ValueError, match="mask_fill -1"):
        T.RandomCrop(10, padding=2, mask_fill=-1).with_targets(x, targets)
    targets["masks"] = targets["masks"] > 3
    with pytest.raises(ValueError, match="mask_fill 2 .*bool"):
        T.Pad(2, mask_fill=2).with_targets(x, targets)
    targets["masks"] = torch.zeros(4, H, W, dtype=torch.uint16)
    with pytest.raises(ValueError, match="mask_fill -3 .*uint16"):
        T.Pad(2, mask_fill=-3).with_targets(x, targets)
    targets["masks"] = torch.zeros(4, H, W, dtype=torch.bool)
    # the fill is unused outside constant mode: not checked there
    T.Pad(2, padding_mode="edge", mask_fill=2).with_targets(x, targets)
    assert "mask_fill=7" in repr(T.Pad(1, mask_fill=7))


# ---------------------------------------------------------------------------------------------
# CenterCrop
# ---------------------------------------------------------------------------------------------

def _tv_center_anchor(size, crop):
    """Where torchvision's center_crop puts input pixel 0 (negative offset of the window): found
    by centre-cropping a coordinate ramp."""
    ramp = torch.arange(1, size + 1).view(1, size, 1).float()
    out = TF.center_crop(ramp, [crop, 1])[0, :, 0]
    hit = (out == 1).nonzero()
    return -int(hit[0]) if len(hit) else int(out[0]) - 1


@pytest.mark.parametrize("size", [(10, 12), (H, W), (23, 30), (27, 33), (15, 29)])
def test_center_crop_matches_torchvision(size):
    m = T.CenterCrop(size)
    x, targets = _batch(seed=2)
    y, out = m.with_targets(x, targets)
    assert torch.equal(y, TF.center_crop(x, list(size)))
    top, left = _tv_center_anchor(H, size[0]), _tv_center_anchor(W, size[1])
    for i in range(x.shape[0]):
        mask, boxes, kp = _tv(targets, i, (H, W))
        mask = TF.center_crop(mask, list(size))
        # boxes/keypoints follow the image: torchvision's image (and mask) window
        _check_sample(out, targets, i, mask, TF.crop(boxes, top, left, *size),
                      TF.crop(kp, top, left, *size))
        # which is torchvision's own box rule except where the crop exceeds the image by
        # 3 (mod 4) pixels: there torchvision shifts boxes one pixel more than its image
        odd = any((c - s) > 0 and (c - s) % 4 == 3 for c, s in zip(size, (H, W)))
        same = torch.equal(TF.center_crop(boxes, list(size)), TF.crop(boxes, top, left, *size))
        assert same != odd


# ---------------------------------------------------------------------------------------------
# Resize and RandomResizedCrop
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs", [dict(size=(10, 12)), dict(size=13), dict(size=(31, 17)),
                                    dict(size=12, max_size=14), dict(size=(H, W))])
def test_resize_matches_torchvision(kwargs):
    m = T.Resize(**kwargs)
    x, targets = _batch(seed=3)
    y, out = m.with_targets(x, targets)
    assert torch.equal(y, m(x))
    size = kwargs["size"] if isinstance(kwargs["size"], int) else list(kwargs["size"])
    size = [size] if isinstance(size, int) else size
    mx = kwargs.get("max_size")
    for i in range(x.shape[0]):
        mask, boxes, kp = _tv(targets, i, (H, W))
        _check_sample(out, targets, i, TF.resize(mask, size, max_size=mx),
                      TF.resize(boxes, size, max_size=mx), TF.resize(kp, size, max_size=mx),
                      exact=False)


@pytest.mark.parametrize("kwargs", [
    dict(scale=(0.3, 0.3), ratio=(0.8, 0.8)),  # pinned area and aspect; position drawn
    dict(scale=(0.05, 1.0)),
    dict(scale=(1.0, 1.0), ratio=(W / H, W / H)),  # the whole image: fully pinned
    dict(scale=(5.0, 5.0)),  # never fits: torchvision's centre fallback
])
def test_random_resized_crop_matches_torchvision(kwargs):
    m = T.RandomResizedCrop((12, 15), **kwargs)
    x, targets = _batch(seed=4, mask_k=2)
    keys = _keys(x.shape[0], 3)
    top, left, h, w = m.make_params(x, keys)
    y, out = m.with_targets(x, targets, keys)
    assert torch.equal(y, m(x, keys))
    if kwargs.get("scale") == (1.0, 1.0):
        assert (top == 0).all() and (h == H).all() and (w == W).all()
    for i in range(x.shape[0]):
        box = (int(top[i]), int(left[i]), int(h[i]), int(w[i]))
        mask, boxes, kp = _tv(targets, i, (H, W))
        _check_sample(out, targets, i, TF.resized_crop(mask, *box, [12, 15]),
                      TF.resized_crop(boxes, *box, [12, 15]),
                      TF.resized_crop(kp, *box, [12, 15]), exact=False)


def test_random_resized_crop_eval_targets_follow_the_eval_box():
    m = T.RandomResizedCrop(16).eval()
    x, targets = _batch(h=32, w=32, seed=5)
    y, out = m.with_targets(x, targets)
    assert torch.equal(y, m(x))  # the eval image path, unchanged
    # 0.875 of 32 = 28, centred: the usual Resize + CenterCrop evaluation box
    for i in range(x.shape[0]):
        assert torch.equal(y[i], TF.resized_crop(x[i], 2, 2, 28, 28, [16, 16]))
        mask, boxes, kp = _tv(targets, i, (32, 32))
        _check_sample(out, targets, i, TF.resized_crop(mask, 2, 2, 28, 28, [16, 16]),
                      TF.resized_crop(boxes, 2, 2, 28, 28, [16, 16]),
                      TF.resized_crop(kp, 2, 2, 28, 28, [16, 16]), exact=False)
    # eval is the identity for an input of the output size and with eval_crop_pct=None
    for mod, hw in ((m, 16), (T.RandomResizedCrop(16, eval_crop_pct=None).eval(), 32)):
        x, targets = _batch(h=hw, w=hw, seed=6)
        y, out = mod.with_targets(x, targets)
        assert y is x
        for k, v in targets.items():
            assert torch.equal(out[k], v)


# ---------------------------------------------------------------------------------------------
# All five: random parameters, scripted == eager, empty batch, M = 0 and K = 0
# ---------------------------------------------------------------------------------------------

FACTORIES = {
    "RandomCrop": lambda: T.RandomCrop(14, padding=3, padding_mode="symmetric", mask_fill=4),
    "RandomCrop-pad-if-needed": lambda: T.RandomCrop((24, 12), pad_if_needed=True),
    "Pad": lambda: T.Pad([2, 0, 1, 3], fill=7, mask_fill=1),
    "CenterCrop": lambda: T.CenterCrop((23, 11)),
    "Resize": lambda: T.Resize(15, interpolation="nearest"),
    "RandomResizedCrop": lambda: T.RandomResizedCrop(13, antialias=False),
    "RandomResizedCrop-eval": lambda: T.RandomResizedCrop((11, 9)).eval(),
}


def _same(a, b):
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]), k


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_scripted_equals_eager(name):
    m = FACTORIES[name]()
    s = torch.jit.script(m)
    x, targets = _batch(seed=7)
    keys = _keys(x.shape[0]) if m.takes_keys else None
    y, out = m.with_targets(x, targets, keys)
    ys, outs = s.with_targets(x, targets, keys)
    assert torch.equal(y, ys)
    _same(out, outs)


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_empty_batch_and_empty_targets(name):
    m = FACTORIES[name]()
    x, targets = _batch(n=0)
    y, out = m.with_targets(x, targets)
    assert y.shape[0] == 0 and out["masks"].shape[0] == 0 and out["boxes"].shape == (0, 5, 4)
    assert out["masks"].shape[-2:] == y.shape[-2:]
    x, targets = _batch(n=3, m=0, k=0)
    y, out = m.with_targets(x, targets)
    assert out["boxes"].shape == (3, 0, 4) and out["box_valid"].shape == (3, 0)
    assert out["keypoints"].shape == (3, 0, 2) and out["keypoint_valid"].shape == (3, 0)
    assert out["masks"].shape[-2:] == y.shape[-2:]


@settings(deadline=None, max_examples=6)
@given(name=st.sampled_from(sorted(FACTORIES)), seed=st.integers(0, 999),
       n=st.integers(1, 5))
def test_targets_move_with_their_own_sample(name, seed, n):
    """Keyed with_targets: each sample's targets depend on its key alone, the image equals
    forward's, the input is not changed, and a valid keypoint lands on a pixel whose mask
    label is the one it had (masks made from the keypoints' pixels)."""
    m = FACTORIES[name]()
    x, targets = _batch(n=n, seed=seed)
    # label each keypoint's pixel with a distinct value: it must travel with the keypoint
    kpi = targets["keypoints"].floor().long()
    masks = torch.zeros(n, H, W, dtype=torch.int64)
    for i in range(n):
        masks[i, kpi[i, :, 1], kpi[i, :, 0]] = torch.arange(1, kpi.shape[1] + 1)
    targets["masks"] = masks
    targets["keypoints"] = kpi.float() + 0.5
    before = {k: v.clone() for k, v in targets.items()}
    keys = _keys(n, seed)
    keyed = keys if m.takes_keys else None
    y, out = m.with_targets(x, targets, keyed)
    _same(targets, before)
    assert torch.equal(y, m(x, keyed) if m.takes_keys else m(x))
    # sample 0 alone gives what it gave in the batch
    one = {k: v[:1] for k, v in targets.items()}
    y1, out1 = m.with_targets(x[:1], one, None if keyed is None else keyed[:1])
    assert torch.equal(y1, y[:1])
    _same(out1, {k: v[:1] for k, v in out.items()})
    # crops and pads move whole pixels: a valid keypoint's pixel keeps its label
    if name.startswith(("RandomCrop", "Pad", "CenterCrop")):
        kv, ko = out["keypoint_valid"], out["keypoints"]
        for i in range(n):
            for j in range(ko.shape[1]):
                if kv[i, j] and targets["keypoint_valid"][i, j]:
                    px, py = int(ko[i, j, 0]), int(ko[i, j, 1])
                    label = int(masks[i, kpi[i, j, 1], kpi[i, j, 0]])
                    assert int(out["masks"][i, py, px]) == label


@pytest.mark.parametrize("name", ["Pad", "CenterCrop", "Resize"])
def test_deterministic_transforms_move_targets_in_eval_too(name):
    m = FACTORIES[name]()
    x, targets = _batch(seed=8)
    y, out = m.with_targets(x, targets)
    ye, oute = m.eval().with_targets(x, targets)
    assert torch.equal(y, ye) and y.shape[-2:] != x.shape[-2:]
    _same(out, oute)
