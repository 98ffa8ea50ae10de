"""Warp transforms (RandomRotation, RandomResizedCrop, Resize) against torchvision references.

References are torchvision.transforms.v2.functional applied per sample with the parameters our
``make_params`` drew (same seed, same draw order as ``forward``). Tolerances, stated once:

* rotation: uint8 bilinear within 1 step everywhere, uint8 nearest identical on >= 99.9% of
  pixels (a sampling point exactly on a pixel edge may round the other way if float ops are
  reassociated; on CPU we observe 0 differences), float32 within 2e-5, float16 within one
  half-precision ulp of the reference plus 2e-5 (we compute half in float32: the reference is
  torchvision on the float32 image, cast). 2e-5: sampling coordinates carry ~4 float32 eps of
  relative error, on images of at most 40 px 4 * 2**-23 * 40 = 1.9e-5 of a pixel, times the
  largest step between neighbouring values (1); measured max 1.9e-6.
* resized crop, antialias=True (bilinear, CPU): identical for every dtype (the per-box path
  makes torchvision's own interpolate call); on GPU float within 2e-5, uint8 within 1 step.
* resized crop, bicubic (either antialias): CPU identical for every dtype (same per-box call);
  batched (GPU, compile, export) float within 1e-5, uint8 within 2 steps of torchvision's CPU
  uint8 kernel (fixed-point vs float weights, each of the two passes rounded).
* resized crop otherwise: nearest identical; float as rotation; uint8 bilinear within 1 step
  (torchvision resizes uint8 with PyTorch's fixed-point uint8 kernel, we interpolate in float32
  and round, so ~15-20% of pixels differ by exactly 1).
* resize: identical (same interpolate call).

The generic checks (scripted == eager, eval, empty batch, no in-place change, channels_last,
seeds, per-sample independence) run on these transforms through tests/contract/.
"""

import os

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as TF

import batchaug.functional as BF
from batchaug import _random as batchaug_random
from batchaug.transforms import RandomResizedCrop, RandomRotation, Resize
from tests.conftest import DEVICES
from tests.contract.tolerances import ulp

MODES = {"nearest": TF.InterpolationMode.NEAREST, "bilinear": TF.InterpolationMode.BILINEAR}


def _batch(n, c, h, w, dtype, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (n, c, h, w), generator=g, dtype=torch.uint8)
    if dtype != torch.uint8:
        x = (x.to(torch.float32) / 255).to(dtype)
    return x.to(device)


COORD_TOL = 2e-5  # see the module docstring


def _compare(out, ref, dtype, interpolation, nearest_exact_frac=1.0):
    assert out.shape == ref.shape and out.dtype == ref.dtype
    diff = (out.double() - ref.double()).abs()
    if dtype == torch.uint8 and interpolation == "nearest":
        frac = (diff == 0).double().mean().item()
        assert frac >= nearest_exact_frac, f"only {frac:.5f} of pixels identical"
    elif dtype == torch.uint8:
        assert diff.max().item() <= 1, f"max diff {diff.max().item()} uint8 steps"
    else:
        bound = torch.full_like(diff, COORD_TOL)
        if dtype == torch.float16:  # both round float32 values COORD_TOL apart: one ulp at most
            bound += ulp(ref.double().abs() + COORD_TOL, torch.float16)
        assert bool((diff <= bound).all()), f"max diff {diff.max().item()}"


dtypes = st.sampled_from([torch.uint8, torch.float16, torch.float32])


# ----------------------------------------------------------------------------- rotation

@pytest.mark.parametrize("device", DEVICES)
@settings(deadline=None)
@given(
    h=st.integers(1, 24), w=st.integers(1, 24), c=st.sampled_from([1, 3]), dtype=dtypes,
    interpolation=st.sampled_from(["nearest", "bilinear"]),
    degrees=st.one_of(st.floats(0, 360), st.tuples(st.floats(-400, 0), st.floats(0, 400))),
    fill=st.one_of(st.sampled_from([0, 255]), st.floats(0, 255),
                   st.lists(st.floats(0, 255), min_size=3, max_size=3)),
    use_center=st.booleans(), cx=st.floats(-5, 30), cy=st.floats(-5, 30),
    seed=st.integers(0, 2**16),
)
def test_rotation_matches_torchvision_per_sample(
    device, h, w, c, dtype, interpolation, degrees, fill, use_center, cx, cy, seed
):
    fill_list = [float(f) for f in fill] if isinstance(fill, list) else [float(fill)]
    if c == 1:
        fill_list = fill_list[:1]
    if dtype != torch.uint8:  # the image lives in [0, 1]: keep the fill on the same scale
        fill_list = [f / 255 for f in fill_list]
    center = [cx, cy] if use_center else None
    m = RandomRotation(degrees, interpolation=interpolation, center=center, fill=fill_list)
    x = _batch(5, c, h, w, dtype, device, seed)
    torch.manual_seed(seed)
    angles = m.make_params(x)[0]  # (angle, translate, scale, shear): an affine of angle only
    torch.manual_seed(seed)
    out = m(x)
    assert out.dtype == dtype and out.shape == x.shape
    lo, hi = m.degrees
    assert ((angles >= lo) & (angles <= hi)).all()
    ref_in = x.float() if dtype == torch.float16 else x
    ref = torch.stack([
        TF.rotate(ref_in[i], float(angles[i]), interpolation=MODES[interpolation],
                  center=center, fill=fill_list)
        for i in range(x.shape[0])
    ]).to(dtype)
    _compare(out, ref, dtype, interpolation, nearest_exact_frac=0.999)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("interpolation", ["nearest", "bilinear"])
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_rotation_90_is_rot90(device, interpolation, dtype):
    x = _batch(4, 3, 17, 17, dtype, device)
    for k, angle in ((1, 90.0), (2, 180.0), (3, -90.0)):
        m = RandomRotation((angle, angle), interpolation=interpolation)
        y, ref = m(x), torch.rot90(x, k, dims=(-2, -1))
        if interpolation == "bilinear" and dtype != torch.uint8:
            # sampling points land on pixel centres only up to float error (~1e-6 of a pixel)
            torch.testing.assert_close(y, ref, atol=1e-5, rtol=0)
        else:
            assert torch.equal(y, ref), angle
    # even size, non-default degrees type (int pair)
    x = _batch(2, 1, 8, 8, dtype, device)
    assert torch.equal(BF.rotate(x, torch.full((2,), 90.0, device=device), interpolation, [0.0]),
                       torch.rot90(x, 1, dims=(-2, -1)))


