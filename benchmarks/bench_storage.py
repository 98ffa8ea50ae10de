"""Which storage of a cache of photos reads fastest: JPEG (the files' own bytes), raw pixels at
each photo's own size, or raw after a size-reducing ``pre_transform`` (``Resize(S)``).

The same photos (``batchaug.bench.photos.make_photo_folder``: JPEG files cut from
scikit-image's sample photographs, shorter side 180-420 px) in three caches, each read by
``DeviceLoader(cache, batch, crop=Augment(RandomResizedCrop(OUT), RandomHorizontalFlip()),
decode_threads=THREADS)`` on the CPU, with ``torch.set_num_threads(THREADS)`` (each of
``--threads``). Timing: ``batchaug.bench.timing`` (interleaved rounds of equal windows); the
table gives images/s and raw's same-round ratio over each storage.

    OMP_NUM_THREADS=1 python benchmarks/bench_storage.py --photos 300 --out 128 --rounds 5
"""
import argparse
import os
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import batchaug as B  # noqa: E402
from batchaug.bench import timing  # noqa: E402
from batchaug.bench.photos import make_photo_folder  # noqa: E402
from batchaug.bench.timing import Epochs  # noqa: E402


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


def _loader(cache, out, batch, threads):
    return B.DeviceLoader(cache, batch, shuffle=True, drop_last=True, seed=0,
                          decode_threads=threads,
                          crop=B.Augment(B.RandomResizedCrop(out), B.RandomHorizontalFlip()))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--photos", type=int, default=300)
    p.add_argument("--out", type=int, default=128, help="RandomResizedCrop size")
    p.add_argument("--resize", type=int, default=None,
                   help="the pre_transform's shorter side (default: out / 0.875)")
    p.add_argument("--batch", type=int, default=64)
    timing.add_arguments(p, rounds=5, window=2.0, threads="1")
    args = p.parse_args(argv)
    resize = args.resize or round(args.out / 0.875)
    with tempfile.TemporaryDirectory() as root:
        make_photo_folder(root, args.photos)
        caches = _caches(root, resize)
    for name, cache in caches.items():
        stored = cache.images.nbytes if hasattr(cache.images, "nbytes") else 0
        print(f"{name}: {stored / len(cache) / 1024:.0f} KiB per photo stored")
    print(f"{args.photos} photos, RandomResizedCrop({args.out}) + flip in the loader, batch "
          f"{args.batch}")
    results, threads = {}, args.threads
    for k, t in enumerate(threads):  # decode_threads follows torch's thread count
        args.threads = [t]
        results[t] = timing.compare([Epochs(n, _loader(c, args.out, args.batch, t))
                                     for n, c in caches.items()], args, f"storage/{t}")
        print("\n".join(timing.table(results[t], "raw, own sizes", header=k == 0)))
    timing.write_json(args.json, results)


if __name__ == "__main__":
    main()
