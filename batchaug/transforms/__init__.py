"""Batched augmentation modules: one small ``nn.Module`` per transform, per-sample random params."""
# --- basic transforms (flip, crop, normalize, dtype) ---
from batchaug.transforms._basic import (
    CenterCrop,
    Normalize,
    RandomCrop,
    RandomHorizontalFlip,
    RandomVerticalFlip,
    ToDtype,
)
# --- warp transforms (rotation, resized crop, resize) ---
from batchaug.transforms._warp import RandomResizedCrop, RandomRotation, Resize

__all__ = [
    "CenterCrop",
    "Normalize",
    "RandomCrop",
    "RandomHorizontalFlip",
    "RandomResizedCrop",
    "RandomRotation",
    "RandomVerticalFlip",
    "Resize",
    "ToDtype",
]
