"""The geometry family (``batchaug/transforms/_geometry.py``), one class per transform for its
own behaviour: images against torchvision (hypothesis properties, per-sample references with the
module's own draws), its targets (masks, boxes, keypoints) against torchvision v2 on tv_tensors
one sample at a time, and its ragged batches (each image as the module on it alone).

Tolerances, stated once:

* resized crop, antialias=True (bilinear, CPU): identical for every dtype (the per-box path
  makes torchvision's own interpolate call); on GPU float within 2e-5, uint8 within 1 step.
* resized crop, bicubic (either antialias): CPU identical for every dtype (same per-box call);
  batched (GPU, compile, export) float within 1e-5, uint8 within 2 steps of torchvision's CPU
  uint8 kernel (fixed-point vs float weights, each of the two passes rounded).
* resized crop otherwise: nearest identical; float within 2e-5; uint8 bilinear within 1 step
  (torchvision resizes uint8 with PyTorch's fixed-point uint8 kernel, we interpolate in float32
  and round, so ~15-20% of pixels differ by exactly 1).
* resize: identical (same interpolate call).
* targets: masks exact, crop/pad boxes and keypoints exact, resized ones and padded crops to the
  last float32 bit (torchvision multiplies by a float32 ratio, and pads then crops in two float32
  steps; we move once in float64), validity as torchvision's
  SanitizeBoundingBoxes(min_size=1, min_area=1) / SanitizeKeyPoints decide it.

Tests shared by several transforms stay with their subject: tests/contract/ (every transform),
test_geometry_targets.py (the family's targets: scripted, empty, keyed), test_warp.py (the
resampling transforms' dtypes, errors, fills and the resized-crop kernel's device paths),
test_sizes.py (ragged batches through pipelines), test_targets.py (the target kernels).
"""
import pytest
import torch
import torchvision.transforms.v2.functional as TF
from hypothesis import example, given, settings, strategies as st
from torchvision import tv_tensors
from torchvision.transforms import v2

import batchaug
import batchaug.functional as BF
import batchaug.transforms as T
from batchaug import (Augment, CenterCrop, Pad, RandomCrop, RandomHorizontalFlip,
                      RandomResizedCrop, RandomVerticalFlip, Resize)
from batchaug.functional import _kernels as F
from tests.conftest import DEVICES
from tests.transforms.test_geometry_targets import _batch as _targets_batch, _keys, _tv, H, W
from tests.transforms.test_sizes import (_batch as _ragged_batch, _objects as _ragged_objects,
                                         KEYS as RAGGED_KEYS, N as RAGGED_N, SIZES as RAGGED_SIZES)
from tests.transforms.test_warp import _batch as _warp_batch
from tests.transforms.test_warps import _warp_compare, dtypes, INTERPOLATIONS


@st.composite
def batches(draw, min_hw=1, max_hw=12, dtypes=(torch.uint8, torch.float16, torch.float32)):
    n = draw(st.integers(1, 6))
    c = draw(st.sampled_from([1, 3]))
    h = draw(st.integers(min_hw, max_hw))
    w = draw(st.integers(min_hw, max_hw))
    dtype = draw(st.sampled_from(dtypes))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    x = torch.randint(0, 256, (n, c, h, w), generator=g, dtype=torch.uint8)
    if dtype != torch.uint8:
        x = (x.float() / 255).to(dtype)
    if draw(st.booleans()):
        x = x.contiguous(memory_format=torch.channels_last)
    return x


PAD_FORMS = st.one_of(st.integers(0, 6), *(
    st.lists(st.integers(0, 6), min_size=k, max_size=k) for k in (1, 2, 4)))


PADDING_MODES = ["constant", "edge", "reflect", "symmetric"]


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


def _tv_center_anchor(size, crop):
    """Where torchvision's center_crop puts input pixel 0 (negative offset of the window): found
    by centre-cropping a coordinate ramp."""
    ramp = torch.arange(1, size + 1).view(1, size, 1).float()
    out = TF.center_crop(ramp, [crop, 1])[0, :, 0]
    hit = (out == 1).nonzero()
    return -int(hit[0]) if len(hit) else int(out[0]) - 1


def _tv_bicubic_boxes(x, box, oh, ow, antialias):
    t, l, bh, bw = box
    return torch.stack([
        TF.resized_crop(x[i], int(t[i]), int(l[i]), int(bh[i]), int(bw[i]), [oh, ow],
                        interpolation=TF.InterpolationMode.BICUBIC, antialias=antialias)
        for i in range(x.shape[0])
    ])


def _chi2_uniform(values, k, what):
    """Counts of ``values`` over 0..k-1 against the uniform law: every value drawn, chi-square
    below its Wilson-Hilferty quantile at z = 5 (p ~ 3e-7)."""
    counts = torch.bincount(values, minlength=k).double()
    assert counts.numel() == k, f"{what}: values beyond {k - 1}"
    assert (counts > 0).all(), f"{what}: never drawn: {torch.nonzero(counts == 0).view(-1)}"
    expected = values.numel() / k
    chi2 = ((counts - expected) ** 2 / expected).sum().item()
    a = 2.0 / (9.0 * (k - 1))
    assert chi2 <= (k - 1) * (1 - a + 5 * a ** 0.5) ** 3, f"{what}: chi2 {chi2:.1f}"


def _tv_rrc_boxes(h, w, scale, ratio, n=600):
    """Every box torchvision's RandomResizedCrop.get_params draws on an h x w image (a pinned
    scale and ratio leave one size, so n draws reach every offset)."""
    torch.manual_seed(0)
    img = torch.zeros(1, h, w)
    return {tuple(v2.RandomResizedCrop.get_params(img, list(scale), list(ratio)))
            for _ in range(n)}


