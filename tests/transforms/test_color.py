"""Colour transforms against torchvision.transforms.v2.functional, per sample, and their
random distributions (tests/contract/ adds scripting, export, gradients, ...).

Tolerances (measured; the kernels follow torchvision's formulas op for op):
- brightness, grayscale, invert, posterize, solarize, autocontrast, equalize: exact in uint8
  and float32.
- contrast, saturation, sharpness: torchvision blends with one fused multiply-add per pixel,
  here two roundings with a per-sample factor: uint8 within 1, float within 1e-5, float16
  within 2 ulps (torchvision computes in float16, we in float32).
- hue: a closed form of torchvision's HSV round trip (2x faster): float32/float64 within 2e-6,
  the README's figure (measured 1.4e-6 / 1.1e-6 over 6 x 64 images of 32x32 px; float16
  within 2 ulps), uint8 within 1 (about 1e-5 of the values differ).
- The four-op ColorJitter chain in uint8: a 1-step difference in one op grows by the later
  ops' factors (bound in the test; more than 1 step off on < 1 % of pixels), float32 within
  1e-5.
"""
from __future__ import annotations

import math

import pytest
import torch
import torchvision.transforms.v2.functional as TF
from hypothesis import given
from hypothesis import strategies as st

import batchaug.functional as BF
import batchaug.transforms as T
from tests.contract.references import _ref_color_jitter

DTYPES = [torch.uint8, torch.float16, torch.float32, torch.float64]


def _batch(seed: int, dtype: torch.dtype, n: int = 8, c: int = 3, h: int = 9, w: int = 11,
           lo: int = 0, hi: int = 256) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(lo, hi, (n, c, h, w), generator=g, dtype=torch.uint8)
    # a few flat images and gray pixels: the degenerate cases of contrast, hue, equalize
    x[0] = x[0, :1, :1, :1]
    x[1, :, :3] = x[1, :1, :3]
    return x if dtype == torch.uint8 else (x.to(torch.float64) / 255).to(dtype)


def _tol(dtype: torch.dtype, uint8: float = 1.0) -> float:
    return {torch.uint8: uint8, torch.float16: 2e-3, torch.float32: 1e-5,
            torch.float64: 1e-5}[dtype]


HUE_FLOAT_TOL = 2e-6  # float32/float64 hue (module doc, README)


def _op_tol(op: str, dtype: torch.dtype) -> float:
    if op == "brightness" and dtype in (torch.uint8, torch.float32):
        return 0.0
    if op == "hue" and dtype in (torch.float32, torch.float64):
        return HUE_FLOAT_TOL
    return _tol(dtype)


def _close(y: torch.Tensor, ref: torch.Tensor, tol: float, what: str) -> None:
    assert y.shape == ref.shape and y.dtype == ref.dtype, what
    torch.testing.assert_close(y.double(), ref.double(), atol=tol, rtol=0, msg=what)


SINGLE_OPS = {
    "brightness": (st.floats(0, 3), 0.0),
    "contrast": (st.floats(0, 3), 1.0),
    "saturation": (st.floats(0, 3), 1.0),
    "hue": (st.floats(-0.5, 0.5), 0.0),
}


PER_SAMPLE = [
    (lambda: T.RandomGrayscale(0.3), lambda xi: TF.rgb_to_grayscale(xi, 3), 0.0),
    (lambda: T.RandomInvert(0.3), TF.invert, 0.0),
    (lambda: T.RandomPosterize(3, p=0.3), lambda xi: TF.posterize(xi, 3), 0.0),
    (lambda: T.RandomSolarize(0.4, p=0.3), lambda xi: TF.solarize(
        xi, 0.4 * (255 if xi.dtype == torch.uint8 else 1)), 0.0),
    (lambda: T.RandomAdjustSharpness(2.5, p=0.3), lambda xi: TF.adjust_sharpness(xi, 2.5), None),
    (lambda: T.RandomAutocontrast(0.3), TF.autocontrast, 0.0),
    (lambda: T.RandomEqualize(0.3), TF.equalize, 0.0),
]


