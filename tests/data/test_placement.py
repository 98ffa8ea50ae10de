"""DeviceCache placements (device / host / disk / auto) and the one loader over all of them."""
import json
import os
import pickle
import subprocess
import sys
import tempfile
import textwrap
import threading
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
REPO = Path(__file__).resolve().parents[2]


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
                             env={**os.environ, "OMP_NUM_THREADS": "1",
                                  "MALLOC_MMAP_THRESHOLD_": "131072"})
        assert out.returncode == 0, out.stderr
        res = json.loads(out.stdout.strip().splitlines()[-1])
        assert res["n"] == n
        assert res["load"] < size / 50, res          # headers and labels only
        # A whole epoch: the loader's 4 reused 4.8 MB buffers, the batches handed out (+ 34
        # quasi-random block slots of 0.9 MB), not the file (measured here: 37 MB random, 66 MB
        # quasi_random). A fixed mmap threshold makes glibc return each freed batch at once:
        # with its default (raised to the largest block freed so far) the batches come from
        # the heap, whose fragments kept up to 12 batches' worth resident (105-125 MB
        # quasi_random), a measure of malloc's policy rather than of what the loader holds.
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
    # Versions 1 and 2 (ragged caches) are the formats so far; any other is refused by name,
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


@pytest.mark.parametrize("local_ranks, ranks_per_device, expected", [
    (1, 1, "host"),   # 10 GiB of a 32 GiB budget
    (3, 1, "host"),   # 10 GiB of 32 / 3
    (4, 1, "disk"),   # every rank on the host holds its own 10 GiB: 32 / 4 = 8 GiB each
    (8, 8, "disk"),
])
def test_auto_rule_splits_the_ram_between_the_ranks_of_a_host(local_ranks, ranks_per_device,
                                                                expected):
    placement, reason = choose_placement(10 << 30, "cuda", 8 << 30, 64 << 30, local_ranks,
                                         ranks_per_device)
    assert placement == expected
    if local_ranks > 1:
        assert f"/ {local_ranks} ranks on this host (LOCAL_WORLD_SIZE)" in reason


def test_auto_rule_splits_a_shared_device_between_its_ranks():
    assert choose_placement(3 << 30, "cuda", 8 << 30, 64 << 30)[0] == "device"
    placement, reason = choose_placement(3 << 30, "cuda", 8 << 30, 64 << 30, 2, 2)
    assert placement == "host" and "/ 2 ranks on it" in reason


@pytest.mark.parametrize("ragged", [False, True])
def test_auto_load_reads_local_world_size(tmp_path, monkeypatch, ragged):
    # one placement rule for every storage (a ragged cache's once ignored LOCAL_WORLD_SIZE)
    nbytes = 10 * 3 * 4 * 5
    if ragged:
        from batchaug.data.ragged import RaggedImages

        images = RaggedImages.from_list([torch.zeros(3, 4, 5 - k % 2, dtype=torch.uint8)
                                          for k in range(10)])
        DeviceCache(images, torch.arange(10)).save(tmp_path / "c")
        nbytes = images.data.numel()
    else:
        save_random_cache(tmp_path / "c", 10)
    monkeypatch.setattr("batchaug.data.placement.available_ram", lambda: 4 * nbytes)
    for local, expected in (("1", "device"), ("2", "device"), ("3", "disk"), ("", "device")):
        monkeypatch.setenv("LOCAL_WORLD_SIZE", local)
        cache = DeviceCache.load(tmp_path / "c", device="cpu", placement="auto")
        assert cache.placement == expected, (local, cache.placement_reason)
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv("LOCAL_WORLD_SIZE", bad)
        with pytest.raises(ValueError, match=r"LOCAL_WORLD_SIZE must be an int >= 1 \(the "
                                             r"processes on this host\), got '" + bad):
            DeviceCache.load(tmp_path / "c", device="cpu", placement="auto")


def test_auto_load_counts_memory_pytorch_cached(tmp_path, monkeypatch):
    # A CUDA device, faked on the CPU: 600 bytes of images do not fit in 50% of the driver's
    # 100 free bytes, but do with the 2,000 bytes PyTorch cached and does not use.
    from batchaug.data.cache import _load_once

    save_random_cache(tmp_path / "c", 10)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (100, 10**6))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 2500)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 500)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr("batchaug.data.placement.available_ram", lambda: 10**9)
    chosen = []

    def stop_after_choosing(*args):  # read nothing onto the (fake) device
        chosen.append(args)
        raise KeyboardInterrupt

    with mock.patch("batchaug.data.placement.check_device_memory", stop_after_choosing), \
            pytest.raises(KeyboardInterrupt):
        _load_once(tmp_path / "c", torch.device("cuda", 0), None, False, "auto")
    assert chosen[0][0] == 10 * (3 * 4 * 5 + 8)  # "device": the images and labels checked


