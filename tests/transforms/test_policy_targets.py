"""Targets through the auto-augment policies, timm's policies and the mixers.

Geometric ops (ShearX/Y, TranslateX/Y, Rotate) move masks, boxes and keypoints as
torchvision's own op application (``_apply_image_or_video_transform``, i.e. its functional
``affine``/``rotate``) moves ``tv_tensors`` with the same op and magnitude, then its
sanitizers; photometric ops leave targets exactly as they are; masks are co-registered with
the image kernel's nearest warp; AugMix, TimmAugMix and the mixers refuse dense targets."""
import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
import torchvision.transforms.v2.functional as TF
from torch.export import Dim, export
from torchvision import tv_tensors
from torchvision.transforms import v2

import batchaug
from batchaug import transforms as T
from batchaug.functional import _auto_augment as FA

H, W = 24, 32  # not square: catches swapped axes
M, K = 6, 5


def _targets(n, seed=0, outside=False, mask_dtype=torch.uint8):
    g = torch.Generator().manual_seed(seed)
    lo, hi = (-0.2, 1.2) if outside else (0.0, 1.0)
    p = torch.rand(n, M, 2, 2, generator=g) * (hi - lo) + lo
    xy = p * torch.tensor([W, H], dtype=torch.float32)
    xy[:, : M // 2] = xy[:, : M // 2].round()
    boxes = torch.cat((xy.amin(dim=2), xy.amax(dim=2)), dim=2)
    kp = torch.rand(n, K, 2, generator=g) * torch.tensor([W - 1e-3, H - 1e-3])
    kp[:, : K // 2] = kp[:, : K // 2].floor()
    masks = torch.randint(0, 6, (n, H, W), generator=g).to(mask_dtype)
    return {"masks": masks, "boxes": boxes, "box_valid": torch.rand(n, M, generator=g) < 0.9,
            "keypoints": kp, "keypoint_valid": torch.rand(n, K, generator=g) < 0.9,
            "labels": torch.arange(n)}


def _images(n, seed=0, dtype=torch.uint8):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (n, 3, H, W), generator=g, dtype=torch.uint8)
    return x if dtype == torch.uint8 else x.to(dtype) / 255


def _near(d):
    """Where float rounding may decide a threshold: not compared."""
    return (d.abs() > 0) & (d.abs() < 1e-3)


class _TvStep:
    """torchvision's op application on one sample's tv_tensors, sanitized after the op."""

    def __init__(self, policy):
        self.tv = policy
        self.fill = policy._fill

    def __call__(self, name, magnitude, boxes, bv, kp, kv, mask):
        args = dict(interpolation=v2.InterpolationMode.NEAREST, fill=self.fill)
        rb = self.tv._apply_image_or_video_transform(
            TF.clamp_bounding_boxes(tv_tensors.BoundingBoxes(boxes, format="XYXY",
                                                             canvas_size=(H, W))),
            name, magnitude, **args)
        rk = self.tv._apply_image_or_video_transform(
            tv_tensors.KeyPoints(kp, canvas_size=(H, W)), name, magnitude, **args)
        rm = self.tv._apply_image_or_video_transform(tv_tensors.Mask(mask), name, magnitude,
                                                     **args)
        _, rv = TF.sanitize_bounding_boxes(rb, min_size=1, min_area=1)
        _, rkv = TF.sanitize_keypoints(rk)
        rb, rk = rb.as_subclass(torch.Tensor), rk.as_subclass(torch.Tensor)
        bw, bh = rb[:, 2] - rb[:, 0], rb[:, 3] - rb[:, 1]
        bsure = ~(_near(bw - 1) | _near(bh - 1) | _near(bw * bh - 1))
        ksure = ~(_near(rk[:, 0]) | _near(rk[:, 0] - W) | _near(rk[:, 1]) | _near(rk[:, 1] - H))
        return rb, rv & bv, bsure, rk, rkv & kv, ksure, rm.as_subclass(torch.Tensor)


def _assert_matches(out, ref, what, mask_share=0.02):
    rb, rv, bsure, rk, rkv, ksure, rm = ref
    ob, ov, ok, okv, om = (out["boxes"], out["box_valid"], out["keypoints"],
                           out["keypoint_valid"], out["masks"])
    assert torch.equal(ov[bsure], rv[bsure]), what
    both = rv & ov
    torch.testing.assert_close(ob[both], rb[both], atol=2e-4, rtol=0, msg=what)
    assert (ob[~ov] == 0).all(), what
    assert torch.equal(okv[ksure], rkv[ksure]), what
    both = rkv & okv
    torch.testing.assert_close(ok[both], rk[both], atol=2e-4, rtol=0, msg=what)
    assert (ok[~okv] == 0).all(), what
    # torchvision builds its grid with other float sums: a sample point on a pixel border may
    # round to the other neighbour (a few pixels of a shear or rotation, none of a translation)
    assert (om != rm).float().mean() <= mask_share, what


# one sample per (op, signed magnitude): torchvision's arguments for each
PINNED = [("ShearX", 0.3), ("ShearX", -0.55), ("ShearY", 0.2), ("ShearY", -0.9),
          ("TranslateX", 7.6), ("TranslateX", -12.3), ("TranslateY", 5.0),
          ("TranslateY", -9.9), ("Rotate", 30.0), ("Rotate", -135.0), ("Rotate", 90.0),
          ("Brightness", 0.5), ("Posterize", 4.0), ("Equalize", 0.0), ("Identity", 0.0)]


@pytest.mark.parametrize("outside", [False, True])
def test_pinned_ops_match_torchvision(outside):
    """Each sample's pinned op and magnitude (as make_params gives them) moves its targets as
    torchvision's op application moves tv_tensors, sanitized; photometric ops: unchanged."""
    n = len(PINNED)
    t = batchaug.functional._targets.check_targets(_targets(n, seed=1, outside=outside),
                                                   [n, 3, H, W])
    op = torch.tensor([FA.op_id(name) for name, _ in PINNED])
    mag = torch.tensor([m for _, m in PINNED])
    ref = _TvStep(v2.TrivialAugmentWide())
    for group in (True, False):
        m = T.TrivialAugmentWide(group_by_branch=group)
        out = m.apply_targets(t, (op, mag), [H, W], [H, W])
        assert torch.equal(out["labels"], t["labels"])
        for i, (name, magnitude) in enumerate(PINNED):
            one = {k: v[i] for k, v in out.items()}
            geometric = 1 <= FA.op_id(name) <= 5
            # a photometric op: torchvision's Identity (masks exactly as given; boxes and
            # keypoints only clamped/sanitized, as every geometric transform's)
            r = ref(name if geometric else "Identity", magnitude, t["boxes"][i],
                    t["box_valid"][i], t["keypoints"][i], t["keypoint_valid"][i], t["masks"][i])
            _assert_matches(one, r, f"{name} {magnitude} group={group}",
                            0.0 if not geometric or name.startswith("Translate") else 0.02)


@pytest.mark.parametrize("name", ["RandAugment", "AutoAugment"])
def test_steps_match_torchvision_step_by_step(name):
    """Several ops per sample: torchvision's op application step after step (sanitized after
    each step, as our kernels invalidate), with the drawn ops and magnitudes."""
    n = 24
    m = T.RandAugment(num_ops=3, magnitude=14) if name == "RandAugment" else \
        T.AutoAugment("svhn")
    tv = v2.RandAugment() if name == "RandAugment" else v2.AutoAugment(v2.AutoAugmentPolicy.SVHN)
    x = _images(n, seed=2)
    t = batchaug.functional._targets.check_targets(_targets(n, seed=2), [n, 3, H, W])
    keys = batchaug._random.sample_keys(0, 4, torch.arange(n))
    op, mag = m.make_params(x, keys)
    _, out = m.with_targets(x, t, keys)
    step = _TvStep(tv)
    geometric = 0
    for i in range(n):
        b, bv, k, kv, mk = (t["boxes"][i], t["box_valid"][i], t["keypoints"][i],
                            t["keypoint_valid"][i], t["masks"][i])
        for s in range(op.shape[1]):
            o = int(op[i, s])
            geometric += int(1 <= o <= 5)
            # a photometric step: the Identity (boxes/keypoints clamped and sanitized)
            name_s = FA.OPS[o] if 1 <= o <= 5 else "Identity"
            b, bv, _, k, kv, _, mk = step(name_s, float(mag[i, s]), b, bv, k, kv, mk)
            b = torch.where(bv.unsqueeze(1), b, torch.zeros_like(b))
            k = torch.where(kv.unsqueeze(1), k, torch.zeros_like(k))
        one = {key: v[i] for key, v in out.items()}
        ref = (b, bv, torch.ones_like(bv), k, kv, torch.ones_like(kv), mk)
        _assert_matches(one, ref, f"{name} sample {i}", 0.04)
    assert geometric >= 10  # the draws did exercise the geometric ops


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32], ids=str)
@pytest.mark.parametrize("make", [
    lambda **kw: T.TrivialAugmentWide(**kw), lambda **kw: T.RandAugment(num_ops=3, **kw),
    lambda **kw: T.AutoAugment("cifar10", **kw),
    lambda **kw: T.TimmRandAugment(magnitude=9, magnitude_std=0.5, num_layers=3, prob=0.8,
                                   interpolation="nearest", fill=7, **kw),
    lambda **kw: T.TimmAutoAugment("v0", interpolation="nearest", fill=7, **kw)],
    ids=["TrivialAugmentWide", "RandAugment", "AutoAugment", "TimmRandAugment",
         "TimmAutoAugment"])
