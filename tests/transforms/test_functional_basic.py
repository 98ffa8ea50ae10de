"""Basic kernels against torchvision references (per-sample loops over v2.functional)."""
import pytest
import torch
import torchvision.transforms.v2.functional as TF
from hypothesis import given, settings
from hypothesis import strategies as st

import batchaug.functional as F
from batchaug.functional._utils import cpu_chunk_size
from tests.contract.tolerances import assert_normalize_close, normalize_bound

DTYPES = [torch.uint8, torch.float16, torch.float32]


@st.composite
def batches(draw, min_hw=1, max_hw=12, dtypes=DTYPES):
    n = draw(st.integers(0, 5))
    c = draw(st.sampled_from([1, 3, 4]))
    h = draw(st.integers(min_hw, max_hw))
    w = draw(st.integers(min_hw, max_hw))
    dtype = draw(st.sampled_from(dtypes))
    channels_last = draw(st.booleans())
    seed = draw(st.integers(0, 2**16))
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (n, c, h, w), generator=g, dtype=torch.uint8)
    if dtype != torch.uint8:
        x = (x.float() / 255).to(dtype)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    return x


@settings(deadline=None)
@given(x=batches(), data=st.data())
def test_flips_match_torchvision_per_sample(x, data):
    mask = torch.tensor(data.draw(st.lists(st.booleans(), min_size=x.shape[0], max_size=x.shape[0])),
                        dtype=torch.bool)
    before = x.clone()
    h = F.hflip_where(x, mask)
    v = F.vflip_where(x, mask)
    assert torch.equal(x, before)
    for i in range(x.shape[0]):
        exp_h = TF.horizontal_flip(x[i]) if mask[i] else x[i]
        exp_v = TF.vertical_flip(x[i]) if mask[i] else x[i]
        assert torch.equal(h[i], exp_h)
        assert torch.equal(v[i], exp_v)
    assert h.shape == x.shape and h.dtype == x.dtype


@settings(deadline=None)
@given(x=batches(min_hw=2), mode=st.sampled_from(["constant", "edge", "reflect", "symmetric"]),
       pads=st.lists(st.integers(0, 4), min_size=4, max_size=4), data=st.data())
def test_pad_matches_torchvision(x, mode, pads, data):
    h, w = x.shape[-2:]
    if mode == "reflect":  # torchvision (torch) requires reflect padding < size
        pads = [min(pads[0], w - 1), min(pads[1], h - 1), min(pads[2], w - 1), min(pads[3], h - 1)]
    if mode == "symmetric":  # torchvision indexes out of range beyond one image width
        pads = [min(pads[0], w), min(pads[1], h), min(pads[2], w), min(pads[3], h)]
    fill = [float(data.draw(st.integers(0, 255)))] if x.dtype == torch.uint8 else [0.25]
    if mode == "constant" and data.draw(st.booleans()):
        fill = [(fill[0] + k) % 256 for k in range(x.shape[1])] if x.dtype == torch.uint8 else \
            [0.1 * (k + 1) for k in range(x.shape[1])]
    out = F.pad(x, pads, fill, mode)
    tv_fill = fill[0] if len(fill) == 1 else fill
    expected = TF.pad(x, pads, fill=tv_fill, padding_mode=mode)
    torch.testing.assert_close(out, expected, rtol=0, atol=0)


def test_symmetric_and_reflect_wider_than_image_repeat_periodically():
    # torchvision raises here; batchaug continues the mirror pattern.
    x = torch.arange(3.0).view(1, 1, 1, 3)
    assert F.pad(x, [4, 0, 4, 0], None, "symmetric")[0, 0, 0].tolist() == \
        [2, 2, 1, 0, 0, 1, 2, 2, 1, 0, 0]
    assert F.pad(x, [3, 0, 3, 0], None, "reflect")[0, 0, 0].tolist() == \
        [1, 2, 1, 0, 1, 2, 1, 0, 1]


