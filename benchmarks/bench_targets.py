"""Cost of moving dense targets with the images: ``with_targets`` vs the images-only forward.

    flock /tmp/batchaug-bench.lock python benchmarks/bench_targets.py
    python benchmarks/bench_targets.py --batch 32 --size 224 --rounds 3 --window 0.5 --json t.json
    python benchmarks/bench_targets.py --part kernels      # the target kernels alone (below)
    python benchmarks/bench_targets.py --smoke             # seconds: tiny sizes (run in tests)

Per sample: a uint8 3 x size x size image, a uint8 size x size mask, 32 boxes, 17 keypoints.

Modules (``--part modules``, the default): every geometric transform and a typical
segmentation ``Augment`` (RandomResizedCrop + flip + rotation), built at ``size``, in train();
contenders ``images_only`` = ``m(x, keys)`` and ``with_targets`` = ``m.with_targets(x, targets,
keys)`` with the same keys (same draws). A module without ``with_targets`` yet (or whose
with_targets raises, e.g. an Augment holding one) is listed as skipped with the reason. The
issue's target: with_targets <= 1.3x the images-only time at 224 px.

Kernels (``--part kernels``), CPU:
  rotate nearest / bilinear   the ``rotate`` image kernel with per-sample angles; targets: the
                              matrix (``rotation_matrix``), image + mask in one
                              ``warp_with_masks``, ``affine_boxes``, ``affine_keypoints``
  ..., separate               the same with the image kernel and ``warp_masks`` called apart
  resized crop bilinear(aa)   the ``resized_crop`` image kernel with per-sample boxes (antialias,
                              RandomResizedCrop's default); targets: ``resized_crop_masks`` and
                              boxes / keypoints through ``resized_crop_matrix``
  hflip                       ``hflip_where``; targets: ``flip_masks`` and boxes / keypoints
                              through ``flip_matrix`` (the cheapest image op: the targets'
                              fixed cost shows most here)

Fused (``--part fused``): RandomRotation / RandomAffine / RandomPerspective's own
``with_targets`` (image and masks on one sampling grid) and the base class's generic one
(image and masks warped apart), each as a time ratio to the images-only forward, same round.

Both contenders of a case get the same wall-clock window per round (batchaug.bench.timing,
rounds interleaved with a rotating order) at 1 thread and the default thread count; the report
gives median images per second and the same-round time ratio with_targets / images_only:
median [min-max].
"""
from __future__ import annotations

import argparse
import json
from typing import Callable, Dict, Iterator, List, Optional, Tuple

import torch
from torch import Tensor

import batchaug.functional as BF
from batchaug.bench.contenders import Contender
from batchaug.bench.timing import run_rounds, summarize
from batchaug.functional import _target_masks as TM
from batchaug.functional import _targets as TG

BOXES, KEYPOINTS = 32, 17


class _Fn(Contender):
    """A contender that computes ``fn()`` once per batch of ``n`` samples."""

    def __init__(self, key: str, fn: Callable[[], Tensor], n: int) -> None:
        self.key = self.label = key
        self.fn = fn
        self.labels = torch.zeros(n, dtype=torch.int64)
        self.startup_batches = 0

    def epoch(self) -> Iterator[Tuple[Tensor, Tensor]]:
        out = self.fn()
        yield out.view(self.labels.shape[0], -1), self.labels


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