def test_masks_coregistered_with_the_image(make, dtype):
    """An image made from the mask, run through the module's own image kernels with the
    drawn geometric ops (photometric ones set to Identity: they would change its values)
    and nearest interpolation, equals the moved mask, fill included."""
    n = 40
    if isinstance(make(), (T.TimmRandAugment, T.TimmAutoAugment)):
        m = make(mask_fill=7)  # timm's fill is in uint8 units for any dtype
    else:
        m = make(interpolation="nearest", fill=7 if dtype == torch.uint8 else 7 / 255,
                 mask_fill=7)
    masks = _targets(n, seed=3)["masks"]
    image = masks.unsqueeze(1).expand(n, 3, H, W).to(dtype)
    image = image if dtype == torch.uint8 else image / 255
    keys = batchaug._random.sample_keys(1, 0, torch.arange(n))
    op, mag = m.make_params(image, keys)
    _, out = m.with_targets(image, {"masks": masks}, keys)
    geo = (op >= 1) & (op <= 5)
    warped = m.apply_image(image, (torch.where(geo, op, torch.zeros_like(op)), mag))
    back = warped[:, 0] if dtype == torch.uint8 else (warped[:, 0] * 255).round()
    assert torch.equal(back.to(torch.uint8), out["masks"])
    assert geo.view(n, -1).any(dim=1).sum() >= 5 and not torch.equal(out["masks"], masks)


