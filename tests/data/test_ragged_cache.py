"""Ragged caches: images at their own sizes and JPEG storage, from dataset to loader.

References come from torchvision (``decode_jpeg`` of the stored bytes, ``center_crop``) and from
the dataset itself, never from the cache under test.
"""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
import torchvision.transforms.v2.functional as TF
from torchvision.io import decode_jpeg

from batchaug import DeviceCache, DeviceLoader
from batchaug.compose import Augment
from batchaug.data import atomic, write_cache
from batchaug.data.jpeg import decode_jpegs
from batchaug.data.format import CacheFormatError
from batchaug.transforms import CenterCrop, RandomHorizontalFlip, RandomResizedCrop

HERE = Path(__file__).parent
# torchvision's decoder is the reference; it warns that TorchCodec supersedes it
pytestmark = pytest.mark.filterwarnings("ignore:The image decoding:DeprecationWarning")
FILES = ("images.bin", "index.npy", "labels.npy", "meta.json")


class Photos:
    """``n`` deterministic uint8 images of varying sizes (a pure function of the index): smooth
    gradients plus noise, so that JPEG behaves as on photos. ``die_at``: ``os._exit`` there (a
    killed writer); ``interrupt_at``: KeyboardInterrupt; ``channels``: index -> channel count."""

    classes = ["a", "b", "c"]

    def __init__(self, n, die_at=None, interrupt_at=None, channels=None, bad=()):
        self.n, self.die_at, self.interrupt_at = n, die_at, interrupt_at
        self.channels, self.bad = dict(channels or {}), set(bad)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i == self.die_at:
            os._exit(3)
        if i == self.interrupt_at:
            raise KeyboardInterrupt
        if i in self.bad:
            raise OSError("image file is truncated")
        h, w = 17 + (i * 7) % 23, 13 + (i * 5) % 29
        g = torch.Generator().manual_seed(i)
        y = torch.linspace(0, 1, h).view(1, h, 1)
        x = torch.linspace(0, 1, w).view(1, 1, w)
        c = self.channels.get(i, 3)
        base = (y * 160 + x * 80 + torch.rand(c, 1, 1, generator=g) * 15)
        noise = torch.randint(0, 12, (c, h, w), generator=g)
        return (base + noise).clamp(0, 255).to(torch.uint8), i % 3


def _meta_without_order(path: Path) -> dict:
    meta = json.loads((path / "meta.json").read_text())
    for key in ("order", "shuffle_seed"):  # only write_cache records the stored order
        meta["source"].pop(key, None)
    meta.pop("meta_sha256")
    return meta


def same_files(a: Path, b: Path) -> bool:
    """The same images.bin, index.npy and labels.npy, and meta.json but for the order record."""
    return sorted(os.listdir(a)) == sorted(FILES) == sorted(os.listdir(b)) and all(
        (a / f).read_bytes() == (b / f).read_bytes() for f in FILES[:3]) and (
        _meta_without_order(a) == _meta_without_order(b))


def stored_image(cache, i):
    """Image i from the stored bytes by torchvision's decoder (JPEG) or as the raw bytes."""
    raw = cache.images.bytes_of(i).cpu()
    if cache.storage == "jpeg":
        return decode_jpeg(raw)
    h, w = cache.sizes[i].tolist()
    return raw.view(-1, h, w)


# --- the data model -----------------------------------------------------------------------------
def test_ragged_round_trip_every_placement_and_shard(tmp_path):
    ds = Photos(30)
    cache = DeviceCache.from_dataset(ds, device="cpu", progress=False)
    assert cache.ragged and not cache.dense and cache.compact and cache.storage == "raw"
    assert cache.sizes.tolist() == [list(ds[i][0].shape[1:]) for i in range(30)]
    assert all(torch.equal(cache.image(i), ds[i][0]) for i in range(30))
    pixels = sum(ds[i][0].numel() for i in range(30))
    assert cache.images.data.numel() == pixels  # ragged: no padding anywhere
    cache.save(tmp_path / "c")
    meta = json.loads((tmp_path / "c" / "meta.json").read_text())
    assert meta["format_version"] == 2 and meta["ragged"] and meta["storage"] == "raw"
    assert (tmp_path / "c" / "images.bin").stat().st_size == pixels
    for placement in ("device", "host", "disk", "auto", None):
        got = DeviceCache.load(tmp_path / "c", device="cpu", placement=placement, verify=True)
        assert got.ragged and torch.equal(got.labels, cache.labels)
        assert all(torch.equal(got.image(i), ds[i][0]) for i in range(30)), placement
    parts = [DeviceCache.load(tmp_path / "c", device="cpu", shard=(r, 4), placement=p)
             for r, p in zip(range(4), ("device", "host", "disk", "auto"))]
    images = [p.image(i) for p in parts for i in range(len(p))]
    assert len(images) == 30 and all(torch.equal(a, ds[i][0]) for i, a in enumerate(images))
    assert parts[2].global_len == 30 and parts[2].shard == (2, 4)


