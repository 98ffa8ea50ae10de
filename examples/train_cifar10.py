"""Train a small, fast CNN on CIFAR-10 with the whole input pipeline on the device.

In the spirit of the airbench CIFAR-10 speed runs: the dataset is decoded once into a uint8
``DeviceCache`` on the training device, ``DeviceLoader`` draws batches by on-device indexing (no
workers, no collate, no host-to-device copy), and the augmentation runs as the first layer of the
model (``AugmentedModel``), per sample, on the whole batch. ``StallMeter`` reports how much of each
epoch was spent waiting for batches. At the end the model, preprocessing included, is saved as
TorchScript: it takes raw uint8 images.

    python examples/train_cifar10.py --data ~/data/cifar10      # holds cifar-10-batches-py/
    python examples/train_cifar10.py                            # synthetic data (says so)
    python examples/train_cifar10.py --smoke                    # seconds, synthetic, no files
    python examples/train_cifar10.py --aug trivialaugment --mix both   # stronger recipe

``--aug`` picks the per-sample image policy after the crop and flip (``basic``: none;
``trivialaugment``, ``randaugment``, ``autoaugment``: batchaug's TrivialAugmentWide,
RandAugment, AutoAugment("cifar10"), one op drawn per sample). ``--mix`` mixes images and labels
after the augmentation (MixUp, CutMix, or either per sample), with a soft-target cross-entropy.
The label mixer takes labels, so it sits in the training step between ``model.augment`` and
``model.model``, not inside the model: the saved model is unchanged by it.

``--data`` is read with ``torchvision.datasets.CIFAR10(root, download=False)``: nothing is
downloaded.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
import warnings
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from batchaug import (
    Augment,
    AugmentedModel,
    AutoAugment,
    CutMix,
    DeviceCache,
    DeviceLoader,
    MixUp,
    MixUpOrCutMix,
    Normalize,
    RandAugment,
    RandomCrop,
    RandomHorizontalFlip,
    StallMeter,
    TrivialAugmentWide,
)

# torch 2.14 marks torch.jit as deprecated; TorchScript is still what many deployments load.
warnings.filterwarnings("ignore", message=r".*torch\.jit\..*deprecated.*")

CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2470, 0.2435, 0.2616)
AUGS = ("basic", "trivialaugment", "randaugment", "autoaugment")
MIXES = ("none", "mixup", "cutmix", "both")
LABEL_SMOOTHING = 0.2


def build_augment(aug: str) -> Augment:
    """Crop + flip (airbench: +-2 px translate), the chosen policy, CIFAR normalisation."""
    policy = {
        "basic": [],
        "trivialaugment": [TrivialAugmentWide()],
        "randaugment": [RandAugment(num_ops=2, magnitude=9)],
        "autoaugment": [AutoAugment("cifar10")],
    }[aug]
    return Augment(RandomCrop(32, padding=2, padding_mode="reflect"), RandomHorizontalFlip(),
                   *policy, Normalize(CIFAR_MEAN, CIFAR_STD))


def build_mix(mix: str, num_classes: int = 10) -> Optional[nn.Module]:
    """The label mixer (alpha 1.0, as the MixUp and CutMix papers on CIFAR), or None. It
    smooths the targets itself, so the loss does not smooth them again."""
    if mix == "none":
        return None
    kw = dict(label_smoothing=LABEL_SMOOTHING)
    if mix == "mixup":
        return MixUp(num_classes, alpha=1.0, **kw)
    if mix == "cutmix":
        return CutMix(num_classes, alpha=1.0, **kw)
    return MixUpOrCutMix(num_classes, mixup_alpha=1.0, cutmix_alpha=1.0, switch_prob=0.5, **kw)


def soft_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy against (N, classes) probability targets, in float32 (autocast-safe)."""
    return -(targets * F.log_softmax(logits.float(), dim=1)).sum(1).mean()


def train_loss(model: AugmentedModel, mix: Optional[nn.Module], images: torch.Tensor,
               labels: torch.Tensor) -> torch.Tensor:
    """One step's loss: augment, mix (optional), classify."""
    if mix is None:
        return F.cross_entropy(model(images), labels, label_smoothing=LABEL_SMOOTHING)
    x, targets = mix(model.augment(images), labels)
    return soft_cross_entropy(model.model(x), targets)


def conv_bn(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout),
                         nn.GELU())