@pytest.mark.parametrize("make", [
    lambda f: T.RandAugment(num_ops=3, mask_fill=f),
    lambda f: T.TimmRandAugment(magnitude=9, num_layers=3, prob=0.8, mask_fill=f)],
    ids=["RandAugment", "TimmRandAugment"])
def test_large_integer_ids_move_exactly(make):
    """Panoptic ids beyond float32's exact 2**24 (int64 2**62..., int32 2**31 - 1) move
    through the geometric ops exactly as int16 labels of the same pixels do."""
    n = 30
    g = torch.Generator().manual_seed(9)
    codes = torch.stack([torch.randperm(H * W, generator=g) for _ in range(n)])
    codes = codes.view(n, H, W).to(torch.int16)  # one label per pixel
    x = _images(n, seed=9)
    keys = batchaug._random.sample_keys(3, 3, torch.arange(n))
    ref = make(-1).with_targets(x, {"masks": codes}, keys)[1]["masks"]
    assert (ref == -1).any() and not torch.equal(ref, codes)
    for dtype, top, fill in ((torch.int64, 2 ** 62 + 1, -(2 ** 40) - 3),
                             (torch.int32, 2147483647, 16777217)):
        table = top - torch.arange(H * W, dtype=torch.int64) * 5

        def rename(c):
            return torch.where(c == -1, torch.full_like(c, fill, dtype=torch.int64),
                               table[c.long().clamp(min=0)]).to(dtype)
        out = make(fill).with_targets(x, {"masks": rename(codes)}, keys)[1]["masks"]
        assert out.dtype == dtype and torch.equal(out, rename(ref)), dtype


