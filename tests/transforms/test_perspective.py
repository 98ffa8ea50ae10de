"""RandomPerspective: per sample equal to torchvision's perspective with the drawn corners;
unchosen samples unchanged; v2's corner sampling rule; p frequency; argument errors."""
import math

import pytest
import torch
import torchvision.transforms.v2.functional as TF
from hypothesis import given, settings
from hypothesis import strategies as st

import batchaug.functional as BF
import batchaug.transforms as T


def _kind(corners):
    """'degenerate' (three corners collinear: torchvision's lstsq raises or returns garbage),
    'crossed' (not a convex quadrilateral: the horizon crosses the image, where torchvision
    samples nan), else 'convex'."""
    p = [tuple(c) for c in corners.tolist()]
    cross = [(p[(k + 1) % 4][0] - p[k][0]) * (p[(k + 2) % 4][1] - p[k][1])
             - (p[(k + 1) % 4][1] - p[k][1]) * (p[(k + 2) % 4][0] - p[k][0]) for k in range(4)]
    tri = [(a, b, c) for a in range(4) for b in range(a + 1, 4) for c in range(b + 1, 4)]
    for a, b, c in tri:
        if ((p[b][0] - p[a][0]) * (p[c][1] - p[a][1])
                - (p[b][1] - p[a][1]) * (p[c][0] - p[a][0])) == 0:
            return "degenerate"
    return "convex" if all(v > 0 for v in cross) or all(v < 0 for v in cross) else "crossed"


def _nearest_ties(start, end, h: int, w: int, eps: float = 1e-3) -> torch.Tensor:
    """(h, w) bool: output pixels whose torchvision source point lies within ``eps`` of a
    nearest-rounding boundary (an integer x' or y', see torchvision's _perspective_grid)."""
    from torchvision.transforms.functional import _get_perspective_coeffs

    a, b, c, d, e, f, g, k = _get_perspective_coeffs(start, end)
    y, x = torch.meshgrid(torch.arange(h, dtype=torch.float64) + 0.5,
                          torch.arange(w, dtype=torch.float64) + 0.5, indexing="ij")
    den = g * x + k * y + 1
    sx, sy = (a * x + b * y + c) / den, (d * x + e * y + f) / den
    return ((sx - sx.round()).abs() < eps) | ((sy - sy.round()).abs() < eps)


@settings(deadline=None, max_examples=30)
@given(dtype=st.sampled_from([torch.uint8, torch.float32, torch.float64]),
       interp=st.sampled_from(["nearest", "bilinear"]), distortion=st.floats(0, 1),
       p=st.floats(0, 1), per_channel=st.booleans(),
       hw=st.tuples(st.integers(3, 19), st.integers(3, 19)), seed=st.integers(0, 2**16),
       channels_last=st.booleans())