@pytest.mark.parametrize("keyed", [False, True])
def test_rotation_is_an_affine_of_angle_only(keyed):
    """RandomRotation is a RandomAffine: its params are (angle, 0, 1, 0), the angle drawn as
    torchvision's RandomRotation draws it, and for angles in [0, 360) the image is bit for bit
    RandomAffine's with the angle turned the other way (rotate's matrix is affine's of -angle
    after a remainder by 360)."""
    from batchaug.transforms import RandomAffine
    rot = RandomRotation((0, 90), interpolation="bilinear", center=[3.0, 5.0], fill=[7.0])
    assert isinstance(rot, RandomAffine)
    x = _batch(16, 3, 20, 24, torch.uint8, "cpu", seed=3)
    keys = torch.arange(16, dtype=torch.int64) * 7919 + 5 if keyed else None
    torch.manual_seed(0)
    angle, translate, scale, shear = rot.make_params(x, keys)
    after = torch.get_rng_state()
    torch.manual_seed(0)
    expected = batchaug_random.uniform(x, 0.0, 90.0, keys=keys, draw=0)
    assert torch.equal(angle, expected) and torch.equal(torch.get_rng_state(), after)
    assert bool((translate == 0).all() and (scale == 1).all() and (shear == 0).all())
    affine = RandomAffine(0, interpolation="bilinear", center=[3.0, 5.0], fill=[7.0])
    params = (angle, translate, scale, shear)
    assert torch.equal(rot.apply_image(x, params),
                       affine.apply_image(x, (-angle, translate, scale, shear)))
    assert repr(rot) == ("RandomRotation(degrees=(0.0, 90.0), interpolation='bilinear', "
                         "center=[3.0, 5.0], fill=[7.0])")


def test_rotation_angles_cover_range_and_differ_per_sample():
    m = RandomRotation((-10, 30))
    x = torch.zeros(4000, 1, 2, 2)
    a = m.make_params(x)[0]
    assert a.shape == (4000,) and a.dtype == torch.float32
    assert a.min() >= -10 and a.max() <= 30
    assert a.min() < -9 and a.max() > 29  # the whole range is used
    assert abs(a.mean().item() - 10) < 1.0  # uniform: mean 10, sd of mean ~0.18
    assert torch.unique(a).numel() > 3900


# ----------------------------------------------------------------------------- resized crop

@pytest.mark.parametrize("device", DEVICES)
@settings(deadline=None)
@given(
    h=st.integers(1, 40), w=st.integers(1, 40), oh=st.integers(1, 40), ow=st.integers(1, 40),
    dtype=dtypes, interpolation=st.sampled_from(["nearest", "bilinear"]), antialias=st.booleans(),
    channels_last=st.booleans(),
    scale_lo=st.floats(0.01, 1.0), scale_span=st.floats(0, 1.0),
    ratio_lo=st.floats(0.2, 2.0), ratio_span=st.floats(0, 3.0), seed=st.integers(0, 2**16),
)
@example(h=2, w=2, oh=1, ow=1, dtype=torch.uint8, interpolation="bilinear", antialias=False,
         channels_last=False, scale_lo=1.0, scale_span=0.0, ratio_lo=1.0, ratio_span=0.0, seed=0)
def test_resized_crop_matches_torchvision_per_sample(
    device, h, w, oh, ow, dtype, interpolation, antialias, channels_last, scale_lo, scale_span,
    ratio_lo, ratio_span, seed
):
    m = RandomResizedCrop((oh, ow), scale=(scale_lo, scale_lo + scale_span),
                          ratio=(ratio_lo, ratio_lo + ratio_span), interpolation=interpolation,
                          antialias=antialias)
    x = _batch(6, 3, h, w, dtype, device, seed)
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
                        interpolation=MODES[interpolation], antialias=antialias)
        for i in range(x.shape[0])
    ])
    ref = ref.round() if ref.dtype != dtype and dtype == torch.uint8 else ref
    ref = ref.to(dtype)
    if exact:
        assert torch.equal(out, ref), (out.double() - ref.double()).abs().max()
    elif not (channels_last and ow == 1 and antialias and interpolation == "bilinear"):
        _compare(out, ref, dtype, interpolation)


@pytest.mark.parametrize("device", DEVICES)
@settings(deadline=None, max_examples=30)
@given(
    h=st.integers(1, 40), w=st.integers(1, 40), oh=st.integers(1, 40), ow=st.integers(2, 40),
    dtype=st.sampled_from([torch.uint8, torch.float32, torch.float64]),
    layout=st.sampled_from(["contiguous", "channels_last", "sliced"]), seed=st.integers(0, 2**16),
)
def test_resized_crop_antialias_batched_equals_per_box(device, h, w, oh, ow, dtype, layout, seed):
    # The two antialiased paths: per box (CPU eager/TorchScript) and batched (GPU, compile,
    # export). Same filter: uint8 within 1 step (fixed-point vs float weights), float to 1e-5.
    # (ow >= 2: see the 1-pixel-wide PyTorch quirk in the test above.)
    from batchaug.functional._resize import _resized_crop_aa_batched, _resized_crop_per_sample

    x = _batch(5, 3, h, w + 3, dtype, "cpu", seed)
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


def _tv_bicubic_boxes(x, box, oh, ow, antialias):
    t, l, bh, bw = box
    return torch.stack([
        TF.resized_crop(x[i], int(t[i]), int(l[i]), int(bh[i]), int(bw[i]), [oh, ow],
                        interpolation=TF.InterpolationMode.BICUBIC, antialias=antialias)
        for i in range(x.shape[0])
    ])


