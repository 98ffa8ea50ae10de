"""``batchaug bench --recipe photos``: JPEG files of mixed sizes, decoded and cropped per batch.

The files are random crops of scikit-image's bundled sample photographs (no download), written
as a two-class ImageFolder in a temporary directory. Two recipes read them: ``photos``
(``RandomResizedCrop(224)`` + flip + ImageNet ``Normalize``) and ``photos_rotation`` (the seed's
whole pipeline, ``RandomRotation(30)`` first). The contenders (torchvision ``ImageFolder`` + PIL,
DALI's CPU pipelines, batchaug's JPEG cache and its decode-only ceiling) are described in
docs/performance.md ("JPEG files against DALI"); one whose library does not import is skipped
with the reason.
"""
from __future__ import annotations

import os
import random
import shutil
import tempfile
from typing import Any, Callable, Iterator, List, Tuple

import torch
from torch import Tensor

from batchaug import DeviceLoader, RandomResizedCrop, RandomRotation
from batchaug.bench.contenders import (IMAGENET_MEAN, IMAGENET_STD, Contender, Stream,
                                       _endless_loader, _loader_stream)

PHOTOS = ("astronaut", "coffee", "chelsea", "rocket", "immunohistochemistry",
          "hubble_deep_field", "retina")
OUT = 224
DEGREES = 30  # the seed's RandomRotation(30)
DALI_INSTALL = "pip install nvidia-dali-cuda130 (the bench extra)"


def make_photo_folder(root: str, n: int, seed: int = 0) -> List[str]:
    """``n`` JPEG files of varied sizes cut from scikit-image's sample photographs, in two
    class folders ``a`` and ``b``; returns the paths.

    Example:
        >>> paths = make_photo_folder("/tmp/photos", 16)
    """
    import skimage.data
    from PIL import Image

    rng = random.Random(seed)
    photos = [Image.fromarray(getattr(skimage.data, name)()) for name in PHOTOS]
    paths = []
    for c in ("a", "b"):
        os.makedirs(os.path.join(root, c), exist_ok=True)
    for i in range(n):
        photo = photos[i % len(photos)]
        w, h = photo.size
        for _ in range(100):
            area = rng.uniform(0.3, 1.0) * w * h
            aspect = 2 ** rng.uniform(-1, 1)
            cw, ch = round((area * aspect) ** 0.5), round((area / aspect) ** 0.5)
            if cw <= w and ch <= h:
                break
        else:
            cw, ch = w, h
        left, top = rng.randint(0, w - cw), rng.randint(0, h - ch)
        short = rng.randint(180, 420)
        scale = short / min(cw, ch)
        img = photo.crop((left, top, left + cw, top + ch)).resize(
            (max(1, round(cw * scale)), max(1, round(ch * scale))), Image.BILINEAR)
        path = os.path.join(root, "ab"[i % 2], f"{i:04d}.jpg")
        img.convert("RGB").save(path, quality=95)
        paths.append(path)
    return paths


class ImageFolderPIL(Contender):
    """torchvision ``ImageFolder`` + PIL decode + v1 transforms in a ``DataLoader``."""

    per_sample = True
    antialias = "yes"  # PIL's resize

    def __init__(self, root: str, batch_size: int, workers: int, device: torch.device,
                 rotation: bool = False) -> None:
        import torchvision
        import torchvision.transforms as T

        first = [T.RandomRotation(DEGREES)] if rotation else []
        transform = T.Compose(first + [T.RandomResizedCrop(OUT), T.RandomHorizontalFlip(),
                                       T.ToTensor(), T.Normalize(IMAGENET_MEAN, IMAGENET_STD)])
        self._serve(torchvision.datasets.ImageFolder(root, transform=transform),
                    "torchvision ImageFolder + PIL", batch_size, workers, device)

    def _serve(self, dataset: Any, what: str, batch_size: int, workers: int,
               device: torch.device) -> None:
        """``dataset`` in a ``DataLoader`` with ``workers`` persistent workers."""
        self.key = f"torchvision_w{workers}"
        persistent = ", persistent_workers=True" if workers else ""
        self.label = f"(a) {what}, DataLoader num_workers={workers}{persistent}"
        # a persistent worker has its next prefetch_factor (2) batches ready when a window
        # starts: those are taken untimed, so no window starts with work done in another's
        self.startup_batches = max(1, 2 * workers)
        self.device = device
        self.loader = _endless_loader(dataset, batch_size, workers, device,
                                     persistent=workers > 0)
        self._iterator = None

    def open_stream(self) -> Stream:
        if self.loader.num_workers == 0:
            return _loader_stream(iter(self.loader), self.device)
        if self._iterator is None:  # persistent workers: started once (in warmup), reused
            self._iterator = iter(self.loader)
        return _loader_stream(self._iterator, self.device, stop=False)

    def close(self) -> None:
        if self._iterator is not None:
            self._iterator._shutdown_workers()
            self._iterator = None


