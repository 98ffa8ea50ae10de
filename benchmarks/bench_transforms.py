"""Images/s of batchaug transforms vs kornia, a torchvision per-sample loop, and plain torch.

Every contender goes from a uint8 (N, 3, H, W) batch held in memory to a normalized float32
batch. Timing: ``batchaug.bench.timing`` (interleaved rounds of equal windows, the order
rotating); the report gives per-contender medians and the median and min-max of the
same-round ratios batchaug / it.

    python benchmarks/bench_transforms.py                       # all recipes, 1 and default threads
    python benchmarks/bench_transforms.py --recipes cifar --rounds 7 --json out.json
    python benchmarks/bench_transforms.py --recipes rrc,rotation,cifar --contenders \
        batchaug,batchaug_noaa,batchaug_unfused,uint8_loop,plain_torch,kornia,fused_plain
                                                  # against the hand-written rivals

Recipes (RECIPES below: one entry each):
  cifar     RandomCrop(32, padding=4) + RandomHorizontalFlip + Normalize, 32x32 source
  rotation  RandomRotation(15, bilinear) + Normalize, 32x32 source
  rrc       RandomResizedCrop(224) + RandomHorizontalFlip + Normalize, 256x256 source
  policy    RandomResizedCrop(224) + RandomHorizontalFlip + TrivialAugmentWide + Normalize +
            RandomErasing(0.25) + MixUp(0.2)/CutMix(1.0) (one of the two per sample in
            batchaug, per batch in torchvision and kornia) on 1000-class labels, 256x256
            source (torchvision's ResNet-50 V2 recipe with DeiT's erasing)
  policy_ops  uint8 224x224 in, uint8 out, no Normalize: TrivialAugmentWide alone (batchaug)
            against each of its 13 ops applied to the whole batch at a middle bin
            (op_<Name>: functional.apply_op); the summary line gives TrivialAugmentWide's
            cost over its most expensive op's (target <= 2)
Contenders (CONTENDERS below: one builder each, returning None when it cannot run a recipe):
  batchaug                Augment(...) on the batch
  batchaug_noaa           rrc only: the same with RandomResizedCrop(antialias=False), the
                          batched grid_sample path
  batchaug_unfused        the same modules in an nn.Sequential, one after the other (no CPU
                          fusion)
  batchaug_inplace_mix    policy only: the same with MixUpOrCutMix(inplace=True), mixing
                          Augment's fresh output in place (as timm's Mixup does)
  kornia                  kornia.augmentation on the batch (float input in [0, 1])
  plain_torch             what a careful user writes by hand (one draw per sample, batched ops)
  torchvision_per_sample  a Python loop applying torchvision.transforms.v2 to one uint8 image at
                          a time, then stack (a DataLoader with num_workers=0 without the
                          sampler); on CUDA it runs on the CPU, as a DataLoader feeding the GPU
                          would, and is measured at the first batch size only
  uint8_loop              rrc only: per-sample F.interpolate(channels_last uint8 box,
                          antialias=True), batched flip + normalise
  fused_plain             cifar only: crop + flip in one index_select from a once-padded store
                          and its mirror, normalised in place
  torchvision_loader_w0/_w2  policy only: the torchvision pipeline per sample in a DataLoader
                          (batch 256, num_workers 0 / 2, persistent workers), MixUp/CutMix on
                          each collated batch; _w2 gets 512 images per call (one batch per
                          worker) and is idle between calls, so it never runs during another
                          contender's window
  op_<Name>               policy_ops only: one auto-augment op on the whole batch
kornia's TrivialAugment draws its op once per batch (all samples get the same op): marked
"per batch" in the "policy draws" column; torchvision draws per sample (one image per call).
The "antialias" column says which resize antialiases (rrc only): batchaug and torchvision do,
kornia and plain_torch (grid_sample) cannot.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional

import torch
import torch.nn.functional as Fnn

try:  # an installed batchaug wins; a bare checkout falls back to its own root (appended)
    import batchaug  # noqa: F401
except ImportError:  # pragma: no cover - depends on how the script is run
    sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from batchaug.bench import timing  # noqa: E402
from batchaug.bench.timing import Call  # noqa: E402
from batchaug.recipes import CIFAR10_MEAN as MEAN, CIFAR10_STD as STD  # noqa: E402


# ----------------------------------------------------------------------------- recipes

@dataclass(frozen=True)
class Recipe:
    source: int  # square source size
    batchaug: Callable  # (batchaug module) -> list of transforms
    kornia: Callable  # (kornia.augmentation) -> list of transforms
    torchvision: Callable  # (torchvision.transforms.v2) -> list of transforms
    antialias: Dict[str, str]  # contender -> "yes"/"no" where the recipe resizes
    erase: float = 0.0  # RandomErasing(p) after Normalize (0: none)
    mix: bool = False  # MixUp/CutMix on the batch and 1000-class labels after the rest
    normalize: bool = True  # False: uint8 out (policy_ops)


RECIPES: Dict[str, Recipe] = {
    "cifar": Recipe(
        32,
        lambda B: [B.RandomCrop(32, padding=4), B.RandomHorizontalFlip()],
        lambda K: [K.RandomCrop((32, 32), padding=4), K.RandomHorizontalFlip()],
        lambda v2: [v2.RandomCrop(32, padding=4), v2.RandomHorizontalFlip()],
        {},
    ),
    "rotation": Recipe(
        32,
        lambda B: [B.RandomRotation(15, interpolation="bilinear")],
        # kornia's default p=0.5 would rotate half the images; torchvision rotates all.
        lambda K: [K.RandomRotation(15.0, resample="bilinear", p=1.0)],
        lambda v2: [v2.RandomRotation(15, interpolation=v2.InterpolationMode.BILINEAR)],
        {},
    ),
    "rrc": Recipe(
        256,
        lambda B: [B.RandomResizedCrop(224, antialias=True), B.RandomHorizontalFlip()],
        lambda K: [K.RandomResizedCrop((224, 224)), K.RandomHorizontalFlip()],
        lambda v2: [v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip()],
        {"batchaug": "yes", "batchaug_noaa": "no", "batchaug_unfused": "yes", "kornia": "no",
         "plain_torch": "no", "torchvision_per_sample": "yes", "uint8_loop": "yes"},
    ),
    "policy": Recipe(
        256,
        lambda B: [B.RandomResizedCrop(224, antialias=True), B.RandomHorizontalFlip(),
                   B.TrivialAugmentWide()],
        lambda K: [K.RandomResizedCrop((224, 224)), K.RandomHorizontalFlip(),
                   _kornia_trivial_augment()],
        lambda v2: [v2.RandomResizedCrop(224, antialias=True), v2.RandomHorizontalFlip(),
                    v2.TrivialAugmentWide()],
        {"batchaug": "yes", "batchaug_inplace_mix": "yes", "kornia": "no",
         "torchvision_per_sample": "yes", "torchvision_loader_w0": "yes",
         "torchvision_loader_w2": "yes"},
        erase=0.25, mix=True,
    ),
    "policy_ops": Recipe(
        224,
        lambda B: [B.TrivialAugmentWide()],
        lambda K: [_kornia_trivial_augment()],
        lambda v2: [v2.TrivialAugmentWide()],
        {}, normalize=False,
    ),
}
# Which contenders draw the policy's op once per batch rather than per sample.
POLICY_DRAWS = {"kornia": "per batch"}
POLICY_OPS = ["ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness", "Color",
              "Contrast", "Sharpness", "Posterize", "Solarize", "AutoContrast", "Equalize"]
NUM_CLASSES = 1000


def _kornia_trivial_augment():
    from kornia.augmentation.auto import TrivialAugment

    return TrivialAugment()


def _labels(n: int, device) -> torch.Tensor:
    return torch.randint(0, NUM_CLASSES, (n,), generator=torch.Generator().manual_seed(1)).to(
        device)


def _tv_mix():
    """torchvision's batch mixing of the ResNet-50 V2 recipe: MixUp(0.2) or CutMix(1.0)."""
    from torchvision.transforms import v2

    return v2.RandomChoice([v2.MixUp(alpha=0.2, num_classes=NUM_CLASSES),
                            v2.CutMix(alpha=1.0, num_classes=NUM_CLASSES)])


