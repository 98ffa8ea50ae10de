"""Fine-tune a torchvision model on an ImageFolder (e.g. cats vs dogs) with the data on the device.

The migration story: start from the torchvision training pipeline you already have (resize,
center crop, RandomResizedCrop, flip, rotation, ToTensor, Normalize) and let
``batchaug.from_torchvision`` split it. Its deterministic head (decode, resize, center crop)
runs ONCE into a cache directory (``write_cache``: streamed to disk, in the shuffled order
``batchaug cache build DATA CACHE --resize 256 --center-crop 256`` stores); every run after
that loads the uint8 cache onto the device, and the random part (RandomResizedCrop, flip,
rotation) plus Normalize runs inside the model, per sample, on the whole batch.

    data/cats_dogs/cat/*.jpg, data/cats_dogs/dog/*.jpg        (20% held out for validation)
    data/cats_dogs/train/{cat,dog}/*.jpg + data/cats_dogs/test/{cat,dog}/*.jpg
                                                               (used as given; val/ works too)
    python examples/finetune_imagefolder.py --data data/cats_dogs --weights resnet18-f37072fd.pth
    python examples/finetune_imagefolder.py --data data/cats_dogs --skip-bad   # broken files
    python examples/finetune_imagefolder.py --smoke     # tiny synthetic ImageFolder, seconds

Nothing is downloaded: without ``--weights`` the model starts from random initialisation.
``--weights`` takes a local torchvision checkpoint (a state_dict, or a dict holding one under
``"state_dict"`` or ``"model"``); it is loaded with ``weights_only=True`` (no unpickling of code).
An unreadable image (e.g. a truncated download) stops the cache build with its path in one
line, unless ``--skip-bad`` is given, which skips and counts such files.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import warnings

import torch
import torch.nn.functional as F
import torchvision
import torchvision.transforms as T
from torch import nn

from batchaug import (
    AugmentedModel,
    BadImageError,
    DeviceCache,
    DeviceLoader,
    StallMeter,
    from_torchvision,
)
from batchaug.data import write_cache
from batchaug.errors import command_line

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
TEST_SPLITS = ("test", "val", "validation")


def torchvision_pipeline(size: int, stored: int) -> T.Compose:
    """The training pipeline as one would write it for torchvision's DataLoader."""
    return T.Compose([
        T.Resize(stored), T.CenterCrop(stored),            # deterministic: cached once
        T.RandomResizedCrop(size, scale=(0.35, 1.0)),      # random: per sample, on the device
        T.RandomHorizontalFlip(),
        T.RandomRotation(15),
        T.ToTensor(),
        T.Normalize(IMAGENET_MEAN, IMAGENET_STD),
    ])


