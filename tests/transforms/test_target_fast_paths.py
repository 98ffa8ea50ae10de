"""The target fast paths equal the generic ones bit for bit.

- ``move_targets(..., axis_aligned=True)`` (flips, crops, pads, resizes) vs its generic
  ``affine_boxes`` / ``affine_keypoints`` on random inputs with NaN, inf, inverted, empty and
  out-of-image boxes and keypoints, in float16/32/64;
- ``flip_masks``' per-sample CPU loop vs the batched flip kernels;
- ``resized_crop_masks``' CPU gather vs torchvision's ``resized_crop`` on ``tv_tensors.Mask``
  per sample (and the batched path);
- every axis-aligned transform's ``with_targets`` vs the generic ``move_targets``.
"""
import pytest
import torch
import torchvision.transforms.v2.functional as TF
from hypothesis import given, settings
from hypothesis import strategies as st
from torchvision import tv_tensors

import batchaug as B
from batchaug import _random
import batchaug.functional as BF
from batchaug.functional import _targets as TM
from batchaug.functional import _targets as TG

_BITS = {torch.float16: torch.int16, torch.float32: torch.int32, torch.float64: torch.int64}


def _same_bits(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape
    assert torch.equal(a.view(_BITS[a.dtype]), b.view(_BITS[b.dtype]))


def _messy(g, n, m, last, size, dtype):
    """Points / boxes over [-0.3, 1.3] x ``size`` with NaN, +-inf and exact edge values."""
    v = (torch.rand(n, m, last, generator=g, dtype=torch.float64) * 1.6 - 0.3) * size
    r = torch.rand(n, m, last, generator=g)
    v = torch.where(r < 0.04, float("nan"), v)
    v = torch.where((r >= 0.04) & (r < 0.07), float("inf"), v)
    v = torch.where((r >= 0.07) & (r < 0.1), -float("inf"), v)
    v = torch.where((r >= 0.1) & (r < 0.15), 0.0, v)
    v = torch.where((r >= 0.15) & (r < 0.2), float(size), v)
    v = torch.where((r >= 0.2) & (r < 0.25), v.round(), v)
    return v.to(dtype)


def _axis_matrices(g, kind, n, h, w):
    """(matrix, keypoint matrix, out size) of a random flip / crop / pad / resize."""
    if kind == "flip":
        hf, vf = torch.rand(n, generator=g) < 0.5, torch.rand(n, generator=g) < 0.5
        return TG.flip_matrix(hf, vf), TG.flip_matrix(hf, vf, keypoints=True), [h, w]
    oh = int(torch.randint(1, 2 * h + 3, (1,), generator=g))
    ow = int(torch.randint(1, 2 * w + 3, (1,), generator=g))
    top = torch.randint(-h, h, (n,), generator=g)
    left = torch.randint(-w, w, (n,), generator=g)
    if kind == "crop":  # crops and pads: a box of the output's size
        bh, bw = torch.full((n,), oh), torch.full((n,), ow)
    elif kind == "resize":
        top, left = torch.zeros(n, dtype=torch.int64), torch.zeros(n, dtype=torch.int64)
        bh, bw = torch.full((n,), h), torch.full((n,), w)
    else:  # resized crop
        bh = torch.randint(1, h + 1, (n,), generator=g)
        bw = torch.randint(1, w + 1, (n,), generator=g)
    m = TG.resized_crop_matrix(top, left, bh, bw, [h, w], [oh, ow])
    return m, m, [oh, ow]


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2 ** 31 - 1), kind=st.sampled_from(["flip", "crop", "resize", "rrc"]),
       dtype=st.sampled_from([torch.float16, torch.float32, torch.float64]),
       n=st.integers(0, 5), m=st.integers(0, 9), h=st.integers(1, 40), w=st.integers(1, 40))
def test_axis_aligned_targets_equal_the_generic_path(seed, kind, dtype, n, m, h, w):
    g = torch.Generator().manual_seed(seed)
    matrix, kmatrix, out_size = _axis_matrices(g, kind, n, h, w)
    boxes = _messy(g, n, m, 4, max(h, w), dtype)
    boxes[:, ::3, 2] = boxes[:, ::3, 0] - 1.0  # inverted boxes
    kps = _messy(g, n, m, 2, max(h, w), dtype)
    valid = torch.rand(n, m, generator=g) < 0.9
    targets = {"boxes": boxes, "box_valid": valid, "keypoints": kps, "keypoint_valid": valid}
    fast = TG.move_targets(targets, matrix, [h, w], out_size, keypoint_matrix=kmatrix,
                           axis_aligned=True)
    ref = TG.move_targets(targets, matrix, [h, w], out_size, keypoint_matrix=kmatrix)
    for key in ("boxes", "keypoints"):
        _same_bits(fast[key], ref[key])
    for key in ("box_valid", "keypoint_valid"):
        assert torch.equal(fast[key], ref[key])


