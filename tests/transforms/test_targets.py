"""Target kernels (masks, boxes, keypoints moved by per-sample matrices) against torchvision v2
on tv_tensors, one sample at a time with the same parameters; co-registration of masks with
the image kernels; bad values; script / compile / export with a dynamic batch."""
import pytest
import torch
import torchvision.transforms.v2.functional as TF
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.export import Dim, export
from torchvision import tv_tensors

import batchaug.functional as BF
from batchaug.functional import _targets as TM
from batchaug.functional import _targets as TG

H, W = 48, 64  # not square: catches swapped axes


def _data(n, m, k, h=H, w=W, seed=0, outside=False):
    """Boxes inside the image (or sticking out when ``outside``), keypoints, some integral."""
    g = torch.Generator().manual_seed(seed)
    lo = -0.2 if outside else 0.0
    hi = 1.2 if outside else 1.0
    p = torch.rand(n, m, 2, 2, generator=g) * (hi - lo) + lo
    xy = p * torch.tensor([w, h], dtype=torch.float32)
    xy[:, : m // 2] = xy[:, : m // 2].round()  # integral corners: exact-arithmetic cases
    boxes = torch.cat((xy.amin(dim=2), xy.amax(dim=2)), dim=2)
    kp = torch.rand(n, k, 2, generator=g) * torch.tensor([w - 1e-3, h - 1e-3])
    kp[:, : k // 2] = kp[:, : k // 2].floor()
    bv = torch.rand(n, m, generator=g) < 0.9
    kv = torch.rand(n, k, generator=g) < 0.9
    return boxes, bv, kp, kv


def _tv_boxes(b, canvas):
    bb = tv_tensors.BoundingBoxes(b, format="XYXY", canvas_size=tuple(canvas))
    return TF.clamp_bounding_boxes(bb)  # our documented input rule: clamped to the image first


def _tv_kp(k, canvas):
    return tv_tensors.KeyPoints(k, canvas_size=tuple(canvas))


def _near(d):
    """Where float rounding may decide a threshold (0 < |d| < 1e-3): not compared."""
    return (d.abs() > 0) & (d.abs() < 1e-3)


def _compare(boxes, bv, kp, kv, matrix, kmatrix, out_size, ref_one, tol=2e-4):
    """Our kernels for the batch vs ``ref_one(i, tv_tensor) -> tv_tensor`` per sample, then
    torchvision's sanitizers (min_size=1, min_area=1)."""
    ob, ov = TG.affine_boxes(boxes, bv, matrix, [H, W], out_size)
    ok, okv = TG.affine_keypoints(kp, kv, kmatrix, [H, W], out_size)
    assert ob.shape == boxes.shape and ok.shape == kp.shape
    for i in range(boxes.shape[0]):
        rb = ref_one(i, _tv_boxes(boxes[i], (H, W)))
        assert tuple(rb.canvas_size) == tuple(out_size)
        _, rv = TF.sanitize_bounding_boxes(rb, min_size=1, min_area=1)
        rv = rv & bv[i]
        rbt = rb.as_subclass(torch.Tensor)
        bw, bh = rbt[:, 2] - rbt[:, 0], rbt[:, 3] - rbt[:, 1]
        sure = ~(_near(bw - 1) | _near(bh - 1) | _near(bw * bh - 1))
        assert torch.equal(ov[i][sure], rv[sure]), i
        torch.testing.assert_close(ob[i][rv & ov[i]], rbt[rv & ov[i]], atol=tol, rtol=0)
        assert (ob[i][~ov[i]] == 0).all()

        rk = ref_one(i, _tv_kp(kp[i], (H, W)))
        _, rkv = TF.sanitize_keypoints(rk)
        rkv = rkv & kv[i]
        rkt = rk.as_subclass(torch.Tensor)
        sure = ~(_near(rkt[:, 0]) | _near(rkt[:, 0] - out_size[1]) | _near(rkt[:, 1])
                 | _near(rkt[:, 1] - out_size[0]))
        assert torch.equal(okv[i][sure], rkv[sure]), i
        torch.testing.assert_close(ok[i][rkv & okv[i]], rkt[rkv & okv[i]], atol=tol, rtol=0)


N, M, K = 5, 12, 17


@pytest.mark.parametrize("outside", [False, True])
def test_flips_match_torchvision(outside):
    boxes, bv, kp, kv = _data(N, M, K, outside=outside)
    hf = torch.tensor([True, False, True, False, True])
    vf = torch.tensor([False, False, True, True, True])

    def ref(i, t):
        if hf[i]:
            t = TF.horizontal_flip(t)
        if vf[i]:
            t = TF.vertical_flip(t)
        return t

    _compare(boxes, bv, kp, kv, TG.flip_matrix(hf, vf), TG.flip_matrix(hf, vf, keypoints=True),
             [H, W], ref, tol=0)


def test_crop_pad_center_crop_match_torchvision():
    boxes, bv, kp, kv = _data(N, M, K, seed=1)
    top = torch.tensor([0, 5, -3, 17, 9])
    left = torch.tensor([0, 30, 7, -6, 21])
    oh, ow = 29, 33
    m = TG.resized_crop_matrix(top, left, torch.full((N,), oh), torch.full((N,), ow), [H, W],
                               [oh, ow])
    _compare(boxes, bv, kp, kv, m, m, [oh, ow],
             lambda i, t: TF.crop(t, int(top[i]), int(left[i]), oh, ow), tol=0)

    pl, pt, pr, pb = 3, 1, 4, 6
    out = [H + pt + pb, W + pl + pr]
    m = TG.resized_crop_matrix(torch.full((N,), -pt), torch.full((N,), -pl),
                               torch.full((N,), out[0]), torch.full((N,), out[1]), [H, W], out)
    _compare(boxes, bv, kp, kv, m, m, out, lambda i, t: TF.pad(t, [pl, pt, pr, pb]), tol=0)

    for oh, ow in ((31, 40), (H + 5, W + 2)):  # centre crop, and one that pads
        t0 = int(round((H - oh) / 2.0))
        l0 = int(round((W - ow) / 2.0))
        m = TG.resized_crop_matrix(torch.full((N,), t0), torch.full((N,), l0),
                                   torch.full((N,), oh), torch.full((N,), ow), [H, W], [oh, ow])
        _compare(boxes, bv, kp, kv, m, m, [oh, ow],
                 lambda i, t: TF.center_crop(t, [oh, ow]), tol=0)


def test_resize_and_resized_crop_match_torchvision():
    boxes, bv, kp, kv = _data(N, M, K, seed=2)
    for out in ([24, 80], [97, 31]):
        m = TG.resized_crop_matrix(torch.zeros(N), torch.zeros(N), torch.full((N,), H),
                                   torch.full((N,), W), [H, W], out)
        _compare(boxes, bv, kp, kv, m, m, out, lambda i, t: TF.resize(t, out), tol=1e-4)
    top = torch.tensor([0, 3, 10, 1, 20])
    left = torch.tensor([2, 0, 13, 40, 5])
    hc = torch.tensor([48, 20, 30, 7, 28])
    wc = torch.tensor([62, 33, 50, 24, 9])
    size = [32, 40]
    m = TG.resized_crop_matrix(top, left, hc, wc, [H, W], size)
    _compare(boxes, bv, kp, kv, m, m, size,
             lambda i, t: TF.resized_crop(t, int(top[i]), int(left[i]), int(hc[i]), int(wc[i]),
                                          size), tol=1e-4)


@pytest.mark.parametrize("center,outside", [(None, False), ([10.0, 30.5], False), (None, True)])
def test_rotation_matches_torchvision(center, outside):
    # outside: boxes sticking out of the image are clamped to it first (the reference gets them
    # through ClampBoundingBoxes, see _tv_boxes)
    boxes, bv, kp, kv = _data(N, M, K, seed=3, outside=outside)
    angle = torch.tensor([0.0, 90.0, -33.5, 181.25, 12.0])
    m = TG.rotation_matrix(angle, H, W, center)
    _compare(boxes, bv, kp, kv, m, m, [H, W],
             lambda i, t: TF.rotate(t, float(angle[i]), center=center))


def test_rotation_with_expand_matches_torchvision():
    # expand: the same centred matrix, a bigger output. At quarter turns torchvision's canvas is
    # exactly the rotated image; elsewhere its boxes shift by the exact extent while its image
    # (and our targets) are centred in the rounded canvas, up to half a pixel apart
    boxes, bv, kp, kv = _data(N, M, K, seed=4)
    angle = torch.tensor([90.0, -90.0, 270.0, 90.0, -270.0])
    m = TG.rotation_matrix(angle, H, W)
    _compare(boxes, bv, kp, kv, m, m, [W, H],
             lambda i, t: TF.rotate(t, float(angle[i]), expand=True))


def _affine_params(seed, n):
    g = torch.Generator().manual_seed(seed)
    angle = torch.rand(n, generator=g) * 360 - 180
    translate = (torch.rand(n, 2, generator=g) - 0.5) * 20
    scale = torch.rand(n, generator=g) * 0.8 + 0.7
    shear = (torch.rand(n, 2, generator=g) - 0.5) * 40
    return angle, translate, scale, shear


@settings(deadline=None, max_examples=10)
@given(seed=st.integers(0, 2**16), center=st.sampled_from([None, [5.0, 40.0]]))
def test_affine_matches_torchvision(seed, center):
    boxes, bv, kp, kv = _data(4, M, K, seed=seed)
    angle, translate, scale, shear = _affine_params(seed, 4)
    theta = BF.affine_matrix(angle, translate, scale, shear, H, W, center)
    m = TG.affine_to_matrix(theta)
    _compare(boxes, bv, kp, kv, m, m, [H, W],
             lambda i, t: TF.affine(t, float(angle[i]), translate[i].tolist(),
                                    float(scale[i]), shear[i].tolist(), center=center))


def test_perspective_matches_torchvision():
    boxes, bv, kp, kv = _data(N, M, K, seed=5)
    g = torch.Generator().manual_seed(5)
    corners = torch.tensor([[0, 0], [W - 1, 0], [W - 1, H - 1], [0, H - 1]])
    jitter = (torch.rand(N, 4, 2, generator=g) * 10).round().long()
    sign = torch.tensor([[1, 1], [-1, 1], [-1, -1], [1, -1]])
    ends = corners + sign * jitter
    coeffs = BF.perspective_coefficients(ends, H, W)
    m = TG.perspective_to_matrix(coeffs, H, W)
    _compare(boxes, bv, kp, kv, m, m, [H, W],
             lambda i, t: TF.perspective(t, None, None, coefficients=coeffs[i].tolist()),
             tol=2e-3)


def test_composition_is_the_matrix_product():
    boxes, bv, kp, kv = _data(N, M, K, seed=6)
    angle = torch.tensor([10.0, -20.0, 33.0, 0.0, 5.0])
    hf = torch.tensor([True, False, True, True, False])
    rot = TG.rotation_matrix(angle, H, W)
    both = TG.compose_matrices(rot, TG.flip_matrix(hf, torch.zeros_like(hf), keypoints=True))
    ok, okv = TG.affine_keypoints(kp, kv, both, [H, W], [H, W])
    for i in range(N):  # torchvision: rotate, then flip
        t = TF.rotate(_tv_kp(kp[i], (H, W)), float(angle[i]))
        if hf[i]:
            t = TF.horizontal_flip(t)
        _, rv = TF.sanitize_keypoints(t)
        rv = rv & kv[i]
        assert torch.equal(okv[i], rv)
        torch.testing.assert_close(ok[i][rv], t.as_subclass(torch.Tensor)[rv], atol=2e-4,
                                   rtol=0)


# --------------------------------------------------------------------------------------------
# properties
# --------------------------------------------------------------------------------------------

@settings(deadline=None, max_examples=15)
@given(n=st.integers(0, 6), m=st.integers(0, 5), k=st.integers(0, 5), seed=st.integers(0, 999))
def test_shapes_independence_and_no_input_change(n, m, k, seed):
    boxes, bv, kp, kv = _data(n, m, k, seed=seed)
    angle, translate, scale, shear = _affine_params(seed, n)
    mat = TG.affine_to_matrix(BF.affine_matrix(angle, translate, scale, shear, H, W))
    before = [t.clone() for t in (boxes, bv, kp, kv, mat)]
    ob, ov = TG.affine_boxes(boxes, bv, mat, [H, W], [30, 50])
    ok, okv = TG.affine_keypoints(kp, kv, mat, [H, W], [30, 50])
    for a, b in zip(before, (boxes, bv, kp, kv, mat)):
        assert torch.equal(a, b)
    assert ob.shape == (n, m, 4) and ov.shape == (n, m) and ov.dtype == torch.bool
    assert ok.shape == (n, k, 2) and okv.shape == (n, k) and ob.dtype == boxes.dtype
    assert ((ob >= 0) & (ob <= torch.tensor([50, 30, 50, 30]))).all()
    assert not (ov & ~bv).any() and not (okv & ~kv).any()
    if n > 1:  # each sample depends only on its own row: a permuted batch permutes the output
        p = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
        pb, pv = TG.affine_boxes(boxes[p], bv[p], mat[p], [H, W], [30, 50])
        assert torch.equal(pb, ob[p]) and torch.equal(pv, ov[p])
        pk, pkv = TG.affine_keypoints(kp[p], kv[p], mat[p], [H, W], [30, 50])
        assert torch.equal(pk, ok[p]) and torch.equal(pkv, okv[p])


@settings(deadline=None, max_examples=15)
@given(seed=st.integers(0, 999))
def test_moved_keypoint_lands_on_its_moved_pixel(seed):
    # Output pixel (oy, ox) samples the input at q, its centre mapped by the matrix (worked out
    # here by hand). A keypoint at q moves to that centre, and the warped mask holds there the
    # label of the input pixel under q (unless q is within float noise of a pixel border).
    g = torch.Generator().manual_seed(seed)
    n = 6
    angle = torch.rand(n, generator=g) * 360
    m = TG.rotation_matrix(angle, H, W, [20.0, 17.5])
    ox = torch.randint(0, W, (n,), generator=g)
    oy = torch.randint(0, H, (n,), generator=g)
    cx, cy = ox.double() + 0.5 - W / 2, oy.double() + 0.5 - H / 2
    qx = m[:, 0, 0] * cx + m[:, 0, 1] * cy + m[:, 0, 2] + W / 2
    qy = m[:, 1, 0] * cx + m[:, 1, 1] * cy + m[:, 1, 2] + H / 2
    kp = torch.stack((qx, qy), dim=1).float().view(n, 1, 2)
    moved, ok = TG.affine_keypoints(kp, torch.ones(n, 1, dtype=torch.bool), m, [H, W], [H, W])
    torch.testing.assert_close(moved[:, 0], torch.stack((ox, oy), 1).float() + 0.5, atol=1e-4,
                               rtol=0)
    assert ok.all()
    inside = (qx >= 0) & (qx < W) & (qy >= 0) & (qy < H)
    mask = torch.zeros(n, H, W, dtype=torch.uint8)
    idx = torch.arange(n)[inside]
    mask[idx, qy[inside].floor().long(), qx[inside].floor().long()] = 1
    warped = TM.warp_masks(mask, m, [H, W])
    frac = torch.minimum((qx - qx.round()).abs(), (qy - qy.round()).abs())
    clear = frac > 1e-3
    got = warped[torch.arange(n), oy, ox]
    assert torch.equal(got[clear], inside[clear].to(torch.uint8))


def test_bad_boxes_and_keypoints_come_out_invalid():
    boxes = torch.tensor([[[5.0, 5.0, 2.0, 9.0], [1.0, float("nan"), 4.0, 4.0],
                           [1.0, 1.0, 9.0, 9.0], [3.0, 3.0, 3.5, 9.0]]])
    kp = torch.tensor([[[float("nan"), 2.0], [3.0, 4.0], [W, 1.0]]])
    m = TG.identity_matrix(boxes)
    ob, ov = TG.affine_boxes(boxes, torch.ones(1, 4, dtype=torch.bool), m, [H, W], [H, W])
    assert ov.tolist() == [[False, False, True, False]]  # inverted, NaN, fine, too thin
    assert torch.isfinite(ob).all() and (ob[~ov] == 0).all()
    ok, okv = TG.affine_keypoints(kp, torch.ones(1, 3, dtype=torch.bool), m, [H, W], [H, W])
    assert okv.tolist() == [[False, True, False]] and torch.isfinite(ok).all()
    # a singular matrix: everything invalid, nothing non-finite
    z = torch.zeros(1, 3, 3, dtype=torch.float64)
    ob, ov = TG.affine_boxes(boxes, torch.ones(1, 4, dtype=torch.bool), z, [H, W], [H, W])
    assert not ov.any() and torch.isfinite(ob).all()


def test_flip_keypoint_indices():
    kp = torch.arange(2 * 3 * 2, dtype=torch.float32).view(2, 3, 2)
    kv = torch.tensor([[True, False, True], [True, True, False]])
    idx = torch.tensor(TG.check_flip_indices([2, 1, 0]))
    out, ov = TG.flip_keypoint_indices(kp, kv, torch.tensor([True, False]), idx)
    assert torch.equal(out[0], kp[0, [2, 1, 0]]) and torch.equal(out[1], kp[1])
    assert ov.tolist() == [[True, False, True], [True, True, False]]
    with pytest.raises(ValueError, match="permutation of 0..K-1"):
        TG.check_flip_indices([0, 0, 1])


# --------------------------------------------------------------------------------------------
# masks: co-registration with the image kernels, and torchvision
# --------------------------------------------------------------------------------------------

def _masks(n, k=None, h=H, w=W, seed=0, dtype=torch.uint8):
    g = torch.Generator().manual_seed(seed)
    shape = (n, h, w) if k is None else (n, k, h, w)
    return torch.randint(0, 7, shape, generator=g).to(dtype)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int64, torch.bool])