def test_a_fixed_size_cache_is_still_written_and_read_as_version_1(tmp_path):
    cache = DeviceCache.from_tensors(torch.zeros(4, 3, 5, 5, dtype=torch.uint8), torch.arange(4),
                                     device="cpu")
    cache.save(tmp_path / "c")
    assert json.loads((tmp_path / "c" / "meta.json").read_text())["format_version"] == 1
    got = DeviceCache.load(tmp_path / "c", device="cpu")
    assert got.dense and not got.compact and not got.ragged and got.storage == "raw"
    assert got.sizes.tolist() == [[5, 5]] * 4 and got.image(2).shape == (3, 5, 5)


def test_jpeg_decodes_as_torchvision_decodes_the_same_bytes(tmp_path):
    ds = Photos(12)
    cache = DeviceCache.from_dataset(ds, device="cpu", storage="jpeg", quality=90,
                                     progress=False)
    assert cache.storage == "jpeg" and cache.images.quality == 90
    raw = [ds[i][0] for i in range(12)]
    ours = [cache.image(i) for i in range(12)]
    refs = [decode_jpeg(cache.images.bytes_of(i)) for i in range(12)]
    assert all(torch.equal(a, b) for a, b in zip(ours, refs))
    assert all(a.shape == r.shape for a, r in zip(ours, raw))
    # lossy but close, and smaller than the raw pixels
    assert max((a.float() - r.float()).abs().mean().item() for a, r in zip(ours, raw)) < 8
    assert cache.images.data.numel() < sum(r.numel() for r in raw)
    threaded = decode_jpegs([cache.images.bytes_of(i) for i in range(12)], torch.device("cpu"),
                            threads=3)
    assert all(torch.equal(a, b) for a, b in zip(threaded, refs))


@pytest.mark.parametrize("storage", ["raw", "jpeg"])
def test_write_cache_writes_what_save_writes_and_resumes_to_it(tmp_path, storage):
    ds = Photos(45)
    DeviceCache.from_dataset(ds, device="cpu", storage=storage, progress=False).save(
        tmp_path / "saved")
    r = write_cache(ds, tmp_path / "w", chunk_size=8, storage=storage, progress=False,
                    shuffle=False)
    assert same_files(tmp_path / "saved", tmp_path / "w")
    assert r.rows == 45 and r.storage == storage
    with pytest.raises(KeyboardInterrupt):
        write_cache(Photos(45, interrupt_at=30), tmp_path / "c", chunk_size=8, storage=storage,
                    progress=False, shuffle=False)
    assert not (tmp_path / "c").exists()
    r = write_cache(ds, tmp_path / "c", chunk_size=8, storage=storage, resume=True,
                    progress=False, shuffle=False)
    assert r.resumed_from == 24 and same_files(tmp_path / "saved", tmp_path / "c")