class TestColorJitter:
    """ColorJitter: each adjustment and the four-op chain against torchvision, its orders,
    its paths (grouped, static, uint8/float, CPU chunks), its arguments."""

    @given(op=st.sampled_from(sorted(SINGLE_OPS)), dtype=st.sampled_from(DTYPES),
           lo=st.floats(0, 3), hi=st.floats(0, 3), channels=st.sampled_from([1, 3]),
           seed=st.integers(0, 2**16))
    def test_single_adjustment_matches_torchvision(self, op, dtype, lo, hi, channels, seed):
        if op == "hue":
            lo, hi = lo / 6 - 0.5, hi / 6 - 0.5 + 0.5
        lo, hi = min(lo, hi), max(lo, hi)
        m = T.ColorJitter(**{op: (lo, hi)})
        x = _batch(seed, dtype, c=channels)
        torch.manual_seed(seed)
        y = m(x)
        torch.manual_seed(seed)
        ref = _ref_color_jitter(m, x, m.make_params(x))
        _close(y, ref, _op_tol(op, dtype), f"{op} ({lo}, {hi}) {dtype}")


    @given(dtype=st.sampled_from(DTYPES), seed=st.integers(0, 2**16),
           strength=st.floats(0.0, 0.9))
    def test_color_jitter_chain_matches_torchvision(self, dtype, seed, strength):
        m = T.ColorJitter(strength, strength, strength, strength / 2)
        x = _batch(seed, dtype)
        torch.manual_seed(seed)
        y = m(x)
        torch.manual_seed(seed)
        ref = _ref_color_jitter(m, x, m.make_params(x))
        if dtype != torch.uint8:
            _close(y, ref, _tol(dtype) * (2 if dtype == torch.float16 else 1),
                   f"chain {strength} {dtype}")
            return
        # uint8: each op may round one step away from torchvision (see the module doc), and every
        # later brightness/contrast/saturation factor (<= f = 1 + strength) scales that step, so a
        # pixel can be off by at most 1 + f + f^2 + f^3 (measured over 3,000 seeds: <= 0.38 of it).
        # Such pixels are rare: more than 1 step off on <= 0.13 % of pixels (measured), asserted
        # below 1 %.
        f = 1.0 + strength
        diff = (y.to(torch.int32) - ref.to(torch.int32)).abs()
        assert y.shape == ref.shape and y.dtype == ref.dtype
        assert diff.max().item() <= 1 + f + f * f + f ** 3, f"chain {strength}: {diff.max()}"
        assert (diff > 1).float().mean().item() < 0.01, f"chain {strength}: too many pixels off"


    @pytest.mark.parametrize("dtype", DTYPES, ids=str)
    @pytest.mark.parametrize("op,factor,fn", [
        ("brightness", 1.5, TF.adjust_brightness), ("contrast", 0.5, TF.adjust_contrast),
        ("saturation", 2.0, TF.adjust_saturation), ("hue", 0.25, TF.adjust_hue),
        ("hue", -0.5, TF.adjust_hue), ("brightness", 0.0, TF.adjust_brightness),
    ])
    def test_degenerate_range_is_the_fixed_adjustment(self, dtype, op, factor, fn):
        x = _batch(3, dtype)
        y = T.ColorJitter(**{op: (factor, factor)})(x)
        _close(y, fn(x, factor), _op_tol(op, dtype), f"{op}=({factor}, {factor})")


    def test_identity_ranges_are_skipped(self):
        assert T.ColorJitter().ops == []
        assert T.ColorJitter(brightness=(1, 1), hue=(0, 0), contrast=0.2).ops == [1]
        x = _batch(0, torch.uint8)
        assert T.ColorJitter()(x) is x


    @pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
    def test_half_hue_is_finite_and_matches_float32(self, dtype):
        x = _batch(5, torch.float32, n=16)
        x[2] = 1.0  # white: max == min, v = 1
        x[3, 0] = 0.0
        m = T.ColorJitter(hue=0.5)
        torch.manual_seed(0)
        y = m(x.to(dtype))
        torch.manual_seed(0)
        y32 = m(x.to(dtype).float())
        assert torch.isfinite(y).all()
        torch.testing.assert_close(y.float(), y32.to(dtype).float(), atol=0, rtol=0)


    @pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16], ids=str)
    def test_float_hue_edge_cases_both_paths(self, dtype):
        """Float hue picks its branch with sign masks (no where): ties for the max (r == g,
        g == b, r == b, all equal), saturated and gray pixels, factors 0, +-0.5. The in-place path
        (no grad) equals the differentiable one bit for bit, both within 2e-6 of torchvision
        (float16: 2e-3, its own rounding of the float32 result)."""
        levels = torch.tensor([0.0, 0.25, 0.5, 1.0])
        rgb = torch.cartesian_prod(levels, levels, levels).T.reshape(3, 8, 8)  # every tie
        x = torch.stack([rgb, torch.rand(3, 8, 8, generator=torch.Generator().manual_seed(0))] * 3)
        factor = torch.tensor([0.0, 0.5, -0.5, 0.25, -1 / 6, 0.1])
        x = x.to(dtype)
        y = BF.adjust_hue(x, factor)
        with torch.enable_grad():
            yg = BF.adjust_hue(x.clone().requires_grad_(True), factor)
        assert yg.requires_grad and torch.equal(yg.detach(), y)
        for i in range(x.shape[0]):
            ref = TF.adjust_hue(x[i].float(), float(factor[i])).to(dtype)
            _close(y[i], ref, 2e-3 if dtype == torch.float16 else HUE_FLOAT_TOL, f"sample {i}")


    def test_all_24_orders_occur_uniformly(self):
        m = T.ColorJitter(0.4, 0.4, 0.4, 0.1)
        x = torch.zeros(4800, 3, 1, 1)
        torch.manual_seed(0)
        _, order = m.make_params(x)
        assert sorted(order[0].tolist()) == [0, 1, 2, 3]
        codes = (order * torch.tensor([64, 16, 4, 1])).sum(1)
        counts = torch.bincount(codes, minlength=256)[torch.unique(codes)]
        assert counts.numel() == 24
        n, p = 4800, 1 / 24
        sd = math.sqrt(n * p * (1 - p))
        assert ((counts - n * p).abs() < 5 * sd).all(), counts


    @pytest.mark.parametrize("args", [(0.5, 0.5, 0.5, 0.2), (0, 0, 0, 0.5), (0, 0.9, 0, 0.5),
                                      (0.5, 0, 0.9, 0.3), (0.5, 0.5, 0.5, 0)], ids=str)
    def test_grouped_and_static_paths_agree(self, args):
        # uint8's static path puts the blends in slots around the hue (k = 1 to 4 adjustments,
        # with and without hue)
        m = T.ColorJitter(*args)
        for dtype in (torch.uint8, torch.float32):
            x = _batch(1, dtype, n=32)
            torch.manual_seed(0)
            factors, order = m.make_params(x)
            grouped = m._grouped(x, factors, order)
            _close(grouped, m._static(x, factors, order), 0.0, f"grouped vs static {dtype}")
            if dtype == torch.uint8:
                _close(grouped, m._static_u8(x, factors, order), 0.0, "grouped vs static_u8")


    @given(seed=st.integers(0, 2**16), strength=st.floats(0.0, 2.0), hue=st.floats(0.0, 0.5),
           channels=st.sampled_from([1, 3]), channels_last=st.booleans(), n=st.integers(2, 24))
    def test_uint8_float_chain_equals_the_uint8_kernels(self, seed, strength, hue, channels,
                                                        channels_last, n):
        """The uint8 static path (_static_u8: one float32 working tensor through every step, each
        *_u8f kernel truncating as a uint8 round trip would) equals the grouped path, which runs
        the public uint8 kernels (adjust_*) one conversion each: exactly, input untouched."""
        m = T.ColorJitter(strength, strength, strength, hue) if channels == 3 else \
            T.ColorJitter(strength, strength)
        x = _batch(seed, torch.uint8, n=n, c=channels)
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        before = x.clone()
        torch.manual_seed(seed)
        factors, order = m.make_params(x)
        chain = m._static_u8(x, factors, order)
        _close(chain, m._grouped(x, factors, order), 0.0, "u8 float chain vs uint8 kernels")
        assert torch.equal(x, before)


    @pytest.mark.parametrize("channels", [1, 3])
    def test_mix_u8f_is_each_blend_in_place(self, channels):
        """One form, per-sample weights: (f, 0, 0) brightness, (f, 0, 1 - f) contrast, (f, 1 - f, 0)
        saturation, (1, 0, 0) identity, exactly as the separate u8f kernels, written over xf."""
        xf = _batch(4, torch.uint8, n=8, c=channels).to(torch.float32)
        f = torch.tensor([0.0, 0.3, 0.6, 1.0, 1.4, 2.5, 7.0, 1e6])
        zero, rest = torch.zeros(8), 1.0 - f
        sat = BF._color.saturation_u8f(xf, f)
        for weights, ref in [((zero, zero), BF._color.brightness_u8f(xf, f)),
                             ((zero, rest), BF._color.contrast_u8f(xf, f)),
                             ((rest if channels == 3 else zero, zero),
                              sat if channels == 3 else xf),
                             ((zero, zero), xf)]:
            factor = torch.ones(8) if ref is xf else f
            y = xf.clone()
            out = BF._color.mix_u8f_(y, factor, *weights)
            assert out.data_ptr() == y.data_ptr()
            torch.testing.assert_close(out, ref, atol=0, rtol=0)
        if channels == 3:  # the hue step writes the working buffer as adjust_hue's uint8 result
            y = xf.clone()
            h = torch.linspace(-0.5, 0.5, 8)
            out = BF._color.rotate_hue_(y, h, True, True)
            assert out.data_ptr() == y.data_ptr() and not torch.equal(y, xf)
            assert torch.equal(y.to(torch.uint8), BF.adjust_hue(xf.to(torch.uint8), h))


    def test_jitter_argument_rules_follow_torchvision(self):
        m = T.ColorJitter(brightness=1.5, hue=0.2)
        assert (m.lows[0], m.highs[0]) == (0.0, 2.5)  # clipped at 0
        assert (m.lows[3], m.highs[3]) == (-0.2, 0.2)
        with pytest.raises(ValueError, match=r"hue must be in \[0, 0.5\]"):
            T.ColorJitter(hue=0.6)
        with pytest.raises(ValueError, match=r"contrast must be \(min, max\) with 0 <= min <= max"):
            T.ColorJitter(contrast=(1.5, 0.5))
        with pytest.raises(ValueError, match=r"brightness must be in \[0, "):
            T.ColorJitter(brightness=-0.1)


    def test_cpu_chunks_equal_the_whole_batch_pass(self):
        # 3x256x256 float32 is 768 KiB a sample: 4 MiB CPU chunks per thread hold 5 of the 12
        # (10 with 2 threads)
        m = T.ColorJitter(0.5, 0.5, 0.5, 0.2)
        x = _batch(4, torch.uint8, n=12, h=256, w=256)
        budget = BF._utils.color_chunk_bytes()
        assert BF._utils.cpu_chunk_size(x, 4 * 3 * 256 * 256, budget, True) < 12
        torch.manual_seed(0)
        y = m(x)
        torch.manual_seed(0)
        factors, order = m.make_params(x)
        assert torch.equal(y, m._grouped(x, factors, order))


