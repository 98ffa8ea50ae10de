"""The recipes and the input pipelines that ``batchaug bench`` puts side by side: contenders
(a)-(e) of the table in docs/performance.md ("Benchmark your own pipeline").

Every contender goes end to end, from the stored uint8 images to a normalised float32 batch on
the target device with a fresh random order every epoch, and is read through ``open_stream()``:
an endless stream of batches (a ``DataLoader`` gets a sampler of many concatenated permutations,
so no epoch boundary falls inside a timing window) that ``close()`` shuts down, joining the
worker processes.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator, List, Optional, Tuple

import numpy as np
import torch
from torch import Tensor, nn

from batchaug import recipes as _recipes

CIFAR_MEAN = tuple(_recipes.CIFAR10_MEAN)
CIFAR_STD = tuple(_recipes.CIFAR10_STD)
IMAGENET_MEAN = tuple(_recipes.IMAGENET_MEAN)
IMAGENET_STD = tuple(_recipes.IMAGENET_STD)

RECIPE_NAMES = ("cifar", "rotation", "imagenet", "color", "color224", "simclr", "photos",
                "photos_rotation")
# what ``--recipe photos`` runs: RandomResizedCrop, then the seed's whole pipeline (rotation)
PHOTO_RECIPES = ("photos", "photos_rotation")
# what ``--recipe all`` runs: the loader recipes (``make bench``); the colour ones run by name
ALL_RECIPES = ("cifar", "rotation", "imagenet")
# ColorJitter's arguments in the colour recipes (SimCLR's), and their grayscale probability
JITTER = (0.4, 0.4, 0.4, 0.1)
GRAY_P = 0.2


@dataclass(frozen=True)
class Recipe:
    """One augmentation recipe, described independently of the library that runs it."""

    name: str
    kind: str  # "crop" | "rotation" | "resized_crop" | "color" | "simclr" | "photos"
    source_hw: Tuple[int, int]  # image size of the synthetic default data
    out_hw: Tuple[int, int]  # output size (set from the data's size for crop/rotation)
    default_images: int  # images in the pool each contender reads, when --images is not given
    default_train_steps: int
    mean: Tuple[float, ...]
    std: Tuple[float, ...]
    # Seconds each contender is timed per round without --window: a few of its slowest batches.
    default_window: float = 0.5
    # Whether the resize antialiases where a contender can choose: as PIL (a), which always does.
    antialias: bool = True

    @property
    def description(self) -> str:
        h, w = self.out_hw
        if self.kind == "crop":
            return f"RandomCrop({_size_str(h, w)}, padding=4) + RandomHorizontalFlip + Normalize"
        if self.kind == "rotation":
            return "RandomRotation(15, interpolation=bilinear) + Normalize"
        if self.kind == "color":
            return (f"ColorJitter{JITTER} + RandomGrayscale({GRAY_P}) + Normalize "
                    f"(per-sample factors and order; torchvision: per image)")
        if self.kind == "simclr":
            return (f"SimCLR: RandomResizedCrop({_size_str(h, w)}) + RandomHorizontalFlip + "
                    f"ColorJitter{JITTER} p=0.8 + RandomGrayscale({GRAY_P}) + "
                    f"GaussianBlur({self.blur_kernel}, (0.1, 2.0)) p=0.5 + Normalize")
        if self.kind == "photos":
            first = "RandomRotation(30) + " if self.name == "photos_rotation" else ""
            return (f"JPEG files -> decode + {first}RandomResizedCrop({_size_str(h, w)}) + "
                    f"RandomHorizontalFlip + Normalize")
        return f"RandomResizedCrop({_size_str(h, w)}) + RandomHorizontalFlip + Normalize"

    @property
    def blur_kernel(self) -> int:
        """SimCLR's blur kernel: 10% of the output side, odd (batchaug.recipes.simclr's)."""
        from batchaug.recipes import _blur_kernel

        return _blur_kernel(self.out_hw[0])


def _size_str(h: int, w: int) -> str:
    return str(h) if h == w else f"({h}, {w})"


def make_recipe(name: str, channels: int, data_hw: Optional[Tuple[int, int]] = None) -> Recipe:
    """The recipe ``name``; ``data_hw`` is the size of the user's images (None: synthetic)."""
    if name not in RECIPE_NAMES:
        raise ValueError(f"recipe must be one of {list(RECIPE_NAMES)}, got {name!r}")
    if name in PHOTO_RECIPES:  # its own JPEG files (batchaug.bench.photos), never --data
        return Recipe(name, "photos", (0, 0), (224, 224), 512, 8, IMAGENET_MEAN, IMAGENET_STD,
                      default_window=1.0)
    if name in ("color", "color224", "simclr"):
        if channels != 3:
            raise ValueError(f"recipe {name} needs 3-channel (RGB) images, got {channels} "
                             f"channels")
        if name == "simclr":
            src = data_hw or (256, 256)
            return Recipe(name, "simclr", src, (224, 224), 1024, 8, IMAGENET_MEAN, IMAGENET_STD,
                          default_window=1.0)
        src = data_hw or ((224, 224) if name == "color224" else (32, 32))
        big = src[0] * src[1] > 128 * 128
        return Recipe(name, "color", src, src, 1024 if big else 10240, 8 if big else 20,
                      IMAGENET_MEAN, IMAGENET_STD, default_window=1.0 if big else 0.5)
    imagenet = name == "imagenet"
    if channels == 3:
        mean, std = (IMAGENET_MEAN, IMAGENET_STD) if imagenet else (CIFAR_MEAN, CIFAR_STD)
    else:
        mean, std = (0.5,) * channels, (0.25,) * channels
    if imagenet:
        src = data_hw or (256, 256)
        return Recipe(name, "resized_crop", src, (224, 224), 1024, 8, mean, std,
                      default_window=1.0)
    src = data_hw or (32, 32)
    kind = "crop" if name == "cifar" else "rotation"
    return Recipe(name, kind, src, src, 10240, 20, mean, std)