# ----------------------------------------------------------------------------- contenders

def batchaug_pipeline(recipe: str, device: str, inplace_mix: bool = False,
                      antialias: bool = True, unfused: bool = False) -> Optional[Callable]:
    import batchaug

    r = RECIPES[recipe]
    if (inplace_mix and not r.mix) or (not antialias and recipe != "rrc"):
        return None
    steps = r.batchaug(batchaug)
    if not antialias:
        steps[0] = batchaug.RandomResizedCrop(224, antialias=False)
    if r.normalize:
        steps.append(batchaug.Normalize(MEAN, STD))
    if r.erase:
        steps.append(batchaug.RandomErasing(p=r.erase))
    aug = batchaug.Augment(*steps).to(device).train()
    if unfused:  # nn.Sequential runs the modules one by one
        aug = torch.nn.Sequential(*aug)
    if not r.mix:
        return aug
    mix = batchaug.MixUpOrCutMix(NUM_CLASSES, mixup_alpha=0.2, cutmix_alpha=1.0,
                                 switch_prob=0.5, inplace=inplace_mix).to(device).train()

    def run(x):
        return mix(aug(x), _labels(x.shape[0], x.device))

    return run


def kornia_pipeline(recipe: str, device: str) -> Optional[Callable]:
    try:
        import kornia.augmentation as K
    except ImportError:
        return None
    r = RECIPES[recipe]
    steps = r.kornia(K)
    if r.normalize:
        steps.append(K.Normalize(torch.tensor(MEAN, device=device),
                                 torch.tensor(STD, device=device)))
    if r.erase:
        steps.append(K.RandomErasing(p=r.erase))
    seq = torch.nn.Sequential(*steps).to(device)
    if not r.mix:
        def run(x):  # kornia works on float input in [0, 1]
            return seq(x.float().div_(255))

        return run
    # kornia's MixUp draws lambda uniformly (no Beta); one of the two per batch
    mixes = [K.RandomMixUpV2(data_keys=["input", "class"]),
             K.RandomCutMixV2(data_keys=["input", "class"])]

    def run_mix(x):
        y = seq(x.float().div_(255))
        mix = mixes[int(torch.randint(0, 2, ()))]
        return mix(y, _labels(x.shape[0], x.device))

    return run_mix