def test_jpeg_write_resumed_without_its_storage_is_refused(tmp_path):
    """A JPEG write interrupted, then resumed with storage left out, would go on as raw and
    leave a cache load refuses: a ValueError naming storage, the leftover kept for a resume
    with storage="jpeg" (and the other direction, raw resumed as JPEG, refused too)."""
    ds = Photos(45)
    clean = write_cache(ds, tmp_path / "clean", chunk_size=8, storage="jpeg", progress=False,
                        shuffle=False)
    assert clean.storage == "jpeg"
    for first, then in (("jpeg", {}), ("jpeg", {"storage": "raw"}), ("raw", {"storage": "jpeg"})):
        out = tmp_path / f"{first}-{len(then)}"
        with pytest.raises(KeyboardInterrupt):
            write_cache(Photos(45, interrupt_at=30), out, chunk_size=8, storage=first,
                        progress=False, shuffle=False)
        with pytest.raises(ValueError, match=f"storage='{first}', this one has storage="
                           f"'{then.get('storage', 'raw')}'; pass the same arguments"):
            write_cache(ds, out, chunk_size=8, resume=True, progress=False, shuffle=False, **then)
        assert not out.exists() and len(atomic.leftovers(out)) == 1
    r = write_cache(ds, tmp_path / "jpeg-0", chunk_size=8, storage="jpeg", resume=True,
                    progress=False, shuffle=False)
    assert r.resumed_from == 24 and same_files(tmp_path / "clean", tmp_path / "jpeg-0")
    assert DeviceCache.load(tmp_path / "jpeg-0", device="cpu").storage == "jpeg"


@pytest.mark.parametrize("storage", ["raw", "jpeg"])
def test_indexing_ragged_images_points_to_cache_image(storage):
    """cache.images[:4] on a ragged or JPEG cache: not "'RaggedImages' object is not
    subscriptable" but what works instead (cache.image(i))."""
    cache = DeviceCache.from_dataset(Photos(6), device="cpu", storage=storage, progress=False)
    assert not cache.dense
    what = "JPEG" if storage == "jpeg" else "ragged"
    for item in (slice(None, 4), 0, -1, torch.tensor([1, 2])):
        with pytest.raises(TypeError, match=rf"images of a {what} cache have their own sizes "
                           r"and cannot be indexed as one tensor; use cache\.image\(i\)"):
            cache.images[item]
    with pytest.raises(TypeError, match=r"use cache\.image\(i\)"):
        list(cache.images)
    assert cache.image(5).shape[0] == 3


class LateRagged(Photos):
    """The first ``fixed`` images share one size; the rest vary (raggedness found late)."""

    def __init__(self, n, fixed, **kw):
        super().__init__(n, **kw)
        self.fixed = fixed

    def __getitem__(self, i):
        image, label = super().__getitem__(i)
        return (TF.resize(image, [20, 16]) if i < self.fixed else image), label


def test_raggedness_found_late_gives_the_same_cache_both_ways(tmp_path):
    ds = LateRagged(80, fixed=70)  # found in from_dataset's second batch of 64
    cache = DeviceCache.from_dataset(ds, device="cpu", progress=False)  # rows moved over
    assert cache.ragged and all(torch.equal(cache.image(i), ds[i][0]) for i in range(80))
    cache.save(tmp_path / "saved")
    r = write_cache(ds, tmp_path / "w", chunk_size=8, progress=False,
                    shuffle=False)  # starts over, ragged
    assert r.rows == 80 and same_files(tmp_path / "saved", tmp_path / "w")
    fixed = write_cache(LateRagged(16, fixed=16), tmp_path / "f", chunk_size=8, progress=False)
    assert fixed.stored_bytes is None and (tmp_path / "f" / "images.npy").exists()


def test_skipped_images_and_workers_write_what_from_dataset_saves(tmp_path):
    ds = Photos(30, bad={3, 17})
    with pytest.warns(UserWarning, match="skipped 2 of 30"):
        DeviceCache.from_dataset(ds, device="cpu", storage="jpeg", skip_bad=True,
                                 progress=False).save(tmp_path / "saved")
    with pytest.warns(UserWarning, match="skipped 2 of 30"):
        r = write_cache(ds, tmp_path / "w", chunk_size=7, storage="jpeg", skip_bad=True,
                        num_workers=2, progress=False, shuffle=False)
    assert r.rows == 28 and [i for i, _ in r.skipped] == [3, 17]
    assert same_files(tmp_path / "saved", tmp_path / "w")