@pytest.mark.parametrize("k", [None, 3])
def test_masks_are_coregistered_with_the_image_kernels(dtype, k):
    masks = _masks(N, k, dtype=dtype)
    img = masks.unsqueeze(1) if k is None else masks
    img = img.to(torch.uint8)

    def same(out, ref):
        ref = ref.squeeze(1) if k is None else ref
        assert out.dtype == dtype and torch.equal(out, ref.to(dtype))

    angle = torch.tensor([0.0, 90.0, -33.5, 181.25, 12.0])
    for fill in (0, 5):
        same(TM.warp_masks(masks, TG.rotation_matrix(angle, H, W, [3.0, 9.0]), [H, W], fill),
             BF.rotate(img, angle, "nearest", [float(fill)], [3.0, 9.0]))
    theta = BF.affine_matrix(*_affine_params(1, N), H, W)
    same(TM.warp_masks(masks, TG.affine_to_matrix(theta), [H, W], 2),
         BF.affine(img, theta, "nearest", [2.0]))
    hf = torch.tensor([True, False, True, False, True])
    same(TM.warp_masks(masks, TG.flip_matrix(hf, ~hf), [H, W]),
         BF.vflip_where(BF.hflip_where(img, hf), ~hf))
    same(TM.flip_masks(masks, hf, ~hf), BF.vflip_where(BF.hflip_where(img, hf), ~hf))
    same(TM.flip_masks(masks, hf), BF.hflip_where(img, hf))
    ends = torch.tensor([[[2, 1], [W - 3, 0], [W - 1, H - 4], [0, H - 2]]]).expand(N, 4, 2)
    coeffs = BF.perspective_coefficients(ends, H, W)
    same(TM.perspective_with_masks(img, masks, coeffs, "nearest", [3.0], 3)[1],
         BF.perspective(img, coeffs, "nearest", [3.0]))
    top, left = torch.tensor([0, 3, 10, 1, 20]), torch.tensor([2, 0, 13, 40, 5])
    hc, wc = torch.tensor([48, 20, 30, 7, 28]), torch.tensor([62, 33, 50, 24, 9])
    same(TM.resized_crop_masks(masks, top, left, hc, wc, [32, 40]),
         BF.resized_crop(img, top, left, hc, wc, [32, 40], "nearest"))


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int32])
def test_warp_masks_in_cpu_chunks_equals_the_image_kernel(dtype):
    # 80 masks of 128 x 128 are warped in two CPU chunks (the image kernel chunks differently)
    n, s = 80, 128
    masks = _masks(n, h=s, w=s, seed=9, dtype=dtype)
    angle = torch.rand(n, generator=torch.Generator().manual_seed(9)) * 360
    out = TM.warp_masks(masks, TG.rotation_matrix(angle, s, s), [s, s], 3)
    ref = BF.rotate(masks.unsqueeze(1).to(torch.uint8), angle, "nearest", [3.0]).squeeze(1)
    assert out.dtype == dtype and torch.equal(out, ref.to(dtype))


