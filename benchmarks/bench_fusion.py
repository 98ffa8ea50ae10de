"""Does Augment's CPU fusion pay? The same Augment with its fusion rules on and off, end to end.

    OMP_NUM_THREADS=1 python benchmarks/bench_fusion.py --rounds 8
    python benchmarks/bench_fusion.py --recipes rot,cifar --rounds 6

Contenders (``batchaug/_fusion.py``): ``all`` (its rules), ``none`` (the modules one by one,
as under TorchScript or on CUDA). Each measurement is a fresh process (1 thread) that warms up,
then times ``aug(x)`` over ``--window`` seconds (``batchaug.bench.timing.measure``): the
allocator reaches the steady state a training loop has, and one contender's freed buffers
cannot serve another's. Rounds run the contenders in rotating order; the report gives the
same-round ratio of the first mode over each other in images/s (``all / none`` > 1: the
fusion is faster), median [min-max].
Recipes (uint8 input):
  rrc_erase  RandomResizedCrop(224), RandomHorizontalFlip, Normalize, RandomErasing(0.25)
             (timm/ImageNet style); 64 x 256 px
  cifar      RandomCrop(32, padding=4), RandomHorizontalFlip, Normalize; 256 x 32 px
  rot        RandomRotation(15, bilinear), Normalize (`batchaug bench --recipe rotation`);
             256 x 32 px
"""
from __future__ import annotations

import argparse
import subprocess
import sys

MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]


def child(recipe: str, mode: str, window: float) -> str:
    import torch

    import batchaug as B
    import batchaug._fusion as fusion
    from batchaug.bench import timing

    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)

    def u8(n: int, s: int) -> torch.Tensor:
        return torch.randint(0, 256, (n, 3, s, s), dtype=torch.uint8, generator=g)

    aug, x = {
        "rrc_erase": lambda: (B.Augment(B.RandomResizedCrop(224), B.RandomHorizontalFlip(),
                                        B.Normalize(MEAN, STD), B.RandomErasing(0.25)),
                              u8(64, 256)),
        "cifar": lambda: (B.Augment(B.RandomCrop(32, padding=4), B.RandomHorizontalFlip(),
                                    B.Normalize(MEAN, STD)), u8(256, 32)),
        "rot": lambda: (B.Augment(B.RandomRotation(15, interpolation="bilinear"),
                                  B.Normalize(MEAN, STD)), u8(256, 32)),
    }[recipe]()
    keep = {"all": fusion.rules(), "none": []}[mode]
    fusion._RULES[:] = keep
    fusion.rules = lambda: keep  # type: ignore[assignment]
    call = timing.Call(mode, aug, [(x,)])
    timing.warmup(call, torch.device("cpu"))
    images, seconds = timing.measure(call, window, torch.device("cpu"))
    return f"{images} {seconds}"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--recipes", default="rrc_erase", help="comma list of rrc_erase,cifar,rot")
    ap.add_argument("--modes", default="all,none")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--window", type=float, default=1.0, help="seconds per measurement")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        print(child(a.child[0], a.child[1], float(a.child[2])))
        return
    from batchaug.bench import timing

    modes = list(dict.fromkeys(a.modes.split(",") + ["none"]))
    for k, recipe in enumerate(a.recipes.split(",")):
        measurements = []
        for r in range(a.rounds):
            for i in range(len(modes)):
                m = modes[(i + r) % len(modes)]
                out = subprocess.run([sys.executable, __file__, "--child", recipe, m,
                                      str(a.window)], check=True, capture_output=True,
                                     text=True).stdout.split()
                measurements.append(timing.Measurement(recipe, m, 1, r, int(out[0]),
                                                       float(out[1])))
        summary = timing.summarize(measurements)
        print("\n".join(timing.table(summary, modes[0], recipe, header=k == 0)), flush=True)


if __name__ == "__main__":
    main()