# --- the augmentation of each library, per recipe kind -----------------------------------------


class _Dataset(torch.utils.data.Dataset):
    """Images one per item through a per-sample transform: with ``pil``, HWC uint8 arrays made
    into PIL images as torchvision's CIFAR10 does, else CHW uint8 tensors as they are."""

    def __init__(self, images: Any, labels: Any, transform: Callable, pil: bool) -> None:
        self.images, self.labels, self.transform, self.pil = images, labels, transform, pil

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int):
        image = self.images[index]
        if self.pil:
            from PIL import Image

            image = Image.fromarray(image[:, :, 0] if image.shape[2] == 1 else image)
        return self.transform(image), int(self.labels[index])


def _torchvision_augment(T: Any, recipe: Recipe, **resize: Any) -> List[Callable]:
    """``recipe``'s random steps from ``T``: torchvision's ``transforms`` or ``transforms.v2``,
    or batchaug (the same classes and arguments in all); ``resize``: the resized crop's extra
    arguments."""
    from torchvision.transforms import InterpolationMode

    h, w = recipe.out_hw
    if recipe.kind == "crop":
        return [T.RandomCrop((h, w), padding=4), T.RandomHorizontalFlip()]
    if recipe.kind == "rotation":
        return [T.RandomRotation(15, interpolation=InterpolationMode.BILINEAR)]
    if recipe.kind == "color":
        return [T.ColorJitter(*JITTER), T.RandomGrayscale(GRAY_P)]
    crop = [T.RandomResizedCrop((h, w), **resize), T.RandomHorizontalFlip()]
    if recipe.kind == "simclr":
        return crop + [T.RandomApply([T.ColorJitter(*JITTER)], p=0.8), T.RandomGrayscale(GRAY_P),
                       T.RandomApply([T.GaussianBlur(recipe.blur_kernel, (0.1, 2.0))], p=0.5)]
    return crop


def torchvision_v1_transform(recipe: Recipe) -> Callable:
    """The per-sample torchvision (v1, PIL) pipeline for ``recipe`` (PIL resizes antialias)."""
    import torchvision.transforms as T

    return T.Compose(_torchvision_augment(T, recipe)
                     + [T.ToTensor(), T.Normalize(recipe.mean, recipe.std)])