def test_bad_boxes_and_keypoints_come_out_invalid_zeros_for_every_matrix():
    # the finishing step relies on non-finite input giving non-finite output: check it
    # through rotations and perspectives too, where the generic path is the only one
    g = torch.Generator().manual_seed(0)
    n = 6
    angle = torch.rand(n, generator=g) * 360
    coef = torch.tensor([1.1, 0.05, -0.3, 0.02, 1.0, 0.1, 0.001, 0.002]).expand(n, 8)
    for matrix in (TG.rotation_matrix(angle, 20, 30), TG.perspective_to_matrix(coef, 20, 30),
                   TG.rotation_matrix(torch.full((n,), 90.0), 20, 30)):
        kps = torch.tensor([[float("nan"), 3.0], [float("inf"), 4.0], [5.0, -float("inf")],
                            [10.0, 10.0]]).expand(n, 4, 2)
        boxes = torch.tensor([[float("nan"), 0.0, 5.0, 5.0], [2.0, 2.0, 1.0, 9.0],
                              [0.0, 0.0, float("inf"), 8.0], [4.0, 4.0, 16.0, 12.0]]
                             ).expand(n, 4, 4)
        valid = torch.ones(n, 4, dtype=torch.bool)
        k, kv = TG.affine_keypoints(kps, valid, matrix, [20, 30], [20, 30])
        b, bv = TG.affine_boxes(boxes, valid, matrix, [20, 30], [20, 30])
        assert not kv[:, :3].any() and not bv[:, :3].any()
        assert torch.equal(k[:, :3], torch.zeros(n, 3, 2))
        assert torch.equal(b[:, :3], torch.zeros(n, 3, 4))
        assert torch.isfinite(k).all() and torch.isfinite(b).all()


@pytest.mark.parametrize("k", [None, 3])
@pytest.mark.parametrize("dtype", [torch.uint8, torch.bool, torch.int64])
@pytest.mark.parametrize("n", [0, 1, 7])
def test_flip_masks_per_sample_equals_the_batched_kernels(k, dtype, n):
    g = torch.Generator().manual_seed(n)
    shape = [n, 9, 14] if k is None else [n, k, 9, 14]
    masks = torch.randint(0, 2 if dtype == torch.bool else 1000, shape, generator=g).to(dtype)
    img = masks.unsqueeze(1) if k is None else masks
    hf, vf = torch.rand(n, generator=g) < 0.5, torch.rand(n, generator=g) < 0.5

    def ref(y):
        return y.squeeze(1) if k is None else y

    cases = [((hf, None), ref(BF.hflip_where(img, hf))),
             ((None, vf), ref(BF.vflip_where(img, vf))),
             ((hf, vf), ref(BF.vflip_where(BF.hflip_where(img, hf), vf))),
             ((None, None), masks)]
    for (h, v), want in cases:
        got = TM.flip_masks(masks, h, v)
        assert got.dtype == dtype and torch.equal(got, want)
        assert got.data_ptr() != masks.data_ptr() or masks.numel() == 0
    scripted = torch.jit.script(TM.flip_masks)  # the batched kernels
    assert torch.equal(scripted(masks, hf, vf), TM.flip_masks(masks, hf, vf))


@pytest.mark.parametrize("k", [None, 2])
@pytest.mark.parametrize("dtype", [torch.uint8, torch.bool, torch.int32, torch.int64])
def test_resized_crop_masks_gather_equals_torchvision(k, dtype):
    g = torch.Generator().manual_seed(3)
    n, h, w = 12, 23, 37
    shape = [n, h, w] if k is None else [n, k, h, w]
    hi = 2 if dtype == torch.bool else 200
    masks = torch.randint(0, hi, shape, generator=g).to(dtype)
    bh = torch.randint(1, h + 1, (n,), generator=g)
    bw = torch.randint(1, w + 1, (n,), generator=g)
    bh[0], bw[0] = h, w  # whole image: a plain resize
    top = (torch.rand(n, generator=g) * (h - bh + 1)).long()
    left = (torch.rand(n, generator=g) * (w - bw + 1)).long()
    sizes = [[h, w], [2 * h, 2 * w], [5, 61], [1, 1], [h + 1, w - 3]]
    for size in sizes:
        got = TM.resized_crop_masks(masks, top, left, bh, bw, size)
        assert got.dtype == dtype
        for i in range(n):
            mi = masks[i] if k is not None else masks[i].unsqueeze(0)
            src = mi if dtype == torch.uint8 else mi.to(torch.uint8)  # labels < 256 here
            want = TF.resized_crop(tv_tensors.Mask(src), int(top[i]), int(left[i]),
                                   int(bh[i]), int(bw[i]), size)
            gi = got[i] if k is not None else got[i].unsqueeze(0)
            assert torch.equal(gi.to(torch.uint8), want.as_subclass(torch.Tensor)), (size, i)
        batched = TM._resized_crop_masks_batched(masks, top, left, bh, bw, size)
        assert torch.equal(got, batched)


