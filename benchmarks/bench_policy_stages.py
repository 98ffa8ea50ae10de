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

Each stage gets the previous stage's output (prepared once, outside the clock). Timing:
``batchaug.bench.timing``, every (side, stage) pair one contender of the same rounds. The table
gives the median ms per batch and the median [min-max] of the same-round ratios torchvision /
batchaug per stage and for the sum of stages.
"""
from __future__ import annotations

import argparse
import statistics
from typing import Callable, Dict, List

import torch

from batchaug.bench import timing
from batchaug.bench.timing import Call
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


def run(args: argparse.Namespace, seed: int = 0) -> Dict[tuple, dict]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (args.batch_size, 3, 256, 256), dtype=torch.uint8, generator=g)
    labels = torch.randint(0, NUM_CLASSES, (args.batch_size,), generator=g)
    sides = {"batchaug": _batchaug_stages(), "torchvision": _torchvision_stages()}
    torch.manual_seed(seed)
    inputs = {name: _inputs(st, x, labels, name == "torchvision") for name, st in sides.items()}
    timed = [(name, stage) for stage in STAGES for name in sides] + [("batchaug", "mix_inplace")]
    return timing.compare([Call(f"{name}/{stage}", sides[name][stage],
                                [(inputs[name][stage],)], images=args.batch_size)
                           for name, stage in timed], args, "policy stages")


def report(summary: Dict[tuple, dict], batch: int, threads: int) -> str:
    def ms(key: str) -> List[float]:  # ms per batch, round by round
        return [1000.0 * batch / r for r in summary[(key, threads)]["samples_images_per_s"]]

    def total(side: str, parts: List[str]) -> List[float]:
        return [sum(v) for v in zip(*(ms(f"{side}/{s}") for s in parts))]

    rows = [(s, ms(f"batchaug/{s}"), ms(f"torchvision/{s}")) for s in STAGES]
    rows.append(("total", total("batchaug", STAGES), total("torchvision", STAGES)))
    rows.append(("mix_inplace", ms("batchaug/mix_inplace"), ms("torchvision/mix")))
    rows.append(("total_inplace", total("batchaug", STAGES[:-1] + ["mix_inplace"]),
                 total("torchvision", STAGES)))
    lines = [f"policy stages, batch {batch}, {threads} thread(s): ms per batch (median of rounds)",
             "| stage | batchaug ms | torchvision per sample ms | torchvision / batchaug: "
             "median [min-max] of same-round ratios |", "|---|---:|---:|---:|"]
    for stage, b, t in rows:
        ratios = [tv / ba for tv, ba in zip(t, b)]
        lines.append(f"| {stage} | {statistics.median(b):.1f} | {statistics.median(t):.1f} | "
                     + timing.spread({"median": statistics.median(ratios), "min": min(ratios),
                                      "max": max(ratios)}) + " |")
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch-size", type=int, default=256)
    timing.add_arguments(ap, rounds=3, window=1.0, threads="1")
    args = ap.parse_args(argv)
    summary = run(args)
    for t in args.threads:
        print(report(summary, args.batch_size, t))
    timing.write_json(args.json, summary)


if __name__ == "__main__":
    main()
