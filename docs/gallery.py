"""The gallery: one picture per transform and per recipe, on real photographs.

Every picture is made by running the code on scikit-image's sample photographs (astronaut:
NASA, public domain; chelsea: CC0, Stefan van der Walt; coffee: CC0, Rachel Michetti; rocket:
SpaceX, public domain): one row per photograph, the original first, then independent draws
of the transform in training mode. :data:`TRANSFORMS` is the registry: a transform gets its
picture by being listed there (a test checks that every exported transform is); recipes come
from :func:`batchaug.recipes.names`; :data:`TARGETS` shows masks and boxes moving with the
pixels (``with_targets``).

    python docs/gallery.py                       # every picture, into docs/_gallery/
    python docs/gallery.py RandomRotation cifar10  # only these

Needs scikit-image (``pip install -e .[docs]``).
"""
from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
from torch import Tensor, nn

import batchaug as B

HERE = Path(__file__).resolve().parent
OUT = HERE / "_gallery"
SIZE = 128
PHOTOS = ("astronaut", "chelsea", "coffee")
DRAWS = 4
SEED = 0

from batchaug.recipes import IMAGENET_MEAN as MEAN, IMAGENET_STD as STD  # noqa: E402


class _Mix(nn.Module):
    """A label mixer shown on images alone (labels: each photo its own class)."""

    def __init__(self, mix: nn.Module) -> None:
        super().__init__()
        self.mix = mix

    def forward(self, x: Tensor) -> Tensor:
        return self.mix(x, torch.arange(x.shape[0], device=x.device))[0]


class _MixWithNext(_Mix):
    """A mixer that pairs sample i with sample N - 1 - i (timm's), shown with each photo paired
    with the next one: in an odd batch the middle photo would be paired with itself. The photos
    go in with a reordered copy, ``y = x.flip(0).roll(1, 0)``: in the batch ``[x, y]`` of 2N,
    sample i < N meets ``y[N - 1 - i] = x[(i + 1) % N]``; the first N outputs are shown."""

    def forward(self, x: Tensor) -> Tensor:
        n = x.shape[0]
        labels = torch.arange(n, device=x.device)
        both = torch.cat([x, x.flip(0).roll(1, 0)])
        return self.mix(both, torch.cat([labels, labels.flip(0).roll(1, 0)]))[0][:n]


