"""The loader's crop on a JPEG cache through each image's window only (batchaug.data.roi_crop):
the same batches, bit for bit, and the same draws (keyed, or the same global random numbers
consumed) as the full decode into a padded batch + the crop stage."""
import io
import time

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
    # a warp before RandomResizedCrop: each box decoded through the warp's preimage
    "rotation_rrc_flip": lambda: B.Augment(B.RandomRotation(30), B.RandomResizedCrop(48),
                                           B.RandomHorizontalFlip()),
    "flips_affine_rrc": lambda: B.Augment(
        B.RandomHorizontalFlip(), B.RandomVerticalFlip(),
        B.RandomAffine(20, translate=(0.1, 0.2), scale=(0.7, 1.3), shear=(5, 10, -5, 5),
                       fill=[10, 200, 30]),
        B.RandomResizedCrop((40, 56), scale=(0.02, 1.0), interpolation="bicubic")),
    # nearest with a fill; translations that take most boxes off the photo
    "rotation_nearest_far": lambda: B.Augment(
        B.RandomAffine(60, translate=(0.9, 0.9), interpolation="nearest", fill=7),
        B.RandomResizedCrop(32)),
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
@pytest.mark.parametrize("name", ["rrc", "timm", "random_crop", "flips_rrc_flip",
                                  "rotation_rrc_flip"])
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
@pytest.mark.parametrize("warp", [False, True])
def test_window_decode_decodes_no_whole_image_and_pads_no_batch(warp, monkeypatch):
    cache = _cache()
    calls = {"windows": 0, "pixels": 0}
    real = roi_decode.decode_windows

    def counted(data, windows, threads):
        calls["windows"] += len(data)
        calls["pixels"] += sum(h * w for _, _, h, w in windows)
        return real(data, windows, threads)

    def refuse(*args, **kwargs):
        raise AssertionError("a whole image was decoded or a padded batch made")

    monkeypatch.setattr(roi_decode, "decode_windows", counted)
    monkeypatch.setattr(jpeg, "_decode_cpu", refuse)
    monkeypatch.setattr("batchaug.data.ragged_batches.pad_images", refuse)
    crop = B.RandomResizedCrop(32, scale=(0.05, 0.3))
    loader = B.DeviceLoader(cache, 4, crop=B.Augment(B.RandomRotation(30), crop) if warp
                            else crop, prefetch=0, decode_threads=1)
    assert sum(x.shape[0] for x, _ in loader) == len(cache)
    assert calls["windows"] == len(cache)  # every image through its window only
    # boxes of 5-30 % of the photo: their preimages (rotated, with taps) stay well within it
    assert calls["pixels"] < 0.8 * sum(h * w for h, w in SIZES)


@needs_roi
@pytest.mark.parametrize("threads", [1, 3])
def test_window_decode_resizes_on_one_intra_op_thread_and_restores_the_count(threads,
                                                                            monkeypatch):
    # each image's resize is too small to split over OpenMP threads (image_threads: the
    # images are split over threads instead); the caller's count comes back after the batch
    counts = []
    real = roi_crop.resize_each

    def counted(*args, **kwargs):
        counts.append(torch.get_num_threads())
        return real(*args, **kwargs)

    monkeypatch.setattr(roi_crop, "resize_each", counted)
    loader = B.DeviceLoader(_cache(), 4, crop=B.RandomResizedCrop(32), prefetch=0,
                            decode_threads=threads)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        assert sum(x.shape[0] for x, _ in loader) == len(SIZES)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
    assert counts == [1] * len(SIZES)


def test_plan_says_why_a_crop_decodes_whole_images():
    assert roi_crop.plan([B.RandomPerspective(), B.RandomResizedCrop(8)])[1].startswith(
        "step 0 is RandomPerspective: only flips, then RandomResizedCrop")
    assert roi_crop.plan([B.RandomRotation(10), B.CenterCrop(8)])[1].startswith(
        "step 0 is RandomRotation")  # a warp reaches the window decode before RRC only
    roi, why = roi_crop.plan([B.RandomRotation(10), B.RandomResizedCrop(8)],
                             decode_scale="auto")  # through a warp: exact windows
    assert roi is not None or why.startswith("nvImageCodec")
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
def test_window_is_the_sized_draw(name):
    """window draws what with_sizes draws (same numbers consumed) from sizes alone."""
    t = B.Augment(CROPS[name]())[-1] if name != "rrc" else CROPS[name]()
    t = t[-1] if isinstance(t, B.Augment) else t
    sizes = torch.tensor(SIZES)
    keys = torch.arange(len(SIZES), dtype=torch.int64) * 7919
    x = torch.zeros(len(SIZES), 3, 260, 240, dtype=torch.uint8)
    for k in (None, keys):
        torch.manual_seed(0)
        win = t.window(sizes, k)
        after = torch.get_rng_state()
        torch.manual_seed(0)
        if isinstance(t, B.TimmRandomResizedCrop):
            params = t.crop_params(x, k, sizes)
        else:
            params = t.make_params(x, k, sizes)
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