@pytest.mark.parametrize("device", DEVICES)
@settings(deadline=None)
@given(
    h=st.integers(1, 40), w=st.integers(1, 40), oh=st.integers(1, 40), ow=st.integers(1, 40),
    dtype=st.sampled_from([torch.uint8, torch.float16, torch.float32, torch.float64]),
    antialias=st.booleans(), channels_last=st.booleans(), seed=st.integers(0, 2**16),
)
def test_resized_crop_bicubic_matches_torchvision_per_sample(
    device, h, w, oh, ow, dtype, antialias, channels_last, seed
):
    """RandomResizedCrop(interpolation="bicubic") per sample vs v2.functional.resized_crop(...,
    BICUBIC) with the drawn boxes. CPU (eager): identical for every dtype, except a 1x1 uint8
    output (torch's uint8 kernel asserts there, torchvision fails; we resize in float32, clamp
    and round, torchvision's float path) and PyTorch's one-pixel-wide channels_last float quirk
    (see the bilinear test above). Elsewhere (batched): float to 1e-5, uint8 within 2 steps of
    torchvision's CPU uint8 result (see the next test)."""
    m = RandomResizedCrop((oh, ow), interpolation="bicubic", antialias=antialias)
    x = _batch(5, 3, h, w, dtype, device, seed)
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
    device, h, w, oh, ow, dtype, antialias, layout, sharp, seed
):
    """The two bicubic paths: per box (CPU eager/TorchScript: torch's kernels, torchvision's
    CPU result) and batched separable matrices (GPU, compile, export). Float within 1e-5.
    uint8 within 2 steps: torch's uint8 kernel uses fixed-point weights in each of its two
    passes and the batched path float weights, each pass rounded. ``sharp`` images (0/255
    stripes) make bicubic overshoot, where the clamp between the passes matters (one float
    pass would be up to ~30 steps off)."""
    from batchaug.functional._resize import _resized_crop_aa_batched, _resized_crop_per_sample

    x = _batch(5, 3, h, w + 3, dtype, "cpu", seed)
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
def test_resized_crop_bicubic_eval_is_center_crop_resize(dtype, antialias):
    m = RandomResizedCrop(24, interpolation="bicubic", antialias=antialias).eval()
    x = _batch(3, 3, 40, 48, dtype, "cpu")
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
    h, w, scale_lo, scale_span, ratio_lo, ratio_span, seed
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


def test_resized_crop_distribution_matches_torchvision():
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


@pytest.mark.parametrize("keyed", [False, True])
def test_resized_crop_offsets_cover_every_position(keyed):
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
    top, left, bh, bw = RandomResizedCrop(8, scale=(0.25, 0.25), ratio=(0.75, 0.75)).make_params(
        x, keys)
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
def test_resized_crop_eval_is_center_crop_resize(device, dtype, shape, size, box):
    m = RandomResizedCrop(size).eval()
    x = _batch(3, 3, *shape, dtype, device)
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
def test_resized_crop_eval_is_identity_when_input_has_the_output_size(size):
    """issue 7 item 13: a cache built with ``--resize 256 --center-crop 224`` fed to
    RandomResizedCrop(224) in eval() must not be centre-cropped (zoomed) a second time."""
    oh, ow = (size, size) if isinstance(size, int) else size
    x = _batch(2, 3, oh, ow, torch.uint8, "cpu")
    for pct in (0.875, 0.5, None):
        m = RandomResizedCrop(size, eval_crop_pct=pct).eval()
        assert m(x) is x
        assert torch.equal(torch.jit.script(m)(x), x)
    # other input sizes still get the centre crop + resize to ``size``
    bigger = _batch(2, 3, oh + 32, ow + 32, torch.uint8, "cpu")
    m = RandomResizedCrop(size).eval()
    # By hand: 256x256 -> 224x224 box; 52x56 (taller than 20:24) -> full width 46.67 x 56,
    # times 0.875 -> 40.83 x 49 -> 41 x 49.
    box = [224, 224] if size == 224 else [41, 49]
    ref = TF.resize(TF.center_crop(bigger, box), [oh, ow], antialias=True)
    assert torch.equal(m(bigger), ref)


def test_resized_crop_eval_full_box_is_identity():
    x = _batch(2, 3, 16, 16, torch.uint8, "cpu")
    assert torch.equal(RandomResizedCrop(16, eval_crop_pct=1.0).eval()(x), x)


# ----------------------------------------------------------------------------- resize

@pytest.mark.parametrize("device", DEVICES)
@settings(deadline=None)
@given(
    h=st.integers(1, 40), w=st.integers(1, 40), dtype=dtypes,
    size=st.one_of(st.integers(1, 50), st.tuples(st.integers(1, 50), st.integers(1, 50))),
    interpolation=st.sampled_from(["nearest", "bilinear"]), antialias=st.booleans(),
)
def test_resize_matches_torchvision(device, h, w, dtype, size, interpolation, antialias):
    x = _batch(3, 3, h, w, dtype, device)
    y = Resize(size, interpolation=interpolation, antialias=antialias)(x)
    tv_size = [size] if isinstance(size, int) else list(size)
    try:
        ref = TF.resize(x, tv_size, interpolation=MODES[interpolation], antialias=antialias)
    except RuntimeError:
        # PyTorch's native uint8 bilinear kernel asserts on 1x1 outputs of 3-channel input;
        # batchaug takes the float path there, so compare with torchvision's float path
        assert dtype == torch.uint8 and y.shape[-2:] == (1, 1)
        ref = TF.resize(x.float(), tv_size, interpolation=MODES[interpolation],
                        antialias=antialias).round().to(torch.uint8)
    assert y.dtype == dtype
    assert torch.equal(y, ref)


def test_resize_shorter_side():
    x = torch.zeros(2, 3, 30, 45, dtype=torch.uint8)
    assert Resize(20)(x).shape == (2, 3, 20, 30)
    assert Resize([20])(x).shape == (2, 3, 20, 30)
    assert Resize((7, 9))(x).shape == (2, 3, 7, 9)
    assert Resize(30)(x) is x  # same size: nothing to do, as torchvision