#: name -> (a module built to make its effect visible, a one-line caption)
TRANSFORMS: Dict[str, Tuple[Callable[[], nn.Module], str]] = {
    # geometry
    "RandomHorizontalFlip": (lambda: B.RandomHorizontalFlip(p=0.5), "p=0.5: a coin per image"),
    "RandomVerticalFlip": (lambda: B.RandomVerticalFlip(p=0.5), "p=0.5"),
    "RandomCrop": (lambda: B.RandomCrop(SIZE, padding=24), "RandomCrop(128, padding=24)"),
    "CenterCrop": (lambda: B.CenterCrop(80), "CenterCrop(80)"),
    "Pad": (lambda: B.Pad(16, padding_mode="reflect"), "Pad(16, padding_mode='reflect')"),
    "Resize": (lambda: B.Resize(64), "Resize(64)"),
    "RandomResizedCrop": (lambda: B.RandomResizedCrop(SIZE), "RandomResizedCrop(128)"),
    "RandomRotation": (lambda: B.RandomRotation(30, interpolation="bilinear"),
                       "RandomRotation(30, interpolation='bilinear')"),
    "RandomAffine": (lambda: B.RandomAffine(20, translate=(0.1, 0.1), scale=(0.8, 1.2), shear=10,
                                            interpolation="bilinear"),
                     "RandomAffine(20, translate=(0.1, 0.1), scale=(0.8, 1.2), shear=10)"),
    "RandomPerspective": (lambda: B.RandomPerspective(0.5, p=1.0),
                          "RandomPerspective(0.5, p=1.0)"),
    # colour
    "ColorJitter": (lambda: B.ColorJitter(0.4, 0.4, 0.4, 0.1), "ColorJitter(0.4, 0.4, 0.4, 0.1)"),
    "Grayscale": (lambda: B.Grayscale(3), "Grayscale(3)"),
    "RandomGrayscale": (lambda: B.RandomGrayscale(p=0.5), "p=0.5"),
    "RandomInvert": (lambda: B.RandomInvert(p=0.5), "p=0.5"),
    "RandomPosterize": (lambda: B.RandomPosterize(2, p=0.5), "RandomPosterize(2, p=0.5)"),
    "RandomSolarize": (lambda: B.RandomSolarize(128, p=0.5), "RandomSolarize(128, p=0.5)"),
    "RandomAdjustSharpness": (lambda: B.RandomAdjustSharpness(4.0, p=0.5),
                              "RandomAdjustSharpness(4.0, p=0.5)"),
    "RandomAutocontrast": (lambda: B.RandomAutocontrast(p=0.5), "p=0.5"),
    "RandomEqualize": (lambda: B.RandomEqualize(p=0.5), "p=0.5"),
    # blur, erasing, dtype
    "GaussianBlur": (lambda: B.GaussianBlur(9, sigma=(0.1, 4.0)), "GaussianBlur(9, sigma=(0.1, 4.0))"),
    "RandomErasing": (lambda: B.RandomErasing(p=0.8, value="random"),
                      "RandomErasing(p=0.8, value='random')"),
    "Normalize": (lambda: B.Normalize(MEAN, STD), "shown undone: the picture is the input"),
    "ToDtype": (lambda: B.ToDtype(torch.float32, scale=True), "uint8 to float32 in [0, 1]"),
    # containers
    "RandomApply": (lambda: B.RandomApply([B.ColorJitter(0.8, 0.8, 0.8, 0.2)], p=0.5),
                    "RandomApply([ColorJitter(0.8, 0.8, 0.8, 0.2)], p=0.5)"),
    "RandomChoice": (lambda: B.RandomChoice([B.RandomInvert(1.0), B.Grayscale(3),
                                             B.RandomRotation(45)]),
                     "RandomChoice([RandomInvert(1.0), Grayscale(3), RandomRotation(45)])"),
    "RandomOrder": (lambda: B.RandomOrder([B.RandomRotation(30), B.RandomPosterize(2, p=1.0),
                                           B.ColorJitter(0.5)]),
                    "RandomOrder([RandomRotation(30), RandomPosterize(2, p=1.0), ColorJitter(0.5)])"),
    # automatic augmentation
    "TrivialAugmentWide": (lambda: B.TrivialAugmentWide(), "an op per image"),
    "RandAugment": (lambda: B.RandAugment(), "two ops per image"),
    "AutoAugment": (lambda: B.AutoAugment("imagenet"), "a sub-policy per image"),
    "AugMix": (lambda: B.AugMix(), "chains mixed per image"),
    # label mixing (each photo its own label; the images only)
    "MixUp": (lambda: _Mix(B.MixUp(len(PHOTOS), alpha=1.0)), "with the previous image"),
    "CutMix": (lambda: _Mix(B.CutMix(len(PHOTOS), alpha=1.0)), "a box of the previous image"),
    "MixUpOrCutMix": (lambda: _Mix(B.MixUpOrCutMix(len(PHOTOS))), "one or the other per image"),
    # timm's semantics, per sample
    "TimmRandomResizedCrop": (lambda: B.TimmRandomResizedCrop(SIZE),
                              "bilinear or bicubic per image"),
    "TimmRandAugment": (lambda: B.TimmRandAugment(9, magnitude_std=0.5),
                        "TimmRandAugment(9, magnitude_std=0.5): rand-m9-mstd0.5"),
    "TimmAutoAugment": (lambda: B.TimmAutoAugment("v0"), "TimmAutoAugment('v0')"),
    "TimmAugMix": (lambda: B.TimmAugMix(), "augmix-m3-w3"),
    "TimmRandomErasing": (lambda: B.TimmRandomErasing(0.8, mode="pixel"),
                          "TimmRandomErasing(0.8, mode='pixel')"),
    "TimmMixup": (lambda: _MixWithNext(B.TimmMixup(0.8, 1.0, mode="elem",
                                                   num_classes=len(PHOTOS))),
                  "TimmMixup(0.8, 1.0, mode='elem'): with the next image"),
}


