"""The loader's crop on a JPEG cache through each image's window only (batchaug.data.roi_crop):
the same batches, bit for bit, and the same draws (keyed, or the same global random numbers
consumed) as the full decode into a padded batch + the crop stage."""
import io

import numpy as np
import pytest
import torch
from PIL import Image

import batchaug as B
from batchaug.data import jpeg, roi_crop, roi_decode

needs_roi = pytest.mark.skipif(not roi_decode.available(), reason="nvImageCodec is not installed")

# (height, width): odd sizes, both orientations, some smaller than the crops below
SIZES = [(67, 91), (101, 53), (130, 177), (257, 199), (95, 143), (83, 61), (64, 64), (150, 40),
         (45, 120), (211, 97), (120, 120), (77, 230)]


class JpegFiles:
    """JPEG files (their bytes, as an ImageFolder of photos gives them) cut from a photo."""

    classes = ["a", "b"]

    def __init__(self, gray=False, progressive=False):
        skimage_data = pytest.importorskip("skimage.data")  # a test extra

        self.items = []
        photo = skimage_data.astronaut()
        rng = np.random.default_rng(0)
        for k, (h, w) in enumerate(SIZES):
            t, l = int(rng.integers(0, 512 - h)), int(rng.integers(0, 512 - w))
            image = Image.fromarray(photo[t:t + h, l:l + w])
            if gray:
                image = image.convert("L")
            buf = io.BytesIO()
            image.save(buf, format="JPEG", quality=90, progressive=progressive,
                       subsampling=k % 3)
            self.items.append((buf.getvalue(), k % 2))

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        data, label = self.items[i]
        return Image.open(io.BytesIO(data)), label


def _cache(**kw):
    return B.DeviceCache.from_dataset(JpegFiles(**kw), device="cpu", storage="jpeg",
                                      progress=False)


CROPS = {
    "rrc": lambda: B.RandomResizedCrop(48),
    "flips_rrc_flip": lambda: B.Augment(B.RandomHorizontalFlip(), B.RandomVerticalFlip(),
                                        B.RandomResizedCrop((40, 56), interpolation="bicubic"),
                                        B.RandomHorizontalFlip()),
    "timm": lambda: B.Augment(B.RandomHorizontalFlip(), B.TimmRandomResizedCrop(32)),
    "random_crop": lambda: B.Augment(B.RandomVerticalFlip(),
                                     B.RandomCrop(96, padding=40, pad_if_needed=True,
                                                  fill=[7, 80, 200])),
    # windows wholly in the padding too
    "random_crop_far": lambda: B.RandomCrop(24, padding=70, pad_if_needed=True, fill=5),
    "center_crop": lambda: B.Augment(B.RandomHorizontalFlip(), B.CenterCrop((80, 110))),
}


def _batches(cache, crop, keyed, roi, monkeypatch, epochs=2, train=True, **kw):
    """Every batch of ``epochs`` epochs and, after each, a number drawn from the global
    generator (what a model's augmentation would draw next)."""
    with monkeypatch.context() as m:
        if not roi:
            m.setattr(roi_decode, "available", lambda: False)
        crop = crop if train else crop.eval()
        loader = B.DeviceLoader(cache, 5, seed=3, return_keys=keyed, crop=crop, **kw)
        assert (loader.window_decode == "roi") == roi, loader.window_decode
        torch.manual_seed(11)
        out = []
        for _ in range(epochs):
            for batch in loader:
                out.append((batch[0], batch[1], torch.rand(2)))
        return out, torch.get_rng_state()


@needs_roi
@pytest.mark.parametrize("keyed,threads", [(False, 1), (True, 1), (False, 3), (True, 2)])
@pytest.mark.parametrize("name", sorted(CROPS))
def test_window_decode_gives_the_full_decodes_batches_and_draws(name, keyed, threads,
                                                                monkeypatch):
    cache = _cache()
    ref, ref_state = _batches(cache, CROPS[name](), keyed, False, monkeypatch,
                              decode_threads=threads)
    got, state = _batches(cache, CROPS[name](), keyed, True, monkeypatch,
                          decode_threads=threads)
    assert len(got) == len(ref)
    for (x, y, r), (xr, yr, rr) in zip(got, ref):
        assert x.dtype == xr.dtype and x.shape == xr.shape
        assert torch.equal(x, xr), (x.int() - xr.int()).abs().max()
        assert torch.equal(y, yr) and torch.equal(r, rr)
    assert torch.equal(state, ref_state)  # the global generator advanced identically