def torchvision_v2_transform(recipe: Recipe) -> nn.Module:
    """torchvision.transforms.v2 for ``recipe`` on uint8 tensors: one draw per call, so per
    sample when called on one image and per batch when called on a batch."""
    from torchvision.transforms import v2

    return v2.Compose(_torchvision_augment(v2, recipe, antialias=recipe.antialias)
                      + [v2.ToDtype(torch.float32, scale=True),
                         v2.Normalize(list(recipe.mean), list(recipe.std))])


def kornia_transform(recipe: Recipe, device: torch.device) -> nn.Module:
    """kornia's batched, per-sample equivalent; takes float input in [0, 1]. Its resized crop
    has no antialias option (it does not antialias)."""
    import kornia.augmentation as K

    if recipe.kind == "rotation":
        # kornia's default p=0.5 would rotate only half the images (torchvision rotates all).
        aug = [K.RandomRotation(15.0, resample="bilinear", p=1.0)]
    elif recipe.kind == "color":
        aug = [K.ColorJitter(*JITTER, p=1.0), K.RandomGrayscale(p=GRAY_P)]
    elif recipe.kind == "simclr":
        k = recipe.blur_kernel
        aug = [K.RandomResizedCrop(recipe.out_hw), K.RandomHorizontalFlip(),
               K.ColorJitter(*JITTER, p=0.8), K.RandomGrayscale(p=GRAY_P),
               K.RandomGaussianBlur((k, k), (0.1, 2.0), p=0.5)]
    else:  # the crops: torchvision's classes and arguments
        aug = _torchvision_augment(K, recipe)
    norm = K.Normalize(torch.tensor(recipe.mean), torch.tensor(recipe.std))
    return nn.Sequential(*aug, norm).to(device)


# The batchaug preset (``batchaug.recipes``) each bench recipe runs, where one matches.
PRESET_OF = {"cifar": "cifar10", "imagenet": "imagenet", "color": "color", "color224": "color",
             "simclr": "simclr"}


