"""A real two-process torch.distributed (gloo) run of DeviceLoader, whole and partitioned."""
import math
import os
import sys

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

N, BATCH, EPOCH, WORLD = 37, 5, 3, 2


def _worker(rank: int, init_file: str, cache_dir: str, out_dir: str, tiny_dir: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=WORLD)
    try:
        from batchaug import DeviceCache, DeviceLoader

        results = {}
        # Whole cache on every rank; rank/world_size come from torch.distributed.
        cache = DeviceCache.load(cache_dir, device="cpu")
        loader = DeviceLoader(cache, BATCH, seed=11)
        loader.set_epoch(EPOCH)
        labels = torch.cat([y for _, y in loader])
        results["whole"] = (loader.rank, loader.world_size, len(loader), labels)
        # Partitioned: each rank holds only its contiguous part.
        part = DeviceCache.load(cache_dir, device="cpu", shard=(rank, WORLD))
        ploader = DeviceLoader(part, BATCH, seed=11)
        ploader.set_epoch(EPOCH)
        plabels = torch.cat([y for _, y in ploader])
        results["part"] = (len(ploader), plabels, part.labels.clone())
        # Fewer images than ranks (issue 7 item 3): every rank still gets ceil(1 / 2) = 1
        # sample, so no rank computes a loss over an empty batch.
        tiny = DeviceLoader(DeviceCache.load(tiny_dir, device="cpu", shard=(rank, WORLD)), 4)
        sizes = torch.tensor([y.numel() for _, y in tiny] or [0])
        gathered_sizes = [torch.empty_like(sizes) for _ in range(WORLD)]
        dist.all_gather(gathered_sizes, sizes)
        results["tiny"] = [t.tolist() for t in gathered_sizes]
        # Everyone's share, gathered through the process group itself.
        gathered = [torch.empty_like(labels) for _ in range(WORLD)]
        dist.all_gather(gathered, labels)
        results["gathered"] = gathered
        torch.save(results, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


@pytest.mark.skipif(not dist.is_available() or sys.platform == "win32",
                    reason="torch.distributed with gloo is unavailable")
def test_two_process_gloo(tmp_path):
    from batchaug import DeviceCache

    images = torch.arange(N, dtype=torch.uint8).view(N, 1, 1, 1).expand(N, 3, 2, 2)
    DeviceCache.from_tensors(images, torch.arange(N), device="cpu").save(tmp_path / "cache")
    DeviceCache.from_tensors(images[:1], torch.arange(1), device="cpu").save(tmp_path / "tiny")
    mp.spawn(_worker, args=(str(tmp_path / "init"), str(tmp_path / "cache"), str(tmp_path),
                            str(tmp_path / "tiny")),
             nprocs=WORLD, join=True)
    res = [torch.load(tmp_path / f"rank{r}.pt") for r in range(WORLD)]

    per_rank = math.ceil(N / WORLD)
    shares = []
    for r, out in enumerate(res):
        rank, world, nbatches, labels = out["whole"]
        assert (rank, world) == (r, WORLD)  # defaults taken from torch.distributed
        assert nbatches == math.ceil(per_rank / BATCH)
        assert labels.numel() == per_rank
        shares.append(labels)
    # Both ranks drew from the same permutation: disjoint but for the one padding sample.
    assert set(torch.cat(shares).tolist()) == set(range(N))
    assert len(set(shares[0].tolist()) & set(shares[1].tolist())) == per_rank * WORLD - N
    for out in res:  # all_gather saw the same shares the ranks computed
        assert all(torch.equal(a, b) for a, b in zip(out["gathered"], shares))

    # Partitioned mode: same batch count, each rank only within its part, parts cover all.
    assert res[0]["part"][0] == res[1]["part"][0]
    for nbatches, plabels, part_labels in (out["part"] for out in res):
        assert set(plabels.tolist()) == set(part_labels.tolist())
    assert sorted(torch.cat([out["part"][2] for out in res]).tolist()) == list(range(N))
    # One image, two ranks: one batch of one sample on each rank.
    assert all(out["tiny"] == [[1]] * WORLD for out in res)
