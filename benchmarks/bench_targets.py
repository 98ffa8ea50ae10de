"""Cost of moving dense targets with the images: ``with_targets`` vs the images-only forward,
and a ``DeviceLoader`` with targets vs images only.

    python benchmarks/bench_targets.py --rounds 5
    python benchmarks/bench_targets.py --batch 32 --size 224 --rounds 3 --window 0.5 --json t.json
    python benchmarks/bench_targets.py --part loader --images 256   # the loader, (a) and (b)
    python benchmarks/bench_targets.py --smoke             # seconds: tiny sizes (run in tests)

Modules (``--part modules``, the default): per sample a uint8 3 x size x size image, a uint8
size x size mask, 32 boxes and 17 keypoints; every geometric transform and a typical
segmentation ``Augment`` (RandomResizedCrop + flip + rotation), built at ``size``, in train();
contenders ``images_only`` = ``m(x, keys)`` and ``with_targets`` = ``m.with_targets(x, targets,
keys)`` with the same keys (same draws). A module without ``with_targets`` (or whose
with_targets raises) is listed as skipped with the reason.

Loader (``--part loader``): ``--images`` samples read one epoch at a time by ``DeviceLoader``
on the CPU: (a) a fixed-size cache, images + labels vs images + masks; (b) a ragged cache
(sizes ``size``..``size + 130``) through ``crop=RandomResizedCrop(size)``, images only vs
images and masks (the crop's ``with_targets``).

Timing: ``batchaug.bench.timing`` (interleaved rounds of equal windows, at 1 thread and the
default thread count); the table gives images/s and the same-round ratio images_only / it,
i.e. with_targets' time over the images-only time: median [min-max].
"""
from __future__ import annotations

import argparse
from typing import Callable, Dict, List, Optional, Tuple

import torch

from batchaug.bench import timing
from batchaug.bench.timing import Call, Epochs

BOXES, KEYPOINTS = 32, 17


def _data(batch: int, size: int):
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (batch, 3, size, size), generator=g, dtype=torch.uint8)
    mask = torch.randint(0, 21, (batch, size, size), generator=g, dtype=torch.uint8)
    xy = torch.rand(batch, BOXES, 2, 2, generator=g) * size
    boxes = torch.cat((xy.amin(dim=2), xy.amax(dim=2)), dim=2)
    kp = torch.rand(batch, KEYPOINTS, 2, generator=g) * (size - 1)
    bv = torch.ones(batch, BOXES, dtype=torch.bool)
    kv = torch.ones(batch, KEYPOINTS, dtype=torch.bool)
    return g, x, mask, boxes, bv, kp, kv