# ----------------------------------------------------------------------------- common behaviour

FACTORIES = {
    "RandomRotation": lambda: RandomRotation(40, interpolation="bilinear"),
    "RandomResizedCrop": lambda: RandomResizedCrop(12),
    "Resize": lambda: Resize((12, 10)),
}


@pytest.mark.parametrize("name", sorted(FACTORIES))
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float16, torch.float32])
def test_dtype_kept_empty_batch_and_seeds(name, dtype):
    m = FACTORIES[name]()
    x = _batch(16, 3, 20, 24, dtype, "cpu")
    torch.manual_seed(5)
    a = m(x)
    torch.manual_seed(5)
    b = m(x)
    assert a.dtype == dtype and torch.equal(a, b)
    empty = m(x[:0])
    assert empty.shape[0] == 0 and empty.shape[1:] == a.shape[1:] and empty.dtype == dtype
    if name != "Resize":  # random: identical images come out different
        same = x[:1].expand(16, -1, -1, -1).contiguous()
        y = m(same)
        assert torch.unique(y.reshape(16, -1), dim=0).shape[0] > 1


def test_compile_fullgraph_train_matches_eager():
    torch._dynamo.reset()
    m = torch.nn.Sequential(RandomRotation(20, "bilinear"), RandomResizedCrop(16), Resize(12))
    x = _batch(4, 3, 24, 20, torch.uint8, "cpu")
    # fallback_random: the compiled graph draws with eager's RNG, so outputs are comparable
    with torch._inductor.config.patch(fallback_random=True):
        c = torch.compile(m, fullgraph=True)
        torch.manual_seed(0)
        a = c(x)
    torch.manual_seed(0)
    b = m(x)
    assert a.shape == b.shape and a.dtype == b.dtype
    if tuple(int(v) for v in torch.__version__.split("+")[0].split(".")[:2]) < (2, 14):
        # as tests/contract/test_compose_export.py: torch 2.11's compiled
        # RandomResizedCrop.make_params draws other boxes than eager under fallback_random
        pytest.skip("compiled draws differ from eager's under fallback_random before torch 2.14")
    # fused float arithmetic may round a pixel the other way
    assert (a.int() - b.int()).abs().max() <= 1


def test_export_eval():
    m = torch.nn.Sequential(RandomRotation(20), RandomResizedCrop(16), Resize(12)).eval()
    x = _batch(2, 3, 24, 20, torch.uint8, "cpu")
    ep = torch.export.export(m, (x,))
    assert torch.equal(ep.module()(x), m(x))


# ----------------------------------------------------------------------------- bad arguments

@pytest.mark.parametrize("factory,exc,match", [
    (lambda: RandomRotation(-1), ValueError, r"degrees must be in \[0, 100000\]"),
    (lambda: RandomRotation((10, 5)), ValueError,
         r"degrees must be \(min, max\) with min <= max"),
    (lambda: RandomRotation(float("nan")), ValueError, r"degrees must be a finite number"),
    (lambda: RandomRotation((1, 2, 3)), TypeError,
         r"degrees must be a sequence \(min, max\) of two numbers"),
    (lambda: RandomRotation(True), TypeError,
         r"degrees must be a non-negative number or a \(min, max\)"),
    (lambda: RandomRotation(10, interpolation="bicubic"), ValueError,
         r"interpolation must be one of \['nearest', 'bilinear'\]"),
    (lambda: RandomRotation(10, expand=True), ValueError,
         r"expand=True is not supported: the expanded size depends"),
    (lambda: RandomRotation(10, center=(1,)), TypeError,
         r"center must be None or a sequence \(x, y\) of two numbers"),
    (lambda: RandomRotation(10, fill="white"), TypeError,
         r"fill must be a number or a non-empty sequence of numbers"),
    (lambda: RandomResizedCrop(0), ValueError, r"size must be positive"),
    (lambda: RandomResizedCrop(-3), ValueError, r"size must be positive"),
    (lambda: RandomResizedCrop((10, 0)), ValueError, r"size must be positive"),
    (lambda: RandomResizedCrop(10, scale=(0.5, 0.1)), ValueError,
         r"scale must be \(min, max\) with min <= max"),
    (lambda: RandomResizedCrop(10, scale=(0.0, 1.0)), ValueError,
         r"scale values must be in \[1e-06, 1e\+06\]"),
    (lambda: RandomResizedCrop(10, ratio=(2.0, 1.0)), ValueError,
         r"ratio must be \(min, max\) with min <= max"),
    (lambda: RandomResizedCrop(10, ratio=(-1.0, 1.0)), ValueError,
         r"ratio values must be in \[1e-06, 1e\+06\]"),
    (lambda: RandomResizedCrop(10, ratio=0.5), TypeError,
         r"ratio must be a sequence \(min, max\) of two numbers"),
    (lambda: RandomResizedCrop(10, interpolation="area"), ValueError,
         r"interpolation must be one of \['nearest', 'bilinear', 'bicubic'\]"),
    (lambda: RandomResizedCrop(10, eval_crop_pct=0.0), ValueError,
         r"eval_crop_pct must be in \(0, 1\]"),
    (lambda: RandomResizedCrop(10, eval_crop_pct=1.5), ValueError,
         r"eval_crop_pct must be in \(0, 1\]"),
    (lambda: RandomResizedCrop(10, antialias="yes"), TypeError, r"antialias must be a bool"),
    (lambda: Resize(0), ValueError, r"size must be positive"),
    (lambda: Resize((5, -1)), ValueError, r"size must be positive"),
    (lambda: Resize((1, 2, 3)), TypeError,
         r"size must be an int or a sequence of 1 or 2 ints"),
    (lambda: Resize(2.5), TypeError,
         r"size must be an int or a sequence of 1 or 2 ints"),
    (lambda: Resize(10, interpolation="area"), ValueError,
         r"interpolation must be one of \['nearest', 'bilinear', 'bicubic'\]"),
    # non-finite and absurd values (issue 7 item 8)
    (lambda: RandomRotation(float("inf")), ValueError, r"degrees must be a finite number"),
    (lambda: RandomRotation(1e308), ValueError, r"degrees must be in \[0, 100000\]"),
    (lambda: RandomRotation(10**400), ValueError, r"degrees must be finite"),
    (lambda: RandomRotation((-float("inf"), 0)), ValueError,
         r"degrees values must be finite numbers"),
    (lambda: RandomRotation((float("nan"), 1)), ValueError,
         r"degrees values must be finite numbers"),
    (lambda: RandomRotation(("a", 1)), TypeError,
         r"degrees must be a sequence \(min, max\) of two numbers"),
    (lambda: RandomRotation("30"), TypeError,
         r"degrees must be a non-negative number or a \(min, max\)"),
    (lambda: RandomRotation(10, center=(float("nan"), 1)), ValueError,
         r"center must be a finite number"),
    (lambda: RandomRotation(10, center=(1e300, 1)), ValueError,
         r"center must be in \[-1e\+06, 1e\+06\]"),
    (lambda: RandomRotation(10, center=(True, 1)), TypeError, r"center must be a number"),
    (lambda: RandomRotation(10, fill=float("nan")), ValueError, r"fill must be finite"),
    (lambda: RandomRotation(10, fill=[0, float("inf"), 0]), ValueError, r"fill must be finite"),
    (lambda: RandomRotation(10, fill=[]), TypeError,
         r"fill must be a number or a non-empty sequence of numbers"),
    (lambda: RandomResizedCrop(10, scale=(float("nan"), 1)), ValueError,
         r"scale values must be finite numbers"),
    (lambda: RandomResizedCrop(10, scale=(0.1, float("inf"))), ValueError,
         r"scale values must be finite numbers"),
    (lambda: RandomResizedCrop(10, scale=(0.1, 1e300)), ValueError,
         r"scale values must be in \[1e-06, 1e\+06\]"),
    (lambda: RandomResizedCrop(10, ratio=(1e-300, 1.0)), ValueError,
         r"ratio values must be in \[1e-06, 1e\+06\]"),
    (lambda: RandomResizedCrop(10, ratio=(0.5, float("nan"))), ValueError,
         r"ratio values must be finite numbers"),
    (lambda: RandomResizedCrop(10, eval_crop_pct=float("nan")), ValueError,
         r"eval_crop_pct must be a finite number"),
    (lambda: RandomResizedCrop(10, eval_crop_pct=True), TypeError,
         r"eval_crop_pct must be a number"),
    (lambda: RandomResizedCrop(10**6), ValueError,
         r"size must be at most 65536 pixels per side"),
    (lambda: Resize(10**6), ValueError, r"size must be at most 65536 pixels per side"),
])
def test_bad_arguments(factory, exc, match):
    with pytest.raises(exc, match=match):
        factory()