class Block(nn.Module):
    """conv -> pool -> conv, as in airbench's ConvGroup."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.conv1 = conv_bn(cin, cout)
        self.pool = nn.MaxPool2d(2)
        self.conv2 = conv_bn(cout, cout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv2(self.pool(self.conv1(x)))


class FastNet(nn.Module):
    """A small airbench-style CNN: stem conv, three conv groups, global max pool, linear."""

    def __init__(self, widths=(64, 256, 256), num_classes: int = 10) -> None:
        super().__init__()
        self.stem = conv_bn(3, widths[0] // 2)
        self.layers = nn.Sequential(Block(widths[0] // 2, widths[0]), Block(widths[0], widths[1]),
                                    Block(widths[1], widths[2]))
        self.head = nn.Linear(widths[2], num_classes, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(self.stem(x))
        x = torch.amax(x, dim=(2, 3))
        return self.head(x) / 8.0  # airbench scales the logits down; steadier early training


def load_data(args: argparse.Namespace, device: torch.device):
    """(train cache, test cache): CIFAR-10 from --data, else synthetic with a clear message."""
    if args.data:
        from torchvision.datasets import CIFAR10

        if not os.path.isdir(args.data):
            sys.exit(f"train_cifar10.py: error: --data {args.data} is not a directory")
        try:
            train_set = CIFAR10(args.data, train=True, download=False)
            test_set = CIFAR10(args.data, train=False, download=False)
        except RuntimeError as exc:  # torchvision: "Dataset not found or corrupted."
            sys.exit(f"train_cifar10.py: error: --data {args.data}: {exc} (expected "
                     f"{os.path.join(args.data, 'cifar-10-batches-py')} from the official "
                     f"python-format archive)")
        return (DeviceCache.from_dataset(train_set, device=device),
                DeviceCache.from_dataset(test_set, device=device))
    n_train, n_test = (512, 256) if args.smoke else (10_000, 2_000)
    print(f"no --data given: training on {n_train} SYNTHETIC random images (accuracy stays at "
          f"chance level, ~10%); pass --data DIR holding cifar-10-batches-py for real CIFAR-10")
    g = torch.Generator().manual_seed(0)
    def synth(n):
        images = torch.randint(0, 256, (n, 3, 32, 32), dtype=torch.uint8, generator=g)
        return DeviceCache.from_tensors(images, torch.randint(0, 10, (n,), generator=g),
                                        device=device)
    return synth(n_train), synth(n_test)


@torch.no_grad()
def evaluate(model: nn.Module, cache: DeviceCache, batch_size: int) -> float:
    model.eval()  # random augmentation off; Normalize still runs inside the model
    correct = torch.zeros((), dtype=torch.int64, device=cache.device)
    for images, labels in DeviceLoader(cache, batch_size, shuffle=False):
        correct += (model(images).argmax(1) == labels).sum()
    model.train()
    return int(correct) / len(cache)  # one host sync per evaluation


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="directory holding cifar-10-batches-py (no download)")
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--lr", type=float, default=0.2)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", default=None,
                        help="TorchScript file to write (default: cifar10_fastnet.pt; with "
                        "--smoke, a temporary directory removed at exit)")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny synthetic run (seconds); writes nothing unless --out is given")
    parser.add_argument("--aug", choices=AUGS, default="basic",
                        help="image policy after crop + flip (default: basic, none)")
    parser.add_argument("--mix", choices=MIXES, default="none",
                        help="label mixing: MixUp, CutMix or both (per sample); default none")
    args = parser.parse_args(argv)
    if args.smoke:
        args.epochs, args.batch_size = 2, 128
    device = torch.device(args.device)
    torch.manual_seed(0)

    train_cache, test_cache = load_data(args, device)
    print(f"train {train_cache!r}\ntest  {test_cache!r}")
    args.batch_size = min(args.batch_size, len(train_cache))  # at least one full batch per epoch
    loader = DeviceLoader(train_cache, args.batch_size, shuffle=True, drop_last=True, seed=0)
    augment = build_augment(args.aug)
    mix = build_mix(args.mix)
    widths = (16, 32, 32) if args.smoke else (64, 256, 256)
    model = AugmentedModel(augment, FastNet(widths)).to(device)
    if device.type == "cuda":
        model = model.to(memory_format=torch.channels_last)
    steps = args.epochs * len(loader)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, nesterov=True,
                                weight_decay=5e-4)
    # Short warm-up, then linear decay to zero: the airbench-style schedule for short runs.
    warmup = max(1, steps // 10)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) / warmup, max(0.0, (steps - s) / (steps - warmup + 1))))

    print(f"{args.epochs} epochs x {len(loader)} steps, batch {args.batch_size}, on {device}, "
          f"--aug {args.aug} --mix {args.mix}")
    for epoch in range(args.epochs):
        loader.set_epoch(epoch)
        meter = StallMeter(device)
        start = time.perf_counter()
        loss_sum = torch.zeros((), device=device)
        for images, labels in meter.wrap(loader):
            with meter.compute():
                with torch.autocast(device.type, torch.bfloat16, enabled=device.type == "cuda"):
                    loss = train_loss(model, mix, images, labels)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                schedule.step()
                loss_sum += loss.detach()
        stall = meter.summary()  # synchronises once
        seconds = time.perf_counter() - start
        acc = evaluate(model, test_cache, 1024)
        print(f"epoch {epoch + 1}/{args.epochs}: {seconds:.2f} s, "
              f"{len(loader) * args.batch_size / seconds:,.0f} img/s, train loss "
              f"{float(loss_sum) / len(loader):.3f}, test acc {100 * acc:.2f}%, data-wait "
              f"{100 * stall.wait_fraction:.1f}% ({stall.wait_ms_mean:.2f} ms wait / "
              f"{stall.compute_ms_mean:.2f} ms compute per step)")
        if not math.isfinite(float(loss_sum)):
            sys.exit("train_cifar10.py: error: the loss diverged")

    # Deployment: augmentation off, Normalize kept, uint8 images in.
    model.eval()
    scripted = torch.jit.script(model)
    with tempfile.TemporaryDirectory(prefix="batchaug-cifar10-") as tmp:
        # A smoke run leaves nothing behind in the current directory unless asked to.
        out = args.out or (os.path.join(tmp, "cifar10_fastnet.pt") if args.smoke
                           else "cifar10_fastnet.pt")
        torch.jit.save(scripted, out)
        reloaded = torch.jit.load(out, map_location=device)
        probe = test_cache.images[:8]
        with torch.no_grad():
            same = torch.allclose(reloaded(probe), model(probe), atol=1e-5, rtol=1e-4)
        where = (" (--smoke: a temporary file, removed at exit; pass --out to keep it)"
                 if out != args.out and args.smoke else "")
        print(f"saved TorchScript model to {out}{where} (uint8 in, logits out); reloaded output "
              f"{'matches' if same else 'DIFFERS FROM'} the trained model")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