def test_ragged_rows_are_stored_in_the_seeded_shuffled_order(tmp_path):
    from batchaug.data.writer import stored_order

    ds = Photos(20)
    write_cache(ds, tmp_path / "c", chunk_size=6, seed=3, progress=False)
    cache = DeviceCache.load(tmp_path / "c", device="cpu")
    order = stored_order(20, True, 3)
    assert cache.ragged and cache.source["shuffle_seed"] == 3
    assert all(torch.equal(cache.image(k), ds[i][0]) for k, i in enumerate(order))
    assert cache.labels.tolist() == [ds[i][1] for i in order]


KILL = textwrap.dedent("""
    import sys
    sys.path.insert(0, {here!r})
    from test_ragged_cache import Photos
    from batchaug.data import write_cache
    write_cache(Photos({n}, die_at={die}), {out!r}, chunk_size={chunk}, storage="jpeg",
                progress=False, shuffle=False)
""")


def test_killed_jpeg_write_resumes_to_the_same_files(tmp_path):
    n, chunk, die = 40, 8, 29
    write_cache(Photos(n), tmp_path / "clean", chunk_size=chunk, storage="jpeg", progress=False,
                shuffle=False)
    out = tmp_path / "c"
    code = KILL.format(here=str(HERE), n=n, die=die, out=str(out), chunk=chunk)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 3, proc.stderr
    assert not out.exists() and len(atomic.leftovers(out)) == 1
    r = write_cache(Photos(n), out, chunk_size=chunk, storage="jpeg", resume=True,
                    progress=False, shuffle=False)
    assert r.resumed_from == 24 and same_files(tmp_path / "clean", out)
    assert atomic.leftovers(out) == []


# --- the loader ---------------------------------------------------------------------------------
@pytest.mark.parametrize("storage", ["raw", "jpeg"])
def test_loader_crops_each_stored_image_as_torchvision_every_placement(tmp_path, storage):
    ds = Photos(21)
    DeviceCache.from_dataset(ds, device="cpu", storage=storage, progress=False).save(
        tmp_path / "c")
    for placement in ("device", "host", "disk"):
        cache = DeviceCache.load(tmp_path / "c", device="cpu", placement=placement)
        refs = [TF.center_crop(stored_image(cache, i), [14, 12]) for i in range(21)]
        for prefetch in (0, 2):
            loader = DeviceLoader(cache, 8, crop=CenterCrop((14, 12)), prefetch=prefetch,
                                  return_keys=True, seed=5)
            batches = list(loader)
            idx = loader.indices(0)
            x = torch.cat([b[0] for b in batches])
            assert [b[0].shape[0] for b in batches] == [8, 8, 5]
            assert x.dtype == torch.uint8 and x.shape[1:] == (3, 14, 12)
            assert torch.equal(x, torch.stack([refs[i] for i in idx.tolist()]))
            assert torch.equal(torch.cat([b[1] for b in batches]), cache.labels[idx])
            assert torch.equal(torch.cat([b[2] for b in batches]), loader.keys(0))


def test_crop_on_a_fixed_cache_and_set_crop_between_epochs():
    images = torch.randint(0, 256, (10, 3, 20, 16), dtype=torch.uint8)
    cache = DeviceCache.from_tensors(images, torch.arange(10), device="cpu")
    loader = DeviceLoader(cache, 4, crop=CenterCrop(10), shuffle=False)
    x = torch.cat([b[0] for b in loader])
    assert torch.equal(x, TF.center_crop(images, [10, 10]))
    loader.set_crop(Augment(CenterCrop(12), CenterCrop(6)))
    x = torch.cat([b[0] for b in loader])
    assert torch.equal(x, TF.center_crop(images, [6, 6]))
    ragged = DeviceCache.from_dataset(Photos(9), device="cpu", progress=False)
    loader = DeviceLoader(ragged, 4, crop=RandomResizedCrop(16))
    assert {b[0].shape[-1] for b in loader} == {16}
    loader.set_crop(RandomResizedCrop(24))  # progressive resizing: nothing rebuilt
    assert {b[0].shape[-1] for b in loader} == {24}