def preset_augment(recipe: Recipe) -> Optional[nn.Module]:
    """batchaug's contender from ``batchaug.recipes``, or None where the bench's recipe is not
    the preset (data not square or not RGB, or a cifar size whose padding is not 4); ``color``
    gets the recipe's Normalize appended, as every contender normalises."""
    import batchaug as B

    preset = PRESET_OF.get(recipe.name)
    h, w = recipe.out_hw
    if preset is None or h != w or not recipe.antialias:
        return None
    if recipe.kind == "crop":
        if max(1, h // 8) != 4 or (recipe.mean, recipe.std) != (CIFAR_MEAN, CIFAR_STD):
            return None
    elif (recipe.mean, recipe.std) != (IMAGENET_MEAN, IMAGENET_STD):
        return None
    aug = _recipes.get(preset, h)
    if recipe.kind == "color":
        return B.Augment(*aug, B.Normalize(recipe.mean, recipe.std))
    return aug


def batchaug_augment(recipe: Recipe) -> nn.Module:
    """batchaug's ``Augment`` for ``recipe`` (uint8 in, normalised float32 out): the preset of
    ``batchaug.recipes`` where one matches (``preset_augment``), else built here."""
    preset = preset_augment(recipe)
    return preset if preset is not None else _batchaug_explicit(recipe)


def _batchaug_explicit(recipe: Recipe) -> nn.Module:
    """batchaug's ``Augment`` for ``recipe``, the same steps as torchvision's contenders."""
    import batchaug as B

    return B.Augment(*_torchvision_augment(B, recipe, antialias=recipe.antialias),
                     B.Normalize(recipe.mean, recipe.std))


def torchaug_skip_reason(recipe: Recipe) -> Optional[str]:
    """Why torchaug cannot run ``recipe`` with a draw per sample (None: it can)."""
    if recipe.kind == "crop":
        return "torchaug's RandomCrop has no batch mode: one crop per batch"
    if recipe.kind in ("color", "simclr"):
        return ("torchaug's ColorJitter draws at most 24 chunks per batch (its num_chunks is "
                "capped at 24), and its RandomApply decides once per batch")
    return None


def torchaug_transform(recipe: Recipe) -> nn.Module:
    """torchaug's batched pipeline for ``recipe`` (rotation, resized crop), one draw per sample
    (``batch_transform=True``, ``num_chunks=-1``: a chunk per sample); uint8 in, normalised
    float32 out."""
    import torchaug.transforms as TA

    h, w = recipe.out_hw
    if recipe.kind == "rotation":
        aug = [TA.RandomRotation(15, interpolation=TA.InterpolationMode.BILINEAR, num_chunks=-1,
                                 batch_transform=True)]
    elif recipe.kind == "resized_crop":
        # its batched flip flips round(p * N) samples chosen at random (p per sample on average)
        aug = [TA.RandomResizedCrop((h, w), antialias=recipe.antialias, num_chunks=-1,
                                    batch_transform=True),
               TA.RandomHorizontalFlip(batch_transform=True)]
    else:
        raise ValueError(f"torchaug: {torchaug_skip_reason(recipe)}")
    return TA.Compose(aug + [TA.ToDtype(torch.float32, scale=True),
                             TA.Normalize(list(recipe.mean), list(recipe.std))])


def _antialias(recipe: Recipe, value: bool) -> str:
    resizes = recipe.kind in ("resized_crop", "simclr")
    return "yes" if value and resizes else ("no" if resizes else "-")


# --- streams: what the timing loop pulls batches from ---------------------------------------


class Stream:
    """An endless iterator of ``(inputs, labels)``; ``close()`` frees what it holds."""

    def __init__(self, batches: Iterator[Tuple[Tensor, Tensor]], on_close=None) -> None:
        self._batches, self._on_close = batches, on_close

    def __iter__(self) -> "Stream":
        return self

    def __next__(self) -> Tuple[Tensor, Tensor]:
        return next(self._batches)

    def close(self) -> None:
        if self._on_close is not None:
            self._on_close()
            self._on_close = None


def _cpu_seconds(pids: List[int]) -> Optional[float]:
    """User + system CPU time of processes ``pids`` (Linux ``/proc``), None where unreadable."""
    total = 0
    try:
        for pid in pids:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
    except (OSError, IndexError, ValueError):
        return None
    return total / os.sysconf("SC_CLK_TCK")


def _running(pids: List[int]) -> bool:
    """Whether a thread of processes ``pids`` is running or waiting for a CPU (state R or D)."""
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[0] in ("R", "D"):
                        return True
            except (OSError, IndexError):
                continue
    return False


def wait_idle(pids: List[int], limit: float = 5.0) -> None:
    """Return once processes ``pids`` use no CPU over a poll interval and none of their threads
    is runnable, or after ``limit`` s."""
    deadline = time.perf_counter() + limit
    before = _cpu_seconds(pids)
    while before is not None and time.perf_counter() < deadline:
        time.sleep(0.05)
        now = _cpu_seconds(pids)
        # on a loaded machine a worker with batches left can wait a whole poll for a CPU:
        # no CPU time alone does not mean idle, its state (R) says it still has work
        if now is None or (now - before < 0.005 and not _running(pids)):
            return
        before = now


def _loader_stream(it: Iterator[Tuple[Tensor, Tensor]], device: torch.device,
                  stop: bool = True) -> Stream:
    """The batches of a ``DataLoader`` iterator on ``device``. Closing joins its workers
    (``stop``) or, for persistent workers that the next stream reuses, waits until they have
    finished the batches they prefetched: either way no worker keeps augmenting inside the next
    contender's window."""
    def batches() -> Iterator[Tuple[Tensor, Tensor]]:
        for images, labels in it:
            yield (images.to(device, non_blocking=True), labels.to(device, non_blocking=True))

    if stop:
        return Stream(batches(), getattr(it, "_shutdown_workers", None))
    pids = [w.pid for w in getattr(it, "_workers", [])]
    return Stream(batches(), lambda: wait_idle(pids))


def _endless_loader(dataset: torch.utils.data.Dataset, batch_size: int, num_workers: int,
                   device: torch.device, seed: int = 0, persistent: bool = False
                   ) -> torch.utils.data.DataLoader:
    """A shuffling ``DataLoader`` whose one iterator runs through many fresh permutations."""
    # Without replacement and num_samples > len: concatenated permutations, drawn lazily.
    sampler = torch.utils.data.RandomSampler(dataset, num_samples=len(dataset) * 100_000,
                                             generator=torch.Generator().manual_seed(seed))
    return torch.utils.data.DataLoader(
        dataset, batch_size=batch_size, sampler=sampler, num_workers=num_workers,
        pin_memory=device.type == "cuda", persistent_workers=persistent,
    )


# --- the contenders ---------------------------------------------------------------------------


class Contender:
    """One input pipeline, read through ``open_stream()``: ``(inputs, labels)`` batches on the
    target device, endlessly: ``epoch()`` (one shuffled pass) again and again, unless a
    ``DataLoader`` contender overrides ``open_stream``. ``startup_batches`` of a fresh stream are
    not timed; ``model_prefix``: the augmentation ``--train`` puts inside the model.
    """

    key: str = ""
    label: str = ""
    per_sample: bool = True
    note: str = ""
    antialias: str = "-"  # "yes" / "no" for a resizing recipe, "-" when nothing is resized
    startup_batches: int = 1
    model_prefix: Optional[nn.Module] = None

    def epoch(self) -> Iterator[Tuple[Tensor, Tensor]]:
        raise NotImplementedError

    def count(self, batch: Tensor) -> int:
        """How many images ``batch`` (a stream's first item) counts for."""
        return int(batch.shape[0])

    def open_stream(self) -> Stream:
        def forever() -> Iterator[Tuple[Tensor, Tensor]]:
            while True:
                produced = False
                for batch in self.epoch():
                    produced = True
                    yield batch
                if not produced:
                    raise ValueError(f"{self.label}: an epoch produced no batch")

        gen = forever()
        return Stream(gen, gen.close)

    def close(self) -> None:
        pass


class TorchvisionPerSample(Contender):
    """torchvision per sample in a ``DataLoader``: v1 on PIL images made from HWC uint8
    ``images`` with ``num_workers`` workers, or (``v2``) v2 on CHW uint8 tensors in-process."""

    per_sample = True

    def __init__(self, recipe: Recipe, images: Any, labels: Any, batch_size: int,
                 num_workers: int, device: torch.device, v2: bool = False) -> None:
        if v2:
            self.key = "torchvision_v2_per_sample"
            self.label = "(a2) torchvision v2 per-sample on uint8 tensors, num_workers=0"
        else:
            self.key = f"torchvision_w{num_workers}"
            self.label = f"(a) torchvision per-sample, DataLoader num_workers={num_workers}"
        # PIL's resize always antialiases
        self.antialias = _antialias(recipe, recipe.antialias or not v2)
        self.startup_batches = max(1, num_workers)
        self.device = device
        transform = torchvision_v2_transform(recipe) if v2 else torchvision_v1_transform(recipe)
        self.loader = _endless_loader(_Dataset(images, labels, transform, pil=not v2),
                                      batch_size, num_workers, device)

    def open_stream(self) -> Stream:
        return _loader_stream(iter(self.loader), self.device)


class _OnTheBatch(Contender):
    """A library's batched transform called on random batches drawn on the device from a uint8
    tensor ((b), (c), (e)); ``scale``: the batch as floats in [0, 1] (kornia takes those)."""

    def __init__(self, key: str, label: str, transform: Callable, antialias: str,
                 images: Tensor, labels: Tensor, batch_size: int, per_sample: bool = True,
                 note: str = "", scale: bool = False) -> None:
        self.key, self.label, self.transform, self.antialias = key, label, transform, antialias
        self.per_sample, self.note, self.scale = per_sample, note, scale
        self.images, self.labels, self.batch_size = images, labels, batch_size
        self.generator = torch.Generator(device=images.device).manual_seed(0)

    def epoch(self) -> Iterator[Tuple[Tensor, Tensor]]:
        n = self.images.shape[0]
        perm = torch.randperm(n, device=self.images.device, generator=self.generator)
        for start in range(0, n, self.batch_size):
            idx = perm[start:start + self.batch_size]
            batch = self.images.index_select(0, idx)
            yield (self.transform(batch.float().div_(255) if self.scale else batch),
                   self.labels.index_select(0, idx))


class BatchaugLoader(Contender):
    key = "batchaug"
    label = "(d) batchaug DeviceLoader + Augment"
    per_sample = True

    def __init__(self, recipe: Recipe, images: Tensor, labels: Tensor, batch_size: int,
                 device: torch.device, augment_in_model: bool = False) -> None:
        from batchaug import DeviceCache, DeviceLoader

        cache = DeviceCache.from_tensors(images, labels, device=device)
        self.loader = DeviceLoader(cache, batch_size, shuffle=True, drop_last=False, seed=0)
        self.augment = batchaug_augment(recipe).to(device).train()
        self.augment_in_model = augment_in_model
        self.model_prefix = self.augment if augment_in_model else None
        self.antialias = _antialias(recipe, recipe.antialias)
        self._epoch = 0

    def epoch(self) -> Iterator[Tuple[Tensor, Tensor]]:
        self.loader.set_epoch(self._epoch)
        self._epoch += 1
        for images, labels in self.loader:
            yield (images if self.augment_in_model else self.augment(images)), labels


def usual_per_sample_keys(contenders: List[Contender]) -> List[str]:
    """The contenders a headline compares batchaug with: the per-sample pipelines people use."""
    return [c.key for c in contenders if c.per_sample and c.key.startswith("torchvision_")]


def worker_count() -> int:
    """``min(4, cpu count)``: the usual DataLoader worker setting for contender (a)."""
    return max(1, min(4, os.cpu_count() or 1))


def build_contenders(recipe: Recipe, images: Tensor, labels: Tensor, batch_size: int,
                     device: torch.device, augment_in_model: bool = False,
                     log: Callable[[str], None] = print) -> Tuple[List[Contender], List[dict]]:
    """All contenders for ``recipe`` on CPU uint8 ``(N, C, H, W)`` ``images``, each holding its
    own copy in the form it reads; returns (contenders, skipped)."""
    hwc = np.ascontiguousarray(images.permute(0, 2, 3, 1).numpy())
    labels_np = labels.numpy()
    on_device = (images.to(device), labels.to(device), batch_size)
    contenders: List[Contender] = [
        TorchvisionPerSample(recipe, hwc, labels_np, batch_size, 0, device),
        TorchvisionPerSample(recipe, hwc, labels_np, batch_size, worker_count(), device),
        TorchvisionPerSample(recipe, images.contiguous(), labels, batch_size, 0, device, v2=True),
        _OnTheBatch("torchvision_v2_batch", "(b) torchvision.transforms.v2 on the batch tensor",
                    torchvision_v2_transform(recipe), _antialias(recipe, recipe.antialias),
                    *on_device, per_sample=False, note="one random draw per batch"),
    ]
    skipped: List[dict] = []
    try:
        import kornia  # noqa: F401
    except Exception as exc:  # ImportError, or a kornia that fails to import with this torch
        reason = f"kornia is not importable ({type(exc).__name__}: {exc}); pip install kornia"
        skipped.append({"contender": "kornia", "label": "(c) kornia batched", "reason": reason})
        log(f"skipping (c) kornia: {reason}")
    else:
        contenders.append(_OnTheBatch("kornia", "(c) kornia batched",
                                      kornia_transform(recipe, device),
                                      _antialias(recipe, False), *on_device, scale=True))
    try:
        import torchaug  # noqa: F401
    except Exception as exc:
        reason = (f"torchaug is not importable ({type(exc).__name__}: {exc}); pip install "
                  f"--no-deps torchaug")
        skipped.append({"contender": "torchaug", "label": "(e) torchaug", "reason": reason})
        log(f"skipping (e) torchaug: {reason}")
    else:
        why = torchaug_skip_reason(recipe)
        if why is None:
            contenders.append(_OnTheBatch(
                "torchaug", f"(e) torchaug {torchaug.__version__} batched, per sample "
                "(batch_transform=True, num_chunks=batch)", torchaug_transform(recipe),
                _antialias(recipe, recipe.antialias), *on_device))
        else:
            skipped.append({"contender": "torchaug",
                            "label": f"(e) torchaug {torchaug.__version__}",
                            "reason": f"no per-sample draws for this recipe: {why}"})
    contenders.append(BatchaugLoader(recipe, images, labels, batch_size, device, augment_in_model))
    return contenders, skipped
