"""``batchaug bench --data CACHE`` on a cache of photos at their own sizes (ragged or JPEG):
the imagenet recipe as training runs it, ``RandomResizedCrop(224)`` + flip on each photo's own
pixels, then ImageNet ``Normalize``: torchvision v2 per sample in a ``DataLoader`` (0 and 2
workers) against ``DeviceLoader(cache, crop=...)``. Nothing is squared first.
"""
from __future__ import annotations

from typing import Any, Callable, List, Tuple

import torch
from torch import Tensor

from batchaug.bench.contenders import IMAGENET_MEAN, IMAGENET_STD, Contender
from batchaug.bench.photos import OUT, BatchaugJpeg, ImageFolderPIL

WORKERS = (0, 2)
DESCRIPTION = ("your photos at their own sizes: RandomResizedCrop(224) + flip in the loader "
               "(DeviceLoader crop=, as training with a ragged cache), then Normalize")


class _Photos(torch.utils.data.Dataset):
    """The cache's photos at their own sizes through torchvision's per-sample transform."""

    def __init__(self, cache: Any, out: int) -> None:
        from torchvision.transforms import v2

        self.cache = cache
        self.transform = v2.Compose([
            v2.RandomResizedCrop(out, antialias=True), v2.RandomHorizontalFlip(),
            v2.ToDtype(torch.float32, scale=True), v2.Normalize(IMAGENET_MEAN, IMAGENET_STD)])

    def __len__(self) -> int:
        return len(self.cache)

    def __getitem__(self, i: int) -> Tuple[Tensor, Tensor]:
        return self.transform(self.cache.image(i)), self.cache.labels[i]


class TorchvisionOwnSizes(ImageFolderPIL):
    """torchvision v2 per sample on each photo at its own size, in a ``DataLoader`` (read as
    the photos recipe's contender (a) reads its files)."""

    def __init__(self, cache: Any, out: int, batch_size: int, workers: int,
                 device: torch.device) -> None:
        self._serve(_Photos(cache, out), "torchvision v2 per sample on each photo at its own size",
                    batch_size, workers, device)


class BatchaugOwnSizes(BatchaugJpeg):
    """batchaug's DeviceLoader with the crop stage on each photo's own extent (read as the
    photos recipe's batchaug contender reads its JPEG cache)."""

    def __init__(self, cache: Any, batch_size: int, device: torch.device) -> None:
        super().__init__(cache, batch_size, device)
        self.label = ("(d) batchaug DeviceLoader(crop=RandomResizedCrop + flip) on each photo at "
                      "its own size, decode_threads = torch threads")


def build_contenders(cache: Any, out: int, batch_size: int, device: torch.device,
                     log: Callable[[str], None] = print) -> Tuple[List[Contender], List[dict]]:
    """The contenders on ``cache`` (photos at their own sizes) and the skipped ones (none);
    ``out`` is the photos recipe's crop size (its batchaug contender's)."""
    if out != OUT:
        raise ValueError(f"out must be {OUT} (the photos recipe's crop), got {out}")
    if batch_size > len(cache):
        raise ValueError(f"--batch-size {batch_size} is more than the {len(cache)} photos read "
                         f"from the cache (the loaders drop an incomplete last batch)")
    contenders: List[Contender] = [TorchvisionOwnSizes(cache, out, batch_size, w, device)
                                   for w in WORKERS]
    contenders.append(BatchaugOwnSizes(cache, batch_size, device))
    return contenders, []