@pytest.mark.parametrize("n,s", [(5, 48), (80, 128)])  # one CPU chunk, several
@pytest.mark.parametrize("dtype,interp,fill", [
    (torch.uint8, "nearest", None), (torch.uint8, "nearest", [7.0, 0.0, 255.0]),
    (torch.uint8, "bilinear", [3.0]), (torch.float32, "nearest", [0.5]),
    (torch.float64, "bilinear", None)])
def test_warp_with_masks_equals_the_separate_kernels(n, s, dtype, interp, fill):
    g = torch.Generator().manual_seed(n)
    x = torch.randint(0, 256, (n, 3, s, s), generator=g).to(dtype)
    masks = _masks(n, 2, h=s, w=s, seed=n)
    angle = torch.rand(n, generator=g) * 360
    m = TG.rotation_matrix(angle, s, s, [4.0, 9.5])
    y, mk = TM.warp_with_masks(x, masks, m, interp, fill, 2)
    assert torch.equal(y, BF.rotate(x, angle, interp, fill, [4.0, 9.5]))
    # masks: sampled on the image's grid (float64 for float64 images: compare with the image
    # kernel on the mask itself in that dtype)
    ref = BF.rotate(masks.to(dtype), angle, "nearest", [2.0], [4.0, 9.5]).to(torch.uint8)
    assert torch.equal(mk, ref)
    if dtype != torch.float64:
        assert torch.equal(mk, TM.warp_masks(masks, m, [s, s], 2))