def torchvision_per_sample(recipe: str, device: str) -> Optional[Callable]:
    tf = _tv_compose(recipe)
    mix = _tv_mix() if RECIPES[recipe].mix else None

    def run(x):
        y = torch.stack([tf(image) for image in x.cpu()])
        return y if mix is None else mix(y, _labels(y.shape[0], "cpu"))

    return run


def _tv_compose(recipe: str):
    from torchvision.transforms import v2

    r = RECIPES[recipe]
    steps = r.torchvision(v2)
    if r.normalize:
        steps += [v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)]
    if r.erase:
        steps.append(v2.RandomErasing(p=r.erase))
    return v2.Compose(steps)


class _Images(torch.utils.data.Dataset):
    """The source batch as a dataset of (transformed image, label)."""

    def __init__(self, x: torch.Tensor, labels: torch.Tensor, tf: Callable) -> None:
        self.x, self.labels, self.tf = x, labels, tf

    def __len__(self) -> int:
        return self.x.shape[0]

    def __getitem__(self, i: int):
        return self.tf(self.x[i]), self.labels[i]


def per_sample_loader(tf: Callable, workers: int, batch: int,
                      after: Optional[Callable] = None) -> Callable:
    """``tf`` per sample in a DataLoader over the input: one loader per source tensor, kept
    warm (persistent workers); a call runs one epoch of it, ``after(images, labels)`` on each
    collated batch."""
    state: Dict[str, object] = {}

    def run(x):
        if state.get("key") != x.data_ptr():
            state["key"] = x.data_ptr()
            state["loader"] = torch.utils.data.DataLoader(
                _Images(x, _labels(x.shape[0], "cpu"), tf), batch_size=batch,
                num_workers=workers, persistent_workers=workers > 0)
        out = None
        for images, labels in state["loader"]:  # one epoch: x.shape[0] / batch batches
            out = images if after is None else after(images, labels)
        return out

    return run


def _torchvision_loader(workers: int) -> Callable[[str, str], Optional[Callable]]:
    def build(recipe: str, device: str) -> Optional[Callable]:
        if recipe != "policy":
            return None
        return per_sample_loader(_tv_compose(recipe), workers, 256, _tv_mix())

    return build