def _modules(size: int) -> List[Tuple[str, Callable[[], torch.nn.Module]]]:
    """(label, constructor) of every geometric transform at ``size`` px input, and a typical
    segmentation Augment."""
    import batchaug as B

    s = size
    return [
        ("RandomHorizontalFlip", lambda: B.RandomHorizontalFlip()),
        ("RandomVerticalFlip", lambda: B.RandomVerticalFlip()),
        ("RandomCrop pad", lambda: B.RandomCrop(s, padding=max(1, s // 8))),
        ("RandomCrop reflect", lambda: B.RandomCrop(s, padding=max(1, s // 8),
                                                    padding_mode="reflect")),
        ("CenterCrop", lambda: B.CenterCrop(max(1, s * 7 // 8))),
        ("Pad", lambda: B.Pad(max(1, s // 16))),
        ("Resize 3/4", lambda: B.Resize(max(1, s * 3 // 4))),
        ("RandomResizedCrop", lambda: B.RandomResizedCrop(s)),
        ("RandomRotation nearest", lambda: B.RandomRotation(30)),
        ("RandomRotation bilinear", lambda: B.RandomRotation(30, interpolation="bilinear")),
        ("RandomAffine", lambda: B.RandomAffine(20, translate=(0.1, 0.1), scale=(0.8, 1.2),
                                                shear=10)),
        ("RandomPerspective", lambda: B.RandomPerspective(0.5, p=1.0)),
        ("RandomChoice flip/rotate", lambda: B.RandomChoice(
            [B.RandomHorizontalFlip(1.0), B.RandomRotation(30)])),
        ("TrivialAugmentWide", lambda: B.TrivialAugmentWide()),
        ("RandAugment", lambda: B.RandAugment()),
        ("AutoAugment", lambda: B.AutoAugment()),
        ("TimmRandAugment m9-mstd0.5", lambda: B.TimmRandAugment(9, magnitude_std=0.5)),
        ("Augment seg (RRC+flip+rot)", lambda: B.Augment(
            B.RandomResizedCrop(s, scale=(0.3, 1.0)), B.RandomHorizontalFlip(),
            B.RandomRotation(15))),
        # the whole training recipe of a segmentation model: the colour and normalisation
        # steps cost the same with targets (they leave them as they are)
        ("Augment seg recipe (+ColorJitter+Normalize)", lambda: B.Augment(
            B.RandomResizedCrop(s, scale=(0.3, 1.0)), B.RandomHorizontalFlip(),
            B.RandomRotation(15), B.ColorJitter(0.2, 0.2, 0.2),
            B.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]))),
    ]


Case = Tuple[str, Call, Call]


def module_contenders(batch: int, size: int) -> Tuple[List[Case], List[Tuple[str, str]]]:
    """(cases, skipped): per module, images_only vs with_targets on the same data and keys;
    skipped: (label, why) for modules that cannot move targets."""
    from batchaug import _random

    _, x, mask, boxes, bv, kp, kv = _data(batch, size)
    targets = {"masks": mask, "boxes": boxes, "box_valid": bv, "keypoints": kp,
               "keypoint_valid": kv}
    keys = _random.sample_keys(0, 0, torch.arange(batch))
    cases: List[Case] = []
    skipped: List[Tuple[str, str]] = []
    for label, make in _modules(size):
        try:
            m = make().train()
        except Exception as e:  # a constructor this size cannot take (tiny --smoke sizes)
            skipped.append((label, f"{type(e).__name__}: {e}"))
            continue
        if not callable(getattr(m, "with_targets", None)):
            skipped.append((label, "no with_targets"))
            continue
        k = (keys,) if getattr(m, "takes_keys", False) else ()

        def with_targets(m=m, k=k):
            return m.with_targets(x, targets, *k)[0]

        try:
            with_targets()
        except Exception as e:
            skipped.append((label, f"with_targets raises {type(e).__name__}: "
                                   f"{str(e).splitlines()[0][:120]}"))
            continue
        cases.append((label, Call("images_only", lambda m=m, k=k: m(x, *k)),
                       Call("with_targets", with_targets)))
    return cases, skipped


def loader_contenders(images: int, size: int, batch: int) -> List[Case]:
    """(a) fixed-size and (b) ragged caches read by DeviceLoader, images only vs with masks."""
    from batchaug import RandomResizedCrop
    from batchaug.data import DeviceCache, DeviceLoader
    from batchaug.data.ragged import RaggedImages

    g = torch.Generator().manual_seed(0)
    n, s = images, size
    x = torch.randint(0, 256, (n, 3, s, s), dtype=torch.uint8, generator=g)
    masks = torch.randint(0, 21, (n, s, s), dtype=torch.uint8, generator=g)
    plain = DeviceCache.from_tensors(x, torch.zeros(n, dtype=torch.long), device="cpu")
    seg = DeviceCache.from_tensors(x, None, device="cpu", masks=masks)
    sizes = [(s + int(v) % 97, s + int(v) % 131)
             for v in torch.randint(0, 1000, (n,), generator=g)]
    ims = [torch.randint(0, 256, (3, h, w), dtype=torch.uint8, generator=g) for h, w in sizes]
    ms = [torch.randint(0, 21, (1, h, w), dtype=torch.uint8, generator=g) for h, w in sizes]
    rag = RaggedImages.from_list(ims)
    rag_plain = DeviceCache(rag, torch.zeros(n, dtype=torch.long))
    rag_seg = DeviceCache(rag, None, targets={"masks": RaggedImages.from_list(ms)})
    crop = RandomResizedCrop(s)
    return [
        (f"(a) fixed {s}px loader", Epochs("images_only", DeviceLoader(plain, batch, seed=1)),
         Epochs("with_targets", DeviceLoader(seg, batch, seed=1))),
        (f"(b) ragged {s}..{s + 130}px, crop=RandomResizedCrop({s})",
         Epochs("images_only", DeviceLoader(rag_plain, batch, seed=1, crop=crop, prefetch=0)),
         Epochs("with_targets", DeviceLoader(rag_seg, batch, seed=1, crop=crop, prefetch=0))),
    ]


def main(argv: Optional[List[str]] = None) -> Dict[str, dict]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--images", type=int, default=256, help="samples in the loader's caches")
    ap.add_argument("--part", choices=("modules", "loader", "all"), default="modules")
    ap.add_argument("--smoke", action="store_true",
                    help="tiny sizes, one short round at 1 thread (seconds; run in the tests)")
    timing.add_arguments(ap, rounds=3, window=0.5)
    args = ap.parse_args(argv)
    if args.smoke:
        args.batch, args.size, args.images, args.rounds, args.window = 2, 32, 8, 1, 0.01
        args.threads = [1]
    cases: List[Case] = []
    skipped: List[Tuple[str, str]] = []
    if args.part in ("modules", "all"):
        cases, skipped = module_contenders(args.batch, args.size)
    if args.part in ("loader", "all"):
        cases += loader_contenders(args.images, args.size, args.batch)
    results: Dict[str, dict] = {}
    for k, (label, images, with_targets) in enumerate(cases):
        results[label] = timing.compare([images, with_targets], args, label)
        print("\n".join(timing.table(results[label], "images_only", label, header=k == 0)),
              flush=True)
    for label, why in skipped:
        print(f"{label}: skipped, {why}", flush=True)
    timing.write_json(args.json, {"cases": results, "skipped": dict(skipped)})
    return results


if __name__ == "__main__":
    main()