@pytest.mark.parametrize("dtype", [torch.uint8, torch.bool, torch.int64])
@pytest.mark.parametrize("k", [None, 2])
def test_resized_crop_masks_cpu_loop_equals_batched_path(dtype, k):
    masks = _masks(N, k, seed=4, dtype=dtype)
    top, left = torch.tensor([0, 3, 10, 1, 20]), torch.tensor([2, 0, 13, 40, 5])
    hc, wc = torch.tensor([48, 20, 30, 7, 28]), torch.tensor([62, 33, 50, 24, 9])
    for size in ([32, 40], [97, 13]):
        loop = TM.resized_crop_masks(masks, top, left, hc, wc, size)  # CPU: the gathers
        batched = TM._resized_crop_masks_batched(masks, top, left, hc, wc, size)
        assert loop.dtype == dtype and torch.equal(loop, batched)


def test_masks_match_torchvision():
    masks = _masks(N, seed=3)
    top = torch.tensor([0, 5, -3, 17, 9])
    left = torch.tensor([0, 30, 7, -6, 21])
    m = TG.resized_crop_matrix(top, left, torch.full((N,), 29), torch.full((N,), 33), [H, W],
                               [29, 33])
    out = TM.warp_masks(masks, m, [29, 33])
    hf = torch.tensor([True, False, True, False, True])
    flipped = TM.warp_masks(masks, TG.flip_matrix(hf, torch.zeros_like(hf)), [H, W])
    pad = TM.warp_masks(masks, TG.resized_crop_matrix(
        torch.full((N,), -1), torch.full((N,), -3), torch.full((N,), H + 7),
        torch.full((N,), W + 7), [H, W], [H + 7, W + 7]), [H + 7, W + 7], 4)
    top2, left2 = torch.tensor([0, 3, 10, 1, 20]), torch.tensor([2, 0, 13, 40, 5])
    hc, wc = torch.tensor([48, 20, 30, 7, 28]), torch.tensor([62, 33, 50, 24, 9])
    rc = TM.resized_crop_masks(masks, top2, left2, hc, wc, [32, 40])
    rcb = TM._resized_crop_masks_batched(masks, top2, left2, hc, wc, [32, 40])
    angle = torch.tensor([90.0, -90.0, 270.0, 90.0, 30.0])
    rot = TM.warp_masks(masks, TG.rotation_matrix(angle, H, W), [H, W], 1)
    rot_x = TM.warp_masks(masks[:4], TG.rotation_matrix(angle[:4], H, W), [W, H])
    for i in range(N):
        mk = tv_tensors.Mask(masks[i])
        # torchvision crops past the border by padding with 0
        assert torch.equal(out[i], TF.crop(mk, int(top[i]), int(left[i]), 29, 33))
        assert torch.equal(flipped[i], TF.horizontal_flip(mk) if hf[i] else mk)
        assert torch.equal(pad[i], TF.pad(mk, [3, 1, 4, 6], fill=4))
        ref = TF.resized_crop(mk, int(top2[i]), int(left2[i]), int(hc[i]), int(wc[i]), [32, 40])
        assert torch.equal(rc[i], ref) and torch.equal(rcb[i], ref)
        # rotations: the grids are built with different float sums than torchvision's matmul;
        # a sample point on a pixel border may round to the other neighbour (a handful of
        # pixels at 30 degrees, none at quarter turns)
        ref = TF.rotate(mk, float(angle[i]), fill=1)
        assert (rot[i] != ref).float().mean() < 0.005
        if i < 4:
            assert torch.equal(rot_x[i], TF.rotate(mk, float(angle[i]), expand=True))


