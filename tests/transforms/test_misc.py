"""The misc family (``batchaug/transforms/_misc.py``), one class per transform for its own
behaviour: GaussianBlur and RandomErasing against torchvision, per sample; Normalize and ToDtype
against torchvision and their output dtypes (a model's ``.to(dtype)``, scripted == eager).

GaussianBlur tolerance: two 1-D passes here, one 2-D convolution in torchvision: float within
1e-5 (float16: 2e-3), uint8 within 1.
"""
from __future__ import annotations

import math

import pytest
import torch
import torchvision.transforms.v2 as V2
import torchvision.transforms.v2.functional as TF
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.export import Dim, export

import batchaug as B
import batchaug.functional as BF
import batchaug.transforms as T
from tests.contract.tolerances import assert_normalize_close
from tests.transforms.test_geometry import batches


def _batch(seed: int, dtype: torch.dtype, n: int = 6, h: int = 13, w: int = 17) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (n, 3, h, w), generator=g, dtype=torch.uint8)
    return x if dtype == torch.uint8 else (x.to(torch.float64) / 255).to(dtype)


TOL = {torch.uint8: 1.0, torch.float16: 2e-3, torch.float32: 1e-5, torch.float64: 1e-5}


def _tv_erasing_boxes(h_img, w_img, scale, ratio, n=800):
    """Every box torchvision's RandomErasing draws on an h x w image ((0, 0, 0, 0): none)."""
    tv = V2.RandomErasing(p=1.0, scale=scale, ratio=ratio)
    img = torch.zeros(1, h_img, w_img)
    torch.manual_seed(0)
    boxes = []
    for _ in range(n):
        p = tv.make_params([img])
        boxes.append((p["i"], p["j"], p["h"], p["w"]) if p["v"] is not None else (0, 0, 0, 0))
    return _marginals(boxes)


def _marginals(boxes):
    """The tops, the lefts and the sizes seen (a joint set would need ~10x the draws)."""
    return ({b[0] for b in boxes}, {b[1] for b in boxes}, {b[2:] for b in boxes})


@given(branch=st.lists(st.integers(0, 4), max_size=40), extra=st.integers(0, 2))
def test_branch_groups_and_ungroup(branch, extra):
    """Each branch's samples in input order, the branches with samples ascending, and
    ungroup of per-branch results gives them back in sample order."""
    from batchaug.functional._misc import branch_groups, ungroup

    b = torch.tensor(branch, dtype=torch.int64)
    ks, idxs, order = branch_groups(b, 5 + extra)
    assert ks == sorted(set(branch))
    for k, idx in zip(ks, idxs):
        assert idx.tolist() == [i for i, v in enumerate(branch) if v == k]
    assert torch.equal(order, torch.cat(idxs) if idxs else torch.zeros(0, dtype=torch.int64))
    values = torch.arange(len(branch)) * 10 + b
    parts = [values.index_select(0, idx) for idx in idxs]
    if parts:
        assert torch.equal(ungroup(parts, order), values)


MEAN, STD = [0.4914, 0.4822, 0.4465], [0.2470, 0.2435, 0.2616]
ALL_U8 = torch.arange(256, dtype=torch.uint8).view(1, 1, 16, 16)


def _bf16_model():
    conv = nn.Conv2d(3, 8, 3)
    aug = B.Augment(B.RandomHorizontalFlip(), B.Normalize(MEAN, STD))
    return B.AugmentedModel(aug, conv).to(torch.bfloat16)


class TestGaussianBlur:
    """GaussianBlur: kernels against torchvision, sigma per sample, errors."""

    @given(dtype=st.sampled_from(list(TOL)), kx=st.sampled_from([1, 3, 5, 9]),
           ky=st.sampled_from([1, 3, 7, 11]), lo=st.floats(0.05, 5), hi=st.floats(0.05, 5),
           seed=st.integers(0, 2**16), channels_last=st.booleans())
    def test_gaussian_blur_matches_torchvision(self, dtype, kx, ky, lo, hi, seed, channels_last):
        m = T.GaussianBlur((kx, ky), sigma=(min(lo, hi), max(lo, hi)))
        x = _batch(seed, dtype)
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        torch.manual_seed(seed)
        y = m(x)
        torch.manual_seed(seed)
        sigma = m.make_params(x)
        ref = torch.stack([TF.gaussian_blur(x[i], [kx, ky], [float(sigma[i])] * 2)
                           for i in range(x.shape[0])])
        assert y.dtype == x.dtype
        torch.testing.assert_close(y.double(), ref.double(), atol=TOL[dtype], rtol=0)


    def test_gaussian_blur_fixed_sigma_and_errors(self):
        x = _batch(1, torch.float32)
        y = T.GaussianBlur(5, sigma=1.3)(x)
        torch.testing.assert_close(y, TF.gaussian_blur(x, [5, 5], [1.3, 1.3]), atol=1e-5, rtol=0)
        with pytest.raises(ValueError, match="GaussianBlur: kernel_size"):
            T.GaussianBlur(29)(x)  # needs reflect padding of 14 > 13 rows
        with pytest.raises(ValueError, match="kernel_size must be odd and positive"):
            T.GaussianBlur(4)
        with pytest.raises(ValueError, match=r"sigma must be \(min, max\) with min <= max"):
            T.GaussianBlur(3, sigma=(2.0, 1.0))


    def test_gaussian_blur_sigma_is_per_sample(self):
        sigma = torch.tensor([0.1, 3.0])
        x = _batch(2, torch.float32, n=1).expand(2, -1, -1, -1)
        y = BF.gaussian_blur(x, [7, 7], sigma)
        torch.testing.assert_close(y[0], x[0], atol=1e-6, rtol=0)  # sigma 0.1: ~identity
        assert (y[1] - x[1]).abs().max() > 0.1