@settings(deadline=None)
@given(x=batches(min_hw=2), data=st.data())
def test_crop_each_sample_is_its_window(x, data):
    n, _, h, w = x.shape
    ch = data.draw(st.integers(1, h))
    cw = data.draw(st.integers(1, w))
    top = torch.tensor(data.draw(st.lists(st.integers(0, h - ch), min_size=n, max_size=n)),
                       dtype=torch.int64)
    left = torch.tensor(data.draw(st.lists(st.integers(0, w - cw), min_size=n, max_size=n)),
                        dtype=torch.int64)
    out = F.crop(x, top, left, ch, cw)
    assert out.shape == (n, x.shape[1], ch, cw)
    for i in range(n):
        assert torch.equal(out[i], TF.crop(x[i], int(top[i]), int(left[i]), ch, cw))


def test_crop_of_a_non_contiguous_view():
    x = torch.randint(0, 256, (4, 3, 10, 12), dtype=torch.uint8)[:, :, 1:9, 2:11]
    top, left = torch.tensor([0, 1, 2, 3]), torch.tensor([4, 3, 0, 1])
    out = F.crop(x, top, left, 5, 5)
    for i in range(4):
        assert torch.equal(out[i], x[i, :, top[i]:top[i] + 5, left[i]:left[i] + 5])


@settings(deadline=None)
@given(x=batches(), ch=st.integers(1, 16), cw=st.integers(1, 16))
def test_center_crop_matches_torchvision(x, ch, cw):
    out = F.center_crop(x, ch, cw)
    assert torch.equal(out, TF.center_crop(x, [ch, cw]))


def test_center_crop_every_size_difference():
    """Every image size 1..13 against every crop size 1..13 on each axis (the other axis
    cropped by 1, padded by 1, or kept): the anchor is torchvision's round((size - crop) / 2),
    half to even (0.5 -> 0, 2.5 -> 2), which a random draw of sizes rarely hits."""
    g = torch.Generator().manual_seed(0)
    for size in range(1, 14):
        for crop in range(1, 14):
            for other, other_crop in ((6, 5), (6, 7), (6, 6)):
                for h, w, ch, cw in ((size, other, crop, other_crop),
                                     (other, size, other_crop, crop)):
                    x = torch.randint(0, 256, (2, 3, h, w), generator=g, dtype=torch.uint8)
                    assert torch.equal(F.center_crop(x, ch, cw), TF.center_crop(x, [ch, cw])), \
                        (h, w, ch, cw)


@settings(deadline=None)
@given(x=batches(), out_dtype=st.sampled_from([torch.float32, torch.float16, torch.bfloat16]),
       data=st.data())
def test_normalize_matches_torchvision(x, out_dtype, data):
    c = x.shape[1]
    mean = data.draw(st.lists(st.floats(0, 1), min_size=c, max_size=c))
    std = data.draw(st.lists(st.floats(0.05, 2), min_size=c, max_size=c))
    out = F.normalize(x, torch.tensor(mean), torch.tensor(std), out_dtype)
    ref = TF.normalize(TF.to_dtype(x.float(), torch.float32, scale=False)
                       if x.is_floating_point() else TF.to_dtype(x, torch.float32, scale=True),
                       mean, std)
    assert out.dtype == out_dtype and out.shape == x.shape
    # The bound the arithmetic allows, against float64 (tests/contract/tolerances.py) ...
    assert_normalize_close(out, x, mean, std)
    # ... and torchvision's float32 result (its own three roundings: /255, -mean, /std).
    bound = normalize_bound(x, mean, std, out_dtype) + normalize_bound(x, mean, std,
                                                                        torch.float32)
    assert bool(((out.double() - ref.double()).abs() <= bound).all())


@settings(deadline=None)
@given(x=batches(), dtype=st.sampled_from([torch.uint8, torch.float16, torch.float32,
                                           torch.float64, torch.bfloat16]),
       scale=st.booleans())