class TestRandomFlips:
    """RandomHorizontalFlip and RandomVerticalFlip, which share their tests."""

    @settings(deadline=None)
    @given(x=batches())
    def test_flip_p0_identity_p1_flip(self, x):
        for cls, ref in ((T.RandomHorizontalFlip, TF.horizontal_flip),
                         (T.RandomVerticalFlip, TF.vertical_flip)):
            assert torch.equal(cls(p=0.0)(x), x)
            assert torch.equal(cls(p=1.0)(x), ref(x))

    def test_flip_rate_is_p(self):
        x = torch.arange(4.0).view(1, 1, 1, 4).expand(4000, 1, 1, 4).contiguous()
        torch.manual_seed(0)
        y = T.RandomHorizontalFlip(p=0.3)(x)
        rate = (y[:, 0, 0, 0] == 3).float().mean().item()
        assert abs(rate - 0.3) < 0.03

    def test_keypoint_moved_onto_the_far_edge_is_invalid_as_alone(self):
        """A flip moves x = -1 to exactly x = w (torchvision's w - 1 - x): outside, on a ragged
        batch as alone (exact arithmetic: the bound, not rounding, decides)."""
        images, masks, boxes, sizes = _ragged_objects(seed=8)
        kps = torch.tensor([[[-1.0, 2.0], [0.0, 2.0]]]).expand(RAGGED_N, 2, 2).contiguous()
        module = RandomHorizontalFlip(1.0)
        _, t = module.with_targets(images, {"keypoints": kps, "sizes": sizes}, RAGGED_KEYS)
        assert t["keypoint_valid"].tolist() == [[False, True]] * RAGGED_N
        for i, (h, w) in enumerate(RAGGED_SIZES):
            assert t["keypoints"][i, 1].tolist() == [w - 1.0, 2.0]
            _, ta = module.with_targets(images[i:i + 1, :, :h, :w].contiguous(),
                                        {"keypoints": kps[i:i + 1]}, RAGGED_KEYS[i:i + 1])
            assert torch.equal(ta["keypoint_valid"][0], t["keypoint_valid"][i])


class TestRandomCrop:
    """RandomCrop: windows of torchvision's padded input, every offset, pad_if_needed, its
    targets."""

    @settings(deadline=None)
    @given(x=batches(min_hw=2), mode=st.sampled_from(["constant", "edge", "reflect", "symmetric"]),
           data=st.data())
    def test_random_crop_sample_is_window_of_torchvision_padded_input(self, x, mode, data):
        h, w = x.shape[-2:]
        lim = min(h, w) - 1 if mode == "reflect" else min(h, w)
        padding = data.draw(st.one_of(
            st.integers(0, lim), st.lists(st.integers(0, lim), min_size=2, max_size=2),
            st.lists(st.integers(0, lim), min_size=4, max_size=4)))
        ltrb = [padding] * 4 if isinstance(padding, int) else (
            padding * 2 if len(padding) == 2 else padding)
        ch = data.draw(st.integers(1, h + ltrb[1] + ltrb[3]))
        cw = data.draw(st.integers(1, w + ltrb[0] + ltrb[2]))
        fill = data.draw(st.integers(0, 255)) if x.dtype == torch.uint8 else 0.5
        aug = T.RandomCrop((ch, cw), padding=padding, fill=fill, padding_mode=mode)
        seed = data.draw(st.integers(0, 1000))
        torch.manual_seed(seed)
        top, left = aug.make_params(x)
        torch.manual_seed(seed)
        out = aug(x)
        padded = TF.pad(x, ltrb, fill=fill, padding_mode=mode)
        assert out.shape == (x.shape[0], x.shape[1], ch, cw) and out.dtype == x.dtype
        for i in range(x.shape[0]):
            t, l = int(top[i]), int(left[i])
            assert torch.equal(out[i], padded[i, :, t:t + ch, l:l + cw])

    def test_random_crop_offsets_cover_all_positions(self):
        x = torch.zeros(4000, 1, 8, 8, dtype=torch.uint8)
        aug = T.RandomCrop(8, padding=2)
        torch.manual_seed(0)
        top, left = aug.make_params(x)
        assert set(top.tolist()) == set(range(5)) and set(left.tolist()) == set(range(5))
        pairs = set(zip(top.tolist(), left.tolist()))
        assert len(pairs) == 25

    @settings(deadline=None)
    @given(x=batches(min_hw=1, max_hw=8), extra_h=st.integers(0, 4), extra_w=st.integers(0, 4))
    def test_random_crop_pad_if_needed_like_torchvision(self, x, extra_h, extra_w):
        h, w = x.shape[-2:]
        ch, cw = h + extra_h, w + extra_w
        aug = T.RandomCrop((ch, cw), pad_if_needed=True, padding_mode="constant", fill=0)
        torch.manual_seed(1)
        top, left = aug.make_params(x)
        torch.manual_seed(1)
        out = aug(x)
        # torchvision pads the missing amount on both sides of the short axis
        padded = TF.pad(x, [extra_w, extra_h, extra_w, extra_h], fill=0)
        assert int(top.max()) <= padded.shape[-2] - ch and int(left.max()) <= padded.shape[-1] - cw
        for i in range(x.shape[0]):
            t, l = int(top[i]), int(left[i])
            assert torch.equal(out[i], padded[i, :, t:t + ch, l:l + cw])

    def test_crop_larger_than_padded_image(self):
        with pytest.raises(ValueError, match="larger than the padded image"):
            T.RandomCrop(10, padding=1)(torch.zeros(2, 3, 7, 8))
        # eval: identity, no error (no crop happens)
        x = torch.zeros(2, 3, 7, 8)
        assert T.RandomCrop(10, padding=1).eval()(x) is x

    @pytest.mark.parametrize("mode", PADDING_MODES)
    @pytest.mark.parametrize("kwargs", [
        dict(size=(12, 16), padding=3),
        dict(size=(24, 30), padding=[1, 2, 0, 3], pad_if_needed=True),
        dict(size=(H, W)),  # no padding: windows equal the image
        dict(size=(16, W), padding=4),  # as wide as the image: pad_crop's flat path
    ])
    def test_random_crop_targets_match_torchvision(self, mode, kwargs):
        m = T.RandomCrop(**kwargs, padding_mode=mode, fill=9, mask_fill=5)
        x, targets = _targets_batch(seed=len(str(kwargs)))
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


