"""with_targets across the geometry family (RandomCrop, Pad, CenterCrop, Resize,
RandomResizedCrop): the helpers their per-transform target tests use (test_geometry.py), and what
the five share: masks of every integer dtype, mask_fill, scripted == eager, empty batch and empty
targets, keyed targets moving with their own sample, deterministic transforms in eval(). Validity
as torchvision's SanitizeBoundingBoxes(min_size=1, min_area=1) / SanitizeKeyPoints decide it."""
import pytest
import torch
import torchvision.transforms.v2.functional as TF
from hypothesis import given, settings
from hypothesis import strategies as st
from torchvision import tv_tensors

import batchaug.transforms as T

H, W = 20, 26  # not square: catches swapped axes


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


# ---------------------------------------------------------------------------------------------
# RandomCrop and Pad: the reference's padding, masks of every dtype, mask_fill
# ---------------------------------------------------------------------------------------------

def test_torchvision_refuses_boxes_with_a_non_constant_padding_mode():
    """Why our reference moves boxes with constant padding for every mode."""
    b = tv_tensors.BoundingBoxes(torch.zeros(1, 4), format="XYXY", canvas_size=(4, 4))
    with pytest.raises(ValueError):
        TF.pad(b, [1, 1, 1, 1], padding_mode="reflect")


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


@pytest.mark.parametrize("module", [T.Resize(16), T.Resize(12, max_size=20),
                                    T.RandomResizedCrop((9, 14))])
def test_resized_box_apply_masks_resizes_a_dense_batch_to_the_output_size(module):
    # the protocol's mask hook called on a dense batch: Resize(int)'s output size follows the
    # input (output_size), as its images'; each box by F.interpolate's nearest rule
    x = torch.zeros(3, 3, 30, 26, dtype=torch.uint8)
    masks = torch.randint(0, 9, (3, 2, 30, 26), generator=torch.Generator().manual_seed(1))
    top, left, h, w = module.make_params(x)
    out = module.apply_masks(masks, (top, left, h, w))
    assert out.shape[2:] == module(x).shape[2:]
    for i in range(3):
        box = masks[i:i + 1, :, top[i]:top[i] + h[i], left[i]:left[i] + w[i]]
        ref = torch.nn.functional.interpolate(box.float(), size=list(out.shape[2:]),
                                              mode="nearest")
        assert torch.equal(out[i:i + 1], ref.long())