@pytest.mark.parametrize("make", [lambda g: T.RandAugment(num_ops=2, group_by_branch=g),
                                  lambda g: T.TimmAutoAugment("original", group_by_branch=g)],
                         ids=["RandAugment", "TimmAutoAugment"])
def test_grouped_equals_static_and_independent_of_the_batch(make):
    n = 30
    x = _images(n, seed=4)
    t = _targets(n, seed=4, outside=True, mask_dtype=torch.int32)
    keys = batchaug._random.sample_keys(2, 2, torch.arange(n))
    ys, ts = make(False).with_targets(x, t, keys)
    yg, tg = make(True).with_targets(x, t, keys)
    sub = {k: v[5:9] for k, v in t.items()}
    ya, ta = make(True).with_targets(x[5:9], sub, keys[5:9])
    assert torch.equal(yg, make(True)(x, keys))
    for k in ts:
        assert torch.equal(ts[k], tg[k]), k
        assert torch.equal(ta[k], tg[k][5:9]), k
    assert ts["masks"].dtype == torch.int32


POLICIES = {
    "TrivialAugmentWide": lambda: T.TrivialAugmentWide(mask_fill=1),
    "RandAugment": lambda: T.RandAugment(num_ops=2),
    "AutoAugment": lambda: T.AutoAugment("svhn"),
    "TimmRandAugment": lambda: T.TimmRandAugment(magnitude=9, magnitude_std=0.5),
    "TimmAutoAugment": lambda: T.TimmAutoAugment("v0"),
    "TimmRandomResizedCrop": lambda: T.TimmRandomResizedCrop(12),
}


@settings(deadline=None, max_examples=12)
@given(name=st.sampled_from(list(POLICIES)), n=st.integers(0, 5), m=st.integers(0, 3),
       k=st.integers(0, 3), layers=st.sampled_from([0, 2]),
       mask_dtype=st.sampled_from([torch.uint8, torch.bool, torch.int64]),
       seed=st.integers(0, 1000))
def test_shapes_dtypes_no_input_change_and_keys_reproduce(name, n, m, k, layers, mask_dtype,
                                                          seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (n, 3, H, W), generator=g, dtype=torch.uint8)
    shape = (n, H, W) if layers == 0 else (n, layers, H, W)
    t = {"masks": torch.randint(0, 2, shape, generator=g).to(mask_dtype),
         "boxes": torch.rand(n, m, 4, generator=g).sort(dim=2).values * W,
         "keypoints": torch.rand(n, k, 2, generator=g) * H, "labels": torch.arange(n)}
    before = {key: v.clone() for key, v in t.items()}
    keys = batchaug._random.sample_keys(seed, 0, torch.arange(n))
    mod = POLICIES[name]()
    y, out = mod.with_targets(x, t, keys)
    y2, out2 = mod.with_targets(x, t, keys)
    assert all(torch.equal(t[key], before[key]) for key in t)  # never in place
    assert torch.equal(y, y2) and all(torch.equal(out[key], out2[key]) for key in out)
    size = tuple(y.shape[2:])
    assert out["masks"].shape == shape[:-2] + size and out["masks"].dtype == mask_dtype
    assert out["boxes"].shape == (n, m, 4) and out["box_valid"].shape == (n, m)
    assert out["keypoints"].shape == (n, k, 2) and out["keypoint_valid"].shape == (n, k)
    assert torch.equal(out["labels"], t["labels"])
    if n > 1:  # a sample's result does not depend on the batch it is in
        y1, out1 = mod.with_targets(x[1:2], {key: v[1:2] for key, v in t.items()}, keys[1:2])
        assert torch.equal(y1, y[1:2])
        assert all(torch.equal(out1[key], out[key][1:2]) for key in out)