def test_resized_crop_masks_gather_keeps_wide_labels_exact():
    # labels beyond float32's exact range: the CPU gather moves them as they are
    masks = (torch.arange(2 * 6 * 8, dtype=torch.int64).view(2, 6, 8) + 2 ** 40)
    one = torch.ones(2, dtype=torch.int64)
    out = TM.resized_crop_masks(masks, one, one, 4 * one, 6 * one, [8, 12])
    assert set(out.unique().tolist()) <= set(masks.unique().tolist())
    assert torch.equal(out[:, ::2, ::2], masks[:, 1:5, 1:7])


def _targets(g, n, h, w):
    return {"masks": torch.randint(0, 9, (n, h, w), generator=g, dtype=torch.uint8),
            "boxes": _messy(g, n, 11, 4, max(h, w), torch.float32),
            "box_valid": torch.rand(n, 11, generator=g) < 0.9,
            "keypoints": _messy(g, n, 7, 2, max(h, w), torch.float32),
            "keypoint_valid": torch.rand(n, 7, generator=g) < 0.9}


@pytest.mark.parametrize("make", [
    lambda: B.RandomHorizontalFlip(), lambda: B.RandomVerticalFlip(),
    lambda: B.RandomHorizontalFlip(1.0, keypoint_flip_indices=[1, 0, 2, 3, 6, 5, 4]),
    lambda: B.RandomCrop(20, padding=5), lambda: B.RandomCrop(20, padding=3,
                                                              padding_mode="reflect"),
    lambda: B.CenterCrop(17), lambda: B.CenterCrop(40), lambda: B.Pad([1, 2, 3, 4]),
    lambda: B.Resize(13), lambda: B.Resize([41, 19]), lambda: B.RandomResizedCrop(24)],
    ids=["hflip", "vflip", "hflip-index", "crop", "crop-reflect", "cc", "cc-pad", "pad",
         "resize", "resize-hw", "rrc"])
def test_axis_aligned_transforms_equal_the_generic_path(make):
    g = torch.Generator().manual_seed(5)
    n, h, w = 9, 22, 30
    x = torch.randint(0, 256, (n, 3, h, w), generator=g, dtype=torch.uint8)
    t = _targets(g, n, h, w)
    keys = _random.sample_keys(0, 0, torch.arange(n))
    mod = make().train()
    k = keys if mod.takes_keys else None
    y, out = mod.with_targets(x, t, k) if k is not None else mod.with_targets(x, t)
    params = mod.make_params(x, k)
    assert torch.equal(y, mod.apply_image(x, params))
    out_size = [y.shape[2], y.shape[3]]
    matrix = mod.target_matrix(params, [h, w], out_size)
    if isinstance(mod, (B.RandomHorizontalFlip, B.RandomVerticalFlip)):
        hf = params if isinstance(mod, B.RandomHorizontalFlip) else torch.zeros_like(params)
        vf = params if isinstance(mod, B.RandomVerticalFlip) else torch.zeros_like(params)
        ref = TG.move_targets(t, matrix, [h, w], out_size, 0, None,
                              TG.flip_matrix(hf, vf, keypoints=True))
        if mod.flip_index.numel() > 0:
            kp, kv = TG.flip_keypoint_indices(ref["keypoints"], ref["keypoint_valid"], params,
                                              mod.flip_index)
            ref["keypoints"], ref["keypoint_valid"] = kp, kv
    else:
        generic = TG.move_targets(t, matrix, [h, w], out_size, 0, None)
        ref = dict(generic)
        # the masks: the module's own kernel (resizes follow F.interpolate's nearest rule,
        # checked against torchvision above; non-constant padding modes pad masks by that
        # mode); the pure copies must equal warp_masks' generic resampling
        ref["masks"] = mod.apply_targets(t, params, [h, w], out_size)["masks"]
        copies = isinstance(mod, (B.CenterCrop, B.Pad)) or (
            isinstance(mod, B.RandomCrop) and mod.padding_mode == "constant")
        if copies:
            assert torch.equal(ref["masks"], generic["masks"])
    assert sorted(out) == sorted(ref)
    for key in ref:
        if ref[key].is_floating_point():
            _same_bits(out[key], ref[key])
        else:
            assert torch.equal(out[key], ref[key]), key
