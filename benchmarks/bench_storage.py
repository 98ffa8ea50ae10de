"""Which storage of a cache of photos reads fastest: JPEG (the files' own bytes), raw pixels at
each photo's own size, or raw after a size-reducing ``pre_transform`` (``Resize(S)``).

The same photos (``batchaug.bench.photos.make_photo_folder``: JPEG files cut from
scikit-image's sample photographs, shorter side 180-420 px) in three caches, each read by
``DeviceLoader(cache, batch, crop=Augment(RandomResizedCrop(OUT), RandomHorizontalFlip()),
decode_threads=THREADS)`` on the CPU, with ``torch.set_num_threads(THREADS)``. Rounds
alternate the three (rotating which goes first); each is timed over an equal window per round.
Prints images/s per round, the median, and each storage's same-round ratio to raw.

    OMP_NUM_THREADS=1 python benchmarks/bench_storage.py --photos 300 --out 128 --rounds 5
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import batchaug as B  # noqa: E402
from batchaug.bench.photos import make_photo_folder  # noqa: E402


def _caches(root, resize):
    import torchvision
    import torchvision.transforms as T

    folder = torchvision.datasets.ImageFolder(root)
    return {
        "jpeg (the files' own bytes)": B.DeviceCache.from_dataset(folder, device="cpu",
                                                                 storage="jpeg",
                                                                 progress=False),
        "raw, own sizes": B.DeviceCache.from_dataset(folder, device="cpu", progress=False),
        f"raw, pre_transform=Resize({resize})": B.DeviceCache.from_dataset(
            folder, device="cpu", pre_transform=T.Resize(resize), progress=False),
    }


def _rate(cache, out, batch, threads, window):
    loader = B.DeviceLoader(cache, batch, shuffle=True, drop_last=True, seed=0,
                            decode_threads=threads,
                            crop=B.Augment(B.RandomResizedCrop(out), B.RandomHorizontalFlip()))
    next(iter(loader))  # start-up untimed
    images, start, epoch = 0, time.perf_counter(), 0
    while time.perf_counter() - start < window:
        loader.set_epoch(epoch)
        epoch += 1
        for x, _ in loader:
            images += x.shape[0]
            if time.perf_counter() - start >= window:
                break
    return images / (time.perf_counter() - start)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--photos", type=int, default=300)
    p.add_argument("--out", type=int, default=128, help="RandomResizedCrop size")
    p.add_argument("--resize", type=int, default=None,
                   help="the pre_transform's shorter side (default: out / 0.875)")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--window", type=float, default=2.0)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    resize = args.resize or round(args.out / 0.875)
    with tempfile.TemporaryDirectory() as root:
        make_photo_folder(root, args.photos)
        caches = _caches(root, resize)
    names = list(caches)
    for name, cache in caches.items():
        stored = cache.images.nbytes if hasattr(cache.images, "nbytes") else 0
        print(f"{name}: {stored / len(cache) / 1024:.0f} KiB per photo stored")
    rates = {n: [] for n in names}
    for r in range(args.rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            rates[name].append(_rate(caches[name], args.out, args.batch, args.threads,
                                     args.window))
        print(f"round {r + 1}: " + ", ".join(f"{n} {rates[n][-1]:,.0f}" for n in names))
    base = names[1]
    print(f"\n{args.photos} photos, RandomResizedCrop({args.out}) + flip in the loader, batch "
          f"{args.batch}, {args.threads} thread(s), {args.rounds} rounds of {args.window:g} s:")
    for n in names:
        ratios = [a / b for a, b in zip(rates[n], rates[base])]
        print(f"  {n}: median {statistics.median(rates[n]):,.0f} img/s "
              f"({min(rates[n]):,.0f}-{max(rates[n]):,.0f}); vs raw own sizes "
              f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})")


if __name__ == "__main__":
    main()