def test_to_dtype_matches_torchvision(x, dtype, scale):
    out = F.to_dtype(x, dtype, scale)
    ref_in = x
    if scale and dtype == torch.uint8 and x.dtype in (torch.float16, torch.bfloat16):
        # half -> uint8 is computed in float32 (torchvision's half arithmetic rounds
        # 1.0 * 255.999 to 256, which wraps to 0): the float32 rule on the widened value
        ref_in = x.float()
    ref = TF.to_dtype(ref_in, dtype, scale=scale)
    assert out.dtype == ref.dtype
    assert torch.equal(out, ref)
    if x.numel():
        assert out.data_ptr() != x.data_ptr()


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_select_samples_every_dtype(layout):
    for dtype in DTYPES + [torch.float64, torch.bfloat16]:
        for w in (5, 8):  # odd row size takes the plain torch.where path
            a = torch.rand(6, 3, 4, w).to(dtype)
            b = torch.rand(6, 3, 4, w).to(dtype)
            if layout == "channels_last":
                a = a.contiguous(memory_format=torch.channels_last)
                b = b.contiguous(memory_format=torch.channels_last)
            mask = torch.tensor([True, False, False, True, True, False])
            assert torch.equal(F.select_samples(mask, a, b),
                               torch.where(mask.view(-1, 1, 1, 1), a, b))


@settings(deadline=None)
@given(x=batches(min_hw=1, max_hw=10), pads=st.lists(st.integers(0, 5), min_size=4, max_size=4),
       zero_fill=st.booleans(), full_width=st.booleans(), data=st.data())
def test_pad_crop_matches_torchvision_pad_then_window(x, pads, zero_fill, full_width, data):
    # pad_crop has a CPU fast path (zero fill, contiguous, crop as wide as the image) that never
    # builds the padded batch; every case must equal torchvision's pad followed by the window.
    n, _, h, w = x.shape
    ph, pw = h + pads[1] + pads[3], w + pads[0] + pads[2]
    height = data.draw(st.integers(1, ph))
    width = w if full_width else data.draw(st.integers(1, pw))
    top = torch.tensor(data.draw(st.lists(st.integers(0, ph - height), min_size=n, max_size=n)),
                       dtype=torch.int64)
    left = torch.tensor(data.draw(st.lists(st.integers(0, pw - width), min_size=n, max_size=n)),
                        dtype=torch.int64)
    fill = [0.0] if zero_fill else [7.0 if x.dtype == torch.uint8 else 0.5]
    before = x.clone()
    y = F.pad_crop(x, top, left, height, width, pads, fill, "constant")
    assert torch.equal(x, before)
    assert y.shape == (n, x.shape[1], height, width) and y.dtype == x.dtype
    for i in range(n):
        padded = TF.pad(x[i], pads, fill=fill[0], padding_mode="constant")
        t, l = int(top[i]), int(left[i])
        assert torch.equal(y[i], padded[:, t:t + height, l:l + width]), (i, t, l)


def _spy(monkeypatch, module, name):
    """Count calls of ``module.name`` (still calling it) for the rest of the test."""
    calls = []
    real = getattr(module, name)

    def spy(*args):
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(module, name, spy)
    return calls


def _spy_select(monkeypatch):
    import batchaug.functional._utils as utils

    return _spy(monkeypatch, utils, "select_samples")


# (dtype, width) with rows of whole 8-byte words (3 channels x 2 rows x width x itemsize).
WORD_ROWS = [(torch.uint8, 4), (torch.float16, 2), (torch.bfloat16, 6), (torch.float32, 4),
             (torch.float64, 1)]


@pytest.mark.parametrize("dtype, w", WORD_ROWS)
@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_hflip_where_word_blend_fast_path(monkeypatch, dtype, w, layout):
    # The in-place int64 word blend: CPU, dense rows of whole words, no grad. The spy proves no
    # fallback ran.
    calls = _spy_select(monkeypatch)
    x = (torch.arange(6 * 3 * 2 * w).view(6, 3, 2, w) % 251).to(dtype)
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    mask = torch.tensor([True, False, False, True, True, False])
    y = F.hflip_where(x, mask)
    assert calls == []
    ref = torch.stack([TF.horizontal_flip(x[i]) if mask[i] else x[i] for i in range(6)])
    assert y.dtype == dtype and torch.equal(y, ref)