@needs_roi
@pytest.mark.parametrize("name", ["rrc", "timm", "random_crop", "flips_rrc_flip"])
def test_window_decode_in_eval_and_gray_progressive_files(name, monkeypatch):
    for kw, train in (({}, False), ({"gray": True, "progressive": True}, True)):
        if name == "random_crop" and kw:
            continue  # its fill has 3 values
        cache = _cache(**kw)
        ref, _ = _batches(cache, CROPS[name](), False, False, monkeypatch, 1, train,
                          prefetch=0)
        got, _ = _batches(cache, CROPS[name](), False, True, monkeypatch, 1, train,
                          prefetch=0)
        assert all(torch.equal(a[0], b[0]) for a, b in zip(got, ref))


@needs_roi
def test_window_decode_decodes_no_whole_image_and_pads_no_batch(monkeypatch):
    cache = _cache()
    calls = {"windows": 0}
    real = roi_decode.decode_windows

    def counted(data, windows, threads):
        calls["windows"] += len(data)
        return real(data, windows, threads)

    def refuse(*args, **kwargs):
        raise AssertionError("a whole image was decoded or a padded batch made")

    monkeypatch.setattr(roi_decode, "decode_windows", counted)
    monkeypatch.setattr(jpeg, "_decode_cpu", refuse)
    monkeypatch.setattr("batchaug.data.ragged_batches.pad_images", refuse)
    loader = B.DeviceLoader(cache, 4, crop=B.RandomResizedCrop(32), prefetch=0,
                            decode_threads=1)
    assert sum(x.shape[0] for x, _ in loader) == len(cache)
    assert calls["windows"] == len(cache)  # every image through its window only


def test_plan_says_why_a_crop_decodes_whole_images():
    assert roi_crop.plan([B.RandomRotation(10), B.RandomResizedCrop(8)])[1].startswith(
        "step 0 is RandomRotation: only flips, then RandomResizedCrop")
    assert roi_crop.plan([B.RandomHorizontalFlip(), B.Resize((8, 8))])[1].startswith(
        "step 1 is Resize")
    assert "antialias=False" in roi_crop.plan([B.RandomResizedCrop(8, antialias=False)])[1]
    assert "padding_mode='edge'" in roi_crop.plan(
        [B.RandomCrop(8, pad_if_needed=True, padding_mode="edge")])[1]
    assert "masks or boxes" in roi_crop.plan([B.CenterCrop(8)], targets=True)[1]
    assert "cuda" in roi_crop.plan([B.CenterCrop(8)], torch.device("cuda"))[1]


def test_without_nvimagecodec_the_loader_decodes_whole_images(monkeypatch):
    monkeypatch.setattr(roi_decode, "available", lambda: False)
    cache = _cache()
    loader = B.DeviceLoader(cache, 4, crop=B.RandomResizedCrop(32), prefetch=0)
    assert loader.window_decode.startswith("nvImageCodec is not installed")
    assert sum(x.shape[0] for x, _ in loader) == len(cache)


@pytest.mark.parametrize("name", ["rrc", "timm", "random_crop", "center_crop"])
def test_window_sized_is_the_sized_draw(name):
    """window_sized draws what with_sizes draws (same numbers consumed) from sizes alone."""
    t = B.Augment(CROPS[name]())[-1] if name != "rrc" else CROPS[name]()
    t = t[-1] if isinstance(t, B.Augment) else t
    sizes = torch.tensor(SIZES)
    keys = torch.arange(len(SIZES), dtype=torch.int64) * 7919
    x = torch.zeros(len(SIZES), 3, 260, 240, dtype=torch.uint8)
    for k in (None, keys):
        torch.manual_seed(0)
        win = t.window_sized(sizes, k)
        after = torch.get_rng_state()
        torch.manual_seed(0)
        if isinstance(t, B.TimmRandomResizedCrop):
            params = t.crop_params(x, k, sizes)
        else:
            params = t.make_params_sized(x, sizes, k)
        assert torch.equal(torch.get_rng_state(), after)
        if isinstance(t, (B.RandomCrop, B.CenterCrop)):
            params = params + (torch.full_like(params[0], t.height),
                               torch.full_like(params[0], t.width))
        assert torch.equal(win, torch.stack(params, 1))