def quadrant_targets(images: Tensor) -> Dict[str, Tensor]:
    """Targets made up for the photographs, to show them moving with the pixels: masks that cut
    each photo into its four quadrants (labels 1 to 4) and one box around its central half."""
    n, _, h, w = images.shape
    below = (torch.arange(h) >= h // 2).view(h, 1).long()
    right = (torch.arange(w) >= w // 2).view(1, w).long()
    masks = (1 + 2 * below + right).to(torch.uint8).expand(n, h, w).clone()
    boxes = torch.tensor([[w / 4, h / 4, 3 * w / 4, 3 * h / 4]]).expand(n, 1, 4).clone()
    return {"masks": masks, "boxes": boxes}


#: name -> (an Augment, a one-line caption): drawn with :func:`quadrant_targets`, moved by
#: ``augment.with_targets`` (masks as an overlay, boxes as rectangles)
TARGETS: Dict[str, Tuple[Callable[[], nn.Module], str]] = {
    "masks_and_boxes": (lambda: B.Augment(B.RandomResizedCrop(SIZE, scale=(0.25, 1.0)),
                                          B.RandomHorizontalFlip(),
                                          B.RandomRotation(25, interpolation="bilinear")),
                        "Augment(RandomResizedCrop(128, scale=(0.25, 1.0)), "
                        "RandomHorizontalFlip(), RandomRotation(25)).with_targets: quadrant "
                        "masks and a box"),
}


def photographs(size: int = SIZE) -> Tensor:
    """The sample photographs, resized and centre-cropped to ``size``, uint8 (N, 3, H, W)."""
    import torchvision.transforms.v2.functional as TF
    from skimage import data

    images = []
    for name in PHOTOS:
        img = torch.from_numpy(getattr(data, name)()).permute(2, 0, 1).contiguous()
        img = TF.resize(img, size, antialias=True)
        images.append(TF.center_crop(img, [size, size]))
    return torch.stack(images)


def _picture(name: str) -> Path:
    return OUT / f"{name}.png"


def make(names: Optional[Sequence[str]] = None) -> List[Path]:
    """Draw the pictures of ``names`` (transforms or recipes; all when None) into docs/_gallery."""
    recipes = B.recipes.names()
    names = list(names) if names else list(TRANSFORMS) + recipes + list(TARGETS)
    unknown = [n for n in names if n not in TRANSFORMS and n not in recipes and n not in TARGETS]
    if unknown:
        raise ValueError(f"not in the gallery registry: {unknown}")
    OUT.mkdir(exist_ok=True)
    images = photographs()
    written = []
    for name in names:
        targets = None
        if name in TARGETS:
            module = TARGETS[name][0]()
            targets = quadrant_targets(images)
        else:
            module = B.recipes.get(name, SIZE) if name in recipes else TRANSFORMS[name][0]()
        written.append(Path(B.show(module, images, _picture(name), draws=DRAWS, seed=SEED,
                                   targets=targets)))
    return written


def write_page(path: Path, with_pictures: bool = True) -> None:
    """The gallery page (Markdown), with the pictures that exist when ``with_pictures``."""
    lines = [
        "# Gallery",
        "",
        "What each transform and each recipe does, on photographs from scikit-image's sample",
        "data (astronaut: NASA, public domain; chelsea: CC0, Stefan van der Walt; coffee: CC0,",
        "Rachel Michetti). One row per photograph: the original, then "
        f"{DRAWS} independent draws in",
        "training mode (each image of a batch draws its own parameters). Made by",
        "`python docs/gallery.py` from the code; a transform is added by registering it there.",
        "",
    ]
    missing = []

    def entry(name: str, caption: str, title: str) -> None:
        lines.extend([f"## {title}", "", caption, ""])
        if with_pictures and _picture(name).exists():
            lines.extend([f"![{name}](_gallery/{name}.png)", ""])
        else:
            missing.append(name)

    for name, (_, caption) in TRANSFORMS.items():
        entry(name, f"`{caption}`", name)
    for name in B.recipes.names():
        entry(name, f"`batchaug.recipes.get({name!r}, {SIZE})`", f"Recipe: {name}")
    for name, (_, caption) in TARGETS.items():
        entry(name, f"`{caption}`", "Masks and boxes")
    if missing:
        lines.extend(["```{note}", f"{len(missing)} pictures are not built here: run "
                      "`make docs` (or `python docs/gallery.py`) to draw them.", "```", ""])
    path.write_text("\n".join(lines))


if __name__ == "__main__":
    start = time.perf_counter()
    done = make(sys.argv[1:])
    print(f"{len(done)} pictures in {OUT} ({time.perf_counter() - start:.1f} s)")