def test_empty_batch_and_empty_targets():
    for n, m, k in ((0, 3, 2), (3, 0, 0), (0, 0, 0)):
        boxes, bv, kp, kv = _data(n, m, k)
        mat = TG.rotation_matrix(torch.full((n,), 30.0), H, W)
        ob, ov = TG.affine_boxes(boxes, bv, mat, [H, W], [H, W])
        ok, okv = TG.affine_keypoints(kp, kv, mat, [H, W], [H, W])
        assert ob.shape == (n, m, 4) and ok.shape == (n, k, 2)
        assert ov.shape == (n, m) and okv.shape == (n, k)
        out = TM.warp_masks(_masks(n, 2), mat, [20, 30])
        assert out.shape == (n, 2, 20, 30) and out.dtype == torch.uint8


# --------------------------------------------------------------------------------------------
# validation
# --------------------------------------------------------------------------------------------

def test_check_targets():
    shape = [2, 3, H, W]
    t = TG.check_targets({"masks": _masks(2), "boxes": torch.zeros(2, 4, 4),
                          "keypoints": torch.zeros(2, 3, 2)}, shape)
    assert t["box_valid"].all() and t["box_valid"].shape == (2, 4)
    assert t["keypoint_valid"].shape == (2, 3)
    with pytest.raises(ValueError, match="allowed keys are masks, boxes, box_valid, keypoints"):
        TG.check_targets({"class": torch.zeros(2)}, shape)
    with pytest.raises(ValueError, match="float masks are refused"):
        TG.check_targets({"masks": torch.zeros(2, H, W)}, shape)
    with pytest.raises(ValueError, match="must have the images' size 48x64, got 48x60"):
        TG.check_targets({"masks": _masks(2, w=60)}, shape)
    with pytest.raises(ValueError, match="batch size 2 first"):
        TG.check_targets({"boxes": torch.zeros(3, 4, 4)}, shape)
    with pytest.raises(ValueError, match=r"float tensor of shape \(N, M, 4\)"):
        TG.check_targets({"boxes": torch.zeros(2, 4, 5)}, shape)
    with pytest.raises(ValueError, match=r"bool tensor of shape \[2, 4\]"):
        TG.check_targets({"boxes": torch.zeros(2, 4, 4), "box_valid": torch.ones(2, 4)}, shape)
    with pytest.raises(ValueError, match="given without"):
        TG.check_targets({"keypoint_valid": torch.ones(2, 3, dtype=torch.bool)}, shape)