# --- issue 35 ---------------------------------------------------------------------------
@needs_roi
@pytest.mark.parametrize("keyed", [False, True])
def test_two_horizontal_flips_before_the_crop_cancel(keyed, monkeypatch):
    """Two flips drawn before the window: an image flipped twice is not flipped (XOR)."""
    cache = _cache()
    crop = lambda: B.Augment(B.RandomHorizontalFlip(), B.RandomHorizontalFlip(),  # noqa: E731
                             B.RandomVerticalFlip(), B.RandomVerticalFlip(),
                             B.RandomResizedCrop((30, 44)))
    ref, _ = _batches(cache, crop(), keyed, False, monkeypatch, 1, prefetch=0)
    got, _ = _batches(cache, crop(), keyed, True, monkeypatch, 1, prefetch=0)
    assert all(torch.equal(a[0], b[0]) for a, b in zip(got, ref))


class NoisePhotos:
    """Small 4:2:0 JPEGs of noise (where a chroma difference shows)."""

    classes = ["a"]

    def __init__(self, n=10, h=17, w=9):
        self.items = []
        for k in range(n):
            array = np.random.default_rng(k).integers(0, 256, (h, w, 3), dtype=np.uint8)
            buf = io.BytesIO()
            Image.fromarray(array).save(buf, format="JPEG", quality=90, subsampling=2)
            self.items.append(buf.getvalue())

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return Image.open(io.BytesIO(self.items[i])), 0


@needs_roi
def test_one_pixel_wide_crops_equal_the_full_decode(monkeypatch):
    """Item 1: RandomCrop((8, 1)) on 17x9 4:2:0 photos, each image equal to the full decode's
    crop with the same draws."""
    cache = B.DeviceCache.from_dataset(NoisePhotos(), device="cpu", storage="jpeg",
                                       progress=False)
    crop = lambda: B.RandomCrop((8, 1), pad_if_needed=True)  # noqa: E731
    ref, _ = _batches(cache, crop(), True, False, monkeypatch, 4, prefetch=0)
    got, _ = _batches(cache, crop(), True, True, monkeypatch, 4, prefetch=0)
    assert all(torch.equal(a[0], b[0]) for a, b in zip(got, ref))


@needs_roi
@pytest.mark.parametrize("keyed,prefetch", [(False, 0), (True, 0), (False, 2), (True, 2)])
def test_set_crop_takes_effect_from_the_next_batch(keyed, prefetch, monkeypatch):
    """Item 5: set_crop mid-epoch (to a window crop, then to one that decodes whole images)
    gives, batch for batch, what the full-decode loader gives with the same calls."""
    cache = _cache()

    def run(roi):
        with monkeypatch.context() as m:
            if not roi:
                m.setattr(roi_decode, "available", lambda: False)
            loader = B.DeviceLoader(cache, 3, seed=3, return_keys=keyed, prefetch=prefetch,
                                    crop=B.RandomResizedCrop(8))
            assert (loader.window_decode == "roi") == roi
            torch.manual_seed(5)
            out = []
            for i, batch in enumerate(loader):
                out.append(batch[0])
                if prefetch:  # the reader has made the next batches with the old crop
                    time.sleep(0.3)
                if i == 0:
                    loader.set_crop(B.RandomResizedCrop((16, 12)))
                if i == 1:
                    loader.set_crop(B.Augment(B.RandomRotation(10), B.CenterCrop(12)))
            return out

    ref, got = run(False), run(True)
    assert [x.shape[-2:] for x in got] == [(8, 8), (16, 12)] + [(12, 12)] * 2
    assert len(got) == len(ref) and all(torch.equal(a, b) for a, b in zip(got, ref))


