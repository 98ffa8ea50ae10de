"""DeviceCache placements (device / host / disk / auto) and the one loader over all of them."""
import json
import os
import pickle
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from batchaug import CacheFormatError, DeviceCache, DeviceLoader
from batchaug.data import order as order_mod
from batchaug.data.placement import choose_placement

PLACEMENTS = ("device", "host", "disk")
REPO = Path(__file__).resolve().parents[1]


def save_random_cache(path, n, shape=(3, 4, 5), dtype=torch.uint8, channels_last=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (n,) + shape, dtype=torch.uint8, generator=g)
    cache = DeviceCache.from_tensors(images, torch.arange(n), device="cpu", dtype=dtype,
                                     channels_last=channels_last)
    cache.save(path)
    return cache


def epoch_batches(cache, **kw):
    return [(x.clone(), y.clone()) for x, y in DeviceLoader(cache, **kw)]


@settings(deadline=None)
@given(n=st.integers(0, 120), bs=st.integers(1, 33), drop_last=st.booleans(),
       world=st.integers(1, 4), order=st.sampled_from(["random", "quasi_random"]),
       shuffle=st.booleans(), seed=st.integers(0, 2**32), epoch=st.integers(0, 50),
       prefetch=st.integers(0, 3), block_rows=st.sampled_from([1, 3, 7, 64]),
       window=st.integers(1, 4), channels_last=st.booleans(),
       dtype=st.sampled_from([torch.uint8, torch.bfloat16]), sharded=st.booleans())
def test_batches_are_identical_across_placements(n, bs, drop_last, world, order, shuffle, seed,
                                                 epoch, prefetch, block_rows, window,
                                                 channels_last, dtype, sharded):
    row_bytes = 3 * 4 * 5 * dtype.itemsize
    # Small blocks and windows, so that a few dozen rows span many blocks and windows (and the
    # disk reader's block cache evicts).
    with mock.patch.object(order_mod, "QUASI_BLOCK_BYTES", block_rows * row_bytes), \
            mock.patch.object(order_mod, "QUASI_MIN_WINDOW_BLOCKS", window), \
            tempfile.TemporaryDirectory() as tmp:
        base = save_random_cache(Path(tmp) / "c", n, dtype=dtype, channels_last=channels_last,
                                 seed=seed % 1000)
        for rank in range(world):
            got = {}
            for placement in PLACEMENTS:
                shard = (rank, world) if sharded else None
                cache = DeviceCache.load(Path(tmp) / "c", device="cpu", placement=placement,
                                         shard=shard)
                assert cache.placement == placement and cache.device == torch.device("cpu")
                kw = dict(batch_size=bs, shuffle=shuffle, drop_last=drop_last, seed=seed,
                          order=order, prefetch=prefetch)
                if not sharded:
                    kw.update(rank=rank, world_size=world)
                loader = DeviceLoader(cache, **kw)
                loader.set_epoch(epoch)
                got[placement] = [(x.clone(), y.clone()) for x, y in loader]
                assert len(got[placement]) == len(loader)
            ref = got["device"]
            for placement in ("host", "disk"):
                assert len(got[placement]) == len(ref)
                for (x, y), (rx, ry) in zip(got[placement], ref):
                    assert x.dtype == rx.dtype == dtype and x.shape == rx.shape
                    assert x.stride() == rx.stride()  # channels_last kept
                    assert torch.equal(y, ry)
                    assert torch.equal(x.contiguous().view(torch.uint8),
                                       rx.contiguous().view(torch.uint8))  # same bytes
                    assert torch.equal(x, base.images[y])  # images still belong to labels