def contenders(batch: int, size: int) -> List[Tuple[str, Contender, Contender]]:
    g, x, mask, boxes, bv, kp, kv = _data(batch, size)
    hw = [size, size]
    angle = torch.rand(batch, generator=g) * 60 - 30
    out: List[Tuple[str, Contender, Contender]] = []

    for interp in ("nearest", "bilinear"):
        def images(i=interp):
            return BF.rotate(x, angle, i, [0.0])

        def with_targets(i=interp):
            m = TG.rotation_matrix(angle, size, size)
            y, _ = TM.warp_with_masks(x, mask, m, i, [0.0])
            TG.affine_boxes(boxes, bv, m, hw, hw)
            TG.affine_keypoints(kp, kv, m, hw, hw)
            return y

        def separate(i=interp):
            y = BF.rotate(x, angle, i, [0.0])
            m = TG.rotation_matrix(angle, size, size)
            TM.warp_masks(mask, m, hw)
            TG.affine_boxes(boxes, bv, m, hw, hw)
            TG.affine_keypoints(kp, kv, m, hw, hw)
            return y

        out.append((f"rotate {interp}", _Fn("images_only", images, batch),
                    _Fn("with_targets", with_targets, batch)))
        out.append((f"rotate {interp}, separate", _Fn("images_only", images, batch),
                    _Fn("with_targets", separate, batch)))

    scale = torch.rand(batch, generator=g) * 0.9 + 0.1
    side = (scale.sqrt() * size).long().clamp(8, size)
    top = (torch.rand(batch, generator=g) * (size - side + 1)).long()
    left = (torch.rand(batch, generator=g) * (size - side + 1)).long()
    osz = [size, size]

    def rrc_images():
        return BF.resized_crop(x, top, left, side, side, osz, "bilinear", True)

    def rrc_targets():
        y = BF.resized_crop(x, top, left, side, side, osz, "bilinear", True)
        m = TG.resized_crop_matrix(top, left, side, side, hw, osz)
        TM.resized_crop_masks(mask, top, left, side, side, osz)
        TG.affine_boxes(boxes, bv, m, hw, osz)
        TG.affine_keypoints(kp, kv, m, hw, osz)
        return y

    out.append(("resized crop bilinear(aa)", _Fn("images_only", rrc_images, batch),
                _Fn("with_targets", rrc_targets, batch)))

    flip = torch.rand(batch, generator=g) < 0.5
    no = torch.zeros_like(flip)

    def flip_images():
        return BF.hflip_where(x, flip)

    def flip_targets():
        y = BF.hflip_where(x, flip)
        m = TG.flip_matrix(flip, no)
        TM.flip_masks(mask, flip)
        TG.affine_boxes(boxes, bv, m, hw, hw)
        TG.affine_keypoints(kp, kv, TG.flip_matrix(flip, no, keypoints=True), hw, hw)
        return y

    out.append(("hflip", _Fn("images_only", flip_images, batch),
                _Fn("with_targets", flip_targets, batch)))
    return out


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


class _Module(Contender):
    """One call of ``fn(x, keys)`` per batch (a module's forward or with_targets)."""

    def __init__(self, key: str, fn: Callable[[], Tensor], n: int) -> None:
        self.key = self.label = key
        self.fn = fn
        self.labels = torch.zeros(n, dtype=torch.int64)
        self.startup_batches = 0

    def epoch(self) -> Iterator[Tuple[Tensor, Tensor]]:
        out = self.fn()
        yield out.reshape(self.labels.shape[0], -1), self.labels


def module_contenders(batch: int, size: int
                      ) -> Tuple[List[Tuple[str, Contender, Contender]], List[Tuple[str, str]]]:
    """(cases, skipped): per module, images_only vs with_targets on the same data and keys;
    skipped: (label, why) for modules that cannot move targets yet."""
    from batchaug import _random

    _, x, mask, boxes, bv, kp, kv = _data(batch, size)
    targets = {"masks": mask, "boxes": boxes, "box_valid": bv, "keypoints": kp,
               "keypoint_valid": kv}
    keys = _random.sample_keys(0, 0, torch.arange(batch))
    cases: List[Tuple[str, Contender, Contender]] = []
    skipped: List[Tuple[str, str]] = []
    for label, make in _modules(size):
        try:
            m = make().train()
        except Exception as e:  # a constructor this size cannot take (tiny --smoke sizes)
            skipped.append((label, f"{type(e).__name__}: {e}"))
            continue
        if not callable(getattr(m, "with_targets", None)):
            skipped.append((label, "no with_targets yet"))
            continue
        k = keys if getattr(m, "takes_keys", False) else None

        def images(m=m, k=k):
            return m(x) if k is None else m(x, k)

        def with_targets(m=m, k=k):
            out, t = m.with_targets(x, targets) if k is None else m.with_targets(x, targets, k)
            return out

        try:
            with_targets()
        except Exception as e:  # e.g. an Augment whose children are not ported yet
            skipped.append((label, f"with_targets raises {type(e).__name__}: "
                                   f"{str(e).splitlines()[0][:120]}"))
            continue
        cases.append((label, _Module("images_only", images, batch),
                      _Module("with_targets", with_targets, batch)))
    return cases, skipped


def run(cases: List[Tuple[str, Contender, Contender]], threads: List[int], rounds: int,
        window: float) -> List[Dict]:
    rows = []
    cpu = torch.device("cpu")
    for label, base, tgt in cases:
        summary = summarize(run_rounds(label, [base, tgt], threads, rounds, window, cpu,
                                       log=lambda s: None))
        for t in threads:
            # images_only's rate over with_targets' rate = with_targets' time over images'
            r = summary[(base.key, t)]["ratios"][tgt.key]
            b = summary[(base.key, t)]["images_per_s"]
            w = summary[(tgt.key, t)]["images_per_s"]
            rows.append({"case": label, "threads": t, "images_only_per_s": b,
                         "with_targets_per_s": w, "time_ratio_median": r["median"],
                         "min": r["min"], "max": r["max"]})
            print(f"{label:<27} {t} thr: images {b:>8,.0f}/s  with targets {w:>8,.0f}/s  "
                  f"time ratio {r['median']:.3f} [{r['min']:.3f}-{r['max']:.3f}]", flush=True)
    return rows