@needs_roi
def test_decode_scale_auto_picks_the_scale_by_height_and_width(monkeypatch):
    """A non-square output: the DCT scale is chosen from the window's height against the
    output's height and its width against the output's width (the largest that keeps both)."""
    pytest.importorskip("simplejpeg")
    chosen = []
    scaled, exact = roi_crop._scaled_window, roi_crop.decode_jpegs

    def spy_scaled(data, window, size, den, channels, name):
        chosen.append((window[2], window[3], den))
        return scaled(data, window, size, den, channels, name)

    def spy_exact(data, device, threads, names, windows):
        chosen.extend((h, w, 1) for h, w in windows[:, 2:].tolist())
        return exact(data, device, threads, names, windows=windows)

    monkeypatch.setattr(roi_crop, "_scaled_window", spy_scaled)
    monkeypatch.setattr(roi_crop, "decode_jpegs", spy_exact)
    cache = _cache()
    loader = B.DeviceLoader(cache, 4, crop=B.RandomResizedCrop((40, 12), scale=(0.5, 1.0)),
                            decode_scale="auto", prefetch=0)
    for _ in loader:
        pass
    assert len(chosen) == len(cache) and any(den > 1 for _, _, den in chosen)
    for height, width, den in chosen:
        assert height // den >= 40 and width // den >= 12, (height, width, den)
        bigger = {1: 2, 2: 4, 4: 8}.get(den)
        assert bigger is None or height // bigger < 40 or width // bigger < 12, \
            (height, width, den)