def test_placement_attributes_repr_and_labels_device(tmp_path):
    save_random_cache(tmp_path / "c", 10)
    for placement in PLACEMENTS:
        cache = DeviceCache.load(tmp_path / "c", device="cpu", placement=placement)
        assert cache.placement == placement
        assert cache.labels.device == cache.device == torch.device("cpu")
        assert len(cache) == 10 and cache.dtype == torch.uint8
        if placement != "device":
            assert f"placement={placement}" in repr(cache)
    disk = DeviceCache.load(tmp_path / "c", device="cpu", placement="disk")
    assert isinstance(disk.mapped.array, np.memmap)
    # the images are a memory map of the file: writing to them never changes the file
    before = (tmp_path / "c" / "images.npy").read_bytes()
    disk.images[0].fill_(7)
    assert (tmp_path / "c" / "images.npy").read_bytes() == before
    moved = disk.to("cpu")
    assert moved.placement == "device" and torch.equal(moved.images, disk.images)


def test_auto_placement_logs_and_shows_the_reason(tmp_path, caplog):
    save_random_cache(tmp_path / "c", 10)
    with caplog.at_level("INFO", logger="batchaug.data.cache"):
        cache = DeviceCache.load(tmp_path / "c", device="cpu", placement="auto")
    assert cache.placement in ("device", "disk")
    assert cache.placement_reason.startswith("auto:")
    assert cache.placement_reason in repr(cache)
    assert any("placement=" in r.getMessage() for r in caplog.records)
    with mock.patch("batchaug.data.placement.available_ram", return_value=100):
        assert DeviceCache.load(tmp_path / "c", device="cpu", placement="auto").placement == "disk"


@pytest.mark.parametrize("nbytes, dev, free, ram, expected", [
    (1 << 30, "cuda", 8 << 30, 64 << 30, "device"),
    (5 << 30, "cuda", 8 << 30, 64 << 30, "host"),     # more than half the free device memory
    (40 << 30, "cuda", 8 << 30, 64 << 30, "disk"),    # more than half the RAM too
    (1 << 30, "cuda", None, None, "disk"),            # nothing known: never risk an OOM
    (1 << 30, "cpu", None, 64 << 30, "device"),       # on the CPU the host is the device
    (40 << 30, "cpu", None, 64 << 30, "disk"),
])
def test_auto_rule(nbytes, dev, free, ram, expected):
    placement, reason = choose_placement(nbytes, dev, free, ram)
    assert placement == expected and reason.startswith("auto:")


def test_bad_placement_and_loader_arguments(tmp_path):
    save_random_cache(tmp_path / "c", 10)
    for bad in ("gpu", "Disk", "", 3):  # (None: the default, by the cache's storage)
        with pytest.raises(ValueError, match=r"placement must be one of \[.device., .host., .disk., .auto.\]"):
            DeviceCache.load(tmp_path / "c", device="cpu", placement=bad)
    cache = DeviceCache.load(tmp_path / "c", device="cpu", placement="disk")
    with pytest.raises(ValueError, match=r"order must be one of \[.random., .quasi_random.\]"):
        DeviceLoader(cache, 4, order="sequential")
    with pytest.raises(ValueError, match="prefetch must be >= 0"):
        DeviceLoader(cache, 4, prefetch=-1)
    with pytest.raises(TypeError, match="prefetch must be an int"):
        DeviceLoader(cache, 4, prefetch=1.5)
    with pytest.raises(pickle.PicklingError, match=r"cannot be pickled; pass its path and call DeviceCache.load"):
        pickle.dumps(cache)
    host = DeviceCache.load(tmp_path / "c", device="cpu", placement="host")
    assert torch.equal(pickle.loads(pickle.dumps(host)).images, host.images)