def fused_contenders(batch: int, size: int) -> List[Tuple[str, List[Contender]]]:
    """RandomRotation, RandomAffine, RandomPerspective: their own ``with_targets`` (image and
    masks on one sampling grid) vs the base class's generic one (``apply_image`` then
    ``apply_targets``: image and masks warped apart), beside the images-only forward; the same
    keys (same draws) for all three."""
    import batchaug as B
    from batchaug import _random
    from batchaug.transforms._base import GeometricTransform

    _, x, mask, boxes, bv, kp, kv = _data(batch, size)
    targets = {"masks": mask, "boxes": boxes, "box_valid": bv, "keypoints": kp,
               "keypoint_valid": kv}
    keys = _random.sample_keys(0, 0, torch.arange(batch))
    mods = [("RandomRotation nearest", B.RandomRotation(30)),
            ("RandomRotation bilinear", B.RandomRotation(30, "bilinear")),
            ("RandomAffine nearest", B.RandomAffine(20, (0.1, 0.1), (0.8, 1.2), 10)),
            ("RandomAffine bilinear", B.RandomAffine(20, (0.1, 0.1), (0.8, 1.2), 10,
                                                     "bilinear")),
            ("RandomPerspective", B.RandomPerspective(0.5, p=1.0))]
    out: List[Tuple[str, List[Contender]]] = []
    for label, m in mods:
        out.append((label, [
            _Module("images_only", lambda m=m: m(x, keys), batch),
            _Module("with_targets", lambda m=m: m.with_targets(x, targets, keys)[0], batch),
            _Module("generic", lambda m=m: GeometricTransform.with_targets(m, x, targets,
                                                                           keys)[0], batch)]))
    return out


def run_fused(cases: List[Tuple[str, List[Contender]]], threads: List[int], rounds: int,
              window: float) -> List[Dict]:
    rows = []
    for label, cs in cases:
        summary = summarize(run_rounds(label, cs, threads, rounds, window, torch.device("cpu"),
                                       log=lambda s: None))
        for t in threads:
            r = summary[("images_only", t)]["ratios"]
            own, gen = r["with_targets"], r["generic"]
            rows.append({"case": label, "threads": t, "own_ratio_median": own["median"],
                         "generic_ratio_median": gen["median"]})
            print(f"{label:<27} {t} thr: time / images-only: own with_targets "
                  f"{own['median']:.3f} [{own['min']:.3f}-{own['max']:.3f}]  generic "
                  f"{gen['median']:.3f} [{gen['min']:.3f}-{gen['max']:.3f}]", flush=True)
    return rows


def main(argv: Optional[List[str]] = None) -> List[Dict]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--window", type=float, default=0.5, help="seconds per measurement")
    ap.add_argument("--part", choices=("modules", "kernels", "fused", "all"),
                    default="modules")
    ap.add_argument("--smoke", action="store_true",
                    help="tiny sizes, one short round at 1 thread (seconds; run in the tests)")
    ap.add_argument("--json", default=None, help="also write the rows here")
    args = ap.parse_args(argv)
    threads = sorted({1, torch.get_num_threads()})
    if args.smoke:
        args.batch, args.size, args.rounds, args.window = 2, 32, 1, 0.01
        threads = [1]
    print(f"batch {args.batch} at {args.size} px, {BOXES} boxes + {KEYPOINTS} keypoints + a "
          f"uint8 mask per sample; {args.rounds} rounds of {args.window} s windows, threads "
          f"{threads}; time ratio = with_targets / images_only in the same round")
    rows: List[Dict] = []
    skipped: List[Tuple[str, str]] = []
    if args.part in ("modules", "all"):
        cases, skipped = module_contenders(args.batch, args.size)
        rows += run(cases, threads, args.rounds, args.window)
        for label, why in skipped:
            print(f"{label:<26} skipped: {why}", flush=True)
    if args.part in ("kernels", "all"):
        rows += run(contenders(args.batch, args.size), threads, args.rounds, args.window)
    if args.part == "fused":
        rows += run_fused(fused_contenders(args.batch, args.size), threads, args.rounds,
                          args.window)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"batch": args.batch, "size": args.size, "rounds": args.rounds,
                       "window_s": args.window, "rows": rows,
                       "skipped": [{"case": lab, "why": why} for lab, why in skipped]},
                      f, indent=1)
    return rows


if __name__ == "__main__":
    main()