@pytest.mark.parametrize("case", ["odd_row_bytes", "sliced", "requires_grad", "empty"])
def test_hflip_where_falls_back_when_a_condition_fails(monkeypatch, case):
    calls = _spy_select(monkeypatch)
    n, w = (0 if case == "empty" else 5), (3 if case == "odd_row_bytes" else 4)
    dtype = torch.uint8 if case == "odd_row_bytes" else torch.float32  # uint8: 18-byte rows
    x = (torch.arange(max(n, 1) * 3 * 2 * w).view(-1, 3, 2, w)[:n] % 251).to(dtype)
    if case == "sliced":
        x = torch.cat([x, x], dim=3)[..., :w]
    if case == "requires_grad":
        x = x.clone().requires_grad_(True)
    mask = torch.tensor([True, False, True, True, False][:n], dtype=torch.bool)
    y = F.hflip_where(x, mask)
    assert calls == [1]  # the plain select_samples path ran
    ref = torch.stack([TF.horizontal_flip(x[i]) if mask[i] else x[i] for i in range(n)]) \
        if n else x.clone()
    assert torch.equal(y.detach(), ref.detach())
    if case == "requires_grad":
        g = torch.randn_like(y)
        assert torch.equal(torch.autograd.grad(y, x, g)[0], torch.autograd.grad(ref, x, g)[0])


def _pad_crop_reference(x, top, left, height, width, pads, fill):
    out = []
    for i in range(x.shape[0]):
        padded = TF.pad(x[i], pads, fill=fill, padding_mode="constant")
        t, l = int(top[i]), int(left[i])
        out.append(padded[:, t:t + height, l:l + width])
    return torch.stack(out)


def _pad_crop_case(dtype, w, pads, seed=0, n=5, c=3, h=4):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(1, 256, (n, c, h, w), generator=g, dtype=torch.uint8)
    x = x if dtype == torch.uint8 else (x.double() / 255).to(dtype)
    ph, pw = h + pads[1] + pads[3], w + pads[0] + pads[2]
    top = torch.randint(0, ph - h + 1, (n,), generator=g)
    left = torch.randint(0, pw - w + 1, (n,), generator=g)
    # Every extreme offset at least once: first and last sample.
    top[0], left[0], top[-1], left[-1] = 0, 0, ph - h, pw - w
    return x, top, left


def _spy_flat(monkeypatch):
    import batchaug.functional._crop as geometry

    return _spy(monkeypatch, geometry, "_pad_crop_flat")


# (dtype, width): the masked copy's word is the largest of 8/4/2/1 bytes dividing a row.
FLAT_WORDS = [(torch.uint8, 8), (torch.uint8, 4), (torch.uint8, 6), (torch.uint8, 5),
              (torch.float16, 4), (torch.float16, 3), (torch.bfloat16, 2), (torch.bfloat16, 1),
              (torch.float32, 2), (torch.float32, 1), (torch.float64, 3)]


@pytest.mark.parametrize("dtype, w", FLAT_WORDS)
@pytest.mark.parametrize("pads", [[4, 4, 4, 4], [0, 2, 0, 1], [3, 0, 0, 2], [0, 0, 2, 0],
                                  [1, 0, 0, 0]])
@pytest.mark.parametrize("fill", [None, [0.0], [0.0, 0.0, 0.0]])
def test_pad_crop_flat_path_every_word_size(monkeypatch, dtype, w, pads, fill):
    # Explicitly on the fast path (zero fill, contiguous, crop as wide as the image, no grad),
    # for every word size of its masked copy and with/without left/right padding (the masked
    # copy vs the plain one): the spy proves the path ran.
    calls = _spy_flat(monkeypatch)
    x, top, left = _pad_crop_case(dtype, w, pads)
    y = F.pad_crop(x, top, left, 4, w, pads, fill, "constant")
    assert calls == [1]
    assert y.dtype == dtype and torch.equal(y, _pad_crop_reference(x, top, left, 4, w, pads, 0))


PLAIN_CASES = ["nonzero_fill", "channels_last", "sliced", "narrower", "no_padding"]


@pytest.mark.parametrize("dtype, case", [(d, c) for d in (torch.uint8, torch.float32)
                                         for c in PLAIN_CASES]
                         + [(torch.float32, "requires_grad"), (torch.float64, "requires_grad")])