def test_each_sample_is_torchvision_perspective(dtype, interp, distortion, p, per_channel, hw,
                                                seed, channels_last):
    """Chosen samples: float32/float64 within 1e-6 / 1e-12, uint8 bilinear within 1 step,
    nearest exact except where the source point is on a rounding tie;
    unchosen samples and degenerate corners: exactly unchanged."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (6, 3) + hw, generator=g, dtype=torch.uint8)
    fill = [10.0, 200.0, 30.0] if per_channel else [7.0]
    if dtype != torch.uint8:
        x = x.to(dtype) / 255
        fill = [f / 255 for f in fill]
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    m = T.RandomPerspective(distortion, p=p, interpolation=interp, fill=fill)
    torch.manual_seed(seed)
    mask, ends = m.make_params(x)
    torch.manual_seed(seed)
    out = m(x)
    assert out.shape == x.shape and out.dtype == dtype
    h, w = hw
    start = [[0, 0], [w - 1, 0], [w - 1, h - 1], [0, h - 1]]
    for i in range(x.shape[0]):
        kind = _kind(ends[i])
        if not bool(mask[i]) or kind == "degenerate":
            assert torch.equal(out[i], x[i])
            continue
        if kind == "crossed":  # torchvision: nan; ours: the fill there
            assert not out[i].is_floating_point() or torch.isfinite(out[i]).all()
            continue
        mode = TF.InterpolationMode(interp)  # torchvision 0.26 takes no string
        ref = TF.perspective(x[i], start, ends[i].tolist(), mode, fill)
        # where the horizon crosses the image torchvision samples nan (uint8: garbage), ours
        # the fill: compared where torchvision's float64 result is finite
        finite = torch.isfinite(TF.perspective(x[i].double(), start, ends[i].tolist(), mode,
                                               fill))
        finite &= torch.isfinite(TF.perspective(x[i].float(), start, ends[i].tolist(), mode,
                                                fill))
        if out.is_floating_point():
            assert torch.isfinite(out[i]).all()
        d = (out[i].double() - ref.double()).abs()
        if interp == "nearest":
            # nearest picks round(x' - 0.5) of the source point x' = (a X + b Y + c) / (g X + h Y + 1)
            # at the pixel centre X = x + 0.5: where x' (or y') is within float error of an
            # integer, float32/float64 grids may round either way. Everywhere else: exact.
            off = (d > 0).any(0) & finite.all(0)
            assert bool((~off | _nearest_ties(start, ends[i].tolist(), h, w)).all()), (
                f"{int(off.sum())} pixels differ away from a rounding tie")
            continue
        d = d[finite]
        if dtype == torch.float32:
            assert d.max() <= 1e-6
        elif dtype == torch.float64:
            assert d.max() <= 1e-12
        else:
            assert d.max() <= 1


def test_coefficients_equal_torchvision():
    from torchvision.transforms.functional import _get_perspective_coeffs

    torch.manual_seed(0)
    m = T.RandomPerspective(0.9, p=1.0)
    x = torch.zeros(64, 1, 13, 21)
    _, ends = m.make_params(x)
    c = BF.perspective_coefficients(ends, 13, 21)
    start = [[0, 0], [20, 0], [20, 12], [0, 12]]
    ref = torch.tensor([_get_perspective_coeffs(start, e.tolist()) for e in ends])
    assert torch.equal(c, ref)


def test_corner_sampling_follows_torchvision():
    """v2.RandomPerspective.make_params: each corner moves inwards by randint(0, bound) with
    bound = int(distortion_scale * (side // 2)) + 1, per axis; every value occurs."""
    h, w = 11, 20
    m = T.RandomPerspective(0.5, p=1.0)
    torch.manual_seed(0)
    _, ends = m.make_params(torch.zeros(4000, 1, h, w))
    bh, bw = int(0.5 * (h // 2)) + 1, int(0.5 * (w // 2)) + 1
    ex, ey = ends[..., 0], ends[..., 1]
    for k, left in enumerate([True, False, False, True]):
        vals = set(ex[:, k].tolist())
        assert vals == (set(range(bw)) if left else set(range(w - bw, w)))
    for k, top in enumerate([True, True, False, False]):
        vals = set(ey[:, k].tolist())
        assert vals == (set(range(bh)) if top else set(range(h - bh, h)))


def test_p_frequency_within_binomial_bounds():
    n, p = 20000, 0.3
    torch.manual_seed(1)
    mask, _ = T.RandomPerspective(0.5, p=p).make_params(torch.zeros(n, 1, 8, 8))
    sd = math.sqrt(n * p * (1 - p))
    assert abs(int(mask.sum()) - n * p) < 5 * sd


def test_zero_distortion_is_identity_up_to_interpolation():
    """distortion_scale=0 keeps every corner: identity coefficients, the image unchanged."""
    x = torch.randint(0, 256, (4, 3, 9, 14), dtype=torch.uint8)
    assert torch.equal(T.RandomPerspective(0.0, p=1.0)(x), x)


def test_tiny_images_and_collinear_corners_leave_the_sample_unchanged():
    """Where torchvision raises (a singular system), the identity; never an error or nan."""
    for hw in ((1, 1), (1, 5), (2, 2), (5, 1), (3, 3), (4, 3)):
        x = torch.rand(40, 3, *hw)
        y = T.RandomPerspective(1.0, p=1.0)(x)
        assert y.shape == x.shape and torch.isfinite(y).all()
    ends = torch.tensor([[[1, 0], [1, 1], [1, 2], [0, 2]],  # three on x = 1
                         [[0, 0], [2, 0], [2, 2], [0, 2]]])  # the image corners
    c = BF.perspective_coefficients(ends, 3, 3)
    identity = torch.tensor([1.0, 0, 0, 0, 1.0, 0, 0, 0])
    assert torch.equal(c[0], identity)
    torch.testing.assert_close(c[1], identity, rtol=0, atol=1e-6)
    x = torch.randint(0, 256, (2, 3, 3, 3), dtype=torch.uint8)
    assert torch.equal(BF.perspective(x[:1], c[:1], "bilinear", [0.0]), x[:1])


@pytest.mark.parametrize("make,exc,match", [
    (lambda: T.RandomPerspective(1.5), ValueError, r"distortion_scale"),
    (lambda: T.RandomPerspective(-0.1), ValueError, r"distortion_scale"),
    (lambda: T.RandomPerspective(0.5, p=2), ValueError, r"p must be in \[0, 1\]"),
    (lambda: T.RandomPerspective(interpolation="bicubic"), ValueError, r"interpolation"),
    (lambda: T.RandomPerspective(fill="x"), TypeError, r"fill"),
])
def test_bad_arguments(make, exc, match):
    with pytest.raises(exc, match=match):
        make()
