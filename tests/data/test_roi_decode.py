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
    """With nvImageCodec, 1- and 3-channel JPEGs never go through the full decoder (except
    for windows one pixel wide: see test_one_pixel_wide_windows_equal_full_decode)."""
    data, windows = _cases()
    data = [d for d, win in zip(data, windows) if win[3] > 1]
    windows = [win for win in windows if win[3] > 1]
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


# --- issue 35 ---------------------------------------------------------------------------
def _noise_jpeg(h, w, seed, **options):
    array = np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(array).save(buf, format="JPEG", **{"quality": 90, **options})
    return torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8)


@pytest.mark.parametrize("h,w,subsampling", [(9, 17, 2), (17, 9, 2), (21, 50, 2), (12, 20, 1)])
def test_one_pixel_wide_windows_equal_full_decode(h, w, subsampling):
    """A window one column wide at the first or last column of a 4:2:0 file: libjpeg-turbo's
    cropped decode upsampled its chroma differently (item 1); every such window, all rows."""
    b = _noise_jpeg(h, w, h * w, subsampling=subsampling)
    windows = [(t, l, hh, 1) for l in (0, 1, w - 1) for t in range(h) for hh in range(1, h - t + 1)]
    got = decode_jpegs([b] * len(windows), CPU, windows=torch.tensor(windows))
    for g, ref, win in zip(got, _reference([b] * len(windows), windows), windows):
        assert torch.equal(g, ref), win


def test_zero_size_windows_are_refused():
    data = [_jpeg(40, 50, 0)]
    for win in ([0, 0, 0, 5], [0, 0, 5, 0]):
        with pytest.raises(ValueError, match=r"height and width >= 1"):
            decode_jpegs(data, CPU, windows=torch.tensor([win]))


@pytest.mark.parametrize("windows", [False, True])
def test_a_corrupt_sample_is_named_at_threads_above_one(windows):
    """The bad bitstream is the 5th of 6 decoded on 3 threads: the error names its cache index."""
    data = [_jpeg(30 + k, 40, k) for k in range(6)]
    bad = data[4].clone()
    bad[len(bad) // 2:len(bad) // 2 + 200] = 0xAB  # the scan damaged; SOI and EOI intact
    data[4] = bad
    names = [10, 11, 12, 13, 14, 15]
    win = torch.tensor([[0, 0, 8, 8]] * 6) if windows else None
    with pytest.raises(CacheFormatError, match=r"sample 14\b"):
        decode_jpegs(data, CPU, threads=3, names=names, windows=win)


def _run_fresh(code, *, path=None):
    """``code`` in a new Python process whose stderr is this process's fd 2 (capfd sees it)."""
    import os
    import subprocess
    import sys

    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (path, root) if p)
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=root)


def test_nvimgcodec_load_messages_are_silenced_when_the_cpu_decoder_works(capfd):
    pytest.importorskip("nvidia.nvimgcodec")
    _run_fresh("import torch\nfrom batchaug.data import roi_decode\n"
               "assert roi_decode.available()\n"
               "roi_decode._decoder(1)\nprint('ok')\n")
    out, err = capfd.readouterr()
    assert out.strip() == "ok"
    assert err == "", err  # not "Failed to load nvjpeg library!", "[ERROR] ... not be registered"


def test_a_broken_nvimgcodec_is_reported_once_in_batchaugs_words(capfd, tmp_path):
    fake = tmp_path / "nvidia" / "nvimgcodec"
    fake.mkdir(parents=True)
    (fake.parent / "__init__.py").write_text("")  # found before the installed nvidia
    (fake / "__init__.py").write_text(
        "import os\n"
        "os.write(2, b'[ERROR] [nvjpeg-ext] Failed to load nvJPEG library\\n')\n"
        "NVIMGCODEC_DEVICE_CPU_ONLY = -99\n"
        "class BackendKind:\n    CPU_ONLY = 0\n"
        "def Backend(kind):\n    return kind\n"
        "def Decoder(**kw):\n    raise RuntimeError('no codec plugin could decode jpeg')\n")
    _run_fresh("import warnings\nwarnings.simplefilter('default')\n"
               "from batchaug.data import roi_decode\n"
               "assert not roi_decode.available() and not roi_decode.available()\n",
               path=str(tmp_path))
    _, err = capfd.readouterr()
    assert "[ERROR]" not in err, err
    assert err.count("nvImageCodec is installed but its CPU decoder does not work here") == 1
    assert "no codec plugin could decode jpeg" in err
    assert "decodes whole JPEGs" in err