class TestCenterCrop:
    """CenterCrop: images and targets against torchvision's center_crop."""

    @settings(deadline=None)
    @given(x=batches(), ch=st.integers(1, 16), cw=st.integers(1, 16))
    def test_center_crop_matches_torchvision(self, x, ch, cw):
        assert torch.equal(T.CenterCrop((ch, cw))(x), TF.center_crop(x, [ch, cw]))

    @pytest.mark.parametrize("size", [(10, 12), (H, W), (23, 30), (27, 33), (15, 29)])
    def test_center_crop_targets_match_torchvision(self, size):
        m = T.CenterCrop(size)
        x, targets = _targets_batch(seed=2)
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


class TestPad:
    """Pad: every padding form and mode against torchvision, padding wider than the image, its
    targets."""

    @settings(deadline=None)
    @given(x=batches(), padding=PAD_FORMS,
           mode=st.sampled_from(["constant", "edge", "reflect", "symmetric"]), data=st.data())
    def test_pad_matches_torchvision(self, x, padding, mode, data):
        """Exact, for every argument form; fill: one value or one per channel (uint8 truncates a
        fractional fill as torchvision does)."""
        c = x.shape[1]
        fill = data.draw(st.one_of(st.floats(0, 1), st.integers(0, 1),
                                   st.lists(st.floats(0, 1), min_size=c, max_size=c)))
        if x.dtype == torch.uint8:
            fill = [f * 255 for f in fill] if isinstance(fill, list) else fill * 255
        m = T.Pad(padding, fill=fill, padding_mode=mode)
        left, top, right, bottom = m.padding
        h, w = x.shape[-2:]
        # torchvision rejects reflect padding >= the side and symmetric padding > the side
        limit_h, limit_w = (h - 1, w - 1) if mode == "reflect" else (h, w)
        wide = max(top, bottom) > limit_h or max(left, right) > limit_w
        out = m(x)
        assert out.shape == (x.shape[0], c, h + top + bottom, w + left + right)
        if mode != "constant" and wide:
            return  # our periodic continuation: checked in test_pad_wider_than_image_is_periodic
        # torchvision refuses a per-channel fill outside "constant" mode; ours ignores it there
        tv_fill = fill if mode == "constant" else 0
        assert torch.equal(out, TF.pad(x, padding, fill=tv_fill, padding_mode=mode))

    @pytest.mark.parametrize("mode", ["reflect", "symmetric"])
    def test_pad_wider_than_image_is_periodic(self, mode):
        """Where torchvision raises, the mirror pattern continues: period 2w-2 (reflect) or 2w."""
        x = torch.arange(4.0).view(1, 1, 1, 4)
        out = T.Pad([9, 0, 9, 0], padding_mode=mode)(x)[0, 0, 0]
        period = 6 if mode == "reflect" else 8
        assert torch.equal(out[9:13], x[0, 0, 0])
        assert torch.equal(out[:-period], out[period:])
        with pytest.raises((ValueError, RuntimeError, IndexError)):  # symmetric: IndexError
            TF.pad(x, [9, 0, 9, 0], padding_mode=mode)

    @pytest.mark.parametrize("mode", PADDING_MODES)
    @pytest.mark.parametrize("padding", [[1, 2, 3, 4], 0, (5, 2)])
    def test_pad_targets_match_torchvision(self, mode, padding):
        m = T.Pad(padding, fill=3, padding_mode=mode, mask_fill=2)
        x, targets = _targets_batch(seed=1)
        y, out = m.with_targets(x, targets)
        assert torch.equal(y, m(x))
        for i in range(x.shape[0]):
            pad = [padding] * 4 if isinstance(padding, int) else list(padding)
            img = TF.pad(tv_tensors.Image(x[i]), pad, fill=3, padding_mode=mode)
            assert torch.equal(y[i], img.as_subclass(torch.Tensor))
            mask, boxes, kp = _tv(targets, i, (H, W))
            _check_sample(out, targets, i, TF.pad(mask, pad, fill=2, padding_mode=mode),
                          TF.pad(boxes, pad), TF.pad(kp, pad))