class TestRandomErasing:
    """RandomErasing: boxes and values against torchvision's rule, p, errors."""

    @given(dtype=st.sampled_from([torch.uint8, torch.float32]), seed=st.integers(0, 2**16),
           value=st.one_of(st.integers(0, 255), st.lists(st.integers(0, 255), min_size=3,
                                                         max_size=3)))
    def test_erasing_matches_torchvision_erase(self, dtype, seed, value):
        m = T.RandomErasing(p=0.7, value=value)
        x = _batch(seed, dtype, n=12)
        torch.manual_seed(seed)
        y = m(x)
        torch.manual_seed(seed)
        top, left, h, w, _ = m.make_params(x)
        v = torch.tensor(m.value, dtype=x.dtype).view(-1, 1, 1)
        ref = torch.stack([TF.erase(x[i], int(top[i]), int(left[i]), int(h[i]), int(w[i]), v)
                           if int(h[i]) > 0 else x[i] for i in range(12)])
        assert torch.equal(y, ref)


    def test_erasing_boxes_follow_torchvision_rule(self):
        h_img, w_img, n = 24, 40, 4000
        m = T.RandomErasing(p=1.0, scale=(0.05, 0.4), ratio=(0.5, 2.0))
        torch.manual_seed(0)
        top, left, h, w, _ = m.make_params(torch.zeros(n, 1, h_img, w_img))
        erased = h > 0
        assert erased.float().mean() > 0.95  # the first of 10 candidates almost always fits
        assert ((h < h_img) & (w < w_img))[erased].all()
        assert (top + h <= h_img).all() and (left + w <= w_img).all()
        assert (top >= 0).all() and (left >= 0).all()
        # same distribution as torchvision's own sampler (one draw per call)
        tv = V2.RandomErasing(p=1.0, scale=(0.05, 0.4), ratio=(0.5, 2.0))
        img = torch.zeros(1, h_img, w_img)
        torch.manual_seed(1)
        tv_areas = []
        for _ in range(1000):
            p = tv.make_params([img])
            tv_areas.append(p["h"] * p["w"] if p["v"] is not None else 0)
        tv_mean = sum(tv_areas) / len(tv_areas)
        ours = (h * w).double().mean().item()
        # mean box area: sd of one area ~ 90 px^2 here, so 1000 draws give ~3 px^2 of noise
        assert abs(ours - tv_mean) < 20, (ours, tv_mean)
        # the position is uniform over the valid range: mean relative offset ~ 0.5
        rel = (top.double() / (h_img - h + 1).double())[erased].mean().item()
        assert abs(rel - 0.5 + 0.5 / h_img) < 0.05


    def test_erasing_p_and_random_values(self):
        n = 2000
        x = torch.full((n, 3, 16, 16), 0.5)
        m = T.RandomErasing(p=0.3, value="random")
        torch.manual_seed(3)
        y = m(x)
        changed = (y != x).flatten(1).any(1)
        sd = math.sqrt(n * 0.3 * 0.7)
        assert abs(changed.sum().item() - n * 0.3) < 5 * sd
        noise = y[y != x]
        assert abs(noise.mean().item()) < 0.05 and abs(noise.std().item() - 1) < 0.05
        xu = torch.full((64, 3, 16, 16), 7, dtype=torch.uint8)
        yu = T.RandomErasing(p=1.0, value="random")(xu)
        assert yu.dtype == torch.uint8 and yu.max() > 200 and yu.min() < 50
        assert torch.equal(xu, torch.full((64, 3, 16, 16), 7, dtype=torch.uint8))  # not in place


    def test_erasing_value_errors(self):
        with pytest.raises(ValueError, match="value must be a number, a sequence or 'random'"):
            T.RandomErasing(value="noise")
        with pytest.raises(ValueError, match="RandomErasing: fill"):
            T.RandomErasing(value=300)(torch.zeros(2, 3, 8, 8, dtype=torch.uint8))
        with pytest.raises(ValueError, match="RandomErasing: fill has 2 values"):
            T.RandomErasing(value=[1, 2])(torch.zeros(2, 3, 8, 8))


    @pytest.mark.parametrize("dtype", [torch.uint8, torch.float16, torch.float32])
    def test_erasing_random_value_scripted_equals_eager(self, dtype):
        m = T.RandomErasing(p=0.9, value="random")
        s = torch.jit.script(m)
        x = _batch(6, dtype, n=8)
        torch.manual_seed(2)
        y = m(x)
        torch.manual_seed(2)
        assert torch.equal(s(x), y)
        assert not torch.equal(y, x)


    @pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
    @pytest.mark.parametrize("value_shape", [(1, 1, 1, 1), (1, 3, 1, 1), (6, 3, 7, 9), (1, 3, 1, 9),
                                             (6, 1, 7, 1)])
    def test_erase_loop_equals_batched_where(self, dtype, value_shape):
        """On CPU ``erase`` writes the boxes by a loop over the erased samples (``erase_`` in
        place); it equals the batched ``where`` on the box mask for every broadcastable value."""
        g = torch.Generator().manual_seed(3)
        x = torch.randint(0, 256, (6, 3, 7, 9), generator=g).to(dtype)
        top = torch.tensor([0, 2, 6, 1, 0, 3])
        left = torch.tensor([0, 5, 8, 0, 2, 4])
        height = torch.tensor([7, 3, 1, 0, 2, 4])
        width = torch.tensor([9, 4, 1, 5, 0, 5])
        value = torch.randint(0, 256, value_shape, generator=g).to(dtype)
        want = torch.where(BF.box_mask(top, left, height, width, 7, 9), value, x)
        before = x.clone()
        got = BF.erase(x, top, left, height, width, value)
        assert torch.equal(got, want) and torch.equal(x, before)
        from batchaug.functional._misc import erase_

        y = x.clone()
        assert erase_(y, top, left, height, width, value) is y and torch.equal(y, want)
        scripted = torch.jit.script(erase_)
        y = x.clone()
        assert torch.equal(scripted(y, top, left, height, width, value), want)


    @pytest.mark.parametrize("h_img, w_img, scale, ratio", [
        (24, 40, (0.1, 0.1), (1.0, 1.0)),   # one 10 x 10 box size: every offset, the last row too
        (10, 40, (0.25, 0.25), (1.0, 1.0)),  # a box as tall as the image: never erased
        (40, 10, (0.25, 0.25), (1.0, 1.0)),  # a box as wide as the image: never erased
    ])
    def test_erasing_boxes_at_the_boundaries_are_torchvisions(self, h_img, w_img, scale, ratio):
        """A pinned scale and ratio leave one box size: the boxes drawn are exactly torchvision's,
        first and last rows and columns included; a box reaching an edge of the image does not
        fit (torchvision's ``h < img_h and w < img_w``)."""
        theirs = _tv_erasing_boxes(h_img, w_img, scale, ratio)
        m = T.RandomErasing(p=1.0, scale=scale, ratio=ratio)
        torch.manual_seed(0)
        top, left, h, w, _ = m.make_params(torch.zeros(1500, 1, h_img, w_img))
        ours = _marginals([b if b[2] > 0 else (0, 0, 0, 0)
                           for b in zip(top.tolist(), left.tolist(), h.tolist(), w.tolist())])
        assert ours == theirs