def test_pad_crop_plain_path_when_a_condition_fails(monkeypatch, dtype, case):
    calls = _spy_flat(monkeypatch)
    pads = [0, 0, 0, 0] if case == "no_padding" else [2, 1, 3, 2]
    x, top, left = _pad_crop_case(dtype, 6, pads)
    width = 6
    fill = [7.0 if dtype == torch.uint8 else 0.25] if case == "nonzero_fill" else [0.0]
    if case == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    if case == "sliced":  # a view whose rows are not contiguous
        x = torch.cat([x, x], dim=3)[..., :6]
    if case == "narrower":
        width = 5
        left = left.clamp(max=6 + pads[0] + pads[2] - width)
    if case == "requires_grad":
        x = x.clone().requires_grad_(True)
    y = F.pad_crop(x, top, left, 4, width, pads, fill, "constant")
    assert calls == []
    ref = _pad_crop_reference(x, top, left, 4, width, pads, fill[0])
    assert torch.equal(y.detach(), ref.detach())
    if case == "requires_grad":
        assert y.requires_grad
        g = torch.randn_like(y)
        (gx,) = torch.autograd.grad(y, x, g)
        (gref,) = torch.autograd.grad(ref, x, g)
        assert torch.equal(gx, gref)


def test_pad_crop_cifar_shape_every_offset():
    # The CIFAR case the fast path was written for: 32x32, padding 4, all 81 offsets at once.
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (81, 3, 32, 32), generator=g, dtype=torch.uint8)
    top = torch.arange(81) // 9
    left = torch.arange(81) % 9
    y = F.pad_crop(x, top, left, 32, 32, [4, 4, 4, 4])
    padded = TF.pad(x, [4, 4, 4, 4])
    for i in range(81):
        t, l = int(top[i]), int(left[i])
        assert torch.equal(y[i], padded[i, :, t:t + 32, l:l + 32])


@pytest.mark.parametrize("threads", [1, 2])
def test_normalize_large_batch_chunked_matches_torchvision(threads):
    # Batches above a few hundred CIFAR images are normalised in L2-sized chunks on the CPU.
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        g = torch.Generator().manual_seed(1)
        x = torch.randint(0, 256, (701, 3, 32, 32), generator=g, dtype=torch.uint8)
        mean, std = torch.tensor([0.49, 0.48, 0.45]), torch.tensor([0.25, 0.24, 0.26])
        assert cpu_chunk_size(x, 4 * 3 * 32 * 32, 384 * 1024, True) < x.shape[0]
        y = F.normalize(x, mean, std)
    finally:
        torch.set_num_threads(old)
    assert_normalize_close(y, x, mean.tolist(), std.tolist())
    # Bit for bit the unchunked path (what compile/export/autograd run): same two roundings.
    from batchaug.functional._misc import normalize_factors

    factor, shift = normalize_factors(mean, std, x.dtype)
    assert torch.equal(y, x.to(torch.float32).mul(factor).add_(shift))


@settings(deadline=None, max_examples=30)
@given(x=batches(min_hw=2, max_hw=24, dtypes=[torch.uint8]), data=st.data())
def test_resize_of_a_window_equals_resize_of_its_copy(x, data):
    # uint8 windows are copied before torch's SIMD resize (speed); pixels and layout unchanged
    h, w = x.shape[-2], x.shape[-1]
    t = data.draw(st.integers(0, h - 1))
    l = data.draw(st.integers(0, w - 1))
    win = x[:, :, t:, l:]
    size = [data.draw(st.integers(2, 30)), data.draw(st.integers(2, 30))]
    mode = data.draw(st.sampled_from(["bilinear", "bicubic"]))
    y = F.resize(win, size, mode, antialias=True)
    ref = torch.nn.functional.interpolate(win.clone(), size=size, mode=mode, antialias=True,
                                          align_corners=False) if win.numel() else y
    assert torch.equal(y, ref)
    assert y.is_contiguous(memory_format=torch.channels_last) == \
        win.clone().is_contiguous(memory_format=torch.channels_last) or y.numel() == 0
    n = x.shape[0]
    if n:
        boxes = [torch.tensor([t] * n), torch.tensor([l] * n),
                 torch.tensor([h - t] * n), torch.tensor([w - l] * n)]
        z = F.resized_crop(x, *boxes, size, mode, True)
        for i in range(n):
            assert torch.equal(z[i], TF.resized_crop(x[i], t, l, h - t, w - l, size,
                                                     antialias=True, interpolation=getattr(
                                                         TF.InterpolationMode, mode.upper())))