@pytest.mark.parametrize("name", sorted(FACTORIES))
@pytest.mark.parametrize("bad,exc", [
    (torch.zeros(3, 8, 8, dtype=torch.uint8), ValueError),
    (torch.zeros(1, 2, 3, 8, 8), ValueError),
    (torch.zeros(2, 3, 8, 8, dtype=torch.int64), TypeError),
    (torch.zeros(2, 3, 8, 8, dtype=torch.bool), TypeError),
    (torch.zeros(2, 3, 0, 8, dtype=torch.uint8), ValueError),  # zero-size images
    (torch.zeros(2, 3, 8, 0), ValueError),
    (torch.zeros(2, 3, 0, 0), ValueError),
])
def test_bad_input_at_call_time(name, bad, exc):
    m = FACTORIES[name]()
    with pytest.raises(exc, match=name):
        m(bad)
    if name != "Resize":
        with pytest.raises(exc, match=name):
            m.eval()(bad)  # checked in eval too, not only when augmenting


def test_fill_channel_mismatch_is_clear():
    m = RandomRotation(10, fill=[1.0, 2.0])
    with pytest.raises(ValueError, match="RandomRotation: fill has 2 values"):
        m(torch.zeros(2, 3, 8, 8, dtype=torch.uint8))


@pytest.mark.parametrize("fill,dtype", [
    (300, torch.uint8), (-1, torch.uint8), ([0, 256, 0], torch.uint8), (1e5, torch.float16),
    (1e39, torch.float32),
])
@pytest.mark.parametrize("make", [
    lambda fill: RandomRotation(10, fill=fill),
    lambda fill: __import__("batchaug").RandomCrop(8, padding=2, fill=fill),
], ids=["RandomRotation", "RandomCrop"])
def test_fill_outside_the_dtype_range_is_one_error_everywhere(make, fill, dtype):
    """One rule for every transform with a fill: a fill the input dtype cannot hold is a
    ValueError at call time naming the transform and the fill (not a clamp, not a raw
    RuntimeError)."""
    m = make(fill)
    name = type(m).__name__
    x = torch.zeros(2, 3, 8, 8, dtype=dtype)
    with pytest.raises(ValueError, match=rf"{name}: fill \[.*\] is outside the range of {dtype}"):
        m(x)
    with pytest.raises(torch.jit.Error, match="outside the range"):
        torch.jit.script(m)(x)
    assert torch.equal(m.eval()(x), x)  # eval: no fill is used, nothing to check