class TestNormalize:
    """Normalize: against torchvision, output dtype rules, extreme statistics."""

    @settings(deadline=None)
    @given(x=batches(), dtype=st.sampled_from([torch.float32, torch.float16, torch.bfloat16]),
           data=st.data())
    def test_normalize_matches_torchvision(self, x, dtype, data):
        c = x.shape[1]
        mean = data.draw(st.lists(st.floats(0, 1), min_size=c, max_size=c))
        std = data.draw(st.lists(st.floats(0.05, 2), min_size=c, max_size=c))
        out = T.Normalize(mean, std, dtype=dtype)(x)
        assert out.dtype == dtype and out.shape == x.shape
        assert_normalize_close(out, x, mean, std)  # the arithmetic's bound vs float64


    def test_normalize_accepts_extreme_but_representable_statistics(self):
        x = torch.randint(0, 256, (2, 3, 4, 4), dtype=torch.uint8)
        for mean, std, dtype in [([0.5], [1e-30], torch.float32), ([1e3], [0.1], torch.float16),
                                 ([-2.0], [1e30], torch.float32)]:
            y = T.Normalize(mean, std, dtype=dtype)(x)
            assert y.dtype == dtype and torch.isfinite(y).all()


    def test_normalize_single_value_applies_to_every_channel(self):
        x = torch.randint(0, 256, (2, 3, 4, 4), dtype=torch.uint8)
        ref = TF.normalize(TF.to_dtype(x, torch.float32, scale=True), [0.5] * 3, [0.25] * 3)
        torch.testing.assert_close(T.Normalize([0.5], [0.25])(x), ref)


    def test_bf16_model_takes_uint8_and_normalizes_in_float32(self):
        torch.manual_seed(0)
        m = _bf16_model().eval()
        norm = m.augment[1]
        assert norm.mean.dtype == torch.float64 and norm.mean.tolist() == MEAN  # exact, not bf16
        assert norm.std.tolist() == STD
        x = torch.randint(0, 256, (4, 3, 16, 16), dtype=torch.uint8)
        ref = B.functional.normalize(x, torch.tensor(MEAN), torch.tensor(STD)).to(torch.bfloat16)
        assert torch.equal(m.augment(x), ref)  # float32 arithmetic, rounded once
        y = m(x)
        assert y.dtype == torch.bfloat16 and torch.equal(y, m.model(ref))
        assert torch.equal(torch.jit.script(m)(x), y)
        ep = export(m, (x,), dynamic_shapes=({0: Dim("batch")},))
        for n in (1, 7):
            xn = torch.randint(0, 256, (n, 3, 16, 16), dtype=torch.uint8)
            assert torch.equal(ep.module()(xn), m(xn))
        m.train()(x)  # train mode too


    def test_normalize_dtype_rules(self):
        x = torch.randint(0, 256, (2, 3, 4, 4), dtype=torch.uint8)
        n = B.Normalize(MEAN, STD)
        assert n(x).dtype == torch.float32 and "dtype=None" in repr(n)
        assert n.half()(x).dtype == torch.float16
        assert n.double()(x).dtype == torch.float64
        assert n.float()(x).dtype == torch.float32
        fixed = B.Normalize(MEAN, STD, dtype=torch.float16).to(torch.bfloat16)
        assert fixed(x).dtype == torch.float16  # an explicit dtype is kept
        # float64 output is computed in float64 from the exact statistics
        ref = (x.double() / 255 - torch.tensor(MEAN, dtype=torch.float64).view(1, 3, 1, 1)) \
            / torch.tensor(STD, dtype=torch.float64).view(1, 3, 1, 1)
        torch.testing.assert_close(B.Normalize(MEAN, STD, dtype=torch.float64)(x), ref,
                                   rtol=1e-12, atol=1e-12)


    def test_normalize_cast_to_a_narrower_dtype_that_would_overflow_is_refused(self):
        norm = B.Normalize([0.5], [1e-5])  # fine in float32: (0.5 + 1) / 1e-5 = 1.5e5
        assert torch.isfinite(norm(torch.full((1, 1, 2, 2), 255, dtype=torch.uint8))).all()
        with pytest.raises(ValueError, match="overflows torch.float16"):
            norm.half()
        # an explicit dtype is not changed by .to(), so nothing to check there
        fixed = B.Normalize([0.5], [1e-5], dtype=torch.float32).half()
        assert fixed(torch.zeros(1, 1, 2, 2, dtype=torch.uint8)).dtype == torch.float32