def _op_contender(name: str) -> Callable[[str, str], Optional[Callable]]:
    def build(recipe: str, device: str) -> Optional[Callable]:
        if recipe != "policy_ops":
            return None
        from batchaug.functional import _auto_augment as FA

        mags: Dict[tuple, torch.Tensor] = {}

        def run(x):
            k = (x.shape[0], x.shape[2], x.shape[3])
            if k not in mags:  # bin 15 of 31 (the middle), positive
                table = FA.op_magnitudes(name, "wide", 31, x.shape[2], x.shape[3], x.device)
                mags[k] = table[15].expand(x.shape[0]).clone()
            return FA.apply_op(x, name, mags[k])

        return run

    return build


def plain_torch_pipeline(recipe: str, device: str) -> Optional[Callable]:
    """What a careful user writes by hand with plain torch ops (no batchaug)."""
    mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1)
    std = torch.tensor(STD, device=device).view(1, 3, 1, 1)

    def normalize(x):
        return (x.float().div_(255)).sub_(mean).div_(std)

    if recipe == "cifar":
        def run(x):
            n = x.shape[0]
            p = Fnn.pad(x, (4, 4, 4, 4))
            top = torch.randint(0, 9, (n,), device=x.device)
            left = torch.randint(0, 9, (n,), device=x.device)
            win = p.unfold(2, 32, 1).unfold(3, 32, 1)  # N C 9 9 32 32 (a view)
            y = win[torch.arange(n, device=x.device), :, top, left]
            flip = torch.rand(n, device=x.device) < 0.5
            y = torch.where(flip.view(n, 1, 1, 1), y.flip(-1), y)
            return normalize(y)
        return run

    if recipe == "rotation":
        def run(x):
            n = x.shape[0]
            ang = (torch.rand(n, device=x.device) * 30 - 15) * math.pi / 180
            cos, sin = torch.cos(ang), torch.sin(ang)
            theta = torch.stack([torch.stack([cos, -sin, torch.zeros_like(cos)], 1),
                                 torch.stack([sin, cos, torch.zeros_like(cos)], 1)], 1)
            grid = Fnn.affine_grid(theta, list(x.shape), align_corners=False)
            return Fnn.grid_sample(normalize(x), grid, mode="bilinear", align_corners=False)
        return run

    if recipe == "rrc":
        def run(x):  # random resized crop via affine_grid + grid_sample, then flip
            n = x.shape[0]
            area = torch.empty(n, device=x.device).uniform_(0.08, 1.0)
            logr = torch.empty(n, device=x.device).uniform_(math.log(3 / 4), math.log(4 / 3))
            ratio = torch.exp(logr)
            cw = torch.sqrt(area * ratio).clamp(max=1.0)
            ch = torch.sqrt(area / ratio).clamp(max=1.0)
            cx = (torch.rand(n, device=x.device) * 2 - 1) * (1 - cw)
            cy = (torch.rand(n, device=x.device) * 2 - 1) * (1 - ch)
            flip = torch.where(torch.rand(n, device=x.device) < 0.5, -1.0, 1.0)
            zero = torch.zeros_like(cw)
            theta = torch.stack([torch.stack([cw * flip, zero, cx], 1),
                                 torch.stack([zero, ch, cy], 1)], 1)
            grid = Fnn.affine_grid(theta, [n, 3, 224, 224], align_corners=False)
            return Fnn.grid_sample(normalize(x), grid, mode="bilinear", align_corners=False)
        return run
    return None


def uint8_loop_pipeline(recipe: str, device: str) -> Optional[Callable]:
    """rrc only: per sample, torch's SIMD uint8 antialiased resize of the box (``F.interpolate``
    on a channels_last uint8 view, what torchvision's uint8 resize calls), then a batched flip
    and normalise: the fastest hand-written CPU loop for this recipe (issue 13)."""
    if recipe != "rrc":
        return None
    import batchaug

    mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1)
    std = torch.tensor(STD, device=device).view(1, 3, 1, 1)
    boxes = batchaug.RandomResizedCrop(224)  # torchvision's box rule, drawn per sample

    def run(x):
        t, l, h, w = (v.tolist() for v in boxes.make_params(x))
        xc = x.contiguous(memory_format=torch.channels_last)
        y = torch.cat([Fnn.interpolate(xc[i:i + 1, :, t[i]:t[i] + h[i], l[i]:l[i] + w[i]],
                                       size=[224, 224], mode="bilinear", antialias=True)
                       for i in range(x.shape[0])])
        flip = torch.rand(y.shape[0], device=y.device) < 0.5
        y = torch.where(flip.view(-1, 1, 1, 1), y.flip(-1), y)
        return y.float().div_(255).sub_(mean).div_(std)

    return run