def test_fill_inside_the_range_including_fractions_for_uint8():
    x = torch.zeros(2, 3, 8, 8, dtype=torch.uint8)
    for fill in (0, 255, 127.6, [0, 128.5, 255]):
        assert RandomRotation(45, fill=fill)(x).dtype == torch.uint8
        assert __import__("batchaug").RandomCrop(8, padding=2, fill=fill)(x).dtype == torch.uint8


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_large_cpu_batches_in_chunks_equal_per_sample(dtype):
    # 200x200 images are big enough that the CPU kernels split the batch into chunks
    # (see functional._utils._chunk_size); the result must not depend on the split.
    x = _batch(20, 3, 200, 200, dtype, "cpu")
    n = x.shape[0]
    assert BF._utils._chunk_size(x, 200, 200) < n
    angle = torch.linspace(-170, 170, n)
    top, left = torch.arange(n) * 3, torch.arange(n) * 2
    h, w = 200 - top, 150 - left
    y = BF.rotate(x, angle, "bilinear", [7.0])
    z = BF.resized_crop(x, top, left, h, w, [180, 190])
    for i in range(n):
        assert torch.equal(y[i:i + 1], BF.rotate(x[i:i + 1], angle[i:i + 1], "bilinear", [7.0]))
        assert torch.equal(z[i:i + 1], BF.resized_crop(
            x[i:i + 1], top[i:i + 1], left[i:i + 1], h[i:i + 1], w[i:i + 1], [180, 190]))


@settings(deadline=None)
@given(h=st.integers(1, 60), w=st.integers(1, 60), size=st.one_of(st.none(), st.integers(1, 30)),
       extra=st.integers(1, 40))
def test_resize_max_size_follows_torchvision(h, w, size, extra):
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


def test_resize_max_size_argument_errors():
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
def test_resize_bicubic_equals_torchvision(dtype, hw, out, antialias, channels_last):
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


def test_resize_bicubic_uint8_float_path_clamps_and_rounds():
    """Off the CPU native path (GPU, or a 1x1 output) uint8 bicubic is float32, clamped to
    [0, 255] and rounded: torchvision's rule for its float path."""
    x = torch.zeros(2, 3, 8, 8, dtype=torch.uint8)
    x[..., ::2, ::2] = 255  # a checkerboard overshoots under bicubic
    ref = torch.nn.functional.interpolate(x.float(), size=[1, 1], mode="bicubic",
                                          align_corners=False, antialias=False)
    y = BF.resize(x, [1, 1], "bicubic", antialias=False)
    assert torch.equal(y, ref.clamp(0, 255).round().to(torch.uint8))
    big = torch.nn.functional.interpolate(x.float(), size=[13, 13], mode="bicubic",
                                          align_corners=False)
    assert big.max() > 255 and big.min() < 0  # the overshoot that the clamp removes


# ----------------------------------------------------------------------------- device paths

def _broadcast_reference(x, top, left, height, width, oh, ow, interpolation, antialias):
    """The batched resized crop written as the plain broadcast matmuls (weights (B, 1, oh, H)
    against the image (B, C, H, W)), the obviously-equal formula the bmm path replaces."""
    from batchaug.functional._resize import _aa_weights, _cubic_weights

    ct = torch.float64 if x.dtype == torch.float64 else torch.float32
    make = (_cubic_weights if interpolation == "bicubic" and not antialias else
            lambda *a: _aa_weights(*a, interpolation))
    wy = make(top, height, oh, x.shape[-2], ct).unsqueeze(1)
    wx = make(left, width, ow, x.shape[-1], ct).unsqueeze(1).transpose(-1, -2)
    if x.dtype == torch.uint8 and interpolation == "bicubic":
        y = torch.matmul(wy, torch.matmul(x.to(ct), wx).round().clamp(0, 255))
    else:
        y = torch.matmul(torch.matmul(wy, x.to(ct)), wx)
    if x.dtype == torch.uint8:
        return y.round().clamp(0, 255).to(torch.uint8)
    return y.to(x.dtype)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("mode", [("bilinear", True), ("bicubic", True), ("bicubic", False)],
                         ids=lambda m: f"{m[0]}-aa{m[1]}")
def test_resized_crop_batched_bmm_equals_broadcast_matmul(dtype, mode):
    """The batched path (accelerators, compile, export) multiplies per-sample weights with all
    channels in one bmm: bit for bit the broadcast matmul on CPU, any layout and size (a
    256 -> 224 crop and a 300-row image, where BLAS blocks the sums)."""
    from batchaug.functional._resize import _resized_crop_aa_batched

    interpolation, antialias = mode
    g = torch.Generator().manual_seed(3)
    for (h, w, oh, ow, c, n) in [(20, 24, 16, 16, 3, 5), (256, 256, 224, 224, 3, 2),
                                 (300, 200, 64, 64, 3, 2), (96, 80, 17, 90, 1, 3)]:
        x = torch.randint(0, 256, (n, c, h, w), generator=g, dtype=torch.uint8)
        if dtype != torch.uint8:
            x = (x.float() / 255).to(dtype)
        bh = torch.randint(1, h + 1, (n,), generator=g)
        bw = torch.randint(1, w + 1, (n,), generator=g)
        top = (torch.rand(n, generator=g, dtype=torch.float64) * (h - bh + 1)).long()
        left = (torch.rand(n, generator=g, dtype=torch.float64) * (w - bw + 1)).long()
        ref = _broadcast_reference(x, top, left, bh, bw, oh, ow, interpolation, antialias)
        for cl in (False, True):
            xi = x.contiguous(memory_format=torch.channels_last) if cl else x
            y = _resized_crop_aa_batched(xi, top, left, bh, bw, oh, ow, interpolation, antialias)
            if dtype == torch.float64:
                # float64 products go to the BLAS library, whose kernels on some CPUs (AMD EPYC
                # with this torch build) sum a 1-channel bmm in another order than the
                # broadcast matmul: 1 ulp apart. uint8 and float32 stay bit for bit.
                torch.testing.assert_close(y, ref, rtol=0, atol=4 * torch.finfo(dtype).eps,
                                           msg=str((h, w, oh, ow, cl)))
            else:
                assert torch.equal(y, ref), (h, w, oh, ow, cl)
            assert y.is_contiguous(memory_format=torch.channels_last) == cl or c == 1