class TestToDtype:
    """ToDtype: against torchvision, scripted == eager on every uint8 value."""

    @settings(deadline=None)
    @given(x=batches(), dtype=st.sampled_from([torch.uint8, torch.float16, torch.float32]),
           scale=st.booleans())
    def test_to_dtype_matches_torchvision(self, x, dtype, scale):
        ref_in = x
        if scale and dtype == torch.uint8 and x.dtype in (torch.float16, torch.bfloat16):
            # half -> uint8 is computed in float32 (torchvision's half arithmetic rounds
            # 1.0 * 255.999 to 256, which wraps to 0): the float32 rule on the widened value
            ref_in = x.float()
        assert torch.equal(T.ToDtype(dtype, scale=scale)(x),
                           TF.to_dtype(ref_in, dtype, scale=scale))


    @pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
    def test_to_dtype_scale_all_uint8_values(self, dtype):
        eager = B.ToDtype(dtype, scale=True)
        scripted = torch.jit.script(eager)
        y = eager(ALL_U8)
        assert torch.equal(scripted(ALL_U8), y)  # bit for bit (was 126/256 off for bfloat16)
        assert torch.equal(y, TF.to_dtype(ALL_U8, dtype, scale=True))
        if dtype in (torch.float16, torch.bfloat16):  # correctly rounded v / 255
            assert torch.equal(y, (ALL_U8.double() / 255).to(dtype))
        back = B.ToDtype(torch.uint8, scale=True)
        assert torch.equal(back(y), ALL_U8) and torch.equal(torch.jit.script(back)(y), ALL_U8)