class TestGrayscale:
    """Grayscale: 1 or 3 output channels as torchvision, channel errors."""

    def test_grayscale_channels_and_errors(self):
        x = _batch(0, torch.uint8)
        assert torch.equal(T.Grayscale()(x), TF.rgb_to_grayscale(x, 1))
        assert torch.equal(T.Grayscale(3)(x), TF.rgb_to_grayscale(x, 3))
        with pytest.raises(ValueError, match="Grayscale: expected 1 or 3 channels"):
            T.Grayscale()(torch.zeros(2, 4, 8, 8))
        with pytest.raises(ValueError, match="ColorJitter: expected 1 or 3 channels"):
            T.ColorJitter(contrast=0.5)(torch.zeros(2, 2, 8, 8))
        # brightness alone works on any channel count, as torchvision
        assert T.ColorJitter(brightness=0.5)(torch.zeros(2, 4, 8, 8)).shape == (2, 4, 8, 8)


class TestRandomColorOps:
    """The per-sample random colour ops (RandomGrayscale, RandomInvert, RandomPosterize,
    RandomSolarize, RandomAdjustSharpness, RandomAutocontrast, RandomEqualize): per sample
    against torchvision, p's frequency, exactly the drawn samples, equalize batched as per
    image."""

    @pytest.mark.parametrize("make,fn,tol", PER_SAMPLE, ids=lambda v: getattr(v, "__name__", ""))
    @given(dtype=st.sampled_from([torch.uint8, torch.float32, torch.float64]),
           seed=st.integers(0, 2**16), lo=st.integers(0, 100), hi=st.integers(150, 256))
    def test_random_per_sample_ops_match_torchvision(self, make, fn, tol, dtype, seed, lo, hi):
        m = make()
        if isinstance(m, T.RandomSolarize) and dtype == torch.uint8:
            m = T.RandomSolarize(0.4 * 255, p=0.3)
        x = _batch(seed, dtype, n=12, lo=lo, hi=hi)
        torch.manual_seed(seed)
        y = m(x)
        torch.manual_seed(seed)
        mask = m.make_params(x)
        ref = torch.stack([fn(x[i]) if bool(mask[i]) else x[i] for i in range(x.shape[0])])
        _close(y, ref, _tol(dtype) if tol is None else tol, f"{type(m).__name__} {dtype}")


    @pytest.mark.parametrize("make", [
        lambda: T.RandomGrayscale(0.3), lambda: T.RandomInvert(0.3), lambda: T.RandomEqualize(0.3),
        lambda: T.RandomPosterize(2, 0.3), lambda: T.RandomSolarize(100, 0.3),
        lambda: T.RandomAdjustSharpness(2.0, 0.3), lambda: T.RandomAutocontrast(0.3),
    ])
    def test_p_frequency_within_binomial_bounds(self, make):
        m = make()
        n, p = 4000, 0.3
        x = torch.zeros(n, 3, 1, 1, dtype=torch.uint8)
        torch.manual_seed(1)
        k = int(m.make_params(x).sum())
        sd = math.sqrt(n * p * (1 - p))
        assert abs(k - n * p) < 5 * sd, (k, n * p)


    def test_random_invert_changes_exactly_the_drawn_samples(self):
        m = T.RandomInvert(0.5)
        x = _batch(2, torch.uint8, n=200)
        torch.manual_seed(4)
        y = m(x)
        torch.manual_seed(4)
        mask = m.make_params(x)
        changed = (y != x).flatten(1).any(1)
        assert torch.equal(changed, mask)


    @pytest.mark.parametrize("h, w", [(20, 20), (64, 64), (224, 224), (61, 97)])
    def test_equalize_batched_equals_per_image(self, h, w):
        """Exact against torchvision per image. Sizes >= 64 px matter: the histogram step
        ``(h*w - last bin) // 255`` only reaches values where an off-by-one divisor (or a rounding
        of its half) changes the lookup table on images of thousands of pixels."""
        n = 8
        x = _batch(9, torch.uint8, n=n, h=h, w=w)
        x[4] = 7  # flat: step == 0, returned as is
        x[5] = torch.randint(0, 2, x[5].shape, dtype=torch.uint8) * 255  # two levels
        x[6] = x[6] // 5 + 60  # narrow range: a stretched histogram
        x[7, 0, : h // 2] = 255  # one heavy last bin: step from the remaining pixels
        y = BF.equalize(x)
        ref = torch.stack([TF.equalize(x[i]) for i in range(n)])
        assert torch.equal(y, ref)
        xf = x.to(torch.float32) / 255
        assert torch.equal(BF.equalize(xf), torch.stack([TF.equalize(xf[i]) for i in range(n)]))