class DaliCPU(Contender):
    """DALI's CPU pipeline: full decode + ``random_resized_crop``, or ROI decode + resize."""

    per_sample = True
    antialias = "yes"  # DALI's resize antialiases by default when downscaling

    def __init__(self, root: str, batch_size: int, roi: bool, device: torch.device,
                 rotation: bool = False) -> None:
        import nvidia.dali

        self.key = "dali_roi" if roi else "dali_full"
        what = ("decoders.image_random_crop (decodes the crop window only) + resize"
                if roi else "decoders.image (full decode) + " +
                ("rotate + " if rotation else "") + "random_resized_crop")
        self.label = f"(f) DALI {nvidia.dali.__version__} CPU pipeline: {what}"
        self.root, self.batch_size, self.roi, self.device = root, batch_size, roi, device
        self.rotation = rotation
        self._seed = 0

    def _pipeline(self, threads: int):
        """A built pipeline with ``num_threads=threads`` (fixed when DALI builds it)."""
        from nvidia.dali import fn, pipeline_def, types

        self._seed += 1  # a new shuffle and new crops for each stream

        @pipeline_def(batch_size=self.batch_size, num_threads=threads, device_id=None,
                      seed=self._seed)
        def pipe():
            jpegs, labels = fn.readers.file(file_root=self.root, random_shuffle=True,
                                            name="files")
            if self.roi:
                images = fn.decoders.image_random_crop(jpegs, device="cpu",
                                                       output_type=types.RGB)
                images = fn.resize(images, resize_x=OUT, resize_y=OUT)
            else:
                images = fn.decoders.image(jpegs, device="cpu", output_type=types.RGB)
                if self.rotation:  # torchvision's expand=False: the photo's own size
                    images = fn.rotate(images, angle=fn.random.uniform(
                        range=(-float(DEGREES), float(DEGREES))), keep_size=True,
                        fill_value=0)
                images = fn.random_resized_crop(images, size=(OUT, OUT))
            images = fn.crop_mirror_normalize(
                images, dtype=types.FLOAT, output_layout="CHW",
                mean=[m * 255 for m in IMAGENET_MEAN], std=[s * 255 for s in IMAGENET_STD],
                mirror=fn.random.coin_flip())
            return images, labels

        p = pipe()
        p.build()
        return p

    def open_stream(self) -> Stream:
        # A pipeline per stream, shut down (its threads joined) when the stream closes: DALI
        # prefetches ahead, and work left running would fall in the next contender's window.
        pipe = self._pipeline(torch.get_num_threads())

        def batches() -> Iterator[Tuple[Tensor, Tensor]]:
            while True:
                images, labels = pipe.run()
                # DALI recycles its output buffers: copy out, as DALIGenericIterator does
                x = torch.from_dlpack(images.as_tensor()).clone()
                y = torch.from_dlpack(labels.as_tensor()).reshape(-1).long()
                yield x.to(self.device, non_blocking=True), y.to(self.device)

        gen = batches()

        def shutdown() -> None:
            gen.close()
            pipe._shutdown()  # waits for the iterations in flight, stops DALI's threads

        return Stream(gen, shutdown)


class BatchaugJpeg(Contender):
    """batchaug: the files' bytes in a JPEG cache, decoded and cropped by the loader."""

    key = "batchaug"
    per_sample = True
    antialias = "yes"

    def __init__(self, cache: Any, batch_size: int, device: torch.device,
                 rotation: bool = False, decode_only: bool = False, label: str = "") -> None:
        crop = "RandomRotation + RandomResizedCrop + flip" if rotation else \
            "RandomResizedCrop + flip"
        if decode_only:
            self.key = "decode_ceiling"
            self.label = ("(g) decode-only ceiling: batchaug's loader decoding the same "
                          "windows and nothing else")
        else:
            self.label = label or (f"(d) batchaug JPEG cache (the files' bytes) + DeviceLoader("
                                   f"crop={crop}), decode_threads = torch threads")
        self.cache, self.rotation, self.decode_only = cache, rotation, decode_only
        self.batch_size, self.device = batch_size, device
        self._epoch = 0

    def open_stream(self) -> Stream:
        import batchaug as B

        first = [B.RandomRotation(DEGREES)] if self.rotation else []
        loader = B.DeviceLoader(self.cache, self.batch_size, shuffle=True, drop_last=True,
                                seed=0, decode_threads=torch.get_num_threads(),
                                crop=B.Augment(*first, B.RandomResizedCrop(OUT),
                                               B.RandomHorizontalFlip()))
        normalize = B.Augment(B.Normalize(IMAGENET_MEAN, IMAGENET_STD)).to(self.device)
        if self.decode_only:
            plan = loader._window_plan

            def decode_only(crop: Any = None) -> Any:
                roi, why = plan(crop)
                roi.decode_only = True
                return roi, why

            loader._window_plan = decode_only  # type: ignore[method-assign]
            normalize = torch.nn.Identity()

        def batches() -> Iterator[Tuple[Tensor, Tensor]]:
            while True:
                loader.set_epoch(self._epoch)
                self._epoch += 1
                for images, labels in loader:
                    yield normalize(images.to(self.device, non_blocking=True)), labels

        gen = batches()
        return Stream(gen, gen.close)