@needs_roi
@pytest.mark.parametrize("keyed", [False, True])
def test_decode_scale_auto_keeps_the_draws_and_changes_pixels_a_little(keyed, monkeypatch):
    """decode_scale="auto": the same draws; windows too small for a DCT scale are exact, the
    others decoded at 1/2..1/8 (fewer pixels) and within a few levels of the full decode."""
    pytest.importorskip("simplejpeg")
    import simplejpeg

    cache = _cache()
    crop = lambda: B.Augment(B.RandomHorizontalFlip(), B.RandomResizedCrop(24))  # noqa: E731
    ref, ref_state = _batches(cache, crop(), keyed, True, monkeypatch, 1, prefetch=0)
    scales = []
    real = simplejpeg.decode_jpeg

    def spy(data, **kw):
        out = real(data, **kw)
        scales.append(kw["min_factor"])
        return out

    monkeypatch.setattr(simplejpeg, "decode_jpeg", spy)
    got, state = _batches(cache, crop(), keyed, True, monkeypatch, 1, prefetch=0,
                          decode_scale="auto")
    assert torch.equal(state, ref_state)
    assert scales and set(scales) <= {2, 4, 8} and len(scales) < len(cache)
    x, xr = torch.cat([g[0] for g in got]), torch.cat([r[0] for r in ref])
    same = [torch.equal(a, b) for a, b in zip(x, xr)]
    assert sum(same) == len(cache) - len(scales)  # the windows decoded at full size: exact
    diff = (x.float() - xr.float()).abs()
    assert 0 < diff.mean() < 4, diff.mean()


def test_decode_scale_is_checked():
    cache = _cache()
    with pytest.raises(ValueError, match="decode_scale must be one of"):
        B.DeviceLoader(cache, 4, crop=B.RandomResizedCrop(32), decode_scale="half")


def test_dct_denominator_keeps_the_window_at_least_the_output():
    assert roi_crop.dct_denominator(2000, 1800, 224, 224) == 8
    assert roi_crop.dct_denominator(1792, 1791, 224, 224) == 4
    assert roi_crop.dct_denominator(448, 448, 224, 224) == 2
    assert roi_crop.dct_denominator(447, 900, 224, 224) == 1


@needs_roi
def test_window_decode_from_disk_and_resumed(tmp_path, monkeypatch):
    """A saved JPEG cache read from disk gives the in-memory cache's batches, and a loader
    resumed after its first batch gives the rest of them."""
    cache = _cache()
    cache.save(tmp_path / "c")
    disk = B.DeviceCache.load(tmp_path / "c", device="cpu", placement="disk")
    crop = lambda: B.Augment(B.RandomResizedCrop(40), B.RandomHorizontalFlip())  # noqa: E731
    ref, _ = _batches(cache, crop(), True, True, monkeypatch, 1)
    got, _ = _batches(disk, crop(), True, True, monkeypatch, 1)
    assert all(torch.equal(a[0], b[0]) for a, b in zip(got, ref)) and len(got) == len(ref)
    first = B.DeviceLoader(disk, 5, seed=3, return_keys=True, crop=crop())
    it = iter(first)
    next(it)
    resumed = B.DeviceLoader(disk, 5, seed=3, return_keys=True, crop=crop())
    resumed.load_state_dict(first.state_dict())
    rest = [x for x, _, _ in resumed]
    assert len(rest) == len(ref) - 1
    assert all(torch.equal(a, b[0]) for a, b in zip(rest, ref[1:]))
