"""Photos of different sizes: what keeping each image's own size costs, in bytes and in time.

The photo set: scikit-image's bundled sample photographs (no download), cut into ``--images``
random crops (aspect 1:2 .. 2:1, 30-100 % of the photo's area) resized to a random shorter side
in 180..420 px, written as JPEG (quality 95) files of an ImageFolder in a temp directory. What the
caches store is each file decoded and resized like ``cache build --resize 256``: shorter side
256, aspect kept (ragged), or ``--resize 256 --center-crop 256`` (fixed, the old square cache).

(a) bytes per image: raw uint8 of the ragged images vs their JPEG at quality 90 (PIL's
    libjpeg-turbo encoder; with the loader's JPEG cache available, the caches' ``nbytes``
    too). Target: JPEG <= 1/4 of raw.
(b) the crop stage's price of raggedness: the same crop on batches of the ragged images (padded
    to the batch's largest, with their sizes; ``crop.with_sizes(images, sizes)``, the loader's
    call) vs on batches of the fixed 256x256 images (``crop(images)``, the Augment itself, and the crop
    stage on them: the price of raggedness alone), and the Augment on squares of the ragged
    images' mean area (the same pixels to crop from); batches of ``--batch`` drawn at random,
    assembled outside the clock. On CPU a rotation/affine followed by RandomResizedCrop warps
    only the crop box on a ragged batch (the pair table's rule; the Augment's forward warps the
    whole image; ``ragged_unfused``: that pair forced off). Crops:
    ``RandomResizedCrop(224)`` and the cats-vs-dogs ``RandomRotation(30)`` +
    ``RandomResizedCrop(224)``. Also the crop stage's batched kernels forced on CPU
    (``batched``) against its per-image path, which is what the CPU takes. Target (issue 29):
    ragged >= 0.9x fixed at 1 thread.
(c) with the loader's ragged/JPEG caches (``DeviceLoader(..., crop=)``): JPEG cache + decode +
    ``RandomResizedCrop(224)`` vs torchvision ``ImageFolder`` + PIL decode + ``RandomResizedCrop``
    + ``PILToTensor`` in a ``DataLoader`` reading the same JPEG files, the same number of
    decode threads / workers (1 thread: ``decode_threads=1`` vs ``num_workers=0``; default
    threads: both = the core count). Target: >= 1.0x. Skipped (said so) without that loader.
(d) which storage reads fastest (not run by default): the same files in three caches, JPEG
    (the files' own bytes), raw at each photo's own size, and raw after a size-reducing
    ``pre_transform`` (``Resize(--resize)``, default ``--out`` / 0.875), each read by
    ``DeviceLoader(cache, batch, crop=Augment(RandomResizedCrop(--out), RandomHorizontalFlip()),
    decode_threads=THREADS)`` on the CPU at each of ``--threads``; ratios: raw's over each.

Interleaved rounds of equal wall-clock windows (``batchaug.bench.timing``), at 1 thread and the
default thread count; the tables give medians and the same-round ratios' median [min-max].

    python benchmarks/bench_photos.py                       # ~3 minutes on 2 cores
    python benchmarks/bench_photos.py --images 120 --rounds 3 --window 1.0 --json out.json
    OMP_NUM_THREADS=1 python benchmarks/bench_photos.py --sections d --images 300 --out 128 \
        --rounds 5 --window 2 --threads 1
"""
from __future__ import annotations

import argparse
import inspect
import os
import statistics
import sys
import tempfile
from typing import Dict, List, Tuple

import torch

try:  # an installed batchaug wins; a bare checkout falls back to its own root (appended)
    import batchaug  # noqa: F401
except ImportError:  # pragma: no cover - depends on how the script is run
    sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from batchaug import (Augment, DeviceCache, DeviceLoader,  # noqa: E402
                      RandomHorizontalFlip, RandomResizedCrop, RandomRotation)
from batchaug.bench.photos import make_photo_folder  # noqa: E402,F401 (the photo set)
from batchaug.bench import timing  # noqa: E402
from batchaug.bench.timing import Call, Epochs  # noqa: E402
import batchaug.functional._sized as sized_module  # noqa: E402
import batchaug._fusion as fusion  # noqa: E402