def build_contenders(count: int, batch_size: int, device: torch.device,
                     log: Callable[[str], None] = print, rotation: bool = False
                     ) -> Tuple[List[Contender], List[dict], str, Callable[[], None]]:
    """The photos recipe's contenders over ``count`` new JPEG files (``rotation``: the seed's
    whole pipeline, ``RandomRotation(30)`` first); returns (contenders, skipped, a note on the
    data, cleanup) -- cleanup removes the files."""
    import torchvision

    from batchaug import DeviceCache

    root = tempfile.mkdtemp(prefix="batchaug-bench-photos-")
    try:
        paths = make_photo_folder(root, count)
        total = sum(os.path.getsize(p) for p in paths)
        workers = sorted({0, torch.get_num_threads()})
        contenders: List[Contender] = [ImageFolderPIL(root, batch_size, w, device, rotation)
                                       for w in workers]
        skipped: List[dict] = []
        dali = [False] if rotation else [False, True]
        try:
            import nvidia.dali  # noqa: F401
        except Exception as exc:  # ImportError, or a DALI that fails to load
            reason = f"DALI is not importable ({type(exc).__name__}: {exc}); {DALI_INSTALL}"
            for roi in dali:
                skipped.append({"contender": "dali_roi" if roi else "dali_full",
                                "label": f"(f) DALI CPU pipeline, {'ROI' if roi else 'full'} "
                                         f"decode", "reason": reason})
            log(f"skipping (f) DALI: {reason}")
        else:
            contenders += [DaliCPU(root, batch_size, roi, device, rotation) for roi in dali]
        cache = DeviceCache.from_dataset(torchvision.datasets.ImageFolder(root), device="cpu",
                                         storage="jpeg", progress=False)
        contenders.append(BatchaugJpeg(cache, batch_size, device, rotation))
        first = [RandomRotation(DEGREES)] if rotation else []
        why = DeviceLoader(cache, batch_size, crop=first + [RandomResizedCrop(OUT)]
                           ).window_decode
        if why == "roi":
            contenders.append(BatchaugJpeg(cache, batch_size, device, rotation, True))
        else:
            skipped.append({"contender": "decode_ceiling", "label": "(g) decode-only ceiling",
                            "reason": f"the loader decodes whole images: {why}"})
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    note = (f"{count} JPEG files (quality 95, shorter side 180-420 px, {total / count / 1024:.0f} "
            f"KiB each on average) cut from scikit-image's sample photographs")
    return contenders, skipped, note, lambda: shutil.rmtree(root, ignore_errors=True)


# --- ``batchaug bench --data CACHE`` on a cache of photos at their own sizes (ragged or JPEG):
# the imagenet recipe as training runs it, on each photo's own pixels, nothing squared first

OWN_SIZES_WORKERS = (0, 2)
OWN_SIZES_DESCRIPTION = ("your photos at their own sizes: RandomResizedCrop(224) + flip in the "
                         "loader (DeviceLoader crop=, as training with a ragged cache), then "
                         "Normalize")


class _OwnSizePhotos(torch.utils.data.Dataset):
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
    """torchvision v2 per sample on each photo at its own size, in a ``DataLoader``."""

    def __init__(self, cache: Any, out: int, batch_size: int, workers: int,
                 device: torch.device) -> None:
        self._serve(_OwnSizePhotos(cache, out),
                    "torchvision v2 per sample on each photo at its own size", batch_size,
                    workers, device)


def own_sizes_contenders(cache: Any, out: int, batch_size: int, device: torch.device
                         ) -> List[Contender]:
    """The contenders on ``cache`` (photos at their own sizes); ``out`` is the photos recipe's
    crop size."""
    if out != OUT:
        raise ValueError(f"out must be {OUT} (the photos recipe's crop), got {out}")
    if batch_size > len(cache):
        raise ValueError(f"--batch-size {batch_size} is more than the {len(cache)} photos read "
                         f"from the cache (the loaders drop an incomplete last batch)")
    return [*(TorchvisionOwnSizes(cache, out, batch_size, w, device) for w in OWN_SIZES_WORKERS),
            BatchaugJpeg(cache, batch_size, device,  # the crop stage on each photo's extent
                         label="(d) batchaug DeviceLoader(crop=RandomResizedCrop + flip) on each "
                         "photo at its own size, decode_threads = torch threads")]
