"""The loader's crop stage (stand-in): runs ``crop`` on each image's own pixels, image by image.

A minimal version of the interface the loader uses; the batched stage replaces it.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch
from torch import Tensor, nn


def _last(crop: nn.Module) -> Optional[nn.Module]:
    from batchaug.compose import Augment

    if isinstance(crop, Augment):
        mods = list(crop)
        return mods[-1] if mods else None
    return crop


def make_crop_stage(crop: nn.Module) -> "CropStage":
    """Validate ``crop`` (ValueError naming ``crop`` if it does not end in a fixed size) and
    wrap it."""
    from batchaug.transforms import CenterCrop, RandomCrop, RandomResizedCrop

    if not isinstance(crop, nn.Module):
        raise TypeError(f"crop must be a batchaug transform (an nn.Module), got "
                        f"{type(crop).__name__}")
    last = _last(crop)
    if isinstance(last, (CenterCrop, RandomCrop)):
        size = (int(last.height), int(last.width))
    elif isinstance(last, RandomResizedCrop):
        size = (int(last.size[0]), int(last.size[1]))
    else:
        raise ValueError(f"crop must end in a transform that fixes the output size "
                         f"(RandomResizedCrop, RandomCrop, CenterCrop), got {crop!r}")
    return CropStage(crop, size)


class CropStage(nn.Module):
    """``crop`` applied to ``images[i, :, :h_i, :w_i]`` for each sample (a Python loop)."""

    def __init__(self, crop: nn.Module, output_size: Tuple[int, int]) -> None:
        super().__init__()
        self.crop = crop
        self.output_size: Tuple[int, int] = output_size

    def forward(self, images: Tensor, sizes: Tensor, keys: Optional[Tensor] = None) -> Tensor:
        oh, ow = self.output_size
        outs = []
        keyed = hasattr(self.crop, "_keyed")
        for i, (h, w) in enumerate(sizes.tolist()):
            x = images[i:i + 1, :, :h, :w]
            if keys is not None and keyed:
                outs.append(self.crop(x, keys[i:i + 1]))
            else:
                outs.append(self.crop(x))
        if not outs:
            return images.new_empty((0, images.shape[1], oh, ow))
        return torch.cat(outs)
