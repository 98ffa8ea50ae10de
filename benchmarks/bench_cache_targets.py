"""DeviceLoader with dense targets vs images only, same cache images, same run.

(a) a fixed-size cache (``--size`` px, device placement on the CPU): batches of images + labels
vs images + masks; (b) a ragged cache through ``crop=RandomResizedCrop``: images only vs images
and masks (the crop's ``with_targets``: the crop runs again on the 1-channel masks). Contenders
alternate in rounds of equal work; reported: each one's median seconds per epoch and the
same-round ratios (targets / images only) with their min and max. 1 intra-op thread by default.

Run: ``python benchmarks/bench_cache_targets.py [--images 256] [--size 224] [--rounds 5]``.
Measured on the 2-core VM, 1 thread, ``--images 1024 --rounds 6``: (a) 0.067 vs 0.069 s per
epoch, ratio median 1.22 (min 0.63, max 1.77: index_select of 64 images is memory-bound and
noisy here); (b) 1.10 vs 1.99 s, ratio 1.79 (1.67..1.84): the masks' crop costs about what the
images' does (a profile shows F.resized_crop's nearest path through grid_sample and dtype
conversions dominating; a batched nearest gather could replace it if made bit-identical).
"""
import argparse
import statistics
import time

import torch

from batchaug import RandomResizedCrop
from batchaug.data import DeviceCache, DeviceLoader
from batchaug.data.ragged import RaggedImages


def _epoch(loader) -> float:
    t0 = time.perf_counter()
    for _ in loader:
        pass
    return time.perf_counter() - t0


def _compare(name: str, plain, with_targets, rounds: int) -> None:
    _epoch(plain), _epoch(with_targets)  # warm-up: first touches of the memory
    a, b = [], []
    for r in range(rounds):  # the order alternates between rounds
        if r % 2:
            b.append(_epoch(with_targets))
            a.append(_epoch(plain))
        else:
            a.append(_epoch(plain))
            b.append(_epoch(with_targets))
    ratios = [y / x for x, y in zip(a, b)]
    print(f"{name}: images only {statistics.median(a):.3f} s, with targets "
          f"{statistics.median(b):.3f} s per epoch; ratio median {statistics.median(ratios):.2f}"
          f" (min {min(ratios):.2f}, max {max(ratios):.2f}) over {rounds} rounds")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--images", type=int, default=256)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    n, s = args.images, args.size
    images = torch.randint(0, 256, (n, 3, s, s), dtype=torch.uint8, generator=g)
    masks = torch.randint(0, 21, (n, s, s), dtype=torch.uint8, generator=g)
    plain = DeviceCache.from_tensors(images, torch.zeros(n, dtype=torch.long), device="cpu")
    seg = DeviceCache.from_tensors(images, None, device="cpu", masks=masks)
    _compare(f"(a) fixed {s}px, batch {args.batch}", DeviceLoader(plain, args.batch, seed=1),
             DeviceLoader(seg, args.batch, seed=1), args.rounds)
    sizes = [(s + int(v) % 97, s + int(v) % 131) for v in torch.randint(0, 1000, (n,),
                                                                        generator=g)]
    ims = [torch.randint(0, 256, (3, h, w), dtype=torch.uint8, generator=g) for h, w in sizes]
    ms = [torch.randint(0, 21, (1, h, w), dtype=torch.uint8, generator=g) for h, w in sizes]
    rag = RaggedImages.from_list(ims)
    rag_plain = DeviceCache(rag, torch.zeros(n, dtype=torch.long))
    rag_seg = DeviceCache(rag, None, targets={"masks": RaggedImages.from_list(ms)})
    crop = RandomResizedCrop(s)
    _compare(f"(b) ragged {s}..{s + 130}px, crop=RandomResizedCrop({s})",
             DeviceLoader(rag_plain, args.batch, seed=1, crop=crop, prefetch=0),
             DeviceLoader(rag_seg, args.batch, seed=1, crop=crop, prefetch=0), args.rounds)


if __name__ == "__main__":
    main()