class _NoPinTorch:
    """``torch`` for a module under test, recording each ``torch.empty``'s ``pin_memory`` and
    allocating pageable memory instead (pinning needs a GPU); ``cuda`` replaced by ``cuda``."""

    def __init__(self, cuda=None):
        self.pins = []
        if cuda is not None:
            self.cuda = cuda

    def empty(self, *args, pin_memory=False, **kw):
        self.pins.append(pin_memory)
        return torch.empty(*args, **kw)

    def __getattr__(self, name):
        return getattr(torch, name)


@pytest.mark.parametrize("channels_last", [False, True])
def test_host_placement_keeps_the_cache_in_pageable_memory(tmp_path, monkeypatch, channels_last):
    # For a CUDA device (faked: nothing here touches it), "host" is ordinary memory: pinning
    # it would round it up to a power of two and lock it; the loader stages through pinned
    # buffers of its own.
    from batchaug.data import format as fmt
    from batchaug.data import placement as placement_mod
    from batchaug.data import storage as storage_mod

    base = save_random_cache(tmp_path / "c", 12, channels_last=channels_last)
    fake = _NoPinTorch()
    monkeypatch.setattr(placement_mod, "torch", fake)
    monkeypatch.setattr(storage_mod, "torch", fake)
    pinned = []
    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda self, *a: pinned.append(self) or self)
    monkeypatch.setattr(placement_mod, "check_device_memory", lambda *a, **k: None)
    meta, mm, _ = fmt.open_cache(tmp_path / "c")
    images, mapped = placement_mod.place_dense(
        tmp_path / "c", fmt.IMAGES, mm, 0, 12, torch.device("cuda", 0), "host", torch.uint8,
        channels_last)
    assert mapped is None
    assert images.device == torch.device("cpu") and torch.equal(images, base.images)
    assert fake.pins and not any(fake.pins) and not pinned


def test_cuda_staging_buffers_are_pinned(monkeypatch):
    from batchaug.data import prefetch as prefetch_mod

    fake = _NoPinTorch(cuda=mock.MagicMock())
    monkeypatch.setattr(prefetch_mod, "torch", fake)
    raw = torch.zeros(20, 3, 4, 5, dtype=torch.uint8)
    delivery = prefetch_mod.Delivery(prefetch_mod.HostGather(raw), torch.device("cuda", 1),
                                     8, 3)
    assert fake.pins == [True, True, True] and len(delivery.buffers) == 3


class _CudaCalls:
    """A stand-in for ``torch.cuda``: every call, also on what calls return, is logged as
    (thread name, dotted name, args); results support ``with``."""

    def __init__(self, log, name="cuda"):
        self._log, self._name = log, name

    def __getattr__(self, attr):
        return _CudaCalls(self._log, f"{self._name}.{attr}")

    def __call__(self, *args, **kw):
        self._log.append((threading.current_thread().name, self._name, args))
        return _CudaCalls(self._log, self._name + "()")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.mark.parametrize("prefetch", [0, 2])
def test_reader_thread_makes_the_device_current_before_any_cuda_call(tmp_path, monkeypatch,
                                                                     prefetch):
    # A new thread's current device is 0: its first CUDA call (an event wait, a stream) would
    # create a context on GPU 0 in every rank. The delivery's CUDA calls are logged by a fake
    # torch.cuda; the copies go to the meta device so nothing needs a GPU.
    from batchaug.data import prefetch as prefetch_mod

    log = []
    monkeypatch.setattr(prefetch_mod, "torch", _NoPinTorch(cuda=_CudaCalls(log)))
    monkeypatch.setattr(torch.Tensor, "record_stream", lambda self, stream: None)
    save_random_cache(tmp_path / "c", 40)
    cache = DeviceCache.load(tmp_path / "c", device="cpu", placement="host")
    loader = DeviceLoader(cache, 4, prefetch=prefetch)
    target = torch.device("meta")
    loader._delivery = prefetch_mod.Delivery(prefetch_mod.HostGather(cache.images), target,
                                             4, prefetch + 2)
    log.clear()
    batches = [(x, y) for x, y in loader]
    assert len(batches) == 10 and all(x.device == target for x, _ in batches)
    reader = [(name, args) for thread, name, args in log if thread == "batchaug-prefetch"]
    main = [name for thread, name, _ in log if thread != "batchaug-prefetch"]
    assert "cuda.set_device" not in main  # the caller's current device is left alone
    if prefetch == 0:
        assert not reader
        return
    assert reader[0] == ("cuda.set_device", (target,))
    assert [n for n, _ in reader].count("cuda.set_device") == 1
    # the reader reused its buffers, waiting on their copies' events, on the right device
    assert ("cuda.Event().synchronize", ()) in reader
    assert ("cuda.device", (target,)) in reader