def test_eval_labels_errors_and_mask_fill():
    x = _images(4)
    t = _targets(4)
    m = T.TrivialAugmentWide(mask_fill=3).eval()
    y, out = m.with_targets(x, t)
    assert y is x and all(torch.equal(out[k], t[k]) for k in t)
    assert "mask_fill=3" in repr(m)
    m.train()
    with pytest.raises(ValueError, match="unknown key 'weights'"):
        m.with_targets(x, {"weights": torch.zeros(4)})
    with pytest.raises(ValueError, match="mask_fill 300 is outside the labels a torch.uint8 mask can hold"):
        T.RandAugment(mask_fill=300).with_targets(x, {"masks": t["masks"]})
    with pytest.raises(TypeError, match="mask_fill must be an int"):
        T.AutoAugment(mask_fill=1.5)
    with pytest.raises(TypeError):
        T.TrivialAugmentWide(None, mask_fill=0)  # keyword-only after the image arguments
    # RandAugment(num_ops=0): no draw, targets as given
    y, out = T.RandAugment(num_ops=0).with_targets(x, t)
    assert y is x and torch.equal(out["boxes"], t["boxes"])


def test_target_matrix_is_the_steps_composed():
    """target_matrix: the product of each step's matrix (the composition of the geometric
    ops), identity for a sample without geometric ops; moving keypoints by it equals the
    step-by-step path where nothing leaves the image."""
    m = T.RandAugment(num_ops=2)
    op = torch.tensor([[5, 3], [6, 7], [1, 0]])
    mag = torch.tensor([[10.0, 2.0], [0.5, 0.5], [0.1, 0.0]])
    mat = m.target_matrix((op, mag), [H, W], [H, W])
    assert torch.equal(mat[1], torch.eye(3, dtype=torch.float64))
    kp = torch.tensor([[[15.0, 11.0]]]).expand(3, 1, 2)
    t = {"keypoints": kp, "keypoint_valid": torch.ones(3, 1, dtype=torch.bool)}
    stepwise = m.apply_targets(t, (op, mag), [H, W], [H, W])["keypoints"]
    direct = batchaug.functional._targets.affine_keypoints(
        kp, t["keypoint_valid"], mat, [H, W], [H, W])[0]
    torch.testing.assert_close(stepwise, direct, atol=1e-5, rtol=0)


# --------------------------------------------------------------------------------------------
# refusals: AugMix, TimmAugMix and the mixers
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("make", [lambda: T.AugMix(), lambda: T.TimmAugMix()],
                         ids=["AugMix", "TimmAugMix"])
def test_augmix_refuses_dense_targets_passes_labels(make):
    x = _images(6)
    t = _targets(6)
    m = make()
    for key in ("masks", "boxes", "keypoints"):
        with pytest.raises(ValueError, match="no single geometry.*TrivialAugmentWide"):
            m.with_targets(x, {key: t[key]})
    keys = batchaug._random.sample_keys(0, 0, torch.arange(6))
    y, out = m.with_targets(x, {"labels": t["labels"]}, keys)
    assert torch.equal(y, m(x, keys)) and list(out) == ["labels"]
    assert torch.equal(out["labels"], t["labels"])


MIXERS = {
    "MixUp": lambda: T.MixUp(10, alpha=0.4),
    "CutMix": lambda: T.CutMix(10),
    "MixUpOrCutMix": lambda: T.MixUpOrCutMix(10, label_smoothing=0.1),
}


@pytest.mark.parametrize("name", list(MIXERS) + ["TimmMixup"])
def test_mixers_with_labels_and_refusals(name):
    x = _images(8, dtype=torch.float32)
    labels = torch.randint(0, 10, (8,))
    if name == "TimmMixup":
        m = T.TimmMixup(0.8, 1.0, mode="elem", num_classes=10)
        keys = None
    else:
        m = MIXERS[name]()
        keys = batchaug._random.sample_keys(0, 0, torch.arange(8))
    torch.manual_seed(3)
    ref = m(x, labels) if keys is None else m(x, labels, keys)
    torch.manual_seed(3)
    y, out = m.with_targets(x, {"labels": labels}, keys)
    assert torch.equal(y, ref[0]) and list(out) == ["labels"]
    assert torch.equal(out["labels"], ref[1])
    t = _targets(8)
    for key in ("masks", "boxes", "keypoints"):
        with pytest.raises(ValueError, match="mixing two images' .*not defined"):
            m.with_targets(x, {"labels": labels, key: t[key]}, keys)
    with pytest.raises(ValueError, match="needs targets\\['labels'\\]"):
        m.with_targets(x, {}, keys)
    scripted = torch.jit.script(m)
    torch.manual_seed(3)
    ys, outs = scripted.with_targets(x, {"labels": labels}, keys)
    assert torch.equal(ys, y) and torch.equal(outs["labels"], out["labels"])