def test_targets_that_are_not_a_dict_are_a_type_error():
    """with_targets(images, [mask]) (a list, a tuple, a bare tensor) says a dict is needed,
    for transforms, containers, policies and mixers alike (not "'list' object has no
    attribute 'items'")."""
    import batchaug
    x = torch.zeros(2, 3, H, W, dtype=torch.uint8)
    m = _masks(2)
    modules = [batchaug.RandomRotation(10), batchaug.RandomHorizontalFlip(),
               batchaug.Normalize([0.5], [0.5]), batchaug.RandAugment(),
               batchaug.Augment(batchaug.RandomResizedCrop(16)),
               batchaug.RandomChoice([batchaug.RandomVerticalFlip()]),
               batchaug.MixUp(num_classes=3)]
    for mod in modules:
        for bad in ([m], (m,), m):
            with pytest.raises(TypeError, match=r"targets must be a dict of tensors keyed by "
                               r"kind, e\.g\. \{'masks': masks\}.*got (list|tuple|Tensor)"):
                mod.with_targets(x, bad)
    with pytest.raises(TypeError, match="got list"):
        TG.check_targets([m], [2, 3, H, W])


# --------------------------------------------------------------------------------------------
# script / compile / export with a dynamic batch
# --------------------------------------------------------------------------------------------