def test_disk_file_shrinking_or_changing_under_the_loader_is_a_clear_error(tmp_path):
    for order in ("random", "quasi_random"):
        for change in ("truncate", "rewrite"):
            path = tmp_path / f"{order}-{change}"
            save_random_cache(path, 64, shape=(3, 16, 16))
            fp = path / "images.npy"
            cache = DeviceCache.load(path, device="cpu", placement="disk")
            it = iter(DeviceLoader(cache, 8, order=order, prefetch=0))
            next(it)
            if change == "truncate":
                os.truncate(fp, fp.stat().st_size // 2)
            else:
                time.sleep(0.01)  # a later mtime even on coarse clocks
                with open(fp, "r+b") as f:
                    f.seek(200)
                    f.write(b"\x01" * 100)
            with pytest.raises(CacheFormatError, match="changed on disk"):
                next(it)


def test_disk_read_past_the_end_is_a_clear_error_not_a_crash(tmp_path):
    save_random_cache(tmp_path / "c", 32, shape=(3, 16, 16))
    cache = DeviceCache.load(tmp_path / "c", device="cpu", placement="disk")
    os.truncate(tmp_path / "c" / "images.npy", 1000)
    cache.mapped.check_unchanged = lambda: None  # as if the size check raced the truncation
    with pytest.raises(CacheFormatError, match="shrank or was truncated"):
        list(DeviceLoader(cache, 8, shuffle=False, prefetch=2))


RSS_SCRIPT = textwrap.dedent("""
    import json, sys
    import torch
    from batchaug import DeviceCache, DeviceLoader

    def rss(key="VmRSS:"):  # VmHWM: the peak so far
        with open("/proc/self/status") as f:
            return next(int(l.split()[1]) * 1024 for l in f if l.startswith(key))

    before = rss()
    cache = DeviceCache.load(sys.argv[1], device="cpu", placement="disk")
    after_load = rss()
    n = 0
    for x, y in DeviceLoader(cache, 32, order=sys.argv[2], prefetch=2):
        n += x.shape[0]
    peak = rss("VmHWM:")
    print(json.dumps({"load": after_load - before, "epoch_peak": peak - before, "n": n}))
""")


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmRSS from /proc")
def test_disk_placement_does_not_load_the_images_into_memory(tmp_path):
    # 2,400 x 3x224x224 uint8 = 361 MB, written from one row broadcast (no big tensor here).
    n = 2400
    row = torch.randint(0, 256, (1, 3, 224, 224), dtype=torch.uint8)
    DeviceCache(row.expand(n, -1, -1, -1), torch.arange(n)).save(tmp_path / "big")
    size = (tmp_path / "big" / "images.npy").stat().st_size
    assert size > 350e6
    for order in ("random", "quasi_random"):
        out = subprocess.run([sys.executable, "-c", RSS_SCRIPT, str(tmp_path / "big"), order],
                             capture_output=True, text=True, timeout=300, cwd=REPO,
                             env={**os.environ, "OMP_NUM_THREADS": "1"})
        assert out.returncode == 0, out.stderr
        res = json.loads(out.stdout.strip().splitlines()[-1])
        assert res["n"] == n
        assert res["load"] < size / 50, res          # headers and labels only
        # a whole epoch: a few 4.8 MB batches in flight (+ 34 MiB of quasi-random block
        # slots), not the file (measured here: 35 MB random, 72 MB quasi_random)
        assert res["epoch_peak"] < size / 3, res


@pytest.mark.parametrize("channels_last", [False, True])
def test_an_empty_cache_loads_and_iterates_in_every_placement(tmp_path, channels_last):
    # from_tensors used to index row 0 of an empty batch when converting its layout
    save_random_cache(tmp_path / "c", 0, channels_last=channels_last)
    for placement in PLACEMENTS:
        cache = DeviceCache.load(tmp_path / "c", device="cpu", placement=placement)
        assert len(cache) == 0 and cache.placement == placement
        assert list(DeviceLoader(cache, 4)) == []


def test_disk_placement_of_another_format_version_says_why(tmp_path):
    # Versions 1 and 2 (compact caches) are the formats so far; any other is refused by name,
    # with placement="disk" as with the others, before anything is mapped.
    from batchaug.data.meta import _meta_checksum

    save_random_cache(tmp_path / "c", 5)
    meta_path = tmp_path / "c" / "meta.json"
    meta = json.loads(meta_path.read_text())
    for version, message in ((0, "invalid format_version 0"), (3, "newer than this batchaug")):
        changed = {**meta, "format_version": version}
        changed["meta_sha256"] = _meta_checksum(changed)
        meta_path.write_text(json.dumps(changed))
        with pytest.raises(CacheFormatError, match=message):
            DeviceCache.load(tmp_path / "c", device="cpu", placement="disk")
