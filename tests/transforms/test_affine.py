"""RandomAffine: per sample equal to torchvision's affine with the drawn parameters; the
sampling rules of v2.RandomAffine.make_params; argument errors."""

import pytest
import torch
import torchvision.transforms.v2.functional as TF
from hypothesis import given, settings
from hypothesis import strategies as st

import batchaug.functional as BF
import batchaug.transforms as T
from tests.contract.references import _ref_affine as _tv_affine


SHEAR = st.one_of(st.none(), st.floats(0, 45),
                  st.tuples(st.floats(-45, 0), st.floats(0, 45)),
                  st.tuples(st.floats(-45, 0), st.floats(0, 45), st.floats(-45, 0),
                            st.floats(0, 45)))


@settings(deadline=None, max_examples=60)
@given(dtype=st.sampled_from([torch.uint8, torch.float32, torch.float64]),
       interp=st.sampled_from(["nearest", "bilinear"]),
       degrees=st.floats(0, 180), translate=st.one_of(st.none(), st.tuples(
           st.floats(0, 0.5), st.floats(0, 0.5))),
       scale=st.one_of(st.none(), st.tuples(st.floats(0.5, 1.0), st.floats(1.0, 1.5))),
       shear=SHEAR, per_channel=st.booleans(),
       center=st.one_of(st.none(), st.tuples(st.floats(-5, 25), st.floats(-5, 25))),
       hw=st.tuples(st.integers(2, 17), st.integers(2, 17)), seed=st.integers(0, 2**16),
       channels_last=st.booleans())