class _Targets(nn.Module):
    """A rotation + flip of images' targets, as the later transforms will call the kernels."""

    def __init__(self):
        super().__init__()
        self.h, self.w = H, W

    def forward(self, x, masks, boxes, bv, kp, kv, angle, flip):
        h, w = self.h, self.w
        rot = TG.rotation_matrix(angle, h, w)
        m = TG.compose_matrices(rot, TG.flip_matrix(flip, flip))
        mk = TG.compose_matrices(rot, TG.flip_matrix(flip, flip, keypoints=True))
        b, v = TG.affine_boxes(boxes, bv, m, [h, w], [h, w])
        k, kv2 = TG.affine_keypoints(kp, kv, mk, [h, w], [h, w])
        k, kv2 = TG.flip_keypoint_indices(k, kv2, flip, torch.arange(kp.shape[1] - 1, -1, -1))
        y, mk2 = TM.warp_with_masks(x, masks, m, "bilinear", [0.0], 1)
        z = torch.zeros_like(angle, dtype=torch.int64)
        rc = TM.resized_crop_masks(masks, z + 3, z + 5, z + 20, z + 30, [17, 23])
        return TM.warp_masks(masks, m, [h, w], 0), y, mk2, b, v, k, kv2, rc


def _inputs(n):
    boxes, bv, kp, kv = _data(n, M, K, seed=n)
    g = torch.Generator().manual_seed(n)
    x = torch.randint(0, 256, (n, 3, H, W), generator=g, dtype=torch.uint8)
    return (x, _masks(n, seed=n), boxes, bv, kp, kv, torch.rand(n, generator=g) * 360,
            torch.rand(n, generator=g) < 0.5)


def _same(a, b):
    for x, y in zip(a, b):
        assert torch.equal(x, y)


def test_scripted_equals_eager():
    eager = _Targets()
    scripted = torch.jit.script(eager)
    for n in (0, 1, 7):
        _same(scripted(*_inputs(n)), eager(*_inputs(n)))


def test_export_with_dynamic_batch():
    eager = _Targets()
    batch = Dim("batch")
    shapes = tuple({0: batch} for _ in range(8))
    run = export(eager, _inputs(8), dynamic_shapes=shapes).module()
    for n in (1, 7, 64):
        _same(run(*_inputs(n)), eager(*_inputs(n)))


def test_compile_fullgraph():
    eager = _Targets()
    compiled = torch.compile(eager, fullgraph=True, dynamic=False)
    got, ref = compiled(*_inputs(7)), eager(*_inputs(7))
    # the bilinear image (index 1) may round differently where inductor fuses the blend;
    # everything nearest or integral must be exact
    torch.testing.assert_close(got[1], ref[1], atol=1, rtol=0)
    _same(got[:1] + got[2:], ref[:1] + ref[2:])