# --------------------------------------------------------------------------------------------
# timm policies, erasing and resized crop
# --------------------------------------------------------------------------------------------

def test_timm_geometric_ops_move_targets_by_the_image_matrix():
    """timm's ops move targets by the matrix their image is warped with (PIL's affine in
    torchvision's centred convention): a keypoint lands where the warp takes its pixel, and a
    photometric op leaves everything as it is."""
    m = T.TimmRandAugment(num_layers=1)
    names = ["ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Color"]
    op = torch.tensor([[FT_ID[n]] for n in names])
    arg = torch.tensor([[0.2], [-0.15], [4.0], [-3.0], [20.0], [1.5]], dtype=torch.float64)
    kp = torch.tensor([[[12.5, 9.5]]]).expand(len(names), 1, 2)
    t = {"keypoints": kp, "keypoint_valid": torch.ones(len(names), 1, dtype=torch.bool)}
    out = m.apply_targets(t, (op, arg), [H, W], [H, W])["keypoints"]
    theta = batchaug.functional._auto_augment.pil_affine_matrix(op[:, 0], arg[:, 0], H, W)
    for i in range(len(names)):
        # the output point whose inverse-mapped (centred) position is the keypoint
        a = theta[i, :, :2]
        c = theta[i, :, 2]
        p_in = kp[i, 0].double() - torch.tensor([W / 2, H / 2], dtype=torch.float64)
        expect = torch.linalg.solve(a, p_in - c) + torch.tensor([W / 2, H / 2],
                                                               dtype=torch.float64)
        torch.testing.assert_close(out[i, 0].double(), expect, atol=1e-4, rtol=0)
    assert torch.equal(out[-1], kp[-1])


FT_ID = {n: batchaug.functional._auto_augment.TIMM_NAMES[n][0] for n in
         ["ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Color"]}


def test_timm_erasing_leaves_targets():
    x = _images(6, dtype=torch.float32)
    t = _targets(6)
    m = T.TimmRandomErasing(1.0, mode="pixel", max_count=2)
    keys = batchaug._random.sample_keys(0, 1, torch.arange(6))
    y, out = m.with_targets(x, t, keys)
    assert torch.equal(y, m(x, keys)) and not torch.equal(y, x)
    assert all(torch.equal(out[k], t[k]) for k in t)
    assert m.takes_keys


