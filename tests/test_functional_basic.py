"""Basic kernels against torchvision references (per-sample loops over v2.functional)."""
import pytest
import torch
import torchvision.transforms.v2.functional as TF
from hypothesis import given, settings
from hypothesis import strategies as st

import batchaug.functional as F

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
        fill = [fill[0] + k for k in range(x.shape[1])] if x.dtype == torch.uint8 else \
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
    tol = {torch.float32: 1e-5, torch.float16: 1e-2, torch.bfloat16: 6e-2}[out_dtype]
    torch.testing.assert_close(out.float(), ref, atol=tol * 20, rtol=tol)


@settings(deadline=None)
@given(x=batches(), dtype=st.sampled_from([torch.uint8, torch.float16, torch.float32,
                                           torch.float64, torch.bfloat16]),
       scale=st.booleans())
def test_to_dtype_matches_torchvision(x, dtype, scale):
    out = F.to_dtype(x, dtype, scale)
    ref = TF.to_dtype(x, dtype, scale=scale)
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