class TestResize:
    """Resize: against torchvision's resize (shorter side, max_size, bicubic), its targets, its
    error on a ragged batch."""

    @pytest.mark.parametrize("device", DEVICES)
    @settings(deadline=None)
    @given(
        h=st.integers(1, 40), w=st.integers(1, 40), dtype=dtypes,
        size=st.one_of(st.integers(1, 50), st.tuples(st.integers(1, 50), st.integers(1, 50))),
        interpolation=st.sampled_from(["nearest", "bilinear"]), antialias=st.booleans(),
    )
    def test_resize_matches_torchvision(self, device, h, w, dtype, size, interpolation, antialias):
        x = _warp_batch(3, 3, h, w, dtype, device)
        y = Resize(size, interpolation=interpolation, antialias=antialias)(x)
        tv_size = [size] if isinstance(size, int) else list(size)
        try:
            ref = TF.resize(x, tv_size, interpolation=INTERPOLATIONS[interpolation],
                            antialias=antialias)
        except RuntimeError:
            # PyTorch's native uint8 bilinear kernel asserts on 1x1 outputs of 3-channel input;
            # batchaug takes the float path there, so compare with torchvision's float path
            assert dtype == torch.uint8 and y.shape[-2:] == (1, 1)
            ref = TF.resize(x.float(), tv_size, interpolation=INTERPOLATIONS[interpolation],
                            antialias=antialias).round().to(torch.uint8)
        assert y.dtype == dtype
        assert torch.equal(y, ref)

    def test_resize_shorter_side(self):
        x = torch.zeros(2, 3, 30, 45, dtype=torch.uint8)
        assert Resize(20)(x).shape == (2, 3, 20, 30)
        assert Resize([20])(x).shape == (2, 3, 20, 30)
        assert Resize((7, 9))(x).shape == (2, 3, 7, 9)
        assert Resize(30)(x) is x  # same size: nothing to do, as torchvision

    @settings(deadline=None)
    @given(h=st.integers(1, 60), w=st.integers(1, 60),
           size=st.one_of(st.none(), st.integers(1, 30)), extra=st.integers(1, 40))
    def test_resize_max_size_follows_torchvision(self, h, w, size, extra):
        """Resize(size, max_size=...) and Resize(None, max_size=...): torchvision's output size and
        values (uint8, bilinear antialiased)."""
        max_size = (size or 0) + extra
        x = torch.randint(0, 256, (2, 3, h, w), dtype=torch.uint8)
        m = Resize(size, max_size=max_size)
        from torchvision.transforms.v2.functional._geometry import _compute_resized_output_size

        ref_size = _compute_resized_output_size((h, w), None if size is None else [size], max_size)
        assert BF.resized_output_size(h, w, [] if size is None else [size], max_size) == ref_size
        if min(ref_size) < 1:  # torchvision's interpolate raises a RuntimeError there
            with pytest.raises(ValueError, match="Resize: a"):
                m(x)
            return
        out = m(x)
        assert list(out.shape[-2:]) == ref_size
        if ref_size == [1, 1]:
            return  # torch's uint8 kernel asserts on a 1x1 output (resize takes the float path)
        assert torch.equal(out, TF.resize(x, None if size is None else [size], max_size=max_size))

    def test_resize_max_size_argument_errors(self):
        with pytest.raises(ValueError, match="max_size needs size to be one int"):
            Resize((8, 9), max_size=20)
        with pytest.raises(ValueError, match="max_size = 8 must be greater"):
            Resize(8, max_size=8)
        with pytest.raises(ValueError, match="size can be None only with max_size"):
            Resize(None)
        with pytest.raises(TypeError, match="max_size must be None or an int"):
            Resize(8, max_size=20.0)

    @settings(deadline=None)
    @given(dtype=st.sampled_from([torch.uint8, torch.float32, torch.float64, torch.float16]),
           hw=st.tuples(st.integers(2, 40), st.integers(2, 40)),
           out=st.tuples(st.integers(2, 40), st.integers(2, 40)), antialias=st.booleans(),
           channels_last=st.booleans())
    def test_resize_bicubic_equals_torchvision(self, dtype, hw, out, antialias, channels_last):
        """Exactly v2.functional.resize(..., "bicubic") on the batch: uint8 through torch's native
        kernel (as torchvision on CPU), float16 via float32 without clamping."""
        x = torch.randint(0, 256, (3, 3) + hw, dtype=torch.uint8)
        if dtype != torch.uint8:
            x = (x.float() / 255).to(dtype)
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        y = Resize(list(out), interpolation="bicubic", antialias=antialias)(x)
        ref = TF.resize(x, list(out), TF.InterpolationMode.BICUBIC, antialias=antialias)
        assert y.dtype == dtype and torch.equal(y, ref)

    @pytest.mark.parametrize("kwargs", [dict(size=(10, 12)), dict(size=13), dict(size=(31, 17)),
                                        dict(size=12, max_size=14), dict(size=(H, W))])
    def test_resize_targets_match_torchvision(self, kwargs):
        m = T.Resize(**kwargs)
        x, targets = _targets_batch(seed=3)
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

    def test_resize_int_max_size_too_extreme_on_a_ragged_batch_names_the_resize(self):
        """Item 8: a 68x4 image under Resize(5, max_size=15) would be 15x0: the dense path's
        ValueError, not torch's 'sizes should be greater than 0'."""
        x = torch.zeros(2, 3, 68, 20, dtype=torch.uint8)
        sizes = torch.tensor([[20, 20], [68, 4]])
        for crop in (CenterCrop(5), RandomCrop(5, pad_if_needed=True)):
            aug = Augment(Resize(5, max_size=15), crop)
            with pytest.raises(ValueError, match=r"Resize: a 68x4 image would become 15x0"):
                aug.with_sizes(x, sizes)
            with pytest.raises(ValueError, match=r"Resize: a 68x4 image would become 15x0"):
                aug(x[1:, :, :, :4].contiguous())
        for h, w in ((68, 4), (4, 68)):
            with pytest.raises(ValueError, match="aspect ratio is too extreme"):
                Resize(5, max_size=15).output_size(h, w)
        assert Resize(5, max_size=15).output_size(68, 20) == [15, 4]


