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
    assert torch.allclose(x.float(), base.images[:7].to(x.device).float() / 255, atol=1e-3)


def test_bad_arguments():
    cache = make_cache(10)
    with pytest.raises(ValueError, match="batch_size"):
        DeviceLoader(cache, 0)
    with pytest.raises(TypeError, match="batch_size"):
        DeviceLoader(cache, 2.5)
    with pytest.raises(ValueError, match="rank"):
        DeviceLoader(cache, 2, rank=2, world_size=2)
    with pytest.raises(ValueError, match="world_size"):
        DeviceLoader(cache, 2, rank=0, world_size=0)
    with pytest.raises(TypeError, match="cache"):
        DeviceLoader(cache.images, 2)
    with pytest.raises(TypeError, match="shuffle"):
        DeviceLoader(cache, 2, shuffle="yes")
    with pytest.raises(ValueError, match="seed"):
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
    with pytest.raises(ValueError, match="shard"):
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
