"""Make docs/show_simclr.png, the README's picture, with `batchaug show` on real photographs.

The photographs ship with scikit-image (``skimage.data``, a docs-only dependency:
``pip install -e .[docs]``): astronaut (NASA, public domain), chelsea (CC0, Stefan van der
Walt), coffee (CC0, Rachel Michetti) and rocket (SpaceX, public domain). They are resized and
centre-cropped to 192x192, written as a batchaug cache, and shown through the ``simclr`` recipe.
Seed 1: seed 0's 16 draws happen to contain no grayscale one (p=0.2 each; 0.8**16 = 3%).

    python docs/make_show_picture.py
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import torch
import torchvision.transforms.v2.functional as TF
from skimage import data

from batchaug.cli import main
from batchaug.data import DeviceCache

SIZE = 192
NAMES = ["astronaut", "chelsea", "coffee", "rocket"]


def photographs() -> torch.Tensor:
    images = []
    for name in NAMES:
        img = torch.from_numpy(getattr(data, name)()).permute(2, 0, 1).contiguous()
        img = TF.resize(img, SIZE, antialias=True)
        images.append(TF.center_crop(img, [SIZE, SIZE]))
    return torch.stack(images)


if __name__ == "__main__":
    out = Path(__file__).resolve().parent / "show_simclr.png"
    with tempfile.TemporaryDirectory() as tmp:
        images = photographs()
        DeviceCache(images, torch.arange(len(NAMES))).save(Path(tmp) / "photos")
        raise SystemExit(main(["show", str(Path(tmp) / "photos"), "--out", str(out),
                               "--recipe", "simclr", "--n", str(len(NAMES)), "--draws", "4",
                               "--seed", "1"]))