class TestRandomResizedCrop:
    """RandomResizedCrop: per sample against torchvision's resized_crop (bilinear, bicubic,
    antialias), its boxes' law and fallback, eval's centre crop, its targets, eval on a ragged
    batch."""

    @pytest.mark.parametrize("device", DEVICES)
    @settings(deadline=None)
    @given(
        h=st.integers(1, 40), w=st.integers(1, 40), oh=st.integers(1, 40), ow=st.integers(1, 40),
        dtype=dtypes, interpolation=st.sampled_from(["nearest", "bilinear"]),
        antialias=st.booleans(), channels_last=st.booleans(),
        scale_lo=st.floats(0.01, 1.0), scale_span=st.floats(0, 1.0),
        ratio_lo=st.floats(0.2, 2.0), ratio_span=st.floats(0, 3.0), seed=st.integers(0, 2**16),
    )
    @example(h=2, w=2, oh=1, ow=1, dtype=torch.uint8, interpolation="bilinear", antialias=False,
             channels_last=False, scale_lo=1.0, scale_span=0.0, ratio_lo=1.0, ratio_span=0.0,
             seed=0)
    def test_resized_crop_matches_torchvision_per_sample(
        self, device, h, w, oh, ow, dtype, interpolation, antialias, channels_last, scale_lo,
        scale_span, ratio_lo, ratio_span, seed
    ):
        m = RandomResizedCrop((oh, ow), scale=(scale_lo, scale_lo + scale_span),
                              ratio=(ratio_lo, ratio_lo + ratio_span), interpolation=interpolation,
                              antialias=antialias)
        x = _warp_batch(6, 3, h, w, dtype, device, seed)
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        torch.manual_seed(seed)
        top, left, bh, bw = m.make_params(x)
        torch.manual_seed(seed)
        out = m(x)
        assert out.shape == (6, 3, oh, ow) and out.dtype == dtype
        # torchvision resizes float16 in float32 and casts back, as we do
        ref_in = x.float() if dtype == torch.float16 else x
        # CPU antialiased: the per-box path is torchvision's own call, exact for every dtype. Except
        # a 1x1 uint8 output, where PyTorch's uint8 kernel (and so torchvision) fails an assert: we
        # resize that in float32 and round, as torchvision does on GPU. And an output 1 pixel wide
        # from a channels_last image, where PyTorch's float kernel gives every row row 0's value
        # for one layout and not the other (torchvision restrides its single image, we cannot).
        exact = (antialias and interpolation == "bilinear" and x.device.type == "cpu"
                 and not (dtype == torch.uint8 and oh * ow == 1)
                 and not (channels_last and ow == 1 and dtype != torch.uint8))
        # (PyTorch's uint8 bilinear kernel fails its assert on a 1x1 output without antialias too)
        if interpolation == "bilinear" and dtype == torch.uint8 and (
                (antialias and not exact) or oh * ow == 1):
            ref_in = x.float()
        ref = torch.stack([
            TF.resized_crop(ref_in[i], int(top[i]), int(left[i]), int(bh[i]), int(bw[i]), [oh, ow],
                            interpolation=INTERPOLATIONS[interpolation], antialias=antialias)
            for i in range(x.shape[0])
        ])
        ref = ref.round() if ref.dtype != dtype and dtype == torch.uint8 else ref
        ref = ref.to(dtype)
        if exact:
            assert torch.equal(out, ref), (out.double() - ref.double()).abs().max()
        elif not (channels_last and ow == 1 and antialias and interpolation == "bilinear"):
            _warp_compare(out, ref, dtype, interpolation)

    @pytest.mark.parametrize("device", DEVICES)
    @settings(deadline=None, max_examples=30)
    @given(
        h=st.integers(1, 40), w=st.integers(1, 40), oh=st.integers(1, 40), ow=st.integers(2, 40),
        dtype=st.sampled_from([torch.uint8, torch.float32, torch.float64]),
        layout=st.sampled_from(["contiguous", "channels_last", "sliced"]),
        seed=st.integers(0, 2**16),
    )
    def test_resized_crop_antialias_batched_equals_per_box(
            self, device, h, w, oh, ow, dtype, layout, seed):
        # The two antialiased paths: per box (CPU eager/TorchScript) and batched (GPU, compile,
        # export). Same filter: uint8 within 1 step (fixed-point vs float weights), float to 1e-5.
        # (ow >= 2: see the 1-pixel-wide PyTorch quirk in the test above.)
        from batchaug.functional._resize import _resized_crop_aa_batched, _resized_crop_per_sample

        x = _warp_batch(5, 3, h, w + 3, dtype, "cpu", seed)
        if layout == "channels_last":
            x = x.contiguous(memory_format=torch.channels_last)
        x = x[..., 3:] if layout == "sliced" else x[..., :w]
        m = RandomResizedCrop((oh, ow))
        torch.manual_seed(seed)
        box = m.make_params(x)
        fast = _resized_crop_per_sample(x, *box, oh, ow)
        plain = _resized_crop_aa_batched(x.to(device), *(b.to(device) for b in box), oh, ow).cpu()
        assert fast.dtype == plain.dtype == dtype and fast.shape == plain.shape == (5, 3, oh, ow)
        tol = 1.0 if dtype == torch.uint8 else 1e-5
        assert (fast.double() - plain.double()).abs().max().item() <= tol

    @pytest.mark.parametrize("device", DEVICES)
    @settings(deadline=None)
    @given(
        h=st.integers(1, 40), w=st.integers(1, 40), oh=st.integers(1, 40), ow=st.integers(1, 40),
        dtype=st.sampled_from([torch.uint8, torch.float16, torch.float32, torch.float64]),
        antialias=st.booleans(), channels_last=st.booleans(), seed=st.integers(0, 2**16),
    )
    def test_resized_crop_bicubic_matches_torchvision_per_sample(
        self, device, h, w, oh, ow, dtype, antialias, channels_last, seed
    ):
        """RandomResizedCrop(interpolation="bicubic") per sample vs v2.functional.resized_crop(...,
        BICUBIC) with the drawn boxes. CPU (eager): identical for every dtype, except a 1x1 uint8
        output (torch's uint8 kernel asserts there, torchvision fails; we resize in float32, clamp
        and round, torchvision's float path) and PyTorch's one-pixel-wide channels_last float quirk
        (see the bilinear test above). Elsewhere (batched): float to 1e-5, uint8 within 2 steps of
        torchvision's CPU uint8 result (see the next test)."""
        m = RandomResizedCrop((oh, ow), interpolation="bicubic", antialias=antialias)
        x = _warp_batch(5, 3, h, w, dtype, device, seed)
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        torch.manual_seed(seed)
        box = m.make_params(x)
        torch.manual_seed(seed)
        out = m(x)
        assert out.shape == (5, 3, oh, ow) and out.dtype == dtype
        cpu = x.cpu()
        one_px = dtype == torch.uint8 and oh * ow == 1
        ref_in = cpu.float() if (dtype == torch.float16 or one_px) else cpu
        ref = _tv_bicubic_boxes(ref_in, [b.cpu() for b in box], oh, ow, antialias)
        if one_px:
            ref = ref.clamp(0, 255).round()
        ref = ref.to(dtype)
        if x.device.type == "cpu" and not (channels_last and ow == 1 and dtype != torch.uint8):
            assert torch.equal(out, ref), (out.double() - ref.double()).abs().max()
        elif x.device.type != "cpu":
            tol = 2.0 if dtype == torch.uint8 else (1e-2 if dtype == torch.float16 else 1e-5)
            assert (out.cpu().double() - ref.double()).abs().max().item() <= tol

    @pytest.mark.parametrize("device", DEVICES)
    @settings(deadline=None)
    @given(
        h=st.integers(1, 40), w=st.integers(1, 40), oh=st.integers(2, 40), ow=st.integers(2, 40),
        dtype=st.sampled_from([torch.uint8, torch.float32, torch.float64]), antialias=st.booleans(),
        layout=st.sampled_from(["contiguous", "channels_last", "sliced"]), sharp=st.booleans(),
        seed=st.integers(0, 2**16),
    )
    def test_resized_crop_bicubic_batched_equals_per_box(
        self, device, h, w, oh, ow, dtype, antialias, layout, sharp, seed
    ):
        """The two bicubic paths: per box (CPU eager/TorchScript: torch's kernels, torchvision's
        CPU result) and batched separable matrices (GPU, compile, export). Float within 1e-5.
        uint8 within 2 steps: torch's uint8 kernel uses fixed-point weights in each of its two
        passes and the batched path float weights, each pass rounded. ``sharp`` images (0/255
        stripes) make bicubic overshoot, where the clamp between the passes matters (one float
        pass would be up to ~30 steps off)."""
        from batchaug.functional._resize import _resized_crop_aa_batched, _resized_crop_per_sample

        x = _warp_batch(5, 3, h, w + 3, dtype, "cpu", seed)
        if sharp:
            hi = 255 if dtype == torch.uint8 else 1.0
            x[..., ::2, :] = hi
            x[..., 1::3, 1::2] = 0
        if layout == "channels_last":
            x = x.contiguous(memory_format=torch.channels_last)
        x = x[..., 3:] if layout == "sliced" else x[..., :w]
        m = RandomResizedCrop((oh, ow), interpolation="bicubic", antialias=antialias)
        torch.manual_seed(seed)
        box = m.make_params(x)
        fast = _resized_crop_per_sample(x, *box, oh, ow, "bicubic", antialias)
        plain = _resized_crop_aa_batched(x.to(device), *(b.to(device) for b in box), oh, ow,
                                         "bicubic", antialias).cpu()
        assert fast.dtype == plain.dtype == dtype and fast.shape == plain.shape == (5, 3, oh, ow)
        tol = 2.0 if dtype == torch.uint8 else 1e-5
        assert (fast.double() - plain.double()).abs().max().item() <= tol
        if dtype != torch.uint8:  # floats keep the overshoot, as torchvision's
            ref = _tv_bicubic_boxes(x, box, oh, ow, antialias)
            assert torch.equal(fast, ref)

    @pytest.mark.parametrize("antialias", [True, False])
    @pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
    def test_resized_crop_bicubic_eval_is_center_crop_resize(self, dtype, antialias):
        m = RandomResizedCrop(24, interpolation="bicubic", antialias=antialias).eval()
        x = _warp_batch(3, 3, 40, 48, dtype, "cpu")
        # 40x48 is wider than 1:1: full height 40 x 40, times 0.875 = 35 x 35
        ref = TF.resize(TF.center_crop(x, [35, 35]), [24, 24], TF.InterpolationMode.BICUBIC,
                        antialias=antialias)
        assert torch.equal(m(x), ref)
        assert torch.equal(torch.jit.script(m)(x), ref)

    @settings(deadline=None)
    @given(
        h=st.integers(1, 300), w=st.integers(1, 300),
        scale_lo=st.floats(0.01, 1.0), scale_span=st.floats(0, 1.5),
        ratio_lo=st.floats(0.1, 3.0), ratio_span=st.floats(0, 3.0), seed=st.integers(0, 2**16),
    )
    def test_resized_crop_boxes_respect_scale_ratio_or_fall_back(
        self, h, w, scale_lo, scale_span, ratio_lo, ratio_span, seed
    ):
        scale, ratio = (scale_lo, scale_lo + scale_span), (ratio_lo, ratio_lo + ratio_span)
        m = RandomResizedCrop(8, scale=scale, ratio=ratio)
        torch.manual_seed(seed)
        top, left, bh, bw = m.make_params(torch.zeros(512, 1, h, w, dtype=torch.uint8))
        assert all(t.dtype == torch.int64 and t.shape == (512,) for t in (top, left, bh, bw))
        assert ((bh >= 1) & (bh <= h) & (bw >= 1) & (bw <= w)).all()
        assert ((top >= 0) & (top <= h - bh) & (left >= 0) & (left <= w - bw)).all()
        # torchvision's own fallback box (its make_params when no attempt can fit)
        tv = v2.RandomResizedCrop(8, scale=(1e9, 1e9), ratio=ratio)
        p = tv.make_params([torch.zeros(1, h, w)])
        # (batchaug keeps at least one pixel where torchvision's fallback rounds a side to 0)
        fb_h, fb_w = max(1, p["height"]), max(1, p["width"])
        fb = ((h - fb_h) // 2, (w - fb_w) // 2, fb_h, fb_w)
        assert (fb_h, fb_w) != (p["height"], p["width"]) or fb[:2] == (p["top"], p["left"])
        is_fb = (top == fb[0]) & (left == fb[1]) & (bh == fb[2]) & (bw == fb[3])
        # Otherwise the box is a rounding of some real (w', h') with area fraction in scale and
        # aspect in ratio: check with w', h' anywhere in [w - 0.5, w + 0.5] x [h - 0.5, h + 0.5].
        bwf, bhf, area = bw.double(), bh.double(), float(h * w)
        eps = 1e-6
        area_ok = ((bwf - 0.5) * (bhf - 0.5) <= scale[1] * area * (1 + eps)) & (
            (bwf + 0.5) * (bhf + 0.5) >= scale[0] * area * (1 - eps))
        ratio_ok = ((bwf - 0.5) / (bhf + 0.5) <= ratio[1] * (1 + eps)) & (
            (bwf + 0.5) / (bhf - 0.5).clamp_min(1e-9) >= ratio[0] * (1 - eps))
        assert (is_fb | (area_ok & ratio_ok)).all()
        if scale[0] * area > (w + 0.5) * (h + 0.5):
            assert is_fb.all()  # no rounded box can fit: every sample takes the fallback

    def test_resized_crop_distribution_matches_torchvision(self):
        """Same sampling law as torchvision's 10-attempt loop: compare box statistics."""
        h, w = 48, 64
        torch.manual_seed(0)
        m = RandomResizedCrop(8, scale=(0.08, 1.0))
        top, left, bh, bw = m.make_params(torch.zeros(20000, 1, h, w))
        tv = v2.RandomResizedCrop(8, scale=(0.08, 1.0))
        ps = [tv.make_params([torch.zeros(1, h, w)]) for _ in range(3000)]
        tv_h = torch.tensor([p["height"] for p in ps], dtype=torch.float64)
        tv_w = torch.tensor([p["width"] for p in ps], dtype=torch.float64)
        tv_t = torch.tensor([p["top"] for p in ps], dtype=torch.float64)
        ours_area, tv_area = (bh * bw).double() / (h * w), tv_h * tv_w / (h * w)
        # standard errors: area ~0.005, log aspect ~0.005, top ~0.2 (3000 draws); limits are ~4 SE
        assert abs(ours_area.mean() - tv_area.mean()) < 0.02
        assert abs(torch.log(bw / bh).mean() - torch.log(tv_w / tv_h).mean()) < 0.03
        assert abs(top.double().mean() - tv_t.mean()) < 0.8
        assert abs((bh == h).double().mean() - (tv_h == h).double().mean()) < 0.02

    @pytest.mark.parametrize("keyed", [False, True])
    def test_resized_crop_offsets_cover_every_position(self, keyed):
        """The box's top/left offsets are uniform over every position torchvision draws
        (``torch.randint(0, H - h + 1)``): first and last positions included. With a pinned scale
        and ratio the box size is torchvision's one size, and the offsets are checked position by
        position; with torchvision's default scale, the share of boxes touching each edge is the
        expected sum of 1 / (number of positions)."""
        from batchaug._random import sample_keys

        h, w, n = 48, 64, 20000
        x = torch.zeros(n, 1, h, w)
        keys = sample_keys(0, 3, torch.arange(n)) if keyed else None
        tv = v2.RandomResizedCrop(8, scale=(0.25, 0.25), ratio=(0.75, 0.75))
        ps = [tv.make_params([x[0]]) for _ in range(2000)]
        th, tw = ps[0]["height"], ps[0]["width"]
        assert {(p["height"], p["width"]) for p in ps} == {(th, tw)}
        # torchvision's offsets: exactly the positions 0..H-h and 0..W-w
        assert {p["top"] for p in ps} == set(range(h - th + 1))
        assert {p["left"] for p in ps} == set(range(w - tw + 1))
        torch.manual_seed(0)
        top, left, bh, bw = RandomResizedCrop(
            8, scale=(0.25, 0.25), ratio=(0.75, 0.75)).make_params(x, keys)
        assert (bh == th).all() and (bw == tw).all()
        _chi2_uniform(top, h - th + 1, "top")
        _chi2_uniform(left, w - tw + 1, "left")
        torch.manual_seed(1)
        top, left, bh, bw = RandomResizedCrop(8).make_params(x, keys)
        for off, room, what in ((top, h - bh, "top"), (left, w - bw, "left")):
            p = 1.0 / (room + 1).double()
            sd = (p * (1 - p)).sum().sqrt().item()
            for edge, at in (("first", off == 0), ("last", off == room)):
                got = at.double().sum().item()
                assert abs(got - p.sum().item()) <= 5 * sd, f"{what} {edge}: {got} vs {p.sum():.0f}"

    @pytest.mark.parametrize("device", DEVICES)
    @pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
    @pytest.mark.parametrize("shape,size,box", [
        # Boxes worked out by hand from the class doc (the largest centred box with the output's
        # aspect ratio, each side times 0.875, rounded half to even), not taken from eval_box:
        ((256, 256), 224, (224, 224)),  # 256 * 0.875: the usual Resize(256) + CenterCrop(224)
        ((40, 60), (20, 24), (35, 42)),  # wider than 20:24, full height 40 x 48, times 0.875
        ((30, 20), 32, (18, 18)),  # taller: full width 20 x 20, 17.5 rounds to 18
    ])
    def test_resized_crop_eval_is_center_crop_resize(self, device, dtype, shape, size, box):
        m = RandomResizedCrop(size).eval()
        x = _warp_batch(3, 3, *shape, dtype, device)
        y = m(x)
        oh, ow = (size, size) if isinstance(size, int) else size
        assert y.shape == (3, 3, oh, ow) and y.dtype == dtype
        # torchvision places the box (its own centre-crop offsets) and resizes it.
        ref = TF.resize(TF.center_crop(x, list(box)), [oh, ow], antialias=True)
        assert torch.equal(y, ref)
        assert m.eval_box(*shape)[2:] == box
        if shape == (256, 256):
            assert torch.equal(y, TF.center_crop(x, [224, 224]))
        # train and eval give the same shape
        assert m.train()(x).shape == y.shape
        # eval_crop_pct=None: identity
        assert torch.equal(RandomResizedCrop(size, eval_crop_pct=None).eval()(x), x)

    @pytest.mark.parametrize("size", [224, (20, 24)])
    def test_resized_crop_eval_is_identity_when_input_has_the_output_size(self, size):
        """issue 7 item 13: a cache built with ``--resize 256 --center-crop 224`` fed to
        RandomResizedCrop(224) in eval() must not be centre-cropped (zoomed) a second time."""
        oh, ow = (size, size) if isinstance(size, int) else size
        x = _warp_batch(2, 3, oh, ow, torch.uint8, "cpu")
        for pct in (0.875, 0.5, None):
            m = RandomResizedCrop(size, eval_crop_pct=pct).eval()
            assert m(x) is x
            assert torch.equal(torch.jit.script(m)(x), x)
        # other input sizes still get the centre crop + resize to ``size``
        bigger = _warp_batch(2, 3, oh + 32, ow + 32, torch.uint8, "cpu")
        m = RandomResizedCrop(size).eval()
        # By hand: 256x256 -> 224x224 box; 52x56 (taller than 20:24) -> full width 46.67 x 56,
        # times 0.875 -> 40.83 x 49 -> 41 x 49.
        box = [224, 224] if size == 224 else [41, 49]
        ref = TF.resize(TF.center_crop(bigger, box), [oh, ow], antialias=True)
        assert torch.equal(m(bigger), ref)

    def test_resized_crop_eval_box_rounds_half_to_even_eager_and_scripted(self):
        # 20 * 0.625 = 12.5 -> 12 and (29 - 12) / 2 = 8.5 -> 8: Python's round, half to even
        # (half away from zero would give 13 and 9), the same in TorchScript
        m = RandomResizedCrop(32, eval_crop_pct=0.625).eval()
        assert m.eval_box(29, 20) == (8, 4, 12, 12)
        x = _warp_batch(2, 3, 29, 20, torch.uint8, "cpu")
        ref = TF.resize(x[:, :, 8:20, 4:16], [32, 32], antialias=True)
        assert torch.equal(m(x), ref)
        assert torch.equal(torch.jit.script(m)(x), ref)

    def test_resized_crop_eval_full_box_is_identity(self):
        x = _warp_batch(2, 3, 16, 16, torch.uint8, "cpu")
        assert torch.equal(RandomResizedCrop(16, eval_crop_pct=1.0).eval()(x), x)

    @pytest.mark.parametrize("h, w", [(64, 48), (48, 64)])
    def test_resized_crop_box_as_wide_or_tall_as_the_image_fits_as_in_torchvision(self, h, w):
        """scale 0.75, ratio 1 on a 4:3 image: the box is the image's full width (or height), which
        torchvision accepts (``w <= width``); the boxes drawn are exactly torchvision's."""
        scale, ratio = (0.75, 0.75), (1.0, 1.0)
        theirs = _tv_rrc_boxes(h, w, scale, ratio)
        assert len(theirs) == abs(h - w) + 1  # every offset along the long side
        top, left, bh, bw = RandomResizedCrop(8, scale=scale, ratio=ratio).make_params(
            torch.zeros(600, 1, h, w))
        ours = set(zip(top.tolist(), left.tolist(), bh.tolist(), bw.tolist()))
        assert ours == theirs

    @pytest.mark.parametrize("h, w", [(66, 40), (40, 66), (68, 41), (41, 68)])
    def test_resized_crop_fallback_box_on_odd_margins_is_torchvisions(self, h, w):
        """No attempt fits (scale 2): torchvision's fallback box, centred with ``(H - h) // 2``
        on margins of odd size (13 here) too."""
        ratio = (3 / 4, 4 / 3)
        (want,) = _tv_rrc_boxes(h, w, (2.0, 2.0), ratio, n=3)
        assert (h - want[2]) % 2 == 1 or (w - want[3]) % 2 == 1
        top, left, bh, bw = RandomResizedCrop(8, scale=(2.0, 2.0), ratio=ratio).make_params(
            torch.zeros(4, 1, h, w))
        assert set(zip(top.tolist(), left.tolist(), bh.tolist(), bw.tolist())) == {want}

    @pytest.mark.parametrize("kwargs", [
        dict(scale=(0.3, 0.3), ratio=(0.8, 0.8)),  # pinned area and aspect; position drawn
        dict(scale=(0.05, 1.0)),
        dict(scale=(1.0, 1.0), ratio=(W / H, W / H)),  # the whole image: fully pinned
        dict(scale=(5.0, 5.0)),  # never fits: torchvision's centre fallback
    ])
    def test_random_resized_crop_targets_match_torchvision(self, kwargs):
        m = T.RandomResizedCrop((12, 15), **kwargs)
        x, targets = _targets_batch(seed=4, mask_k=2)
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

    def test_random_resized_crop_eval_targets_follow_the_eval_box(self):
        m = T.RandomResizedCrop(16).eval()
        x, targets = _targets_batch(h=32, w=32, seed=5)
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
            x, targets = _targets_batch(h=hw, w=hw, seed=6)
            y, out = mod.with_targets(x, targets)
            assert y is x
            for k, v in targets.items():
                assert torch.equal(out[k], v)

    @pytest.mark.parametrize("module", [RandomResizedCrop(24), RandomResizedCrop((20, 30)),
                                        RandomResizedCrop(24, eval_crop_pct=None),
                                        RandomResizedCrop((64, 80))],
                             ids=["square", "wide", "whole", "one_image_size"])
    def test_eval_rrc_takes_each_images_eval_box(self, module):
        """eval(): each image as the module in eval() on it alone (its eval box, or the whole
        image resized where eval() would return it as it is)."""
        module.eval()
        x, sizes = _ragged_batch(seed=14)
        out, _ = module.with_sizes(x, sizes)
        for i, (h, w) in enumerate(RAGGED_SIZES):
            img = x[i:i + 1, :, :h, :w].contiguous()
            if module.is_identity(img):
                alone = F.resize(img, module.size, module.interpolation, module.antialias)
                if [h, w] == module.size:
                    alone = img
            else:
                alone = module(img)
            assert torch.equal(out[i:i + 1], alone), i