def fused_plain_pipeline(recipe: str, device: str) -> Optional[Callable]:
    """cifar only: crop + flip as one index_select of windows from a padded store and its mirror
    (built once per source batch, outside the clock, as a dataset would keep it), normalised in
    place: the floor for this recipe in plain torch ops (issue 13)."""
    if recipe != "cifar":
        return None
    scale = (1.0 / 255 / torch.tensor(STD, device=device)).view(1, 3, 1, 1)
    shift = (-torch.tensor(MEAN, device=device) / torch.tensor(STD, device=device)).view(1, 3, 1, 1)
    store: Dict[int, torch.Tensor] = {}

    def run(x):
        if x.data_ptr() not in store:
            store.clear()
            p = Fnn.pad(x, (4, 4, 4, 4))
            store[x.data_ptr()] = torch.cat([p, p.flip(-1)])
        p = store[x.data_ptr()]
        n, s = x.shape[0], p.stride()
        top = torch.randint(0, 9, (n,), device=x.device)
        left = torch.randint(0, 9, (n,), device=x.device)
        flip = (torch.rand(n, device=x.device) < 0.5).long()
        col = torch.where(flip.bool(), 8 - left, left)  # the mirror's window for a flipped crop
        win = p.as_strided([p.numel() - (2 * s[1] + 31 * s[2] + 31), 3, 32, 32],
                           [1, s[1], s[2], 1])
        idx = (torch.arange(n, device=x.device) + flip * n) * s[0] + top * s[2] + col
        return win.index_select(0, idx).float().mul_(scale).add_(shift)

    return run


# name -> builder(recipe, device) -> fn(uint8 batch) -> float batch, or None (cannot run it).
CONTENDERS: Dict[str, Callable[[str, str], Optional[Callable]]] = {
    "batchaug": batchaug_pipeline,
    "batchaug_noaa": lambda recipe, device: batchaug_pipeline(recipe, device, antialias=False),
    "batchaug_unfused": lambda recipe, device: batchaug_pipeline(recipe, device, unfused=True),
    "batchaug_inplace_mix": lambda recipe, device: batchaug_pipeline(recipe, device, True),
    "kornia": kornia_pipeline,
    "plain_torch": plain_torch_pipeline,
    "torchvision_per_sample": torchvision_per_sample,
    "uint8_loop": uint8_loop_pipeline,
    "fused_plain": fused_plain_pipeline,
    "torchvision_loader_w0": _torchvision_loader(0),
    "torchvision_loader_w2": _torchvision_loader(2),
    **{f"op_{name}": _op_contender(name) for name in POLICY_OPS},
}
# Contenders that run on the CPU whatever --device says (a per-sample loop feeding the GPU).
CPU_ONLY = {"torchvision_per_sample", "torchvision_loader_w0", "torchvision_loader_w2"}
# Contenders that take the source batch repeated: one 256-image batch per DataLoader worker.
INPUT_REPEAT = {"torchvision_loader_w2": 2}


# ----------------------------------------------------------------------------- timing

def source_batch(recipe: str, batch_size: int, device: str) -> torch.Tensor:
    size = RECIPES[recipe].source
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, 256, (batch_size, 3, size, size), generator=g,
                         dtype=torch.uint8).to(device)


