"""DeviceLoader: coverage, order, remainder and rank-split properties (in-process)."""
import math
from collections import Counter

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from batchaug import DeviceCache, DeviceLoader


def make_cache(n: int, device: str = "cpu", channels_last: bool = False) -> DeviceCache:
    # Labels are the sample indices and each image encodes its index, so a batch tells
    # exactly which samples it holds and whether images and labels stayed paired.
    idx = torch.arange(n)
    images = torch.stack([(idx % 256), (idx // 256) % 256], 1).to(torch.uint8)
    images = images.view(n, 2, 1, 1).expand(n, 2, 2, 3).contiguous()
    return DeviceCache.from_tensors(images, idx, device=device, channels_last=channels_last)


def collect(loader):
    batches = list(loader)
    for x, y in batches:  # images still belong to their labels
        assert torch.equal(x[:, 0, 0, 0].long() + 256 * x[:, 1, 0, 0].long(), y)
    return batches


sizes = st.integers(0, 300)
batch_sizes = st.integers(1, 70)
seeds = st.integers(0, 2**40)
epochs = st.integers(0, 10_000)


@settings(deadline=None)
@given(n=sizes, bs=batch_sizes, seed=seeds, epoch=epochs, shuffle=st.booleans())
def test_every_index_exactly_once_without_drop_last(n, bs, seed, epoch, shuffle):
    loader = DeviceLoader(make_cache(n), bs, shuffle=shuffle, seed=seed, rank=0, world_size=1)
    loader.set_epoch(epoch)
    batches = collect(loader)
    seen = torch.cat([y for _, y in batches]) if batches else torch.empty(0, dtype=torch.long)
    assert sorted(seen.tolist()) == list(range(n))
    assert len(batches) == len(loader) == math.ceil(n / bs)
    assert all(x.shape[0] == bs for x, _ in batches[:-1])
    if batches:
        assert 1 <= batches[-1][0].shape[0] <= bs
    if not shuffle:
        assert seen.tolist() == list(range(n))


@settings(deadline=None)
@given(n=sizes, bs=batch_sizes, seed=seeds, epoch=epochs)
def test_drop_last_drops_only_the_tail(n, bs, seed, epoch):
    full = DeviceLoader(make_cache(n), bs, seed=seed, drop_last=False, rank=0, world_size=1)
    cut = DeviceLoader(make_cache(n), bs, seed=seed, drop_last=True, rank=0, world_size=1)
    full.set_epoch(epoch)
    cut.set_epoch(epoch)
    full_order = [y for _, y in collect(full)]
    cut_batches = collect(cut)
    assert len(cut_batches) == len(cut) == n // bs
    assert all(x.shape[0] == bs for x, _ in cut_batches)
    kept = torch.cat([y for _, y in cut_batches]) if cut_batches else torch.empty(0, dtype=torch.long)
    order = torch.cat(full_order) if full_order else torch.empty(0, dtype=torch.long)
    assert torch.equal(kept, order[: (n // bs) * bs])


@settings(deadline=None)
@given(n=st.integers(12, 300), bs=batch_sizes, seed=seeds, epoch=epochs)
def test_order_is_a_function_of_seed_and_epoch(n, bs, seed, epoch):
    def order(s, e):
        loader = DeviceLoader(make_cache(n), bs, seed=s, rank=0, world_size=1)
        loader.set_epoch(e)
        return torch.cat([y for _, y in loader])

    a = order(seed, epoch)
    assert torch.equal(a, order(seed, epoch))
    assert not torch.equal(a, order(seed, epoch + 1))  # 12! orders: a clash would be a bug
    assert not torch.equal(a, order(seed + 1, epoch))


def test_iterating_without_set_epoch_advances_the_epoch():
    loader = DeviceLoader(make_cache(50), 8, seed=3, rank=0, world_size=1)
    first = torch.cat([y for _, y in loader])
    second = torch.cat([y for _, y in loader])
    assert not torch.equal(first, second)
    loader.set_epoch(1)
    assert torch.equal(torch.cat([y for _, y in loader]), second)
    # (seed, epoch) and (seed + 1, epoch - 1) must not be the same order (seed + epoch would be)
    other = DeviceLoader(make_cache(50), 8, seed=4, rank=0, world_size=1)
    assert not torch.equal(torch.cat([y for _, y in other]), second)


@settings(deadline=None)
@given(n=sizes, world=st.integers(1, 9), bs=batch_sizes, seed=seeds, epoch=epochs,
       drop_last=st.booleans(), shuffle=st.booleans())
def test_rank_shares_are_disjoint_and_cover(n, world, bs, seed, epoch, drop_last, shuffle):
    cache = make_cache(n)
    loaders = [DeviceLoader(cache, bs, shuffle=shuffle, drop_last=drop_last, seed=seed, rank=r,
                            world_size=world) for r in range(world)]
    for loader in loaders:
        loader.set_epoch(epoch)
    shares = [torch.cat([y for _, y in collect(l)] or [torch.empty(0, dtype=torch.long)])
              for l in loaders]
    # Same number of batches and samples on every rank, whatever the remainder.
    assert len({len(l) for l in loaders}) == 1
    per_rank = n // world if drop_last else math.ceil(n / world)
    expected_batches = per_rank // bs if drop_last else math.ceil(per_rank / bs)
    assert all(len(l) == expected_batches for l in loaders)
    if not drop_last:
        assert all(s.numel() == per_rank for s in shares)
    allidx = torch.cat(shares).tolist()
    counts = Counter(allidx)
    if drop_last:
        # disjoint; only the permutation's tail (and incomplete last batches) are left out
        assert all(c == 1 for c in counts.values())
        assert all(s.numel() == expected_batches * bs for s in shares)
    else:
        assert set(counts) == set(range(n))  # nothing lost
        # disjoint except the DistributedSampler-style padding: exactly per_rank * world - n
        # extra samples, repeats of the permutation's first indices
        assert sum(c - 1 for c in counts.values()) == per_rank * world - n
        if n % world == 0:
            assert all(c == 1 for c in counts.values())


@settings(deadline=None)
@given(n=sizes, bs=batch_sizes, world=st.integers(1, 5), rank_frac=st.floats(0, 0.999))
def test_len_matches_iteration(n, bs, world, rank_frac):
    rank = int(rank_frac * world)
    for drop_last in (False, True):
        loader = DeviceLoader(make_cache(n), bs, drop_last=drop_last, rank=rank, world_size=world)
        assert len(list(loader)) == len(loader)


def test_batches_keep_dtype_layout_and_do_not_alias_the_cache(device):
    cache = make_cache(40, device=device, channels_last=True)
    x, y = next(iter(DeviceLoader(cache, 16, rank=0, world_size=1)))
    assert x.device == cache.images.device and y.device == cache.images.device
    assert x.dtype == torch.uint8 and y.dtype == torch.int64
    assert x.is_contiguous(memory_format=torch.channels_last)
    before = cache.images.clone()
    x.zero_()
    assert torch.equal(cache.images, before)


def test_float_cache_batches(device):
    base = make_cache(20)
    cache = DeviceCache.from_tensors(base.images, base.labels, device=device, dtype=torch.float16)
    x, _ = next(iter(DeviceLoader(cache, 7, shuffle=False, rank=0, world_size=1)))
    assert x.dtype == torch.float16
    # v / 255 correctly rounded to float16 (was atol=1e-3: two half ulps near 1)
    assert torch.equal(x.cpu(), (base.images[:7].double() / 255).to(torch.float16))


def test_bad_arguments():
    cache = make_cache(10)
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        DeviceLoader(cache, 0)
    with pytest.raises(TypeError, match="batch_size must be an int"):
        DeviceLoader(cache, 2.5)
    with pytest.raises(ValueError, match=r"rank must be < world_size \(2\)"):
        DeviceLoader(cache, 2, rank=2, world_size=2)
    with pytest.raises(ValueError, match="world_size must be >= 1"):
        DeviceLoader(cache, 2, rank=0, world_size=0)
    with pytest.raises(TypeError, match="cache must be a batchaug.DeviceCache, got Tensor"):
        DeviceLoader(cache.images, 2)
    with pytest.raises(TypeError, match="shuffle must be a bool"):
        DeviceLoader(cache, 2, shuffle="yes")
    with pytest.raises(ValueError, match="seed must be >= 0"):
        DeviceLoader(cache, 2, seed=-1)


def test_defaults_to_a_single_process_without_torch_distributed():
    loader = DeviceLoader(make_cache(10), 4)
    assert (loader.rank, loader.world_size) == (0, 1)


@pytest.mark.parametrize("drop_last", [False, True])
def test_partitioned_mode_shuffles_within_the_shard(tmp_path, drop_last):
    n, world, bs = 23, 3, 4
    make_cache(n).save(tmp_path / "c")
    seen, lengths = [], set()
    for rank in range(world):
        part = DeviceCache.load(tmp_path / "c", device="cpu", shard=(rank, world))
        loader = DeviceLoader(part, bs, drop_last=drop_last, seed=1)
        assert (loader.rank, loader.world_size, loader.partitioned) == (rank, world, True)
        lengths.add(len(loader))
        labels = torch.cat([y for _, y in collect(loader)])
        assert set(labels.tolist()) <= set(part.labels.tolist())  # never outside the shard
        if not drop_last:
            assert set(labels.tolist()) == set(part.labels.tolist())
        seen.extend(labels.tolist())
    assert len(lengths) == 1  # same number of batches on every rank
    if not drop_last:
        assert set(seen) == set(range(n))
    with pytest.raises(ValueError, match="leave them None for a sharded cache"):
        DeviceLoader(DeviceCache.load(tmp_path / "c", device="cpu", shard=(0, world)), bs,
                     rank=1, world_size=world)


@pytest.mark.parametrize("drop_last", [False, True])
def test_partitioned_every_rank_same_count_never_empty_union_covers(tmp_path, drop_last):
    # Issue 7 item 3: with fewer images than ranks, load used to give some ranks an empty part
    # and the loader a batch of 0 samples (NaN loss, averaged by DDP into every rank).
    for n in range(1, 13):
        make_cache(n).save(tmp_path / f"c{n}")
        for world in range(1, 9):
            per_rank = n // world if drop_last else math.ceil(n / world)
            loaded, counts, nbatches = set(), set(), set()
            for rank in range(world):
                part = DeviceCache.load(tmp_path / f"c{n}", device="cpu", shard=(rank, world))
                assert len(part) >= 1 and part.global_len == n
                loaded.update(part.labels.tolist())
                loader = DeviceLoader(part, 2, drop_last=drop_last, seed=n)
                batches = collect(loader)
                assert len(batches) == len(loader)
                assert all(y.numel() > 0 for _, y in batches)  # never an empty batch
                labels = torch.cat([y for _, y in batches] or [torch.empty(0, dtype=torch.long)])
                assert set(labels.tolist()) <= set(part.labels.tolist())
                if not drop_last:
                    assert labels.numel() == per_rank >= 1  # ceil(N / W), never 0
                    assert set(labels.tolist()) == set(part.labels.tolist())
                counts.add(labels.numel())
                nbatches.add(len(loader))
            assert len(counts) == 1 and len(nbatches) == 1, (n, world)  # same on every rank
            assert loaded == set(range(n)), (n, world)  # the parts cover every sample


def test_partitioned_parts_are_contiguous_and_padded_when_fewer_images_than_ranks(tmp_path):
    from batchaug.data.format import shard_range

    assert [shard_range(3, r, 4) for r in range(4)] == [(0, 1), (0, 1), (1, 2), (2, 3)]
    assert [shard_range(10, r, 4) for r in range(4)] == [(0, 2), (2, 5), (5, 7), (7, 10)]
    assert [shard_range(0, r, 3) for r in range(3)] == [(0, 0)] * 3
    make_cache(3).save(tmp_path / "c")
    part = DeviceCache.load(tmp_path / "c", device="cpu", shard=(0, 4))
    assert part.labels.tolist() == [0]
    assert [y.tolist() for _, y in DeviceLoader(part, 8)] == [[0]]
    # A hand-made empty part of a non-empty set cannot be padded: refused up front.
    empty = DeviceCache(torch.zeros(0, 1, 1, 1, dtype=torch.uint8), torch.zeros(0, dtype=torch.long),
                        shard=(0, 4), global_len=3)
    with pytest.raises(ValueError, match="part.*empty"):
        DeviceLoader(empty, 8)


# --- order="quasi_random", the reader thread, CUDA staging (issue 8) ---------------------------
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import textwrap  # noqa: E402
import threading  # noqa: E402
from pathlib import Path  # noqa: E402
from unittest import mock  # noqa: E402

from batchaug.data import order as order_mod  # noqa: E402
from batchaug.data import prefetch as prefetch_mod  # noqa: E402

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@settings(deadline=None)
@given(n=sizes, bs=batch_sizes, world=st.integers(1, 6), seed=seeds, epoch=epochs,
       drop_last=st.booleans(), block_rows=st.integers(1, 40), window=st.integers(1, 5))
def test_quasi_random_is_a_permutation_and_ddp_shares_are_disjoint(n, bs, world, seed, epoch,
                                                                   drop_last, block_rows, window):
    # make_cache rows are 12 bytes: a block of 12 * block_rows bytes is block_rows rows.
    with mock.patch.object(order_mod, "QUASI_BLOCK_BYTES", 12 * block_rows), \
            mock.patch.object(order_mod, "QUASI_MIN_WINDOW_BLOCKS", window):
        cache = make_cache(n)
        loaders = [DeviceLoader(cache, bs, drop_last=drop_last, seed=seed, rank=r,
                                world_size=world, order="quasi_random") for r in range(world)]
        for loader in loaders:
            loader.set_epoch(epoch)
        br, wb = order_mod.quasi_random_geometry(12, bs)
        assert br == block_rows and wb >= window
        perm = order_mod.epoch_order(n, seed, epoch, True, "quasi_random", br, wb)
        if world == 1:  # the loader's order is this one
            assert torch.equal(loaders[0].indices(), perm)
        assert sorted(perm.tolist()) == list(range(n))  # every sample exactly once
        # locality: any wb * br consecutive positions fall in at most 3 windows of blocks
        # (only one window, the one holding the short last block, is shorter)
        span = wb * br
        for a in range(0, max(1, n - span + 1), max(1, br // 2)):
            assert len({int(i) // br for i in perm[a:a + span]}) <= 3 * wb
        shares = [torch.cat([y for _, y in collect(l)] or [torch.empty(0, dtype=torch.long)])
                  for l in loaders]
    per_rank = n // world if drop_last else math.ceil(n / world)
    assert len({len(l) for l in loaders}) == 1
    counts = Counter(torch.cat(shares).tolist())
    if drop_last:
        assert all(c == 1 for c in counts.values())
    else:
        assert all(s.numel() == per_rank for s in shares)
        assert set(counts) == set(range(n))
        assert sum(c - 1 for c in counts.values()) == per_rank * world - n


def test_quasi_random_mixes_a_class_sorted_file():
    # 20 classes of 500 consecutive rows, 4 rows per block, windows of 16 blocks: each batch
    # of 64 mixes rows from many places in the file, and epochs differ.
    n, per_class = 10_000, 500
    with mock.patch.object(order_mod, "QUASI_BLOCK_BYTES", 4 * 12):
        cache = make_cache(n)
        loader = DeviceLoader(cache, 64, seed=0, rank=0, world_size=1, order="quasi_random")
        classes = [len(set((y // per_class).tolist())) for _, y in loader]
        other = torch.cat([y for _, y in loader])
    assert sum(classes) / len(classes) >= 8
    assert not torch.equal(other, loader.indices(0))


def _disk_cache(tmp_path, n=40):
    make_cache(n).save(tmp_path / "c")
    return DeviceCache.load(tmp_path / "c", device="cpu", placement="disk")


@pytest.mark.parametrize("placement", ["host", "disk"])
def test_reader_thread_exception_reaches_the_caller_with_its_message(tmp_path, placement):
    make_cache(40).save(tmp_path / "c")
    cache = DeviceCache.load(tmp_path / "c", device="cpu", placement=placement)
    baseline = threading.active_count()
    calls = []
    cls = prefetch_mod.DiskGather if placement == "disk" else prefetch_mod.HostGather
    real = cls.__call__

    def flaky(self, idx, out):
        calls.append(1)
        if len(calls) == 3:
            raise OSError("disk on fire (errno 5)")
        return real(self, idx, out)

    with mock.patch.object(cls, "__call__", flaky):
        got = []
        with pytest.raises(OSError, match=r"^disk on fire \(errno 5\)$"):
            for x, y in DeviceLoader(cache, 8, prefetch=2):
                got.append(y)
    assert len(got) == 2  # the batches before the failure were delivered
    assert threading.active_count() == baseline


@pytest.mark.parametrize("how", ["break", "close_generator", "loader_close", "new_iter"])
def test_stopping_early_leaves_no_thread(tmp_path, how):
    cache = _disk_cache(tmp_path, 200)
    loader = DeviceLoader(cache, 4, prefetch=3)
    baseline = threading.active_count()
    if how == "break":
        for _ in loader:
            assert threading.active_count() == baseline + 1
            break
    elif how == "close_generator":
        it = iter(loader)
        next(it)
        it.close()
    elif how == "loader_close":
        it = iter(loader)
        next(it)
        loader.close()  # the generator is still referenced: close() stops its thread anyway
    else:
        it = iter(loader)
        next(it)
        it2 = iter(loader)
        next(it2)  # a new epoch: the abandoned one's thread stops first
        assert threading.active_count() == baseline + 1
        loader.close()
    assert threading.active_count() == baseline
    assert not any(t.name == "batchaug-prefetch" for t in threading.enumerate())


EXIT_SCRIPT = textwrap.dedent("""
    import sys
    from batchaug import DeviceCache, DeviceLoader
    cache = DeviceCache.load(sys.argv[1], device="cpu", placement=sys.argv[2])
    it = iter(DeviceLoader(cache, 2, prefetch=2))
    next(it)   # the reader thread is now blocked on a full queue; exit without closing it
    print("exiting")
""")


@pytest.mark.parametrize("placement", ["host", "disk"])
def test_interpreter_exit_with_a_running_reader_does_not_hang(tmp_path, placement):
    make_cache(100).save(tmp_path / "c")
    out = subprocess.run([sys.executable, "-c", EXIT_SCRIPT, str(tmp_path / "c"), placement],
                         capture_output=True, text=True, timeout=60,
                         cwd=Path(__file__).resolve().parents[2],
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0 and "exiting" in out.stdout, out.stderr


def test_cpu_staging_buffers_are_reused_and_batches_are_not(tmp_path):
    cache = _disk_cache(tmp_path, 64)
    loader = DeviceLoader(cache, 8, prefetch=2)
    batches = [x for x, _ in loader]
    delivery = loader._get_delivery()
    assert len(delivery.buffers) == 4  # prefetch + 2, whatever the number of batches
    ptrs = {b.data_ptr() for b in delivery.buffers}
    assert not ptrs & {x.data_ptr() for x in batches}  # a kept batch is never overwritten
    assert len({x.data_ptr() for x in batches}) == len(batches)
    # in order, and each batch still holds its own rows after the buffers were refilled
    ordered = [x for x, _ in DeviceLoader(cache, 8, shuffle=False, prefetch=2)]
    assert all(torch.equal(x, cache.images[i]) for x, i in zip(ordered, torch.arange(64).split(8)))


@needs_cuda
@pytest.mark.parametrize("placement", ["host", "disk"])
@pytest.mark.parametrize("order", ["random", "quasi_random"])
def test_cuda_placements_deliver_the_device_placements_batches(tmp_path, placement, order):
    make_cache(300).save(tmp_path / "c")
    ref_cache = DeviceCache.load(tmp_path / "c", device="cuda")
    cache = DeviceCache.load(tmp_path / "c", device="cuda", placement=placement)
    assert cache.device.type == "cuda" and cache.labels.is_cuda and not cache.images.is_cuda
    if placement == "host":  # pageable by design (docs/data.md): only the staging is pinned
        assert not cache.images.is_pinned()
    ref = [(x.clone(), y.clone()) for x, y in DeviceLoader(ref_cache, 32, seed=4, order=order)]
    got = []
    loader = DeviceLoader(cache, 32, seed=4, order=order, prefetch=2)
    for x, y in loader:
        assert x.is_cuda and y.is_cuda
        # slow consumer work on the current stream: the next copies must not overwrite x
        torch.cuda._sleep(1_000_000)
        got.append((x.clone(), y.clone()))
    torch.cuda.synchronize()
    assert all(b.is_pinned() for b in loader._get_delivery().buffers)
    assert len(got) == len(ref)
    for (x, y), (rx, ry) in zip(got, ref):
        assert torch.equal(x, rx) and torch.equal(y, ry)


@needs_cuda
def test_cuda_staging_is_pinned_reused_and_copies_on_a_side_stream(tmp_path):
    make_cache(200).save(tmp_path / "c")
    cache = DeviceCache.load(tmp_path / "c", device="cuda", placement="disk")
    loader = DeviceLoader(cache, 16, prefetch=2)
    streams = []
    real = torch.Tensor.to

    def spy(self, *args, **kwargs):
        if kwargs.get("non_blocking") and not self.is_cuda:
            streams.append(torch.cuda.current_stream().cuda_stream)
            assert self.is_pinned()
        return real(self, *args, **kwargs)

    with mock.patch.object(torch.Tensor, "to", spy):
        n = sum(x.shape[0] for x, _ in loader)
    assert n == 200
    delivery = loader._get_delivery()
    assert len(delivery.buffers) == 4 and all(b.is_pinned() for b in delivery.buffers)
    assert streams and set(streams) == {delivery.stream.cuda_stream}
    assert delivery.stream.cuda_stream != torch.cuda.current_stream().cuda_stream


@pytest.mark.parametrize("placement", ["device", "disk"])
@pytest.mark.parametrize("how", ["new_iter", "loader_close", "load_state_dict"])
def test_an_iteration_ended_early_raises_instead_of_stopping(tmp_path, placement, how):
    # One iteration at a time: an old iterator that asks for more after a new iteration
    # started (or after close / load_state_dict) gets an error, never a silently short epoch.
    make_cache(40).save(tmp_path / "c")
    cache = DeviceCache.load(tmp_path / "c", device="cpu", placement=placement)
    loader = DeviceLoader(cache, 4, prefetch=2, rank=0, world_size=1)
    old = iter(loader)
    first = [next(old)[1] for _ in range(3)]
    if how == "new_iter":
        new = iter(loader)
        got = [y for _, y in new]  # the new one is a whole epoch, the next one
        assert len(got) == 10
        assert sorted(torch.cat(got).tolist()) == list(range(40))
    elif how == "loader_close":
        loader.close()
    else:
        state = loader.state_dict()
        loader.load_state_dict(state)
    with pytest.raises(RuntimeError, match=r"iterator was ended before its epoch was complete "
                                           r"\(by a newer iteration of the loader, "
                                           r"loader.close\(\) or load_state_dict\(\)\)"):
        next(old)
    assert len(torch.cat(first)) == 12
    assert not any(t.name == "batchaug-prefetch" for t in threading.enumerate())
    if how == "load_state_dict":  # the resumed iteration continues after the 3 batches
        assert len(list(loader)) == 7


def test_iterators_run_one_after_another_without_error(tmp_path):
    make_cache(40).save(tmp_path / "c")
    cache = DeviceCache.load(tmp_path / "c", device="cpu", placement="host")
    loader = DeviceLoader(cache, 4, prefetch=2)
    created = [iter(loader) for _ in range(2)]  # made, not started: nothing is ended yet
    for it in created:
        assert len(list(it)) == 10
    for _ in range(2):  # a loop left with break, then the next epoch's loop
        for _ in loader:
            break
    assert len(list(loader)) == 10


# --- issue 35: a crop that returns a view of the reused host buffer -------------------------
@pytest.mark.parametrize("ragged", [False, True])
def test_batches_kept_without_clone_are_not_overwritten(tmp_path, ragged):
    """A CPU loader reads batches out of reused buffers (placement="disk"); a crop returning
    a view of one is copied before it is handed out,
    so batches kept in a list are still themselves after the loop."""
    from batchaug import CenterCrop

    class CornerCrop(CenterCrop):
        """A user's crop whose ragged path returns a view of its input: the top-left
        corner (every image here is at least that large)."""

        def apply_image(self, x, params, sizes=None):
            return x[:, :, :self.height, :self.width]

    n = 24
    if ragged:
        sizes = [(8 + i % 3, 9 + i % 2) for i in range(n)]
        imgs = [torch.full((3, h, w), i, dtype=torch.uint8) for i, (h, w) in enumerate(sizes)]

        class Items:
            def __len__(self):
                return n

            def __getitem__(self, i):
                return imgs[i], i

        cache = DeviceCache.from_dataset(Items(), device="cpu")
    else:
        images = torch.arange(n, dtype=torch.uint8).view(n, 1, 1, 1).expand(n, 3, 8, 8)
        cache = DeviceCache.from_tensors(images.contiguous(), torch.arange(n), device="cpu")
    cache.save(tmp_path / "c")
    disk = DeviceCache.load(tmp_path / "c", device="cpu", placement="disk")
    loader = DeviceLoader(disk, 4, crop=CornerCrop(6), seed=0)
    kept = list(loader)  # no clone
    assert len(kept) == n // 4
    for x, y in kept:
        assert torch.equal(x[:, 0, 0, 0], y.to(torch.uint8)), (x[:, 0, 0, 0], y)
        assert torch.equal(x, y.to(torch.uint8).view(-1, 1, 1, 1).expand_as(x))