@pytest.mark.parametrize("keyed", [False, True])
@pytest.mark.parametrize("group", [True, False])
def test_timm_resized_crop_moves_targets_with_its_box(group, keyed):
    """Images equal forward's (same seed or keys); each sample's masks, boxes and keypoints
    equal torchvision's resized_crop of tv_tensors with the box its image used (then its
    sanitizers); in eval the eval box."""
    n = 12
    m = T.TimmRandomResizedCrop(16, interpolations=["bilinear", "nearest", "bicubic"])
    m.choice.group = group
    x = _images(n, seed=6)
    t = batchaug.functional._targets.check_targets(_targets(n, seed=6), [n, 3, H, W])
    keys = batchaug._random.sample_keys(1, 1, torch.arange(n)) if keyed else None
    torch.manual_seed(4)
    ref = m(x, keys)
    torch.manual_seed(4)
    branch, top, left, bh, bw = m.crop_params(x, keys)
    torch.manual_seed(4)
    y, out = m.with_targets(x, t, keys)
    assert torch.equal(y, ref) and torch.equal(out["labels"], t["labels"])
    assert len(set(branch.tolist())) > 1
    for i in range(n):
        box = (int(top[i]), int(left[i]), int(bh[i]), int(bw[i]), [16, 16])
        rm = TF.resized_crop(tv_tensors.Mask(t["masks"][i]), *box)
        rb = TF.resized_crop(TF.clamp_bounding_boxes(tv_tensors.BoundingBoxes(
            t["boxes"][i], format="XYXY", canvas_size=(H, W))), *box)
        rk = TF.resized_crop(tv_tensors.KeyPoints(t["keypoints"][i], canvas_size=(H, W)), *box)
        _, rv = TF.sanitize_bounding_boxes(rb, min_size=1, min_area=1)
        _, rkv = TF.sanitize_keypoints(rk)
        assert torch.equal(out["masks"][i], rm.as_subclass(torch.Tensor))
        ok = rv & t["box_valid"][i]
        assert torch.equal(out["box_valid"][i], ok), i
        torch.testing.assert_close(out["boxes"][i][ok], rb.as_subclass(torch.Tensor)[ok],
                                   atol=1e-4, rtol=0)
        okk = rkv & t["keypoint_valid"][i]
        assert torch.equal(out["keypoint_valid"][i], okk), i
        torch.testing.assert_close(out["keypoints"][i][okk], rk.as_subclass(torch.Tensor)[okk],
                                   atol=1e-4, rtol=0)
    m.eval()
    y, out = m.with_targets(x, t)
    assert torch.equal(y, m(x))
    tt, ll, hh, ww = m.first.eval_box(H, W)
    assert torch.equal(out["masks"][3], TF.resized_crop(tv_tensors.Mask(t["masks"][3]), tt, ll,
                                                        hh, ww, [16, 16]))
    s = torch.jit.script(m.train())
    torch.manual_seed(4)
    ys, outs = s.with_targets(x, t, keys)
    if keyed:  # (scripted unkeyed draws may take another RNG path)
        assert torch.equal(ys, ref) and all(torch.equal(outs[k], out_k) for k, out_k in
                                            m.with_targets(x, t, keys)[1].items())


# --------------------------------------------------------------------------------------------
# script / compile / export with a dynamic batch
# --------------------------------------------------------------------------------------------

class _WithTargets(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, x, masks, boxes, kp, keys):
        y, t = self.m.with_targets(x, {"masks": masks, "boxes": boxes, "keypoints": kp}, keys)
        return y, t["masks"], t["boxes"], t["box_valid"], t["keypoints"], t["keypoint_valid"]


def _inputs(n):
    t = _targets(n, seed=n)
    return (_images(n, seed=n), t["masks"], t["boxes"], t["keypoints"],
            batchaug._random.sample_keys(0, 0, torch.arange(n)))


def test_scripted_exported_compiled_equal_eager():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for m in (T.RandAugment(num_ops=2), T.TimmAutoAugment("v0")):
            s = torch.jit.script(m)
            for n in (0, 5):
                args = _inputs(n)
                ref = m.with_targets(args[0], {"masks": args[1], "boxes": args[2]}, args[4])
                got = s.with_targets(args[0], {"masks": args[1], "boxes": args[2]}, args[4])
                assert torch.equal(ref[0], got[0])
                assert all(torch.equal(ref[1][k], got[1][k]) for k in ref[1])
    eager = _WithTargets(T.RandAugment(num_ops=2, group_by_branch=False))
    batch = Dim("batch")
    run = export(eager, _inputs(8), dynamic_shapes=tuple({0: batch} for _ in range(5))).module()
    for n in (1, 7, 64):
        for a, b in zip(run(*_inputs(n)), eager(*_inputs(n))):
            assert torch.equal(a, b)
    compiled = torch.compile(_WithTargets(T.TrivialAugmentWide()), fullgraph=True,
                             dynamic=False)
    got, ref = compiled(*_inputs(7)), _WithTargets(T.TrivialAugmentWide())(*_inputs(7))
    torch.testing.assert_close(got[0], ref[0], atol=1, rtol=0)  # nearest/colour rounding
    for a, b in zip(got[1:], ref[1:]):
        assert torch.equal(a, b)


def test_no_host_sync_on_meta():
    from tests.contract import NoHostSync

    for m in (T.TrivialAugmentWide(), T.RandAugment(), T.TimmRandAugment()):
        m = m.to("meta")
        x, masks, boxes, kp, keys = (a.to("meta") for a in _inputs(6))
        with NoHostSync("meta"):
            y, t = m.with_targets(x, {"masks": masks, "boxes": boxes, "keypoints": kp}, keys)
        assert t["boxes"].shape == (6, M, 4) and t["masks"].shape == (6, H, W)