def stored_images(paths: List[str]) -> Tuple[List[torch.Tensor], List[torch.Tensor]]:
    """Each file decoded and resized as ``cache build --resize 256`` (ragged) and
    ``--resize 256 --center-crop 256`` (fixed)."""
    from PIL import Image
    from torchvision.transforms.v2 import functional as TF

    ragged, fixed = [], []
    for p in paths:
        with Image.open(p) as im:
            img = TF.pil_to_tensor(im.convert("RGB"))
        r = TF.resize(img, 256, antialias=True)
        ragged.append(r)
        fixed.append(TF.center_crop(r, [256, 256]))
    return ragged, fixed


def padded_batch(images: List[torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor]:
    hm = max(int(i.shape[1]) for i in images)
    wm = max(int(i.shape[2]) for i in images)
    canvas = torch.zeros((len(images), images[0].shape[0], hm, wm), dtype=torch.uint8)
    for k, img in enumerate(images):
        canvas[k, :, :img.shape[1], :img.shape[2]] = img
    sizes = torch.tensor([[int(i.shape[1]), int(i.shape[2])] for i in images])
    return canvas, sizes


def bench_crop(ragged, fixed, batch: int, n_batches: int, args: argparse.Namespace,
               device: torch.device):
    """(b): the crop stage on ragged batches vs the Augment on fixed 256x256 batches."""
    g = torch.Generator().manual_seed(0)
    picks = [torch.randint(0, len(ragged), (batch,), generator=g).tolist()
             for _ in range(n_batches)]
    ragged_in = [padded_batch([ragged[i] for i in p]) for p in picks]
    fixed_in = [(torch.stack([fixed[i] for i in p]),) for p in picks]
    # squares with the ragged images' mean area: the same pixels to crop from, one size
    from torchvision.transforms.v2 import functional as TF

    side = round(statistics.mean(int(r.shape[1] * r.shape[2]) for r in ragged) ** 0.5)
    area_in = [(torch.stack([TF.resize(ragged[i], [side, side], antialias=True) for i in p]),)
               for p in picks]
    stage_fixed_in = [(f[0], torch.tensor([[256, 256]] * f[0].shape[0])) for f in fixed_in]
    ragged_in, fixed_in, area_in, stage_fixed_in = (
        [tuple(t.to(device) for t in b) for b in inputs]
        for inputs in (ragged_in, fixed_in, area_in, stage_fixed_in))
    results = {}
    crops = {"rrc": lambda: Augment(RandomResizedCrop(224)),
             "rotation_rrc": lambda: Augment(RandomRotation(30), RandomResizedCrop(224))}
    for name, make in crops.items():
        aug = make()
        crop = make()

        def stage(x, s, crop=crop):  # the loader's call on a batch with sizes
            return crop.with_sizes(x, s)[0]

        def batched(x, s, crop=crop):
            saved = sized_module.eager_cpu
            sized_module.eager_cpu = lambda t: False
            try:
                return crop.with_sizes(x, s)[0]
            finally:
                sized_module.eager_cpu = saved

        def unfused(x, s, crop=crop):
            saved = fusion.sized_pair
            fusion.sized_pair = lambda *a: None
            try:
                return crop.with_sizes(x, s)[0]
            finally:
                fusion.sized_pair = saved

        contenders = [
            Call("ragged", stage, ragged_in, label="crop stage, ragged batch"),
            Call("fixed", aug, fixed_in, label="Augment, fixed 256x256 batch"),
            Call("fixed_area", aug, area_in,
                 label=f"Augment, fixed {side}x{side} batch (same mean area)"),
            Call("stage_fixed", stage, stage_fixed_in, label="crop stage, fixed 256x256 batch"),
        ]
        if name == "rotation_rrc" and device.type == "cpu":
            contenders.append(Call("ragged_batched", batched, ragged_in,
                                   label="crop stage, batched kernels forced"))
            contenders.append(Call("ragged_unfused", unfused, ragged_in,
                                   label="crop stage, warp then crop unfused"))
        results[name] = timing.compare(contenders, args, f"crop/{name}", device, quiet=False)
    pixels = statistics.mean(int(r.shape[1] * r.shape[2]) for r in ragged) / (256 * 256)
    return results, pixels, side


def bench_bytes(ragged) -> dict:
    import io

    from PIL import Image

    def jpeg_bytes(img: torch.Tensor) -> int:
        buf = io.BytesIO()
        Image.fromarray(img.permute(1, 2, 0).numpy()).save(buf, format="JPEG", quality=90)
        return buf.tell()

    raw = sum(int(r.numel()) for r in ragged)
    jpeg = sum(jpeg_bytes(r) for r in ragged)
    out = {"images": len(ragged), "raw_bytes": raw, "jpeg_q90_bytes": jpeg,
           "raw_per_image": raw / len(ragged), "jpeg_per_image": jpeg / len(ragged),
           "jpeg_over_raw": jpeg / raw}
    if "storage" in inspect.signature(DeviceCache.from_dataset).parameters:
        data = [(r, 0) for r in ragged]
        raw_cache = DeviceCache.from_dataset(data, device="cpu", progress=False)
        jpeg_cache = DeviceCache.from_dataset(data, device="cpu", storage="jpeg", quality=90,
                                              progress=False)
        out["cache_raw_nbytes"] = int(raw_cache.nbytes)
        out["cache_jpeg_nbytes"] = int(jpeg_cache.nbytes)
    return out


def _torchvision_loader(root: str, batch: int, workers: int) -> Epochs:
    import torchvision
    import torchvision.transforms as T

    ds = torchvision.datasets.ImageFolder(
        root, transform=T.Compose([T.RandomResizedCrop(224), T.PILToTensor()]))
    loader = torch.utils.data.DataLoader(ds, batch_size=batch, shuffle=True,
                                         num_workers=workers, drop_last=True)
    return Epochs(f"torchvision_w{workers}", loader, startup_batches=max(1, workers),
                  label=f"ImageFolder + PIL + RandomResizedCrop, DataLoader num_workers={workers}")


def bench_loaders(root: str, batch: int, args: argparse.Namespace):
    """(c), when the loader has ragged/JPEG caches: same files, same thread/worker count."""
    params = inspect.signature(DeviceLoader.__init__).parameters
    if "crop" not in params or "decode_threads" not in params:
        return None
    import torchvision

    dataset = torchvision.datasets.ImageFolder(root)
    cache = DeviceCache.from_dataset(dataset, device="cpu", storage="jpeg", quality=90,
                                     progress=False)
    cores = os.cpu_count() or 1
    out = {}
    for threads, workers in ((1, 0), (cores, cores)):
        jpeg = DeviceLoader(cache, batch, shuffle=True, drop_last=True,
                            crop=RandomResizedCrop(224), decode_threads=threads)
        contenders = [Epochs(f"batchaug_jpeg_t{threads}", jpeg,
                             label=f"JPEG cache + decode + crop stage, decode_threads={threads}"),
                      _torchvision_loader(root, batch, workers)]
        out[str(threads)] = timing.compare(contenders, argparse.Namespace(
            rounds=args.rounds, window=args.window, threads=[threads]), f"loader/{threads}",
            quiet=False)
    return out


def bench_storage(root: str, args: argparse.Namespace) -> Dict[int, dict]:
    """(d): JPEG vs raw vs raw after ``pre_transform=Resize``, each read by the loader."""
    import torchvision
    import torchvision.transforms as T

    folder = torchvision.datasets.ImageFolder(root)
    resize = args.resize or round(args.out / 0.875)
    caches = {
        "jpeg (the files' own bytes)": DeviceCache.from_dataset(
            folder, device="cpu", storage="jpeg", progress=False),
        "raw, own sizes": DeviceCache.from_dataset(folder, device="cpu", progress=False),
        f"raw, pre_transform=Resize({resize})": DeviceCache.from_dataset(
            folder, device="cpu", pre_transform=T.Resize(resize), progress=False),
    }
    print(f"\n(d) storage, RandomResizedCrop({args.out}) + flip in the loader, batch "
          f"{args.batch}; stored per photo: " + ", ".join(
              f"{n} {getattr(c.images, 'nbytes', 0) / len(c) / 1024:.0f} KiB"
              for n, c in caches.items()))
    out = {}
    for k, t in enumerate(args.threads):  # decode_threads follows torch's thread count
        crop = Augment(RandomResizedCrop(args.out), RandomHorizontalFlip())
        loaders = [Epochs(n, DeviceLoader(c, args.batch, shuffle=True, drop_last=True, seed=0,
                                          decode_threads=t, crop=crop))
                   for n, c in caches.items()]
        out[t] = timing.compare(loaders, argparse.Namespace(
            rounds=args.rounds, window=args.window, threads=[t]), f"storage/{t}")
        print("\n".join(timing.table(out[t], "raw, own sizes", "(d)", header=k == 0)))
    return out


def _fmt(summary: dict, key: str, base: str, threads: int) -> str:
    return timing.spread(summary.get((key, threads), {}).get("ratios", {}).get(base))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--images", type=int, default=300)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--batches", type=int, default=4, help="distinct batches per contender")
    timing.add_arguments(ap, rounds=5, window=1.5)
    ap.add_argument("--sections", default="a,b,c",
                    help="which of (a), (b), (c), (d) to run")
    ap.add_argument("--out", type=int, default=128, help="(d): RandomResizedCrop size")
    ap.add_argument("--resize", type=int, default=None,
                    help="(d): the pre_transform's shorter side (default: --out / 0.875)")
    ap.add_argument("--device", default="cpu", help="where (b) runs (the loaders of (c): CPU)")
    args = ap.parse_args(argv)
    default_threads, threads = torch.get_num_threads(), args.threads
    sections = set(args.sections.split(","))
    report = {"args": vars(args), "default_threads": default_threads}
    with tempfile.TemporaryDirectory(prefix="batchaug-photos-") as root:
        paths = make_photo_folder(root, args.images)
        ragged, fixed = stored_images(paths)
        sizes = torch.tensor([[int(r.shape[1]), int(r.shape[2])] for r in ragged])
        print(f"{len(paths)} JPEG photos from scikit-image samples; stored ragged (shorter side "
              f"256): heights {int(sizes[:, 0].min())}-{int(sizes[:, 0].max())}, widths "
              f"{int(sizes[:, 1].min())}-{int(sizes[:, 1].max())}")
        if "a" in sections:
            b = bench_bytes(ragged)
            report["bytes"] = b
            print(f"\n(a) bytes per image: raw {b['raw_per_image']:,.0f}, JPEG q90 "
                  f"{b['jpeg_per_image']:,.0f} ({b['jpeg_over_raw']:.3f} of raw; target <= 0.25)"
                  + (f"; caches: raw {b['cache_raw_nbytes']:,} B, JPEG "
                     f"{b['cache_jpeg_nbytes']:,} B" if "cache_jpeg_nbytes" in b else ""))
        if "b" in sections:
            crop, pixels, side = bench_crop(ragged, fixed, args.batch, args.batches, args,
                                            torch.device(args.device))
            report["crop"] = crop
            print(f"\n(b) crop stage on {args.device}, batch {args.batch}: ragged images hold "
                  f"{pixels:.2f}x the pixels of the 256x256 ones; 'same area' squares are "
                  f"{side}x{side}")
            print("| crop | threads | ragged stage img/s | fixed 256 Augment img/s | "
                  "ragged stage / fixed 256 Augment | ragged stage / fixed 256 stage | "
                  "ragged stage / same-area Augment | batched kernels / per-image | "
                  "warp+crop fused / unfused |")
            print("|---|---|---|---|---|---|---|---|---|")
            for name, s in crop.items():
                for t in threads:
                    rb = _fmt(s, "ragged_batched", "ragged", t)
                    print(f"| {name} | {t} | {s[('ragged', t)]['images_per_s']:,.0f} | "
                          f"{s[('fixed', t)]['images_per_s']:,.0f} | "
                          f"{_fmt(s, 'ragged', 'fixed', t)} | "
                          f"{_fmt(s, 'ragged', 'stage_fixed', t)} | "
                          f"{_fmt(s, 'ragged', 'fixed_area', t)} | {rb} | "
                          f"{_fmt(s, 'ragged', 'ragged_unfused', t)} |")
        loaders = None
        if args.device == "cpu" and "c" in sections:
            loaders = bench_loaders(root, args.batch, args)
        if "c" not in sections:
            pass
        elif args.device != "cpu":
            print("\n(c) skipped: it compares CPU loaders (run without --device)")
        elif loaders is None:
            print("\n(c) skipped: this DeviceLoader has no crop=/decode_threads= (JPEG caches)")
        else:
            report["loaders"] = loaders
            print("\n(c) JPEG cache + decode + crop vs torchvision DataLoader, same files")
            print("| threads/workers | batchaug img/s | torchvision img/s | "
                  "batchaug / torchvision |")
            print("|---|---|---|---|")
            cores = os.cpu_count() or 1
            for t, w in ((1, 0), (cores, cores)):
                s = loaders[str(t)]
                a, v = f"batchaug_jpeg_t{t}", f"torchvision_w{w}"
                print(f"| {t} / {w} | {s[(a, t)]['images_per_s']:,.0f} | "
                      f"{s[(v, t)]['images_per_s']:,.0f} | {_fmt(s, a, v, t)} |")
        if "d" in sections:
            report["storage"] = bench_storage(root, args)
    timing.write_json(args.json, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