def test_resized_crop_batched_never_broadcasts_the_weights_over_channels():
    """On a meta batch of 256 x 3 x 256 x 240 -> 224 x 200 no intermediate has the shape of
    the weights expanded over the channels ((B, C, oh, H): 176 MB in float32 at this size)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from batchaug.functional._resize import _resized_crop_aa_batched

    shapes = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if isinstance(out, torch.Tensor):
                shapes.append((str(func), tuple(out.shape)))
            return out

    n, c, h, w, oh, ow = 256, 3, 256, 240, 224, 200
    x = torch.empty(n, c, h, w, dtype=torch.uint8, device="meta")
    box = torch.zeros(n, dtype=torch.int64, device="meta")
    size = torch.full((n,), 200, dtype=torch.int64, device="meta")
    for interpolation, antialias in (("bilinear", True), ("bicubic", True), ("bicubic", False)):
        shapes.clear()
        with Record():
            y = _resized_crop_aa_batched(x, box, box, size, size, oh, ow, interpolation,
                                         antialias)
        assert y.shape == (n, c, oh, ow)
        assert any("bmm" in f for f, _ in shapes)
        big = [(f, s) for f, s in shapes
               if len(s) == 4 and s[1] == c and (s[2:] == (oh, h) or s[2:] == (w, ow))]
        assert not big, big
        assert not any("expand" in f and len(s) == 4 for f, s in shapes), shapes


def test_resized_crop_batched_ignores_reduced_float32_matmul_precision():
    """A user's TF32/bfloat16 float32 matmul setting does not reach the batched resized crop's
    products: each bmm runs with the backend's precision "ieee" (oneDNN's on CPU, cuBLAS's on
    CUDA), the output equals the one without the setting, and the setting is restored."""
    from unittest import mock

    from batchaug.functional._resize import _resized_crop_aa_batched

    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (4, 3, 64, 64), generator=g, dtype=torch.uint8)
    box = torch.tensor([0, 3, 5, 9])
    args = (box, box, 64 - box, 60 - box, 48, 40, "bilinear", True)
    ref = _resized_crop_aa_batched(x, *args)
    backend = torch.backends.mkldnn.matmul
    seen = []
    bmm = torch.bmm

    def recording_bmm(a, b):
        seen.append(backend.fp32_precision)
        return bmm(a, b)

    saved = backend.fp32_precision
    backend.fp32_precision = "bf16"
    try:
        with mock.patch.object(torch, "bmm", recording_bmm):
            y = _resized_crop_aa_batched(x, *args)
        assert backend.fp32_precision == "bf16"
    finally:
        backend.fp32_precision = saved
    assert seen == ["ieee", "ieee"]
    assert torch.equal(y, ref)


def _restore_matmul_precisions(saved):
    from batchaug.functional._resize import _matmul_precisions

    legacy, cuda, mkldnn = saved
    if legacy is not None:
        torch.set_float32_matmul_precision(legacy)
    torch.backends.cuda.matmul.fp32_precision = cuda
    torch.backends.mkldnn.matmul.fp32_precision = mkldnn
    assert _matmul_precisions() == saved


def _legacy_cublas_tf32():
    try:
        return torch.backends.cuda.matmul.allow_tf32
    except RuntimeError as e:  # "you have used mix of the legacy and new APIs"
        return f"raises: {e}"


@pytest.mark.parametrize("where", ["cuda", "cpu"])
def test_batched_resized_crop_under_high_matmul_precision_keeps_both_apis_in_step(where):
    """After torch.set_float32_matmul_precision("high") the batched resized crop's products run
    in full float32 (cuBLAS's "ieee" on (fake) CUDA, oneDNN's on CPU), the legacy API stays
    readable meanwhile (overriding only the new API's backend made every legacy read raise:
    dynamo reads it) and says the same, and the user's setting comes back exactly."""
    from unittest import mock

    from batchaug.functional._resize import _matmul_precisions, _resized_crop_aa_batched
    from tests.contract.fake_cuda import fake_cuda

    backend = torch.backends.cuda.matmul if where == "cuda" else torch.backends.mkldnn.matmul
    seen = []
    bmm = torch.bmm

    def recording_bmm(a, b):
        seen.append((backend.fp32_precision, _legacy_cublas_tf32(),
                     torch.get_float32_matmul_precision()))
        return bmm(a, b)

    saved = _matmul_precisions()
    x = torch.randint(0, 256, (4, 3, 64, 64), dtype=torch.uint8)
    box = torch.tensor([0, 3, 5, 9])
    torch.set_float32_matmul_precision("high")
    try:
        user = _matmul_precisions()
        assert user[0] == "high" and backend.fp32_precision == "tf32"
        with mock.patch.object(torch, "bmm", recording_bmm):
            if where == "cuda":
                with fake_cuda():
                    xc, bc = x.to("cuda"), box.to("cuda")
                    y = _resized_crop_aa_batched(xc, bc, bc, 64 - bc, 60 - bc, 48, 40)
                assert y.device.type == "cuda"
            else:
                _resized_crop_aa_batched(x, box, box, 64 - box, 60 - box, 48, 40)
        assert _matmul_precisions() == user and _legacy_cublas_tf32() is True
    finally:
        _restore_matmul_precisions(saved)
    assert seen == [("ieee", False, "highest")] * 2


