"""Progressive resizing on a cache of photos kept at their own sizes: the training resolution
grows between epochs (FFCV's low-to-high schedule) without rebuilding anything.

The photos are decoded once into a ragged cache (each image at its own size and aspect, at most
a resize of the shorter side; ``--storage jpeg`` keeps the JPEG bytes instead, decoded per
batch). The loader's crop stage runs ``RandomResizedCrop(res)`` on each image's own pixels and
returns ``res x res`` batches; ``loader.set_crop(RandomResizedCrop(res))`` changes ``res`` from
the next batch on. Flip + Normalize run in the model, as usual.

    data/cats_dogs/cat/*.jpg, data/cats_dogs/dog/*.jpg
    python examples/progressive_resizing.py --data data/cats_dogs --min-res 160 --max-res 224
    python examples/progressive_resizing.py --smoke     # tiny synthetic ImageFolder, seconds

``--compile static`` compiles the model with static shapes: one recompile per new resolution
(the schedule's few sizes); ``--compile dynamic`` marks the spatial dims dynamic: one graph for
every size, with generic kernels. The first batch of each epoch shows what that costs.
Nothing is downloaded.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time

import torch
import torch.nn.functional as F
import torchvision
from torch import nn

from batchaug import (
    Augment,
    AugmentedModel,
    CenterCrop,
    DeviceCache,
    DeviceLoader,
    Normalize,
    RandomHorizontalFlip,
    RandomResizedCrop,
    Resize,
)

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def make_synthetic_imagefolder(root: str, per_class: int = 16) -> None:
    """cat/ and dog/ folders of small JPEGs of different sizes and aspects (reddish cats,
    bluish dogs)."""
    from PIL import Image

    g = torch.Generator().manual_seed(0)
    for c, name in enumerate(("cat", "dog")):
        os.makedirs(os.path.join(root, name), exist_ok=True)
        for i in range(per_class):
            h, w = (int(v) for v in torch.randint(40, 120, (2,), generator=g))
            img = torch.randint(0, 160, (h, w, 3), dtype=torch.uint8, generator=g)
            img[..., 0 if c == 0 else 2] += 90  # a colour cue the model can learn
            Image.fromarray(img.numpy()).save(os.path.join(root, name, f"{name}{i:03d}.jpg"))


def resolution(epoch: int, epochs: int, min_res: int, max_res: int, step: int) -> int:
    """FFCV's schedule: linear from ``min_res`` (first epoch) to ``max_res`` (last), rounded
    down to a multiple of ``step``."""
    if epochs <= 1:
        return max_res
    res = min_res + (max_res - min_res) * epoch / (epochs - 1)
    return max(step, int(res) // step * step)


class TinyNet(nn.Module):
    """A small convnet for any input size (global average pooling before the classifier)."""

    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU())
        self.fc = nn.Linear(32, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(x).mean(dim=(2, 3)))


def build_cache(data: str, indices, stored: int, storage: str, device) -> DeviceCache:
    """Decode (a subset of) an ImageFolder once: each photo keeps its aspect, its shorter side
    resized to ``stored`` (0: as it is)."""
    import torchvision.transforms as T

    dataset = torchvision.datasets.ImageFolder(data)
    subset = torch.utils.data.Subset(dataset, indices)
    pre = T.Resize(stored) if stored else None
    return DeviceCache.from_dataset(subset, pre_transform=pre, device=device, storage=storage,
                                    classes=dataset.classes, progress=False)


@torch.no_grad()
def evaluate(model: nn.Module, cache: DeviceCache, res: int, batch_size: int) -> float:
    """Accuracy at ``res`` with the usual evaluation crop (shorter side to res / 0.875, centre
    crop), run by the loader on each image's own pixels."""
    loader = DeviceLoader(cache, batch_size, shuffle=False,
                          crop=Augment(Resize(round(res / 0.875)), CenterCrop(res)))
    model.eval()
    correct = torch.zeros((), dtype=torch.int64, device=cache.labels.device)
    for images, labels in loader:
        correct += (model(images).argmax(1) == labels).sum()
    model.train()
    return int(correct) / len(cache)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="ImageFolder directory (one sub-folder per class)")
    parser.add_argument("--arch", default="resnet18",
                        help="a torchvision classification model, or 'tiny'")
    parser.add_argument("--stored", type=int, default=256,
                        help="shorter side of the cached photos (0: keep the decoded size)")
    parser.add_argument("--storage", default="raw", choices=["raw", "jpeg"])
    parser.add_argument("--min-res", type=int, default=160)
    parser.add_argument("--max-res", type=int, default=224)
    parser.add_argument("--res-step", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--compile", default="none", choices=["none", "static", "dynamic"])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--smoke", action="store_true", help="tiny synthetic ImageFolder run")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    torch.manual_seed(0)

    with tempfile.TemporaryDirectory(prefix="batchaug-progressive-") as tmp:
        if args.smoke:
            args.data = os.path.join(tmp, "cats_dogs")
            make_synthetic_imagefolder(args.data)
            args.arch, args.stored, args.epochs, args.batch_size = "tiny", 0, 3, 8
            args.min_res, args.max_res, args.res_step = 32, 64, 16
            print(f"--smoke: synthetic ImageFolder of photos of different sizes in {args.data}")
        if not args.data or not os.path.isdir(args.data):
            parser.error(f"--data must be an ImageFolder directory, got {args.data!r}")
        n = len(torchvision.datasets.ImageFolder(args.data))
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(0)).tolist()
        n_val = max(1, n // 5)
        train = build_cache(args.data, perm[n_val:], args.stored, args.storage, device)
        val = build_cache(args.data, perm[:n_val], args.stored, args.storage, device)
        sizes = train.sizes if train.ragged else None
        if sizes is not None:
            print(f"train cache: {len(train)} photos at their own sizes, heights "
                  f"{int(sizes[:, 0].min())}-{int(sizes[:, 0].max())}, widths "
                  f"{int(sizes[:, 1].min())}-{int(sizes[:, 1].max())}, storage {args.storage}")
        classes = train.classes or [str(i) for i in range(int(train.labels.max()) + 1)]

        if args.arch == "tiny":
            net = TinyNet(len(classes))
        else:
            net = getattr(torchvision.models, args.arch)(weights=None, num_classes=len(classes))
        augment = Augment(RandomHorizontalFlip(), Normalize(IMAGENET_MEAN, IMAGENET_STD))
        model = AugmentedModel(augment, net).to(device)
        step_fn = model
        if args.compile == "static":
            step_fn = torch.compile(model, dynamic=False)
        elif args.compile == "dynamic":
            step_fn = torch.compile(model, dynamic=True)
        optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)

        res = resolution(0, args.epochs, args.min_res, args.max_res, args.res_step)
        loader = DeviceLoader(train, args.batch_size, shuffle=True, drop_last=True,
                              crop=RandomResizedCrop(res), return_keys=True)
        for epoch in range(args.epochs):
            res = resolution(epoch, args.epochs, args.min_res, args.max_res, args.res_step)
            loader.set_crop(RandomResizedCrop(res))  # from the next batch on; nothing rebuilt
            start = time.perf_counter()
            first = None
            seen, total_loss, shape = 0, 0.0, None
            for images, labels, keys in loader:
                loss = F.cross_entropy(step_fn(images, keys), labels)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                total_loss += float(loss.detach()) * images.shape[0]
                seen += images.shape[0]
                shape = tuple(images.shape)
                if first is None:  # includes a (re)compile when the size is new
                    first = time.perf_counter() - start
            elapsed = time.perf_counter() - start
            print(f"epoch {epoch + 1}/{args.epochs}: res {res}, batches {shape}, train loss "
                  f"{total_loss / max(1, seen):.3f}, first batch {first:.2f} s, "
                  f"{seen / elapsed:.0f} img/s")
        acc = evaluate(model, val, res, args.batch_size)
        print(f"val accuracy at {res}: {100 * acc:.1f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