def test_each_sample_is_torchvision_affine(dtype, interp, degrees, translate, scale, shear,
                                           per_channel, center, hw, seed, channels_last):
    """Tolerance: nearest exact in every dtype (the README's claim; 0 differing pixels in 300
    random configurations of this test's ranges, odd and even sizes, angles 0/90/180
    included); bilinear: float32 1e-5, float64 1e-10, uint8 within 1 step (measured: 1, on
    0.03 % of the pixels of 2 of 300 configurations)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (5, 3) + hw, generator=g, dtype=torch.uint8)
    fill = [10.0, 200.0, 30.0] if per_channel else [7.0]
    if dtype != torch.uint8:
        x = x.to(dtype) / 255
        fill = [f / 255 for f in fill]
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    m = T.RandomAffine(degrees, translate=translate, scale=scale, shear=shear,
                       interpolation=interp, fill=fill, center=center)
    torch.manual_seed(seed)
    params = m.make_params(x)
    torch.manual_seed(seed)
    out = m(x)
    ref = _tv_affine(m, x, params)
    assert out.shape == x.shape and out.dtype == dtype
    d = (out.double() - ref.double()).abs()
    if interp == "nearest":
        assert torch.equal(out, ref), f"{(d > 0).double().mean().item():.4f} of pixels differ"
    elif dtype == torch.float32:
        assert d.max() <= 1e-5
    elif dtype == torch.float64:
        assert d.max() <= 1e-10
    else:
        assert d.max() <= 1


def test_fixed_parameters_equal_torchvision():
    """Degenerate ranges are fixed values: RandomAffine((30, 30), scale=(0.8, 0.8),
    shear=(10, 10, 5, 5)) is v2.functional.affine(x, 30, [0, 0], 0.8, [10, 5])."""
    x = torch.rand(3, 3, 16, 20, dtype=torch.float64)
    m = T.RandomAffine((30, 30), scale=(0.8, 0.8), shear=(10, 10, 5, 5),
                       interpolation="bilinear")
    out = m(x)
    # parameters are drawn in float32: the fixed 0.8 is float32(0.8), 1.2e-8 away
    f32 = lambda v: float(torch.tensor(v, dtype=torch.float32))  # noqa: E731
    ref = TF.affine(x, 30.0, [0, 0], f32(0.8), [10.0, 5.0], TF.InterpolationMode.BILINEAR, 0)
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-10)
    exact = TF.affine(x, 30.0, [0, 0], 0.8, [10.0, 5.0], TF.InterpolationMode.BILINEAR, 0)
    torch.testing.assert_close(out, exact, rtol=0, atol=1e-6)


def test_matrix_equals_torchvision_inverse_matrix():
    from torchvision.transforms.v2.functional._geometry import _get_inverse_affine_matrix

    angle = torch.tensor([0.0, 33.3, -170.0])
    translate = torch.tensor([[0.0, 0.0], [3.0, -2.0], [-7.0, 5.0]])
    scale = torch.tensor([1.0, 0.75, 1.6])
    shear = torch.tensor([[0.0, 0.0], [12.0, -4.0], [-30.0, 20.0]])
    for center in (None, [2.0, 9.5]):
        m = BF.affine_matrix(angle, translate, scale, shear, 12, 18, center)
        for i in range(3):
            c = [0.0, 0.0] if center is None else [center[0] - 9.0, center[1] - 6.0]
            ref = _get_inverse_affine_matrix(c, float(angle[i]), translate[i].tolist(),
                                             float(scale[i]), shear[i].tolist())
            torch.testing.assert_close(m[i].flatten(), torch.tensor(ref, dtype=torch.float64),
                                       rtol=1e-12, atol=1e-12)


def test_pure_rotation_matches_rotate():
    """affine with angle a, no shift/scale/shear == rotate (torchvision's sign convention)."""
    x = torch.randint(0, 256, (4, 3, 15, 21), dtype=torch.uint8)
    angle = torch.tensor([10.0, -75.0, 90.0, 200.0])
    z = torch.zeros(4, 2)
    mat = BF.affine_matrix(angle, z, torch.ones(4), z, 15, 21)
    torch.testing.assert_close(BF.affine(x, mat, "bilinear", [0.0]),
                               BF.rotate(x, -angle, "bilinear", [0.0]), rtol=0, atol=1)


def test_sampling_rules_follow_torchvision():
    """v2.RandomAffine.make_params per sample: angle uniform in degrees, shift uniform in
    +-fraction * side rounded to whole pixels, scale uniform, shear x (and y with 4 values)."""
    x = torch.zeros(20000, 1, 10, 50)
    m = T.RandomAffine((-10, 30), translate=(0.1, 0.3), scale=(0.5, 2.0), shear=(5, 15))
    torch.manual_seed(0)
    angle, translate, scale, shear = m.make_params(x)
    assert angle.min() >= -10 and angle.max() < 30 and abs(angle.mean() - 10) < 0.5
    tx, ty = translate[:, 0], translate[:, 1]
    assert torch.equal(tx, tx.round()) and torch.equal(ty, ty.round())
    assert tx.abs().max() <= 5 and ty.abs().max() <= 3
    assert set(tx.tolist()) == {-5.0, -4.0, -3.0, -2.0, -1.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0}
    assert set(ty.tolist()) == {-3.0, -2.0, -1.0, 0.0, 1.0, 2.0, 3.0}
    assert scale.min() >= 0.5 and scale.max() < 2.0
    assert shear[:, 0].min() >= 5 and shear[:, 0].max() < 15
    assert torch.equal(shear[:, 1], torch.zeros(20000))
    s4 = T.RandomAffine(0, shear=[-5, 5, 20, 25]).make_params(x)[3]
    assert s4[:, 1].min() >= 20 and s4[:, 1].max() < 25
    s1 = T.RandomAffine(0, shear=7).make_params(x)[3]
    assert s1[:, 0].min() >= -7 and s1[:, 0].max() < 7 and s1[:, 0].min() < -6


@pytest.mark.parametrize("make,exc,match", [
    (lambda: T.RandomAffine(-1), ValueError, r"degrees"),
    (lambda: T.RandomAffine(10, translate=(0.1,)), TypeError, r"translate must be None or a "
                                                               r"sequence \(a, b\)"),
    (lambda: T.RandomAffine(10, translate=(0.1, 1.5)), ValueError, r"translate"),
    (lambda: T.RandomAffine(10, scale=(0.0, 1.0)), ValueError, r"scale"),
    (lambda: T.RandomAffine(10, shear=[1, 2, 3]), TypeError,
     r"shear must be a non-negative number or a sequence of 2 or 4 numbers"),
    (lambda: T.RandomAffine(10, shear=90), ValueError, r"shear"),
    (lambda: T.RandomAffine(10, shear=(-5, 5, 95, 100)), ValueError, r"shear"),
    (lambda: T.RandomAffine(10, interpolation="cubic"), ValueError, r"interpolation"),
    (lambda: T.RandomAffine(10, center=(1,)), TypeError, r"center"),
])
def test_bad_arguments(make, exc, match):
    with pytest.raises(exc, match=match):
        make()


def test_fill_out_of_dtype_range_is_a_call_time_error():
    with pytest.raises(ValueError, match="RandomAffine: fill"):
        T.RandomAffine(10, fill=300)(torch.zeros(2, 3, 8, 8, dtype=torch.uint8))