# --- bad input ----------------------------------------------------------------------------------
def test_corrupted_jpeg_cache_is_named_never_decoded_to_garbage(tmp_path):
    DeviceCache.from_dataset(Photos(10), device="cpu", storage="jpeg", progress=False).save(
        tmp_path / "c")
    index = np.load(tmp_path / "c" / "index.npy")
    k = 6
    pos = int(index[k, 0] + index[k, 1] // 2)  # inside image 6's entropy-coded data
    with open(tmp_path / "c" / "images.bin", "r+b") as f:
        f.seek(pos)
        byte = f.read(1)
        f.seek(pos)
        f.write(bytes([byte[0] ^ 0x10]))
    with pytest.raises(CacheFormatError, match="images.bin: SHA-256 does not match"):
        DeviceCache.load(tmp_path / "c", device="cpu", verify=True)
    for placement in ("device", "disk"):
        cache = DeviceCache.load(tmp_path / "c", device="cpu", placement=placement)
        with pytest.raises(CacheFormatError, match=r"sample 6: its JPEG bytes do not match"):
            list(DeviceLoader(cache, 4, crop=CenterCrop(8)))
        with pytest.raises(CacheFormatError, match=r"sample 6: .*verify=True"):
            cache.image(6)
    shard = DeviceCache.load(tmp_path / "c", device="cpu", shard=(1, 2))  # rows 5..9
    with pytest.raises(CacheFormatError, match=r"sample 6:"):  # the index in the whole cache
        list(DeviceLoader(shard, 5, crop=CenterCrop(8)))


def test_bad_input_is_refused_at_construction_with_the_fix(tmp_path):
    with pytest.raises(ValueError, match=r"dataset\[4\] has 1 channel.*dataset\[0\] has 3"):
        DeviceCache.from_dataset(Photos(8, channels={4: 1}), device="cpu", progress=False)
    for storage in ("raw", "jpeg"):  # (stored shuffled: either may come first)
        with pytest.raises(ValueError, match=r"different channel counts") as info:
            write_cache(Photos(8, channels={4: 1}), tmp_path / storage, storage=storage,
                        progress=False)
        assert "dataset[4]" in str(info.value) and "has 1 " in str(info.value)
    for q in (0, 101, True, 90.5, None):
        with pytest.raises(ValueError, match=r"quality must be an int in 1\.\.100"):
            DeviceCache.from_dataset(Photos(3), device="cpu", storage="jpeg", quality=q)
    with pytest.raises(ValueError, match=r"storage='jpeg' stores 8-bit images: pass dtype=torch.uint8"):
        write_cache(Photos(3), tmp_path / "f", storage="jpeg", dtype=torch.float32)
    with pytest.raises(ValueError, match=r"storage must be one of \['raw', 'jpeg'\]"):
        DeviceCache.from_dataset(Photos(3), device="cpu", storage="png")
    # floating caches cannot hold images of different sizes: both writers say so, the same way
    with pytest.raises(ValueError) as a:
        DeviceCache.from_dataset(Photos(4), device="cpu", dtype=torch.float32, progress=False)
    with pytest.raises(ValueError) as b:
        write_cache(Photos(4), tmp_path / "g", dtype=torch.float32, progress=False)
    assert str(a.value) == str(b.value) and "dataset[1]" in str(a.value)
    assert not any(p.name in ("f", "g") for p in tmp_path.iterdir())
    ragged = DeviceCache.from_dataset(Photos(5), device="cpu", progress=False)
    with pytest.raises(ValueError, match="crop is required for a ragged cache"):
        DeviceLoader(ragged, 2)
    with pytest.raises(ValueError, match="crop must end in a transform that fixes the output"):
        DeviceLoader(ragged, 2, crop=RandomHorizontalFlip())
    loader = DeviceLoader(ragged, 2, crop=CenterCrop(4))
    with pytest.raises(ValueError, match="crop is required"):
        loader.set_crop(None)


# --- the command line ---------------------------------------------------------------------------
def test_cli_build_keeps_the_aspect_stores_jpeg_and_info_says_so(tmp_path, capsys):
    from PIL import Image
    from torchvision.transforms import Resize

    from batchaug.cli import main

    sizes = [(30, 40), (44, 26), (36, 36), (25, 50)]
    for k, (h, w) in enumerate(sizes):
        (tmp_path / "src" / f"c{k % 2}").mkdir(parents=True, exist_ok=True)
        pixels = TF.resize(Photos(k + 1)[k][0], [h, w]).permute(1, 2, 0)
        Image.fromarray(pixels.numpy()).save(tmp_path / "src" / f"c{k % 2}" / f"{k}.png")
    src, raw, jpg = str(tmp_path / "src"), str(tmp_path / "raw"), str(tmp_path / "jpg")
    assert main(["cache", "build", src, raw, "--resize", "20", "--max-size", "30"]) == 0
    assert main(["cache", "build", src, jpg, "--resize", "20", "--storage", "jpeg",
                 "--quality", "85"]) == 0
    out = capsys.readouterr().out
    assert "jpeg" in out and "bytes per image" in out
    cache = DeviceCache.load(raw, device="cpu")
    expected = {tuple(Resize(20, max_size=30)(Image.open(p)).size[::-1])
                for p in (tmp_path / "src").rglob("*.png")}
    assert cache.ragged and {tuple(s) for s in cache.sizes.tolist()} == expected
    jcache = DeviceCache.load(jpg, device="cpu")
    assert jcache.storage == "jpeg" and jcache.images.quality == 85
    assert main(["cache", "info", jpg, "--verify"]) == 0
    info = capsys.readouterr().out
    assert "ragged" in info and "jpeg q85" in info and "(min/median/max)" in info
    assert "bytes stored (jpeg)" in info and "integrity: OK" in info
    assert main(["cache", "build", src, str(tmp_path / "x"), "--storage", "jpeg",
                 "--quality", "101"]) == 2
    assert main(["cache", "build", src, str(tmp_path / "x"), "--max-size", "30"]) == 2
    err = capsys.readouterr().err
    assert "--quality must be in 1..100" in err and "--max-size caps the longer side" in err


def test_show_and_bench_take_a_ragged_jpeg_cache(tmp_path, capsys):
    from PIL import Image

    from batchaug.bench import DataSource
    from batchaug.cli import main

    DeviceCache.from_dataset(Photos(12), device="cpu", storage="jpeg", progress=False).save(
        tmp_path / "j")
    png = tmp_path / "grid.png"
    assert main(["show", str(tmp_path / "j"), "--out", str(png), "--recipe", "cifar10",
                 "--n", "3", "--draws", "2", "--crop", "12"]) == 0
    assert "largest centred square, resized to 12x12" in capsys.readouterr().out
    with Image.open(png) as im:
        assert im.size[0] > 3 * 12
    source = DataSource(str(tmp_path / "j"), needed=12)
    side = min(min(Photos(12)[i][0].shape[1:]) for i in range(12))
    # the photos at their own sizes (the imagenet recipe crops them in the loader) ...
    assert source.channels_and_size() == (3, None) and source.own_sizes is not None
    assert "photos at their own sizes" in source.note and "jpeg" in source.note
    # ... squared only for a recipe that needs one size, and the note says so
    x, y = source.take(None, 5)
    assert source.channels_and_size() == (3, (side, side))
    assert f"centre-cropped to {side}x{side}" in source.note
    cache = DeviceCache.load(tmp_path / "j", device="cpu")
    ref = TF.center_crop(TF.resize(stored_image(cache, 3), side, antialias=True), [side, side])
    assert x.shape == (5, 3, side, side) and y.tolist() == cache.labels[:5].tolist()
    assert (x[3].int() - ref.int()).abs().max() <= 1  # batchaug's Resize, not torchvision's


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_jpeg_batches_are_ordered_and_memory_does_not_grow(tmp_path):
    DeviceCache.from_dataset(Photos(48), device="cpu", storage="jpeg", progress=False).save(
        tmp_path / "j")
    cpu = DeviceCache.load(tmp_path / "j", device="cpu")
    cache = DeviceCache.load(tmp_path / "j", device="cuda")
    assert cache.placement == "host" and cache.images.data.device.type == "cpu"
    loader = DeviceLoader(cache, 16, crop=CenterCrop(12), seed=1)
    reference = DeviceLoader(cpu, 16, crop=CenterCrop(12), seed=1)
    used = []
    for epoch in range(5):
        for (x, y), (xr, yr) in zip(loader, reference):
            assert x.is_cuda and x.dtype == torch.uint8 and torch.equal(y.cpu(), yr)
            # nvJPEG may round differently from libjpeg-turbo, never by much
            assert (x.cpu().int() - xr.int()).abs().float().mean() < 2
        torch.cuda.synchronize()
        used.append(torch.cuda.memory_allocated())
    assert used[-1] <= used[1]  # no growth after the first epoch's allocations


def test_grayscale_jpeg_and_a_pickled_host_cache_round_trip(tmp_path):
    import pickle

    ds = [(im[:1], y) for im, y in (Photos(6)[i] for i in range(6))]
    cache = DeviceCache.from_dataset(ds, device="cpu", storage="jpeg", progress=False)
    assert cache.images.channels == 1 and cache.image(4).shape == ds[4][0].shape
    assert torch.equal(cache.image(4), decode_jpeg(cache.images.bytes_of(4)))
    cache.save(tmp_path / "g")
    host = DeviceCache.load(tmp_path / "g", device="cpu", placement="host")
    back = pickle.loads(pickle.dumps(host))
    assert all(torch.equal(back.image(i), cache.image(i)) for i in range(6))
    disk = DeviceCache.load(tmp_path / "g", device="cpu", placement="disk")
    moved = disk.to("cpu")
    assert moved.placement == "device" and not moved.dense
    assert all(torch.equal(moved.image(i), cache.image(i)) for i in range(6))
    x, _ = next(iter(DeviceLoader(moved, 6, crop=CenterCrop(9), shuffle=False)))
    assert x.shape == (6, 1, 9, 9)


def test_a_superseded_ragged_iteration_raises_and_the_new_one_is_whole():
    cache = DeviceCache.from_dataset(Photos(20), device="cpu", storage="jpeg", progress=False)
    loader = DeviceLoader(cache, 4, crop=CenterCrop(10), prefetch=2)
    old = iter(loader)
    first = next(old)[0].clone()
    loader.set_epoch(0)
    new = list(loader)  # reuses the padded buffers the old reader thread had
    with pytest.raises(RuntimeError, match="ended before its epoch was complete"):
        next(old)
    assert len(new) == 5 and torch.equal(new[0][0], first)
    refs = [TF.center_crop(stored_image(cache, i), [10, 10]) for i in loader.indices(0).tolist()]
    assert torch.equal(torch.cat([b[0] for b in new]), torch.stack(refs))


def test_cpu_padding_and_crop_run_on_one_intra_op_thread_and_restore_the_count(monkeypatch):
    # Per-image copies and crops are too small to split; 2-thread OpenMP regions on a busy
    # machine were measured many times slower (benchmarks/bench_photos.py (c)).
    from batchaug.data import roi_decode
    from batchaug.data.ragged import single_threaded

    monkeypatch.setattr(roi_decode, "available", lambda: False)  # the padded-batch path

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with single_threaded():
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
        with pytest.raises(KeyError), single_threaded():
            raise KeyError("x")
        assert torch.get_num_threads() == 2

        cache = DeviceCache.from_dataset(Photos(12), device="cpu", storage="jpeg",
                                         progress=False)
        loader = DeviceLoader(cache, 5, crop=CenterCrop(10), shuffle=False, decode_threads=2)
        crop, seen = loader.crop, []
        with_sizes = crop.with_sizes

        def spy(x, sizes, keys=None):
            seen.append(torch.get_num_threads())
            return with_sizes(x, sizes, keys)

        crop.with_sizes = spy  # the loader's call on a ragged batch
        x = torch.cat([b[0] for b in loader])
        assert seen == [1, 1, 1] and torch.get_num_threads() == 2
        refs = [TF.center_crop(stored_image(cache, i), [10, 10]) for i in range(12)]
        assert torch.equal(x, torch.stack(refs))
    finally:
        torch.set_num_threads(before)


class _BrokenNativeLibrary:
    """A meta-path finder for which importing TorchCodec fails as a wheel built for another
    CUDA runtime does: its native library raises ``OSError`` while loading."""

    def find_spec(self, name, path=None, target=None):
        if name == "torchcodec" or name.startswith("torchcodec."):
            raise OSError("libnvrtc.so.13: cannot open shared object file")
        return None


def test_a_torchcodec_that_fails_to_load_falls_back_to_torchvision_with_one_warning(
        monkeypatch):
    import warnings

    from batchaug.data import jpeg as C

    for name in [m for m in sys.modules if m == "torchcodec" or m.startswith("torchcodec.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [_BrokenNativeLibrary()] + sys.meta_path)
    monkeypatch.setattr(C, "_CODEC", {})
    monkeypatch.setattr(C, "_DECODE", None)
    img = Photos(1)[0][0]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        data = C.encode_jpeg(img, 90)
        C.encode_jpeg(img, 90)
        out = decode_jpegs([data, data], torch.device("cpu"))
    ours = [w for w in caught if "TorchCodec" in str(w.message)]
    assert len(ours) == 1 and "torchvision" in str(ours[0].message)
    assert torch.equal(out[0], decode_jpeg(data))


def test_cpu_decoding_threads_are_started_once_not_per_batch(monkeypatch):
    import concurrent.futures

    from batchaug.functional import _utils
    from batchaug.data import jpeg as C

    made = []
    base = concurrent.futures.ThreadPoolExecutor

    class Counted(base):
        def __init__(self, *args, **kwargs):
            made.append(args)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(concurrent.futures, "ThreadPoolExecutor", Counted)
    monkeypatch.setattr(_utils, "_POOL", None)  # the kept pool, as a fresh process has it
    data = [C.encode_jpeg(Photos(5)[i][0], 90) for i in range(5)]
    for _ in range(4):
        out = decode_jpegs(data, torch.device("cpu"), threads=2)
    assert [torch.equal(o, decode_jpeg(d)) for o, d in zip(out, data)] == [True] * 5
    assert len(made) == 1


# --- the index's well-formedness (issue 28 item 9) ----------------------------------------------
def _tampered(tmp_path, storage, edit):
    """A saved 6-image cache whose index.npy is rewritten by ``edit(index)`` (in place)."""
    path = tmp_path / storage
    if not path.exists():
        DeviceCache.from_dataset(Photos(6), device="cpu", storage=storage,
                                 progress=False).save(path)
        (path / "index.orig").write_bytes((path / "index.npy").read_bytes())
    index = np.load(path / "index.orig")
    edit(index)
    np.save(path / "index.npy", index.astype("<i8"), allow_pickle=False)
    return path


@pytest.mark.parametrize("storage, edit, what", [
    # each edit keeps every other rule of the index true, so only the named one is tested
    ("jpeg", lambda ix: ix[3].__setitem__(slice(0, 2), (ix[3, 0] + 1, ix[3, 1] - 1)), "gap"),
    ("jpeg", lambda ix: ix[3].__setitem__(slice(0, 2), (ix[3, 0] - 1, ix[3, 1] + 1)),
     "overlap"),
    ("jpeg", lambda ix: ix[0].__setitem__(slice(0, 2), (1, ix[0, 1] - 1)), "first offset"),
    ("jpeg", lambda ix: ix[5].__setitem__(1, ix[5, 1] + 1), "one byte past the file"),
    ("jpeg", lambda ix: ix[2].__setitem__(2, 0), "zero height"),
    ("jpeg", lambda ix: ix[2].__setitem__(3, 0), "zero width"),
    ("raw", lambda ix: ix[5].__setitem__(1, ix[5, 1] - 1), "a raw image one byte short"),
])
def test_index_with_gaps_overlaps_or_bad_bounds_is_refused(tmp_path, storage, edit, what):
    """index.npy must tile images.bin exactly: offsets back to back from 0, the last image
    ending at the file's end at most, sizes >= 1, raw images C * h * w bytes."""
    path = _tampered(tmp_path, storage, lambda ix: None)
    DeviceCache.load(path, device="cpu")  # the untouched index loads
    path = _tampered(tmp_path, storage, edit)
    with pytest.raises(CacheFormatError, match="index.npy"):
        DeviceCache.load(path, device="cpu")


def test_ragged_image_negative_index_down_to_minus_len():
    cache = DeviceCache.from_dataset(Photos(5), device="cpu", progress=False)
    images = cache.images
    for i in range(-5, 5):
        assert torch.equal(images.image(i), Photos(5)[i % 5][0]), i
    for i in (-6, 5):
        with pytest.raises(IndexError, match="out of range for 5 images"):
            images.image(i)

