"""Cost of moving dense targets with the images: image warp alone vs image warp + targets.

    flock /tmp/batchaug-bench.lock python benchmarks/bench_targets.py
    python benchmarks/bench_targets.py --batch 32 --size 224 --rounds 5 --window 1.0 --json t.json

Per sample: a uint8 3 x size x size image, a uint8 size x size mask, 32 boxes, 17 keypoints.
Cases (CPU):
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
  RandomRotation / RandomAffine / RandomPerspective (``--cases modules``): the modules'
                              ``forward`` vs their ``with_targets``; rotation and affine also
                              vs the base class's generic ``with_targets`` (image and mask
                              warped apart), which their own one replaces

Both contenders of a case get the same wall-clock window per round (batchaug.bench.timing,
rounds interleaved with a rotating order) at 1 thread and the default thread count; the report
gives median images per second and the same-round time ratio with_targets / images_only:
median [min-max].
"""
from __future__ import annotations

import argparse
import json
from typing import Callable, Dict, Iterator, List, Tuple

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


def module_contenders(batch: int, size: int) -> List[Tuple[str, List[Contender]]]:
    """The transforms themselves: ``m(x)`` vs ``m.with_targets(x, targets)``; for rotation and
    affine also the base class's generic ``with_targets`` (``apply_image`` then
    ``apply_targets``: image and mask warped apart), which their own ``with_targets`` replaces
    by one grid for both (``warp_with_masks``)."""
    from batchaug import RandomAffine, RandomPerspective, RandomRotation
    from batchaug.transforms._base import GeometricTransform

    _, x, mask, boxes, bv, kp, kv = _data(batch, size)
    targets = {"masks": mask, "boxes": boxes, "box_valid": bv, "keypoints": kp,
               "keypoint_valid": kv}
    mods = [("RandomRotation nearest", RandomRotation(30), True),
            ("RandomRotation bilinear", RandomRotation(30, "bilinear"), True),
            ("RandomAffine nearest", RandomAffine(20, (0.1, 0.1), (0.8, 1.2), 10), True),
            ("RandomAffine bilinear", RandomAffine(20, (0.1, 0.1), (0.8, 1.2), 10, "bilinear"),
             True),
            ("RandomPerspective bilinear p=1", RandomPerspective(0.5, p=1.0), True)]
    out: List[Tuple[str, List[Contender]]] = []
    for label, m, generic in mods:
        cs: List[Contender] = [
            _Fn("images_only", lambda m=m: m(x), batch),
            _Fn("with_targets", lambda m=m: m.with_targets(x, targets)[0], batch)]
        if generic:
            cs.append(_Fn("generic_with_targets",
                          lambda m=m: GeometricTransform.with_targets(m, x, targets)[0], batch))
        out.append((label, cs))
    return out


def run(cases: List[Tuple[str, List[Contender]]], threads: List[int], rounds: int,
        window: float) -> List[Dict]:
    """Each case: the images-only contender first, then its with-targets contenders."""
    rows = []
    cpu = torch.device("cpu")
    for label, contenders_ in cases:
        base = contenders_[0]
        summary = summarize(run_rounds(label, contenders_, threads, rounds, window, cpu,
                                       log=lambda s: None))
        for t in threads:
            b = summary[(base.key, t)]["images_per_s"]
            for tgt in contenders_[1:]:
                # images_only's rate over with_targets' rate = with_targets' time over images'
                r = summary[(base.key, t)]["ratios"][tgt.key]
                w = summary[(tgt.key, t)]["images_per_s"]
                rows.append({"case": label, "contender": tgt.key, "threads": t,
                             "images_only_per_s": b, "with_targets_per_s": w,
                             "time_ratio_median": r["median"], "min": r["min"],
                             "max": r["max"]})
                print(f"{label:<30} {t} thr: images {b:>7,.0f}/s  {tgt.key:<20} {w:>7,.0f}/s  "
                      f"time ratio {r['median']:.3f} [{r['min']:.3f}-{r['max']:.3f}]",
                      flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--window", type=float, default=1.0, help="seconds per measurement")
    ap.add_argument("--json", default=None, help="also write the rows here")
    ap.add_argument("--cases", default="all", choices=("all", "kernels", "modules"),
                    help="kernels: the functional cases; modules: the transforms' with_targets")
    args = ap.parse_args()
    threads = sorted({1, torch.get_num_threads()})
    print(f"batch {args.batch} at {args.size} px, {BOXES} boxes + {KEYPOINTS} keypoints + a "
          f"uint8 mask per sample; {args.rounds} rounds of {args.window} s windows, threads "
          f"{threads}; time ratio = with_targets / images_only in the same round")
    cases: List[Tuple[str, List[Contender]]] = []
    if args.cases in ("all", "kernels"):
        cases += [(label, [a, b]) for label, a, b in contenders(args.batch, args.size)]
    if args.cases in ("all", "modules"):
        cases += module_contenders(args.batch, args.size)
    rows = run(cases, threads, args.rounds, args.window)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"batch": args.batch, "size": args.size, "rounds": args.rounds,
                       "window_s": args.window, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
