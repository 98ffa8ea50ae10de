"""Where the `policy` recipe's time goes, stage by stage: batchaug on the batch against
torchvision v2 one image at a time (what a DataLoader with num_workers=0 runs), on the CPU.

    python benchmarks/bench_policy_stages.py                    # 1 thread, 3 rounds
    python benchmarks/bench_policy_stages.py --threads 2 --rounds 5 --batch-size 128

The recipe is bench_transforms.py's `policy` (torchvision's ResNet-50 V2 recipe with DeiT's
erasing), 224x224 from a 256x256 uint8 batch, cut into the four stages each side runs:

  rrc_flip         RandomResizedCrop(224, antialias) + RandomHorizontalFlip
  trivialaugment   TrivialAugmentWide (uint8 in and out)
  normalize_erase  to float32, Normalize, RandomErasing(0.25)
  mix              MixUp(0.2) / CutMix(1.0) on 1000-class labels (batchaug: one of the two per
                   sample; torchvision: per batch), torchvision's time includes collating the
                   images into one batch (torch.stack), as a DataLoader does
  mix_inplace      batchaug only: the same with MixUpOrCutMix(inplace=True), against
                   torchvision's mix of the same round ("total_inplace": the sum with it)

Each stage gets the previous stage's output (prepared once, outside the clock). Rounds are
interleaved: in every round each (side, stage) pair is timed over the same wall-clock window, so
a load burst hits both sides alike. The table gives the median ms per batch and the median (with
min-max) of the same-round ratios torchvision / batchaug per stage and for the sum of stages.
"""
from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable, Dict, List, Tuple

import torch

from batchaug.recipes import IMAGENET_MEAN as MEAN, IMAGENET_STD as STD  # noqa: E402
NUM_CLASSES = 1000
STAGES = ["rrc_flip", "trivialaugment", "normalize_erase", "mix"]


def _batchaug_stages() -> Dict[str, Callable]:
    import batchaug

    rrc_flip = batchaug.Augment(batchaug.RandomResizedCrop(224, antialias=True),
                                batchaug.RandomHorizontalFlip()).train()
    ta = batchaug.TrivialAugmentWide().train()
    ne = batchaug.Augment(batchaug.Normalize(MEAN, STD), batchaug.RandomErasing(p=0.25)).train()
    mix = batchaug.MixUpOrCutMix(NUM_CLASSES, mixup_alpha=0.2, cutmix_alpha=1.0,
                                 switch_prob=0.5).train()
    mix_inplace = batchaug.MixUpOrCutMix(NUM_CLASSES, mixup_alpha=0.2, cutmix_alpha=1.0,
                                         switch_prob=0.5, inplace=True).train()
    # (in place on the same input every call: the values stay convex blends, the work is the
    # same)
    return {"rrc_flip": rrc_flip, "trivialaugment": ta, "normalize_erase": ne,
            "mix": lambda xy: mix(*xy), "mix_inplace": lambda xy: mix_inplace(*xy)}


def _torchvision_stages() -> Dict[str, Callable]:
    from torchvision.transforms import v2

    rrc_flip = v2.Compose([v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip()])
    ta = v2.TrivialAugmentWide()
    ne = v2.Compose([v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD),
                     v2.RandomErasing(p=0.25)])
    mix = v2.RandomChoice([v2.MixUp(alpha=0.2, num_classes=NUM_CLASSES),
                           v2.CutMix(alpha=1.0, num_classes=NUM_CLASSES)])

    def per_image(tf):
        return lambda images: [tf(im) for im in images]

    return {"rrc_flip": per_image(rrc_flip), "trivialaugment": per_image(ta),
            "normalize_erase": per_image(ne),
            "mix": lambda xy: mix(torch.stack(xy[0]), xy[1])}


def _inputs(side: Dict[str, Callable], x, labels, as_list: bool) -> Dict[str, object]:
    """Each stage's input: the previous stage's output on the source batch."""
    cur = list(x) if as_list else x
    inputs: Dict[str, object] = {}
    for stage in STAGES[:-1]:
        inputs[stage] = cur
        cur = side[stage](cur)
    inputs["mix"] = inputs["mix_inplace"] = (cur, labels)
    return inputs


def _time(fn: Callable, arg, window: float) -> float:
    """Seconds per call, over at least one call and ``window`` seconds."""
    calls, start = 0, time.perf_counter()
    while True:
        fn(arg)
        calls += 1
        elapsed = time.perf_counter() - start
        if elapsed >= window:
            return elapsed / calls


def run(batch: int, rounds: int, window: float, seed: int = 0) -> Dict[str, object]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (batch, 3, 256, 256), dtype=torch.uint8, generator=g)
    labels = torch.randint(0, NUM_CLASSES, (batch,), generator=g)
    sides = {"batchaug": _batchaug_stages(), "torchvision": _torchvision_stages()}
    torch.manual_seed(seed)
    inputs = {name: _inputs(st, x, labels, name == "torchvision") for name, st in sides.items()}
    timed = [(name, stage) for stage in STAGES for name in sides] + [("batchaug", "mix_inplace")]
    for name, stage in timed:  # warm-up
        sides[name][stage](inputs[name][stage])
    ms: Dict[Tuple[str, str], List[float]] = {}
    for r in range(rounds):
        pairs = list(timed)
        if r % 2:
            pairs.reverse()
        for name, stage in pairs:
            t = _time(sides[name][stage], inputs[name][stage], window)
            ms.setdefault((name, stage), []).append(1000.0 * t)
    return {"batch": batch, "rounds": rounds, "ms": ms}


def report(res: Dict[str, object], threads: int) -> str:
    ms = res["ms"]
    rounds = res["rounds"]
    lines = [f"policy stages, batch {res['batch']}, {threads} thread(s), {rounds} rounds: "
             "ms per batch (median of rounds)",
             "| stage | batchaug ms | torchvision per sample ms | torchvision / batchaug: "
             "median (min-max) of same-round ratios |",
             "|---|---:|---:|---:|"]
    def total(side: str, parts: List[str]) -> List[float]:
        return [sum(ms[(side, s)][r] for s in parts) for r in range(rounds)]

    rows = [(s, ms[("batchaug", s)], ms[("torchvision", s)]) for s in STAGES]
    rows.append(("total", total("batchaug", STAGES), total("torchvision", STAGES)))
    rows.append(("mix_inplace", ms[("batchaug", "mix_inplace")], ms[("torchvision", "mix")]))
    rows.append(("total_inplace", total("batchaug", STAGES[:-1] + ["mix_inplace"]),
                 total("torchvision", STAGES)))
    for stage, b, t in rows:
        ratios = [tv / ba for tv, ba in zip(t, b)]
        lines.append(f"| {stage} | {statistics.median(b):.1f} | {statistics.median(t):.1f} | "
                     f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}) |")
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--window", type=float, default=1.0, help="seconds per (side, stage)")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(report(run(args.batch_size, args.rounds, args.window), args.threads))


if __name__ == "__main__":
    main()