def bench_recipe(recipe: str, batch_size: int, device: str, names: List[str],
                 args: argparse.Namespace) -> dict:
    x = source_batch(recipe, batch_size, device)
    calls = []
    for name in names:
        fn = CONTENDERS[name](recipe, device)
        if fn is None:
            if not name.startswith("op_"):
                print(f"[skip] {name} cannot run {recipe} here", file=sys.stderr)
            continue
        inp = x.cpu() if name in CPU_ONLY else x
        inp = inp.repeat(INPUT_REPEAT.get(name, 1), 1, 1, 1)
        calls.append(Call(name, fn, [(inp,)], images=inp.shape[0]))
    summary = timing.compare(calls, args, recipe, torch.device(device), quiet=False)
    return {"recipe": recipe, "device": device, "batch_size": batch_size,
            "antialias": {c.key: RECIPES[recipe].antialias.get(c.key, "-") for c in calls},
            "policy_draws": {c.key: POLICY_DRAWS.get(c.key, "per sample")
                             if recipe.startswith("policy") else "-" for c in calls},
            "summary": summary}


def markdown(results: List[dict]) -> str:
    lines = ["| recipe | device | batch | threads | contender | antialias | policy draws | "
             "median img/s | batchaug / it: median [min-max] of same-round ratios |",
             "|---|---|---|---|---|---|---|---:|---:|"]
    for r in results:
        for (name, t), s in r["summary"].items():
            ours = r["summary"].get(("batchaug", t), {}).get("ratios", {}).get(name)
            lines.append(f"| {r['recipe']} | {r['device']} | {r['batch_size']} | {t} | {name} | "
                         f"{r['antialias'][name]} | {r['policy_draws'][name]} | "
                         f"{s['images_per_s']:,.0f} | "
                         f"{'' if name == 'batchaug' else timing.spread(ours, 1)} |")
    return "\n".join(lines + [""] + targets(results))


def targets(results: List[dict]) -> List[str]:
    """Issue 10's targets, from the same-round ratios: policy, batchaug over torchvision's
    per-sample DataLoader with 0 workers (>= 5); policy_ops, TrivialAugmentWide's cost over
    its most expensive single op's (<= 2; cost ratio = 1 / rate ratio)."""
    out = []
    for r in results:
        for (name, t), s in r["summary"].items():
            tag = f"{r['recipe']} threads={t}"
            if r["recipe"] == "policy" and name in ("batchaug", "batchaug_inplace_mix"):
                q = s["ratios"].get("torchvision_loader_w0")
                if q:
                    out.append(f"- {tag}: {name} / torchvision DataLoader workers 0 = "
                               f"{timing.spread(q, 1)}; target >= 5x")
            ops = [k for (k, u) in r["summary"] if k.startswith("op_") and u == t]
            if r["recipe"] == "policy_ops" and name == "batchaug" and ops:
                slowest = min(ops, key=lambda k: r["summary"][(k, t)]["images_per_s"])
                q = s["ratios"][slowest]
                out.append(f"- {tag}: TrivialAugmentWide cost / {slowest[3:]} cost (the most "
                           f"expensive op) = {1 / q['median']:.2f} ({1 / q['max']:.2f}-"
                           f"{1 / q['min']:.2f}); target <= 2")
    return out


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--recipes", default="all",
                    help=f"comma list of {','.join(RECIPES)} or 'all'")
    ap.add_argument("--contenders", default="all",
                    help=f"comma list of {','.join(CONTENDERS)} or 'all'")
    ap.add_argument("--batch-size", type=int, default=None,
                    help="default 256 on CPU; 512 and 4096 on CUDA")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda", "auto"])
    timing.add_arguments(ap, rounds=5, window=0.3)
    args = ap.parse_args(argv)

    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda but CUDA is not available")
    recipes = list(RECIPES) if args.recipes == "all" else args.recipes.split(",")
    for r in recipes:
        if r not in RECIPES:
            ap.error(f"unknown recipe {r!r}; choose from {list(RECIPES)}")
    names = list(CONTENDERS) if args.contenders == "all" else args.contenders.split(",")
    for n in names:
        if n not in CONTENDERS:
            ap.error(f"unknown contender {n!r}; choose from {list(CONTENDERS)}")
    sizes = [args.batch_size] if args.batch_size else ([256] if device == "cpu" else [512, 4096])
    results = []
    for recipe in recipes:
        for bs in sizes:
            # The CPU per-sample loop does not depend on the GPU batch size: once.
            run = [n for n in names if bs == sizes[0] or n not in CPU_ONLY]
            results.append(bench_recipe(recipe, bs, device, run, args))
    print(markdown(results))
    timing.write_json(args.json, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