def test_scaled_window_edges_are_rounded_to_the_nearest_scaled_pixel():
    pytest.importorskip("simplejpeg")
    import simplejpeg

    photo = np.random.default_rng(0).integers(0, 256, (100, 100, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(photo).save(buf, format="JPEG", quality=90)
    data = torch.frombuffer(bytearray(buf.getvalue()), dtype=torch.uint8)
    scaled = torch.from_numpy(simplejpeg.decode_jpeg(buf.getvalue(), colorspace="RGB",
                                                     min_height=13, min_width=13,
                                                     min_factor=8)).permute(2, 0, 1)
    assert scaled.shape[1:] == (13, 13)  # ceil(100 / 8)
    # top 30 -> 3.9 -> 4, bottom 70 -> 9.1 -> 9; left 20 -> 2.6 -> 3, right 77 -> 10.01 -> 10
    got = roi_crop._scaled_window(data, [30, 20, 40, 57], [100, 100], 8, 3, 0)
    assert torch.equal(got, scaled[:, 4:9, 3:10])


@pytest.mark.parametrize("rotation", [True, False])
def test_batched_warp_matrices_equal_the_one_image_matrices(rotation):
    """The window-through-warp path builds every image's matrix in one call (no ``center``):
    the same float64 values as ``_sized._one_affine``'s one-image calls, which the whole
    decode's crop stage runs (so the same grids and pixels)."""
    from batchaug.functional._sized import _one_affine

    g = torch.Generator().manual_seed(0)
    n = 4000
    angle = torch.rand(n, generator=g) * 360 - 180
    angle[:4] = torch.tensor([0.0, 180.0, -180.0, 90.0])
    translate = (torch.rand(n, 2, generator=g) - 0.5) * 200
    scale = torch.rand(n, generator=g) + 0.5
    shear = (torch.rand(n, 2, generator=g) - 0.5) * 40
    got = roi_crop._affine_matrices(angle, translate, scale, shear, rotation, None)
    for i in range(n):
        h, w = 50 + i % 300, 40 + i % 170
        want = _one_affine(angle, translate, scale, shear, rotation, i, h, w, None)
        assert torch.equal(got[i:i + 1], want), i
    assert roi_crop._affine_matrices(angle, translate, scale, shear, rotation,
                                     [3.0, 4.0]) is None  # per image: depends on the size


@needs_roi
def test_decode_scale_auto_with_a_warp_decodes_the_exact_windows(monkeypatch):
    """decode_scale="auto" with a rotation before the crop: still only the windows through
    the warp are decoded (not whole images), at full size: the whole decode's batches."""
    pytest.importorskip("simplejpeg")
    cache = _cache()
    crop = lambda: B.Augment(B.RandomRotation(30), B.RandomResizedCrop(24))  # noqa: E731
    ref, ref_state = _batches(cache, crop(), False, False, monkeypatch, 1)
    with monkeypatch.context() as m:
        def refuse(*args, **kwargs):
            raise AssertionError("a whole image was decoded")

        m.setattr(jpeg, "_decode_cpu", refuse)
        got, state = _batches(cache, crop(), False, True, monkeypatch, 1,
                              decode_scale="auto")
    assert torch.equal(state, ref_state)
    for (x, y, r), (xr, yr, rr) in zip(got, ref):
        assert torch.equal(x, xr) and torch.equal(y, yr) and torch.equal(r, rr)


# --- issue 37 ---------------------------------------------------------------------------
class Decoded:
    """A JPEG cache's images as its full decode gives them (CHW uint8), with its labels: a raw
    ragged cache of the same pixels."""

    classes = JpegFiles.classes

    def __init__(self, cache):
        self.cache = cache

    def __len__(self):
        return len(self.cache)

    def __getitem__(self, i):
        return self.cache.images.image(i), int(self.cache.labels[i])


@needs_roi
@pytest.mark.parametrize("keyed,prefetch", [(False, 0), (True, 2)])
def test_set_crop_mid_epoch_on_a_window_decode_cache_equals_the_raw_cache(keyed, prefetch):
    """set_crop between batches changes the next batches of a window-decoded JPEG cache
    exactly as those of a raw cache holding the same pixels (to a warp + crop through the
    window, to a crop that decodes whole images, back to a window crop)."""
    cache = _cache()
    raw = B.DeviceCache.from_dataset(Decoded(cache), device="cpu", progress=False)
    crops = [B.RandomResizedCrop((16, 12)),
             B.Augment(B.RandomRotation(10), B.CenterCrop(12)),
             B.Augment(B.RandomHorizontalFlip(), B.RandomAffine(20, scale=(0.8, 1.2)),
                       B.RandomResizedCrop(10))]

    def run(cache):
        loader = B.DeviceLoader(cache, 2, seed=3, return_keys=keyed, prefetch=prefetch,
                                crop=B.RandomResizedCrop(8))
        decodes = []
        torch.manual_seed(5)
        out = []
        for i, batch in enumerate(loader):
            out.append(batch[0])
            if prefetch:  # the reader has made the next batches with the old crop
                time.sleep(0.2)
            if i < len(crops):
                loader.set_crop(crops[i])
                decodes.append(loader.window_decode)
        return out, decodes

    got, decodes = run(cache)
    assert decodes[0] == decodes[2] == "roi" and decodes[1] != "roi"
    ref, _ = run(raw)
    assert [x.shape[-2:] for x in got] == [(8, 8), (16, 12), (12, 12)] + [(10, 10)] * 3
    assert len(got) == len(ref) and all(torch.equal(a, b) for a, b in zip(got, ref))


class MyFlip(B.RandomHorizontalFlip):
    pass


class MyRotation(B.RandomRotation):
    pass


class MyCrop(B.RandomResizedCrop):
    pass


@needs_roi
@pytest.mark.parametrize("keyed", [False, True])
def test_a_users_subclasses_reach_the_window_decode(keyed, monkeypatch):
    """Subclasses of the flips, the warps and the crops are decoded through their windows
    (the steps' own draws and window methods), with the full decode's batches and draws."""
    crop = lambda: B.Augment(MyFlip(), MyRotation(15), MyCrop(20), MyFlip())  # noqa: E731
    assert roi_crop.plan(list(crop()))[0] is not None
    cache = _cache()
    ref, ref_state = _batches(cache, crop(), keyed, False, monkeypatch, 1, prefetch=0)
    got, state = _batches(cache, crop(), keyed, True, monkeypatch, 1, prefetch=0)
    assert len(got) == len(ref) and torch.equal(state, ref_state)
    assert all(torch.equal(a[0], b[0]) for a, b in zip(got, ref))


class MyCropOwnPixels(B.RandomResizedCrop):
    def apply_image(self, x, params, sizes=None):
        return 255 - super().apply_image(x, params, sizes)


class MyFlipOwnDraw(B.RandomHorizontalFlip):
    def make_params(self, x, keys=None, sizes=None):
        return torch.ones_like(super().make_params(x, keys, sizes))


@pytest.mark.parametrize("steps,name,method", [
    (lambda: [MyCropOwnPixels(20)], "MyCropOwnPixels", "apply_image"),
    (lambda: [MyFlipOwnDraw(), B.RandomResizedCrop(20)], "MyFlipOwnDraw", "make_params"),
])
def test_a_subclass_with_its_own_pixels_or_draws_is_decoded_whole(steps, name, method):
    """The window decode runs the library class's draw and kernels in a step's place: a
    subclass that overrides them must not get the base class's pixels silently."""
    p, why = roi_crop.plan(steps())
    assert p is None and name in why and method in why


@needs_roi
def test_a_subclass_with_its_own_pixels_gets_its_own_pixels_through_the_loader():
    cache = _cache()
    loaders = [B.DeviceLoader(cache, 5, seed=3, crop=B.Augment(c(20)))
               for c in (MyCropOwnPixels, B.RandomResizedCrop)]
    assert [ld.window_decode for ld in loaders][1] == "roi"
    assert loaders[0].window_decode != "roi"
    torch.manual_seed(11)
    mine = [b[0] for b in loaders[0]]
    torch.manual_seed(11)
    base = [b[0] for b in loaders[1]]
    assert len(mine) == len(base) and all(torch.equal(a, 255 - b) for a, b in zip(mine, base))