def make_synthetic_imagefolder(root: str, per_class: int = 12, splits: bool = True,
                               broken: bool = True) -> None:
    """cat/ and dog/ folders of small JPEGs of different sizes (reddish cats, bluish dogs), under
    train/ and test/ when ``splits``; ``broken`` adds one truncated JPEG to the training set."""
    from PIL import Image

    g = torch.Generator().manual_seed(0)
    parts = (("train", per_class), ("test", per_class // 2)) if splits else (("", per_class),)
    for split_name, count in parts:
        for c, name in enumerate(("cat", "dog")):
            folder = os.path.join(root, split_name, name)
            os.makedirs(folder, exist_ok=True)
            for i in range(count):
                h, w = (int(v) for v in torch.randint(48, 96, (2,), generator=g))
                img = torch.randint(0, 160, (h, w, 3), dtype=torch.uint8, generator=g)
                img[..., 0 if c == 0 else 2] += 90  # a colour cue the model can learn
                Image.fromarray(img.numpy()).save(os.path.join(folder, f"{name}{i:03d}.jpg"))
    if broken:  # what an interrupted download leaves: the first half of a JPEG
        folder = os.path.join(root, "train" if splits else "", "cat")
        with open(os.path.join(folder, "cat000.jpg"), "rb") as f:
            data = f.read()
        with open(os.path.join(folder, "truncated.jpg"), "wb") as f:
            f.write(data[: len(data) // 2])


def find_splits(data: str) -> tuple[str, str | None]:
    """``(train folder, test folder or None)``: DATA/train and DATA/test (or val/,
    validation/) when both exist, else DATA itself and no test folder."""
    train = os.path.join(data, "train")
    for name in TEST_SPLITS:
        test = os.path.join(data, name)
        if os.path.isdir(train) and os.path.isdir(test):
            return train, test
    return data, None


def build_or_load_cache(folder: str, cache_dir: str, pre_transform, device: torch.device,
                        skip_bad: bool) -> DeviceCache:
    """Decode ``folder`` once into ``cache_dir`` (if it is not there yet), then load it."""
    if not os.path.isdir(cache_dir):
        start = time.perf_counter()
        dataset = torchvision.datasets.ImageFolder(folder)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the skipped files are reported below
            result = write_cache(dataset, cache_dir, pre_transform=pre_transform,
                                 skip_bad=skip_bad)
        skipped = (f"; skipped {len(result.skipped)} unreadable: "
                   f"{'; '.join(r for _, r in result.skipped[:3])}" if result.skipped else "")
        print(f"built cache {cache_dir} from {result.rows} images in "
              f"{time.perf_counter() - start:.1f} s (later runs load it){skipped}")
    cache = DeviceCache.load(cache_dir, device=device)
    print(f"loaded {cache!r}")
    return cache


def split(cache: DeviceCache, val_fraction: float, device: torch.device):
    g = torch.Generator().manual_seed(0)
    perm = torch.randperm(len(cache), generator=g).to(cache.device)
    n_val = max(1, int(len(cache) * val_fraction))
    parts = []
    for idx in (perm[n_val:], perm[:n_val]):
        parts.append(DeviceCache.from_tensors(cache.images[idx], cache.labels[idx], device=device,
                                              classes=cache.classes))
    return parts


def load_data(args, pre, device: torch.device):
    """(train cache, evaluation cache, what the evaluation set is)."""
    train_dir, test_dir = find_splits(args.data)
    stored = round(args.size * 256 / 224)
    root = args.cache or f"{args.data.rstrip(os.sep)}-cache-{stored}"
    with command_line():  # errors name this script's flags (--skip-bad), not Python arguments
        if test_dir is None:
            cache = build_or_load_cache(train_dir, root, pre, device, args.skip_bad)
            if args.smoke:  # the second run of a real workflow: the cache is simply loaded
                cache = build_or_load_cache(train_dir, root, pre, device, args.skip_bad)
            return (*split(cache, 0.2, device), "val")
        train = build_or_load_cache(train_dir, os.path.join(root, "train"), pre, device,
                                    args.skip_bad)
        if args.smoke:
            train = build_or_load_cache(train_dir, os.path.join(root, "train"), pre, device,
                                        args.skip_bad)
        test = build_or_load_cache(test_dir, os.path.join(root, "test"), pre, device,
                                   args.skip_bad)
        return train, test, os.path.basename(test_dir)


def replace_classifier(net: nn.Module, num_classes: int) -> nn.Module:
    """Replace the final classification layer of a torchvision model; return the new layer.

    torchvision puts it under ``fc`` (ResNet, RegNet, ShuffleNet, GoogLeNet, Inception),
    ``classifier`` (DenseNet: a Linear; VGG, AlexNet, MobileNet, EfficientNet, ConvNeXt,
    MaxViT: a Sequential ending in a Linear; SqueezeNet: a 1x1 Conv2d), ``heads`` (ViT) or
    ``head`` (Swin). The last Linear (else 1x1 Conv2d) in the first of those is replaced by a
    fresh one with ``num_classes`` outputs, under the same name, so the state_dict keys stay
    those of ``arch(num_classes=...)``.
    """
    for attr in ("fc", "classifier", "heads", "head"):
        part = getattr(net, attr, None)
        if not isinstance(part, nn.Module):
            continue
        layers = [(n, m) for n, m in part.named_modules() if isinstance(m, nn.Linear)]
        if not layers:  # SqueezeNet: a 1x1 convolution gives the class scores
            layers = [(n, m) for n, m in part.named_modules() if isinstance(m, nn.Conv2d)]
        if not layers:
            continue
        name, old = layers[-1]
        if isinstance(old, nn.Linear):
            new = nn.Linear(old.in_features, num_classes, bias=old.bias is not None)
        else:
            new = nn.Conv2d(old.in_channels, num_classes, old.kernel_size, old.stride,
                            old.padding, bias=old.bias is not None)
        new = new.to(device=old.weight.device, dtype=old.weight.dtype)
        if name:
            parent_name, _, leaf = name.rpartition(".")
            setattr(part.get_submodule(parent_name) if parent_name else part, leaf, new)
        else:
            setattr(net, attr, new)
        if hasattr(net, "num_classes"):
            net.num_classes = num_classes
        return new
    raise ValueError(f"{type(net).__name__}: no classification layer found under fc, "
                     f"classifier, heads or head; replace it yourself")


def build_net(arch: str, num_classes: int, weights: str | None) -> tuple[nn.Module, nn.Module]:
    """``arch`` from torchvision (optionally a local checkpoint) with a fresh ``num_classes``
    head; returns ``(net, head)``."""
    # GoogLeNet and Inception v3 return (logits, aux logits) in training mode unless told not
    # to; the auxiliary heads only matter for training from scratch. (init_weights=True: their
    # current initialisation, without the FutureWarning about it.)
    extra = ({"aux_logits": False, "init_weights": True}
             if arch in ("googlenet", "inception_v3") else {})
    net = getattr(torchvision.models, arch)(weights=None, **extra)  # never downloads
    if weights:
        state = torch.load(weights, map_location="cpu", weights_only=True)
        for key in ("state_dict", "model"):
            if isinstance(state, dict) and isinstance(state.get(key), dict):
                state = state[key]
        missing, unexpected = net.load_state_dict(state, strict=False)
        print(f"loaded {weights}: {len(state) - len(unexpected)} tensors"
              + (f", missing {missing}" if missing else "")
              + (f", ignored {unexpected}" if unexpected else ""))
    else:
        print("no --weights given: starting from random initialisation (nothing is downloaded)")
    head = replace_classifier(net, num_classes)  # new head for our classes
    return net, head


@torch.no_grad()
def evaluate(model: nn.Module, cache: DeviceCache, batch_size: int) -> float:
    model.eval()  # flip/rotation off, RandomResizedCrop a centre crop; Normalize still runs
    correct = torch.zeros((), dtype=torch.int64, device=cache.device)
    for images, labels in DeviceLoader(cache, batch_size, shuffle=False):
        correct += (model(images).argmax(1) == labels).sum()
    model.train()
    return int(correct) / len(cache)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="ImageFolder directory (one sub-folder per class), or one "
                        "holding train/ and test/ (or val/) ImageFolders")
    parser.add_argument("--cache", help="cache directory (default: DATA-cache-SIZE next to DATA)")
    parser.add_argument("--weights", help="local torchvision checkpoint for --arch")
    parser.add_argument("--arch", default="resnet18",
                        help="any torchvision classification model (resnet18, densenet121, "
                        "efficientnet_b0, convnext_tiny, swin_t, vit_b_16 (needs --size 224)...)"
                        "; its last layer is replaced for the data's classes")
    parser.add_argument("--size", type=int, default=224, help="training crop size")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--skip-bad", action="store_true",
                        help="skip unreadable images (e.g. truncated JPEGs) instead of stopping")
    parser.add_argument("--out", default=None,
                        help="fine-tuned weights (state_dict; default finetuned.pt)")
    parser.add_argument("--smoke", action="store_true", help="tiny synthetic ImageFolder run")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    torch.manual_seed(0)

    with tempfile.TemporaryDirectory(prefix="batchaug-finetune-") as tmp:
        if args.smoke:
            args.data = os.path.join(tmp, "cats_dogs")
            args.cache = os.path.join(tmp, "cats_dogs-cache")
            args.size, args.epochs, args.batch_size = 48, 2, 8
            args.out = args.out or os.path.join(tmp, "finetuned.pt")
            args.skip_bad = True  # its training set holds one truncated JPEG
            make_synthetic_imagefolder(args.data)
            print(f"--smoke: synthetic ImageFolder in {args.data} (train/ and test/, one "
                  f"truncated JPEG, --skip-bad)")
        if not args.data or not os.path.isdir(args.data):
            parser.error(f"--data must be an ImageFolder directory, got {args.data!r}")
        args.out = args.out or "finetuned.pt"
        stored = round(args.size * 256 / 224)  # the usual resize-256 / crop-224 ratio

        # The pipeline a torchvision user has, split once: the deterministic head becomes the
        # cache's pre_transform, the rest a batchaug Augment that runs inside the model.
        with warnings.catch_warnings(record=True) as notes:
            warnings.simplefilter("always")
            migration = from_torchvision(torchvision_pipeline(args.size, stored))
        print(migration)
        for note in notes:
            print(f"note: {note.message}")
        pre, augment = migration
        try:
            train, val, where = load_data(args, pre, device)
        except (BadImageError, ValueError, OSError) as exc:  # one line, not a traceback
            sys.exit(f"finetune_imagefolder.py: error: {str(exc).strip().splitlines()[0]}")
        classes = train.classes or [str(i) for i in range(int(train.labels.max()) + 1)]
        if val.classes is not None and val.classes != classes:
            sys.exit(f"finetune_imagefolder.py: error: the {where} folder's classes "
                     f"{val.classes} differ from the training folder's {classes}")

        net, head_layer = build_net(args.arch, len(classes), args.weights)
        model = AugmentedModel(augment, net).to(device)
        if device.type == "cuda":
            model = model.to(memory_format=torch.channels_last)
        head = list(head_layer.parameters())
        backbone = [p for p in net.parameters() if all(p is not h for h in head)]
        # Pretrained backbone: small steps; new head: larger ones.
        optimizer = torch.optim.AdamW([{"params": backbone, "lr": args.lr},
                                       {"params": head, "lr": args.lr * 10}], weight_decay=0.05)
        loader = DeviceLoader(train, args.batch_size, shuffle=True, drop_last=len(train) >
                              args.batch_size, seed=0)
        print(f"classes {classes}; {len(train)} train / {len(val)} {where} images; "
              f"{args.arch} at {args.size}px on {device}")
        for epoch in range(args.epochs):
            loader.set_epoch(epoch)
            meter = StallMeter(device)
            start = time.perf_counter()
            loss_sum = torch.zeros((), device=device)
            for images, labels in meter.wrap(loader):
                with meter.compute():
                    with torch.autocast(device.type, torch.bfloat16,
                                        enabled=device.type == "cuda"):
                        loss = F.cross_entropy(model(images), labels)
                    optimizer.zero_grad(set_to_none=True)
                    loss.backward()
                    optimizer.step()
                    loss_sum += loss.detach()
            stall = meter.summary()
            seconds = time.perf_counter() - start
            acc = evaluate(model, val, args.batch_size)
            print(f"epoch {epoch + 1}/{args.epochs}: {seconds:.2f} s, loss "
                  f"{float(loss_sum) / max(1, len(loader)):.3f}, {where} acc {100 * acc:.1f}%, "
                  f"data-wait {100 * stall.wait_fraction:.1f}%")
        # The plain model's weights, loadable without batchaug (augmentation holds no state).
        torch.save(model.model.state_dict(), args.out)
        print(f"saved fine-tuned {args.arch} weights to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