def test_bmm_ieee_is_thread_safe():
    """Threads (a loader's reader thread beside the training thread) running full-precision
    products at once under a user's TF32 setting: every product launches with "ieee" and the
    setting is restored. Unlocked, one thread launched its product after another had
    restored TF32."""
    import threading
    import time
    from unittest import mock

    from batchaug.functional._resize import _bmm_ieee_eager, _matmul_precisions

    backend = torch.backends.mkldnn.matmul
    seen = []
    bmm = torch.bmm

    def slow_bmm(a, b):
        time.sleep(0.002)  # widen the window in which another thread may restore the setting
        seen.append(backend.fp32_precision)
        return bmm(a, b)

    a, b = torch.rand(2, 3, 4), torch.rand(2, 4, 5)
    errors = []

    def work(i):
        try:
            for k in range(10):
                _bmm_ieee_eager(a, b)
                time.sleep(0.001 * ((i + k) % 4))  # gaps: moments when no thread overrides
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    saved = _matmul_precisions()
    torch.set_float32_matmul_precision("high")
    try:
        user = _matmul_precisions()
        with mock.patch.object(torch, "bmm", slow_bmm):
            threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        assert _matmul_precisions() == user
    finally:
        _restore_matmul_precisions(saved)
    assert not errors, errors
    assert len(seen) == 40 and set(seen) == {"ieee"}, sorted(set(seen))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_bmm_ieee_fork_waits_for_the_override():
    """A fork (a DataLoader worker) while another thread overrides the precision waits for it
    to end: the child has the user's setting and a free lock (not a copy of a held lock)."""
    import threading
    import time
    from unittest import mock

    from batchaug.functional import _resize as R

    bmm = torch.bmm
    entered = threading.Event()

    def slow_bmm(a, b):
        entered.set()
        time.sleep(0.2)
        return bmm(a, b)

    saved = R._matmul_precisions()
    torch.set_float32_matmul_precision("high")
    try:
        with mock.patch.object(torch, "bmm", slow_bmm):
            t = threading.Thread(target=R._bmm_ieee_eager,
                                 args=(torch.rand(1, 2, 2), torch.rand(1, 2, 2)))
            t.start()
            assert entered.wait(5)
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: report, then leave without running pytest's teardown
                ok = R._PRECISION_LOCK.acquire(timeout=1)
                os.write(w, f"{ok} {torch.get_float32_matmul_precision()}".encode())
                os._exit(0)
            os.close(w)
            child = os.read(r, 100).decode()
            os.close(r)
            os.waitpid(pid, 0)
            t.join()
    finally:
        _restore_matmul_precisions(saved)
    assert child == "True high", child


def test_box_scale_is_the_float32_quotient_on_every_backend():
    """interpolate's scale length / out, as the resized crop computes it: the correctly rounded
    float32 quotient, and still that quotient when the division becomes a multiplication by
    the reciprocal (CUDA with a Python divisor, Inductor with a constant one), which in float32
    itself moves some quotients by an ulp: enough to move a nearest sample floor(j * scale)."""
    from batchaug.functional._resize import _box_scale

    length = torch.arange(1, 2049)
    moved = 0
    for out in list(range(1, 300)) + [320, 384, 448, 512, 999]:
        exact = length.float() / torch.full([1], float(out))
        assert torch.equal(_box_scale(length, out, torch.float32), exact), out
        # the float64 route survives a reciprocal multiplication ...
        assert torch.equal((length.double() * (1.0 / out)).float(), exact), out
        # ... which in float32 does not
        moved += int(((length.float() * torch.tensor(1.0 / out, dtype=torch.float32))
                      != exact).sum())
    assert moved > 0
    f64 = _box_scale(length, 7, torch.float64)
    assert f64.dtype == torch.float64 and torch.equal(f64, length.double() / 7.0)


def _cuda_scalar_division():
    """A dispatch mode that divides as CUDA does when the divisor is a CPU scalar (a Python
    number): a * (1 / b), the reciprocal rounded to the dividend's dtype first."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func is torch.ops.aten.div.Tensor and not kwargs:
                a, b = args
                if isinstance(b, (int, float)):  # a Python number arrives as it is
                    b = torch.tensor(float(b), dtype=torch.float64)
                if (isinstance(b, torch.Tensor) and b.dim() == 0 and b.device.type == "cpu"
                        and a.dim() > 0 and a.is_floating_point()):
                    inv = torch.ones((), dtype=a.dtype) / b.to(a.dtype)
                    return torch.ops.aten.mul.Tensor(a, inv)
            return func(*args, **kwargs)

    return Mode()


@pytest.mark.parametrize("out", [224, 160, 97])
def test_nearest_resized_crop_is_the_same_under_cuda_division(out):
    """Every box length from 1 to 256 resized to ``out`` with nearest: the same pixels when
    divisions by Python numbers become multiplications by reciprocals (CUDA's rule for a CPU
    scalar divisor), so a GPU samples the pixels the CPU (and torchvision) does."""
    n = 256
    x = torch.arange(256, dtype=torch.float32).view(1, 1, 1, 256).expand(n, 1, 2, 256)
    length = torch.arange(1, n + 1)
    zero = torch.zeros(n, dtype=torch.int64)
    two = torch.full((n,), 2)
    plain = BF.resized_crop(x, zero, zero, two, length, [1, out], "nearest")
    with _cuda_scalar_division():
        cuda_like = BF.resized_crop(x, zero, zero, two, length, [1, out], "nearest")
    assert torch.equal(cuda_like, plain)
    ref = torch.stack([TF.resized_crop(x[i], 0, 0, 2, int(length[i]), [1, out],
                                       TF.InterpolationMode.NEAREST) for i in range(n)])
    assert torch.equal(plain, ref)


def _tv_rrc_boxes(h, w, scale, ratio, n=600):
    """Every box torchvision's RandomResizedCrop.get_params draws on an h x w image (a pinned
    scale and ratio leave one size, so n draws reach every offset)."""
    torch.manual_seed(0)
    img = torch.zeros(1, h, w)
    return {tuple(v2.RandomResizedCrop.get_params(img, list(scale), list(ratio)))
            for _ in range(n)}


@pytest.mark.parametrize("h, w", [(64, 48), (48, 64)])
def test_resized_crop_box_as_wide_or_tall_as_the_image_fits_as_in_torchvision(h, w):
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
def test_resized_crop_fallback_box_on_odd_margins_is_torchvisions(h, w):
    """No attempt fits (scale 2): torchvision's fallback box, centred with ``(H - h) // 2``
    on margins of odd size (13 here) too."""
    ratio = (3 / 4, 4 / 3)
    (want,) = _tv_rrc_boxes(h, w, (2.0, 2.0), ratio, n=3)
    assert (h - want[2]) % 2 == 1 or (w - want[3]) % 2 == 1
    top, left, bh, bw = RandomResizedCrop(8, scale=(2.0, 2.0), ratio=ratio).make_params(
        torch.zeros(4, 1, h, w))
    assert set(zip(top.tolist(), left.tolist(), bh.tolist(), bw.tolist())) == {want}
