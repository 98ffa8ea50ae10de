"""``with_targets`` across the warps (RandomRotation, RandomAffine, RandomPerspective) against
torchvision v2 on tv_tensors (Mask, BoundingBoxes XYXY, KeyPoints): the helpers their
per-transform target tests use (test_warps.py), and what the three share: pinned ranges against
torchvision's transforms, co-registration of masks with the image kernels, sanitizer validity,
fill / mask_fill, integer ids carried exactly, scripted == eager, empty batch and empty targets,
no device sync."""
import inspect

import pytest
import torch
import torchvision.transforms.v2 as v2
import torchvision.transforms.v2.functional as TF
from hypothesis import given, settings
from hypothesis import strategies as st
from torchvision import tv_tensors
from torchvision.transforms.v2.functional._geometry import _get_inverse_affine_matrix

from batchaug import RandomAffine, RandomPerspective, RandomResizedCrop, RandomRotation, _random
from batchaug.functional import move_targets

H, W = 24, 30  # not square: catches swapped axes
N, M, K = 5, 8, 6


def _batch(n, m=M, k=K, seed=0, mask_dtype=torch.uint8, mask_k=None):
    """uint8 images, masks (labels 0..9), boxes (some sticking out, some with integral
    corners), keypoints (some on pixel corners), random valid flags."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (n, 3, H, W), generator=g, dtype=torch.uint8)
    shape = (n, H, W) if mask_k is None else (n, mask_k, H, W)
    masks = torch.randint(0, 10, shape, generator=g).to(mask_dtype)
    p = torch.rand(n, m, 2, 2, generator=g) * 1.2 - 0.1
    xy = p * torch.tensor([W, H], dtype=torch.float32)
    xy[:, : m // 2] = xy[:, : m // 2].round()
    boxes = torch.cat((xy.amin(dim=2), xy.amax(dim=2)), dim=2)
    kp = torch.rand(n, k, 2, generator=g) * torch.tensor([W - 1e-3, H - 1e-3])
    kp[:, : k // 2] = kp[:, : k // 2].floor()
    targets = {"masks": masks, "boxes": boxes, "box_valid": torch.rand(n, m, generator=g) < 0.9,
               "keypoints": kp, "keypoint_valid": torch.rand(n, k, generator=g) < 0.9,
               "labels": torch.arange(n)}
    return x, targets


def _ties(src_x, src_y):
    """Output pixels whose source point (pixel-index coordinates, float64) lies within 1e-3 of a
    border between two input pixels: nearest may pick either neighbour there (our grid is
    summed in another order than torchvision's matmul). Documented rounding ties."""
    def near(u):
        d = u - torch.floor(u)
        return (d - 0.5).abs() < 1e-3
    return near(src_x) | near(src_y)


def _affine_sources(inv, h, w):
    """Source points of every output pixel for torchvision's inverse affine ``inv`` (6 floats,
    centred coordinates)."""
    ys, xs = torch.meshgrid(torch.arange(h, dtype=torch.float64) + 0.5 - h / 2,
                            torch.arange(w, dtype=torch.float64) + 0.5 - w / 2, indexing="ij")
    sx = inv[0] * xs + inv[1] * ys + inv[2] + w / 2 - 0.5
    sy = inv[3] * xs + inv[4] * ys + inv[5] + h / 2 - 0.5
    return sx, sy


def _near(d):
    return (d.abs() > 0) & (d.abs() < 1e-3)


def _check(x, targets, y, out, ref, ties, fill, mask_fill, box_tol=1e-5):
    """Sample by sample: image (uint8, nearest) and masks equal to torchvision's except at
    rounding ties (``ties(i)``: (H, W) bool), boxes/keypoints to float32 rounding (1e-5: 2-3 ulp at 30 px), valid flags as torchvision's
    sanitizers say (away from their thresholds), invalid ones zero."""
    assert set(out) == set(targets)
    assert torch.equal(out["labels"], targets["labels"])
    tied = 0
    for i in range(x.shape[0]):
        t = ties(i)
        assert (t.float().mean() < 0.2), i  # the exclusion stays small
        img = ref(i, x[i], fill)
        assert not ((y[i] != img) & ~t).any(), i
        rm = ref(i, tv_tensors.Mask(targets["masks"][i]), [float(mask_fill)])
        tied += int(t.sum())
        diff = out["masks"][i] != rm.as_subclass(torch.Tensor)
        assert not (diff & ~t).any(), (i, int((diff & ~t).sum()))  # (K, H, W) broadcasts

        bb = tv_tensors.BoundingBoxes(targets["boxes"][i], format="XYXY", canvas_size=(H, W))
        rb = ref(i, TF.clamp_bounding_boxes(bb), None)
        _, rv = TF.sanitize_bounding_boxes(rb, min_size=1, min_area=1)
        rv = rv & targets["box_valid"][i]
        rbt = rb.as_subclass(torch.Tensor)
        bw, bh = rbt[:, 2] - rbt[:, 0], rbt[:, 3] - rbt[:, 1]
        sure = ~(_near(bw - 1) | _near(bh - 1) | _near(bw * bh - 1))
        ov = out["box_valid"][i]
        assert torch.equal(ov[sure], rv[sure]), i
        both = rv & ov
        torch.testing.assert_close(out["boxes"][i][both], rbt[both], atol=box_tol, rtol=0)
        assert (out["boxes"][i][~ov] == 0).all()

        rk = ref(i, tv_tensors.KeyPoints(targets["keypoints"][i], canvas_size=(H, W)), None)
        _, rkv = TF.sanitize_keypoints(rk)
        rkv = rkv & targets["keypoint_valid"][i]
        rkt = rk.as_subclass(torch.Tensor)
        sure = ~(_near(rkt[:, 0]) | _near(rkt[:, 0] - W) | _near(rkt[:, 1]) | _near(rkt[:, 1] - H))
        okv = out["keypoint_valid"][i]
        assert torch.equal(okv[sure], rkv[sure]), i
        both = rkv & okv
        torch.testing.assert_close(out["keypoints"][i][both], rkt[both], atol=box_tol, rtol=0)
        assert (out["keypoints"][i][~okv] == 0).all()
    return tied


# ---------------------------------------------------------------------------------------------
# against torchvision's transforms, pinned ranges
# ---------------------------------------------------------------------------------------------

def test_degenerate_ranges_match_torchvision_transforms():
    """The modules' own draws with pinned ranges against torchvision v2's transforms on
    tv_tensors, fill per type (``{Mask: mask_fill, "others": fill}``)."""
    x, t = _batch(3, seed=4)
    fills = {tv_tensors.Mask: 4, "others": 9}
    pairs = [
        (RandomRotation((-30.5, -30.5), fill=9, mask_fill=4),
         v2.RandomRotation((-30.5, -30.5), fill=fills), (-30.5, 1.0, [0.0, 0.0], [0.0, 0.0])),
        (RandomAffine((20.0, 20.0), scale=(0.75, 0.75), shear=(10.0, 10.0, -5.0, -5.0), fill=9,
                      mask_fill=4),
         v2.RandomAffine((20.0, 20.0), scale=(0.75, 0.75), shear=(10.0, 10.0, -5.0, -5.0),
                         fill=fills), (20.0, 0.75, [0.0, 0.0], [10.0, -5.0])),
    ]
    for ours, theirs, (angle, scale, translate, shear) in pairs:
        y, out = ours.with_targets(x, t)
        rot = isinstance(ours, RandomRotation)
        inv = _get_inverse_affine_matrix([0.0, 0.0], -angle if rot else angle, translate, scale,
                                         shear)

        def ref(i, v, fill, theirs=theirs):
            return theirs(v)

        _check(x, t, y, out, ref, lambda i, inv=inv: _ties(*_affine_sources(inv, H, W)),
               [9.0], 4)


# ---------------------------------------------------------------------------------------------
# co-registration, fills, validation
# ---------------------------------------------------------------------------------------------

_MODULES = [
    lambda **kw: RandomRotation(45, **kw),
    lambda **kw: RandomRotation(45, center=[2.0, 30.0], **kw),
    lambda **kw: RandomAffine(30, (0.2, 0.1), (0.6, 1.4), (-20, 20, -10, 10), **kw),
    lambda **kw: RandomPerspective(0.8, p=0.7, **kw),
]


@pytest.mark.parametrize("make", _MODULES)
@pytest.mark.parametrize("image_dtype,mask_dtype", [
    (torch.uint8, torch.uint8), (torch.float32, torch.int64), (torch.float64, torch.int32),
    (torch.float16, torch.bool)])
def test_masks_are_coregistered_with_their_image(make, image_dtype, mask_dtype):
    """An image made from the masks, transformed with nearest and fill = mask_fill, equals the
    masks moved by with_targets, exactly (same draws: one with_targets call)."""
    g = torch.Generator().manual_seed(5)
    hi = 2 if mask_dtype == torch.bool else (256 if mask_dtype == torch.uint8 else 2000)
    masks = torch.randint(0, hi, (9, 2, H, W), generator=g).to(mask_dtype)
    fill = 1 if mask_dtype == torch.bool else 77
    if image_dtype == torch.float16:
        hi = min(hi, 2048)
    m = make(interpolation="nearest", fill=float(fill), mask_fill=fill)
    img = masks.to(image_dtype)
    keys = _random.sample_keys(3, 0, torch.arange(9))
    y, out = m.with_targets(img, {"masks": masks}, keys)
    assert out["masks"].dtype == mask_dtype
    assert torch.equal(y.to(torch.float64), out["masks"].to(torch.float64))
    assert torch.equal(y, m(img, keys))  # the image is the forward's


@pytest.mark.parametrize("make", _MODULES)
def test_with_targets_image_is_the_forward_and_keys_give_sample_independence(make):
    x, t = _batch(7, seed=6)
    m = make(fill=3)
    keys = _random.sample_keys(1, 2, torch.arange(7))
    y, out = m.with_targets(x, t, keys)
    assert torch.equal(y, m(x, keys))
    idx = torch.tensor([5, 0, 3])
    sub = {k: v[idx] for k, v in t.items()}
    y2, out2 = m.with_targets(x[idx], sub, keys[idx])
    assert torch.equal(y2, y[idx])
    for k in out:
        assert torch.equal(out2[k], out[k][idx]), k
    assert m.with_targets(x, t, keys)[1]["masks"].data_ptr() != t["masks"].data_ptr()


@pytest.mark.parametrize("make", _MODULES)
def test_eval_returns_images_and_targets_unchanged(make):
    x, t = _batch(3, seed=7)
    m = make().eval()
    y, out = m.with_targets(x, {"boxes": t["boxes"], "masks": t["masks"]})
    assert y is x and out["masks"] is t["masks"] and out["boxes"] is t["boxes"]
    assert out["box_valid"].all() and out["box_valid"].shape == (3, M)


@pytest.mark.parametrize("cls", [RandomRotation, RandomAffine, RandomPerspective])
def test_mask_fill_is_checked(cls):
    args = (0.5,) if cls is RandomPerspective else (10,)
    for bad in (1.5, True, "0", None):
        with pytest.raises(TypeError, match="mask_fill"):
            cls(*args, mask_fill=bad)
    with pytest.raises(ValueError, match="mask_fill"):
        cls(*args, mask_fill=2 ** 63)  # beyond int64: no mask holds it
    assert cls(*args, mask_fill=2 ** 40).mask_fill == 2 ** 40  # any int64 id (panoptic)
    assert inspect.signature(cls).parameters["mask_fill"].kind is \
        inspect.Parameter.KEYWORD_ONLY
    x, t = _batch(2)
    for dtype, fill in ((torch.uint8, 256), (torch.uint8, -1), (torch.bool, 2),
                        (torch.int8, 128), (torch.uint16, -1)):
        m = cls(*args, mask_fill=fill)
        if cls is RandomPerspective:
            m.p = 1.0
        with pytest.raises(ValueError, match="mask_fill"):
            m.with_targets(x, {"masks": t["masks"].to(dtype)})
    assert "mask_fill=5" in repr(cls(*args, mask_fill=5))
    assert "mask_fill" not in repr(cls(*args))


def _big_ids(codes, dtype, fill_code, fill):
    """``codes`` (small labels) renamed to ids beyond float32's exact 2**24 (``fill_code`` to
    ``fill``): a warp that carries ids exactly moves them as it moves the codes."""
    big = {torch.int32: 2147483647, torch.int64: 2 ** 62 + 12345}[dtype]
    table = big - 3 * torch.arange(int(codes.max()) + 1, dtype=torch.int64)
    return torch.where(codes == fill_code, torch.full_like(codes, fill, dtype=torch.int64),
                       table[codes.long().clamp(min=0)]).to(dtype)


_ID_CASES = [(torch.int64, -(2 ** 40) - 1), (torch.int32, -7), (torch.int64, 16777217)]


def _large_ids_case(make, dtype, fill):
    g = torch.Generator().manual_seed(11)
    n = 6
    codes = torch.stack([torch.randperm(H * W, generator=g) for _ in range(n)])
    codes = codes.view(n, H, W).to(torch.int16)  # one label per pixel: any wrong pick shows
    keys = _random.sample_keys(4, 1, torch.arange(n))
    x = torch.randint(0, 256, (n, 3, H, W), generator=g, dtype=torch.uint8)
    ref = make(interpolation="bilinear", mask_fill=-1).with_targets(
        x, {"masks": codes}, keys)[1]["masks"]
    assert (ref == -1).any() and (ref != -1).any()  # some pixels from outside, some inside
    return x, keys, codes, ref


@pytest.mark.parametrize("make", _MODULES)
@pytest.mark.parametrize("dtype,fill", _ID_CASES, ids=str)
def test_large_integer_ids_are_exact(make, dtype, fill):
    """Ids float32 cannot hold (16777217, int32 2**31 - 1, int64 2**62) move exactly as the
    small labels of the same pixels (int16, carried through float32 as before: the same
    nearest pixel, torchvision's fill rule), fused with the image."""
    x, keys, codes, ref = _large_ids_case(make, dtype, fill)
    wide = make(interpolation="bilinear", mask_fill=fill)
    out = wide.with_targets(x, {"masks": _big_ids(codes, dtype, -1, fill)}, keys)[1]
    assert out["masks"].dtype == dtype
    assert torch.equal(out["masks"], _big_ids(ref, dtype, -1, fill))
    # the small labels in int64 take the new path: the same pixels as through float32
    assert torch.equal(make(interpolation="bilinear", mask_fill=-1).with_targets(
        x, {"masks": codes.long()}, keys)[1]["masks"], ref.long())


@pytest.mark.parametrize("make", _MODULES[:3])  # the affine warps (a perspective's matrix
@pytest.mark.parametrize("dtype,fill", _ID_CASES, ids=str)  # is not the image's grid)
def test_large_integer_ids_are_exact_on_the_targets_own_grid(make, dtype, fill):
    """The same through the generic path (move_targets -> warp_masks by the image's
    matrix, its own float grid): the same pixels as the image's grid."""
    x, keys, codes, ref = _large_ids_case(make, dtype, fill)
    wide = make(interpolation="bilinear", mask_fill=fill)
    matrix = wide.target_matrix(wide.make_params(x, keys), [H, W], [H, W])
    out = move_targets({"masks": _big_ids(codes, dtype, -1, fill)}, matrix, [H, W], [H, W],
                       fill)
    assert out["masks"].dtype == dtype
    assert torch.equal(out["masks"], _big_ids(ref, dtype, -1, fill))


def test_warp_masks_carries_every_integer_id():
    """The issue's values: 16777217 stays (float32 gave 16777216), 123456789 stays (not
    123456792), int32 2**31 - 1 stays (not -2**31), and int64 / uint32 extremes."""
    from batchaug.functional import warp_masks
    import math
    c, s = math.cos(math.radians(10)), math.sin(math.radians(10))
    rot = torch.tensor([[c, s, 0.0], [-s, c, 0.0], [0.0, 0.0, 1.0]]).expand(2, 3, 3)
    for value, dtype in ((16777217, torch.int64), (123456789, torch.int64),
                         (2147483647, torch.int32), (-2147483648, torch.int32),
                         (2 ** 63 - 1, torch.int64), (4294967295, torch.uint32)):
        m = torch.full((2, 8, 8), value, dtype=dtype)
        out = warp_masks(m, rot, [8, 8], fill=0)
        assert out.dtype == dtype
        assert set(out.long().unique().tolist()) <= {0, value}, (value, dtype)
        assert (out.long() == value).sum() > 40
        assert torch.equal(RandomRotation((10, 10)).with_targets(
            torch.zeros(2, 3, 8, 8), {"masks": m})[1]["masks"], out)


def test_huge_masks_take_row_column_indices_with_the_same_result():
    """Masks of 2**24 pixels or more cannot number their pixels exactly in float32: they
    sample (row, column) pairs, which must pick the same pixels (forced here on small masks)."""
    from batchaug.functional._targets import _sample_masks, _target_grid
    from batchaug.functional import affine_matrix
    g = torch.Generator().manual_seed(2)
    m = torch.randint(-2 ** 40, 2 ** 40, (3, 2, H, W), generator=g)
    mat = affine_matrix(torch.tensor([20.0, -35.0, 90.0]), torch.tensor([[2.0, 1], [0, -3],
                        [0, 0]]), torch.tensor([1.0, 0.8, 1.3]), torch.zeros(3, 2), H, W)
    grid = _target_grid(mat, [H, W], [H + 5, W - 3], torch.float32)
    flat = _sample_masks(m, grid, -9)
    pairs = _sample_masks(m, grid, -9, flat_limit=0)
    assert torch.equal(flat, pairs) and (flat == -9).any() and (flat != -9).any()


class _MasksOnly(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, x, masks, keys):
        y, t = self.m.with_targets(x, {"masks": masks}, keys)
        return y, t["masks"]


@pytest.mark.parametrize("make", [lambda: RandomRotation(30, mask_fill=-5),
                                  lambda: RandomPerspective(0.5, p=1.0, mask_fill=-5),
                                  lambda: RandomResizedCrop(16)],
                         ids=["RandomRotation", "RandomPerspective", "RandomResizedCrop"])
def test_large_ids_exact_under_compile_and_export(make):
    """The id gather keeps compile (fullgraph) and export with a dynamic batch: int64 ids
    beyond 2**62 equal eager's (a resized crop's compiled/exported masks took the float32
    image kernel, which rounded them)."""
    from torch.export import Dim, export
    w = _MasksOnly(make()).train()
    g = torch.Generator().manual_seed(3)

    def batch(n):
        return (torch.randint(0, 256, (n, 3, H, W), dtype=torch.uint8, generator=g),
                2 ** 62 + torch.randint(0, 1000, (n, H, W), generator=g),
                _random.sample_keys(0, 1, torch.arange(n)))
    torch._dynamo.reset()
    a = batch(6)
    ref = w(*a)[1]
    assert (ref >= 2 ** 62).all() or (ref == -5).any() and (ref >= 2 ** 62).any()
    assert torch.equal(torch.compile(w, backend="aot_eager", fullgraph=True)(*a)[1], ref)
    d = Dim("batch")
    run = export(w, batch(4), dynamic_shapes=({0: d}, {0: d}, {0: d})).module()
    for n in (1, 7):
        a = batch(n)
        assert torch.equal(run(*a)[1], w(*a)[1]), n


@pytest.mark.parametrize("make", _MODULES)
def test_empty_batch_and_empty_targets(make):
    m = make()
    for n, mm, k in ((0, 3, 2), (4, 0, 0), (0, 0, 0)):
        x, t = _batch(n, mm, k, mask_k=2)
        y, out = m.with_targets(x, t)
        assert y.shape == x.shape
        assert out["masks"].shape == (n, 2, H, W) and out["boxes"].shape == (n, mm, 4)
        assert out["box_valid"].shape == (n, mm) and out["keypoints"].shape == (n, k, 2)
        assert out["keypoint_valid"].shape == (n, k)


@pytest.mark.parametrize("make", _MODULES)
def test_scripted_equals_eager(make):
    m = make(interpolation="bilinear", fill=[1, 2, 3], mask_fill=2)
    s = torch.jit.script(m)
    x, t = _batch(6, seed=8, mask_k=3)
    keys = _random.sample_keys(0, 5, torch.arange(6))
    a, ta = m.with_targets(x, t, keys)
    b, tb = s.with_targets(x, t, keys)
    assert torch.equal(a, b) and set(ta) == set(tb)
    for k in ta:
        assert torch.equal(ta[k], tb[k]), k
    torch.manual_seed(0)
    c, _ = s.with_targets(x, {"masks": t["masks"][:, 0]})
    torch.manual_seed(0)
    assert torch.equal(c, m(x))


@settings(deadline=None, max_examples=6)
@given(which=st.integers(0, len(_MODULES) - 1), n=st.integers(1, 5), m=st.integers(0, 4),
       k=st.integers(0, 3), seed=st.integers(0, 2 ** 16))
def test_targets_keep_shapes_and_inputs(which, n, m, k, seed):
    x, t = _batch(n, m, k, seed=seed)
    saved = {key: v.clone() for key, v in t.items()}
    mod = _MODULES[which](interpolation="bilinear")
    torch.manual_seed(seed)
    y, out = mod.with_targets(x, t)
    for key, v in saved.items():  # no in-place change of the inputs
        assert torch.equal(t[key], v)
        assert out[key].shape == v.shape and out[key].dtype == v.dtype
    # invalid boxes and keypoints are zeros; valid boxes lie inside the image, 1 pixel at least
    b = out["boxes"][out["box_valid"]]
    assert (b[:, 2] - b[:, 0] >= 1).all() and (b[:, 3] - b[:, 1] >= 1).all()
    assert (b >= 0).all() and (b[:, 2] <= W).all() and (b[:, 3] <= H).all()
    assert (out["boxes"][~out["box_valid"]] == 0).all()
    kp = out["keypoints"][out["keypoint_valid"]]
    assert ((kp[:, 0] >= 0) & (kp[:, 0] < W) & (kp[:, 1] >= 0) & (kp[:, 1] < H)).all()
    assert not (out["box_valid"] & ~t["box_valid"]).any()


@pytest.mark.parametrize("make", _MODULES)
def test_with_targets_does_not_sync_with_the_device(make):
    """On the meta device: no host read, no Python data copied onto the device (the checks of
    the contract's default forwards), keyed and not."""
    from tests.contract import NoHostSync

    m = make(mask_fill=1).to("meta")
    x, t = _batch(6, mask_k=2)
    x = x.to("meta")
    t = {k: v.to("meta") for k, v in t.items()}
    for keys in (None, _random.sample_keys(0, 0, torch.arange(6)).to("meta")):
        for masks in (t["masks"], t["masks"].long()):  # the float path and the id gather
            with NoHostSync("meta"):
                y, out = m.with_targets(x, {**t, "masks": masks}, keys)
            assert y.shape == x.shape and out["masks"].shape == masks.shape
            assert out["masks"].dtype == masks.dtype
