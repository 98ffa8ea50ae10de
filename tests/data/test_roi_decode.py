"""decode_jpegs(..., windows=): each image's window only, equal to torchvision's full decode
cropped to it, with nvImageCodec's CPU ROI decode (when installed) and without it."""
import io

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision.io import ImageReadMode, decode_jpeg as tv_decode_jpeg

from batchaug.data import jpeg, roi_decode
from batchaug.data.jpeg import decode_jpegs
from batchaug.data.meta import CacheFormatError

CPU = torch.device("cpu")
# (height, width, PIL save options): odd sizes, every subsampling PIL writes, progressive, gray
CASES = [(67, 91, {}), (101, 53, {"subsampling": 0}), (130, 77, {"subsampling": 1}),
         (257, 199, {"progressive": True}), (95, 143, {"progressive": True, "subsampling": 0}),
         (83, 61, {"gray": True}), (64, 64, {"quality": 100})]


def _photo(h, w, seed):
    skimage_data = pytest.importorskip("skimage.data")  # a test extra

    rng = np.random.default_rng(seed)
    photo = skimage_data.astronaut()
    t, l = int(rng.integers(0, 512 - h)), int(rng.integers(0, 512 - w))
    return photo[t:t + h, l:l + w]


def _jpeg(h, w, seed, gray=False, **options):
    array = _photo(h, w, seed)
    image = Image.fromarray(array).convert("L") if gray else Image.fromarray(array)
    buf = io.BytesIO()
    image.save(buf, format="JPEG", **{"quality": 90, **options})
    return torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8)


def _windows(h, w, rng):
    """Windows of every kind: random ones, the whole image, 1x1 corners, the last row/column."""
    out = [(0, 0, h, w), (h - 1, w - 1, 1, 1), (0, 0, 1, 1), (h - 1, 0, 1, w), (0, w - 1, h, 1)]
    for _ in range(6):
        hh, ww = int(rng.integers(1, h + 1)), int(rng.integers(1, w + 1))
        out.append((int(rng.integers(0, h - hh + 1)), int(rng.integers(0, w - ww + 1)), hh, ww))
    return out


def _reference(data, windows):
    """torchvision's full decode of each file, cropped."""
    import warnings

    out = []
    for b, (t, l, h, w) in zip(data, windows):
        with warnings.catch_warnings():  # torchvision 0.29 deprecates its codecs
            warnings.simplefilter("ignore")
            full = tv_decode_jpeg(b, mode=ImageReadMode.UNCHANGED)
        out.append(full[:, t:t + h, l:l + w])
    return out


def _cases():
    rng = np.random.default_rng(0)
    data, windows = [], []
    for k, (h, w, options) in enumerate(CASES):
        b = _jpeg(h, w, k, **options)
        for win in _windows(h, w, rng):
            data.append(b)
            windows.append(win)
    return data, windows


@pytest.mark.parametrize("roi", [True, False], ids=["nvimgcodec", "full-decode-crop"])
@pytest.mark.parametrize("threads", [1, 3])
def test_windows_equal_full_decode_cropped(roi, threads, monkeypatch):
    if roi and not roi_decode.available():
        pytest.skip("nvImageCodec is not installed (pip install nvidia-nvimgcodec-cu13)")
    calls = []
    real = roi_decode.decode_windows
    monkeypatch.setattr(roi_decode, "decode_windows",
                        lambda *a: calls.append(1) or real(*a))
    if not roi:
        monkeypatch.setattr(roi_decode, "available", lambda: False)
    data, windows = _cases()
    got = decode_jpegs(data, CPU, threads=threads, windows=torch.tensor(windows))
    want = _reference(data, windows)
    assert len(got) == len(want)
    for k, (g, r) in enumerate(zip(got, want)):
        assert g.dtype == torch.uint8 and g.shape == r.shape, (k, windows[k])
        assert torch.equal(g, r), (k, windows[k], (g.int() - r.int()).abs().max())
    assert bool(calls) == roi  # the ROI path really ran (or really did not)


@pytest.mark.skipif(not roi_decode.available(), reason="nvImageCodec is not installed")
def test_roi_decode_decodes_no_full_image(monkeypatch):
    """With nvImageCodec, 1- and 3-channel JPEGs never go through the full decoder."""
    data, windows = _cases()
    monkeypatch.setattr(jpeg, "_DECODE", lambda *a: pytest.fail("full decode"))
    got = decode_jpegs(data, CPU, windows=torch.tensor(windows))
    assert [tuple(g.shape[1:]) for g in got] == [(h, w) for _, _, h, w in windows]


def test_windows_empty_batch():
    assert decode_jpegs([], CPU, windows=torch.zeros(0, 4, dtype=torch.long)) == []


@pytest.mark.parametrize("roi", [True, False])
def test_bad_windows_name_the_argument(roi, monkeypatch):
    if roi and not roi_decode.available():
        pytest.skip("nvImageCodec is not installed")
    if not roi:
        monkeypatch.setattr(roi_decode, "available", lambda: False)
    data = [_jpeg(40, 50, 0), _jpeg(30, 20, 1)]
    with pytest.raises(ValueError, match=r"windows must have shape \(2, 4\)"):
        decode_jpegs(data, CPU, windows=torch.zeros(1, 4, dtype=torch.long))
    with pytest.raises(TypeError, match="windows must hold integers"):
        decode_jpegs(data, CPU, windows=torch.zeros(2, 4))
    with pytest.raises(TypeError, match=r"windows must be an \(N, 4\) integer tensor"):
        decode_jpegs(data, CPU, windows=[(0, 0, 1, 1)] * 2)
    with pytest.raises(ValueError, match=r"windows\[0\] = \(0, -1, 1, 1\): top and left must"):
        decode_jpegs(data, CPU, windows=torch.tensor([[0, -1, 1, 1], [0, 0, 1, 1]]))
    with pytest.raises(ValueError, match=r"windows\[1\] = \(0, 0, 31, 5\) does not fit image 1 "
                                         r"\(30x20\)"):
        decode_jpegs(data, CPU, windows=torch.tensor([[0, 0, 40, 50], [0, 0, 31, 5]]))


def test_corrupt_bytes_are_named_with_windows():
    good, bad = _jpeg(40, 50, 0), _jpeg(30, 20, 1)
    bad = bad[:-40].clone()  # truncated: no end marker
    with pytest.raises(CacheFormatError, match="sample 7"):
        decode_jpegs([good, bad], CPU, names=[3, 7],
                     windows=torch.tensor([[0, 0, 4, 4], [0, 0, 4, 4]]))


def test_cmyk_is_decoded_whole_and_cropped():
    """A 4-channel (CMYK) JPEG is not taken by the ROI path; it still gives its window of the
    cache's own full decode (TorchCodec's and torchvision's differ on CMYK: one inverts)."""
    image = Image.fromarray(_photo(40, 50, 3)).convert("CMYK")
    buf = io.BytesIO()
    image.save(buf, format="JPEG", quality=90)
    data = [torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8), _jpeg(40, 50, 4)]
    windows = [(3, 4, 20, 30), (1, 2, 30, 40)]
    if roi_decode.available():
        taken = roi_decode.decode_windows(data, windows, 1)
        assert taken[0] is None and taken[1] is not None
    got = decode_jpegs(data, CPU, windows=torch.tensor(windows))
    full = decode_jpegs(data, CPU)
    for g, f, (t, l, h, w) in zip(got, full, windows):
        assert torch.equal(g, f[:, t:t + h, l:l + w])
    assert got[0].shape[0] == 4
