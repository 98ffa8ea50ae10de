"""Checks of batchaug on a CUDA machine that need only torch (torchvision / TorchCodec where
present): no pytest, no hypothesis, no network. ``gpu/gpu_check.sh`` runs its steps, each
in its own process under ``timeout``.

    python gpu/gpu_probe.py --steps versions,tf32 --jsonl rows.jsonl
    python gpu/gpu_probe.py --dry-run            # every step on the CPU at tiny sizes

Steps (``STEPS``; each yields rows ``{"step", "name", "ok", "note", ...}``, ``ok`` None for a
figure that is reported, not checked):

* ``versions``: torch, torchvision, TorchCodec (or why it does not import), CUDA, the device;
  torch >= 2.9 (``torch.backends.*.fp32_precision``, the resize kernels' TF32 guard).
* ``tf32``: the resize kernels (RandomResizedCrop bilinear and bicubic, Resize, the loader's
  crop stage on a ragged batch) with ``torch.set_float32_matmul_precision("high")`` and with
  ``fp32_precision = "tf32"`` against the exact result: uint8 within 1.
* ``keyed-boxes``: keyed box draws (RandomResizedCrop, TimmRandomResizedCrop, RandomCrop,
  RandomErasing, the crop stage's per-size boxes) on the CPU and on CUDA: equal.
* ``nvjpeg``: ``torchvision.io.decode_jpeg(..., device="cuda")`` (and TorchCodec's, and
  batchaug's ``decode_jpegs``) against the CPU decoder on a few hundred JPEGs.
* ``roi-nvjpeg``: nvImageCodec (nvJPEG) decoding only RandomResizedCrop windows on the device
  against its full decode, img/s; each window equal to the full decode's (not checked where
  nvImageCodec is not installed).
* ``sync``: a host-timing sync probe. ``torch.cuda._sleep`` keeps the GPU busy for ``SLEEP_MS``;
  a call that returns to the host later than its own unhurried time plus half the sleep waited
  for the device (a host<->device copy, ``.item()``, a blocking ``.to``). Over every public
  transform (defaults, train, unkeyed and keyed), ``with_targets`` of the geometric ones, the
  loader's crop stage, and ``next()`` of ``DeviceLoader`` for every placement (device, host,
  disk) and storage (fixed raw, with masks, with boxes; ragged raw; JPEG).
* ``memory``: three epochs of the loader (+ an augment) per storage: the allocated memory after
  epochs 2 and 3 equal, the reserved memory not growing.
* ``prefetch``: a host-placement loader's epoch alone, a fake step (``torch.cuda._sleep``) alone
  and the two together: the share of the loader's time hidden behind the step.
* ``graphs``: the RandomResizedCrop + flip + Normalize + RandomErasing recipe, eager vs
  ``batchaug.graphed`` replay vs ``torch.compile(fullgraph=True)``, img/s; the keyed replay
  equal to eager.

``--dry-run`` runs every step on the CPU at tiny sizes without timing (it checks the script;
tests/bench/test_gpu_bench.py runs it). Rows are written (JSON lines, flushed) as they are made, so a
step cut short by a timeout keeps its earlier rows.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Tuple

try:  # an installed batchaug wins; a bare checkout falls back to its own root (appended)
    import batchaug  # noqa: F401
except ImportError:  # pragma: no cover - depends on how the script is run
    sys.path.append(str(Path(__file__).resolve().parents[1]))

import torch

import batchaug as B  # noqa: E402
from batchaug.recipes import IMAGENET_MEAN, IMAGENET_STD  # noqa: E402

#: How long the sync probe keeps the GPU busy before each call.
SLEEP_MS = 100.0


@dataclass
class Ctx:
    device: torch.device
    dry: bool

    def size(self, real: int, dry: int) -> int:
        return dry if self.dry else real


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _images(n: int, h: int, w: int, seed: int = 0) -> torch.Tensor:
    """Photo-like uint8 images: smooth noise (a JPEG of pure noise is unlike any dataset's)."""
    low = torch.rand(n, 3, max(2, h // 8), max(2, w // 8), generator=_gen(seed)) * 255
    up = torch.nn.functional.interpolate(low, size=(h, w), mode="bicubic", align_corners=False)
    return (up + torch.rand(n, 3, h, w, generator=_gen(seed + 1)) * 8).clamp(0, 255).round().to(
        torch.uint8)


def _version_tuple(v: str) -> Tuple[int, int]:
    parts = v.split("+")[0].split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return (0, 0)


# ---------------------------------------------------------------------------------- versions
def step_versions(ctx: Ctx) -> Iterator[dict]:
    row = {"step": "versions"}
    yield {**row, "name": "torch", "ok": None, "note": f"{torch.__version__} (CUDA runtime "
           f"{torch.version.cuda}, cuDNN {torch.backends.cudnn.version()})"}
    ok = _version_tuple(torch.__version__) >= (2, 9)
    yield {**row, "name": "torch >= 2.9", "ok": ok,
           "note": "fp32_precision, the TF32 guard of the resize kernels, is there" if ok else
           f"torch {torch.__version__}: no torch.backends.*.fp32_precision; the resize "
           f"kernels' TF32 guard needs torch >= 2.9"}
    for mod in ("torchvision", "torchcodec", "pytest", "hypothesis"):
        try:
            m = __import__(mod)
            note = getattr(m, "__version__", "?")
        except Exception as e:  # TorchCodec's native library may raise OSError, not ImportError
            note = f"does not import: {type(e).__name__}: {str(e)[:160]}"
        yield {**row, "name": mod, "ok": None, "note": note}
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        note = (f"{p.name}, {p.total_memory / 2**30:.0f} GiB, capability {p.major}.{p.minor}, "
                f"{torch.cuda.device_count()} device(s)")
    else:
        note = "no CUDA device"
    yield {**row, "name": "device", "ok": None if ctx.dry else torch.cuda.is_available(),
           "note": note}
    yield {**row, "name": "batchaug", "ok": None,
           "note": f"{B.__version__} from {os.path.dirname(B.__file__)}"}


# ---------------------------------------------------------------------------------- tf32
@contextlib.contextmanager
def _precision(kind: str) -> Iterator[None]:
    """``legacy``: ``set_float32_matmul_precision("high")``; ``tf32``: the torch >= 2.9 API
    (``torch.backends.cuda.matmul.fp32_precision``); restored through the same API."""
    if kind == "legacy":
        saved = torch.get_float32_matmul_precision()
        torch.set_float32_matmul_precision("high")
        try:
            yield
        finally:
            torch.set_float32_matmul_precision(saved)
    else:
        backend = torch.backends.cuda.matmul
        saved = backend.fp32_precision
        backend.fp32_precision = "tf32"
        try:
            yield
        finally:
            backend.fp32_precision = saved


def _resize_cases(ctx: Ctx) -> Dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]]:
    from batchaug.data.crop import check_crop

    out = ctx.size(224, 24)
    rrc = B.RandomResizedCrop(out).to(ctx.device)
    bicubic = B.RandomResizedCrop(out, interpolation="bicubic").to(ctx.device)
    resize = B.Resize(out - out // 4).to(ctx.device)
    crop = check_crop(B.RandomResizedCrop(out))[0].to(ctx.device)

    def ragged(x: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        n, _, h, w = x.shape
        sizes = torch.stack([torch.full((n,), h), torch.arange(n) % w // 2 + w // 2], 1)
        return crop.with_sizes(x, sizes.to(x.device), keys)[0]

    return {"RandomResizedCrop": lambda x, k: rrc(x, k),
            "RandomResizedCrop bicubic": lambda x, k: bicubic(x, k),
            "Resize": lambda x, k: resize(x),
            "crop stage (ragged)": ragged}


def step_tf32(ctx: Ctx) -> Iterator[dict]:
    n, h, w = ctx.size(32, 4), ctx.size(300, 40), ctx.size(400, 52)
    x = _images(n, h, w).to(ctx.device)
    keys = B.sample_keys(0, 0, torch.arange(n)).to(ctx.device)
    kinds = ["legacy"]
    if hasattr(torch.backends.cuda.matmul, "fp32_precision"):
        kinds.append("tf32")
    for name, fn in _resize_cases(ctx).items():
        exact = fn(x, keys)
        for kind in kinds:
            with _precision(kind):
                fast = fn(x, keys)
            diff = int((fast.int() - exact.int()).abs().max()) if exact.numel() else 0
            api = ('set_float32_matmul_precision("high")' if kind == "legacy"
                   else 'fp32_precision = "tf32"')
            yield {"step": "tf32", "name": f"{name}, {api}", "ok": diff <= 1,
                   "note": f"max uint8 difference from the exact result: {diff}"}
    # the legacy and new APIs must still agree after a resize under each (batchaug flips and
    # restores the backend's precision around its matmuls)
    with _precision("legacy"):
        _resize_cases(ctx)["RandomResizedCrop"](x, keys)
        after = torch.get_float32_matmul_precision()
        try:  # the legacy getter raises when the two precision APIs were left disagreeing
            legacy = f"allow_tf32 = {torch.backends.cuda.matmul.allow_tf32}"
        except RuntimeError as e:
            legacy = f"allow_tf32 RAISES: {str(e)[:120]}"
    yield {"step": "tf32", "name": "precision restored after a resize",
           "ok": after == "high" and "RAISES" not in legacy,
           "note": f"get_float32_matmul_precision() = {after!r} inside the high block, {legacy}"}


# ---------------------------------------------------------------------------------- keyed boxes
def _box_draws(ctx: Ctx) -> Dict[str, Callable[[torch.Tensor, torch.Tensor], Tuple]]:
    out = ctx.size(224, 24)
    modules = {
        "RandomResizedCrop": B.RandomResizedCrop(out),
        "RandomResizedCrop small boxes": B.RandomResizedCrop(out, scale=(0.01, 0.1)),
        "TimmRandomResizedCrop": B.TimmRandomResizedCrop(out),
        "RandomCrop(pad 8)": B.RandomCrop(out, padding=8),
        "RandomErasing(p=1)": B.RandomErasing(p=1.0),
    }
    draws = {name: (lambda m: lambda x, k: m.make_params(x, k))(m) for name, m in modules.items()}
    rrc = modules["RandomResizedCrop"]

    def per_size(x: torch.Tensor, k: torch.Tensor) -> Tuple:
        n = x.shape[0]
        sizes = torch.stack([torch.arange(n) % 97 + x.shape[2] // 2,
                             torch.arange(n) % 89 + x.shape[3] // 2], 1).to(x.device)
        return rrc.make_params(x, k, sizes)

    draws["RandomResizedCrop boxes on a ragged batch (per-image sizes)"] = per_size
    return draws


def _flat(t) -> List[torch.Tensor]:
    if isinstance(t, torch.Tensor):
        return [t]
    if isinstance(t, dict):
        return [v for k in sorted(t) for v in _flat(t[k])]
    if isinstance(t, (list, tuple)):
        return [v for x in t for v in _flat(x)]
    return []


def step_keyed_boxes(ctx: Ctx) -> Iterator[dict]:
    n = ctx.size(4096, 16)
    shape = (n, 3, ctx.size(256, 32), ctx.size(320, 40))
    # the draws read the batch's shape only: an expanded CPU batch, a real one on the device
    x = torch.zeros(1, *shape[1:], dtype=torch.uint8).expand(shape)
    xd = torch.zeros(shape, dtype=torch.uint8, device=ctx.device)
    keys = B.sample_keys(7, 3, torch.arange(n))
    cpu, dev = _box_draws(Ctx(torch.device("cpu"), ctx.dry)), _box_draws(ctx)
    for name in cpu:
        a = _flat(cpu[name](x, keys))
        b = [t.cpu() for t in _flat(dev[name](xd, keys.to(ctx.device)))]
        same = len(a) == len(b) and all(torch.equal(p, q) for p, q in zip(a, b))
        worst = max((float((p.double() - q.double()).abs().max()) for p, q in zip(a, b)
                     if p.shape == q.shape and p.numel()), default=0.0)
        yield {"step": "keyed-boxes", "name": name, "ok": same,
               "note": f"{n} samples, {len(a)} tensors; max difference {worst:g}"}


# ---------------------------------------------------------------------------------- nvjpeg
def _encode(images: List[torch.Tensor], quality: int = 90) -> List[torch.Tensor]:
    import torchvision.io as io

    return [io.encode_jpeg(im, quality=quality) for im in images]


def _compare(name: str, ref: List[torch.Tensor], got: List[torch.Tensor], seconds: float
             ) -> dict:
    shapes = len(ref) == len(got) and all(r.shape == g.shape for r, g in zip(ref, got))
    if not shapes:
        return {"step": "nvjpeg", "name": name, "ok": False, "note": "shapes differ"}
    diffs = [(r.int() - g.cpu().int()).abs() for r, g in zip(ref, got)]
    worst = max(int(d.max()) for d in diffs)
    mean = sum(float(d.float().mean()) for d in diffs) / len(diffs)
    # decoders differ in IDCT and chroma upsampling rounding: a few levels at edges, never a
    # shifted or wrong image (that shows as a mean difference of several levels)
    return {"step": "nvjpeg", "name": name, "ok": mean < 1.5,
            "note": f"{len(ref)} images: mean |diff| {mean:.3f}, max {worst}, "
                    f"{len(ref) / seconds:.0f} img/s", "max_diff": worst, "mean_diff": mean}


def step_nvjpeg(ctx: Ctx) -> Iterator[dict]:
    import warnings

    import torchvision.io as io

    from batchaug.data.jpeg import decode_jpegs

    n = ctx.size(300, 6)
    sizes = [(ctx.size(160, 24) + (i * 37) % ctx.size(200, 16),
              ctx.size(160, 24) + (i * 53) % ctx.size(240, 16)) for i in range(n)]
    images = [_images(1, h, w, seed=i)[0] for i, (h, w) in enumerate(sizes)]
    data = _encode(images)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torchvision 0.29 deprecates its codecs
        t0 = time.perf_counter()
        ref = [io.decode_jpeg(d) for d in data]
        cpu_s = time.perf_counter() - t0
        yield {"step": "nvjpeg", "name": "torchvision CPU decode", "ok": None,
               "note": f"{n} images, {n / cpu_s:.0f} img/s (one thread)"}
        decoders = {"torchvision decode_jpeg(device)": lambda: io.decode_jpeg(
            data, device=ctx.device)}
        try:
            from torchcodec.decoders import decode_jpeg as tc_decode

            decoders["torchcodec decode_jpeg(device)"] = lambda: tc_decode(
                data, mode="UNCHANGED", device=ctx.device)
        except Exception as e:  # ImportError, or OSError from its native library
            yield {"step": "nvjpeg", "name": "torchcodec decode_jpeg(device)", "ok": None,
                   "note": f"not checked: {type(e).__name__}: {str(e)[:120]}"}
        decoders["batchaug decode_jpegs(device)"] = lambda: decode_jpegs(data, ctx.device)
        for name, fn in decoders.items():
            try:
                out = fn()  # warm-up (the hardware decoder's handle)
                out = out if isinstance(out, list) else [out]
                _sync(ctx)
                t0 = time.perf_counter()
                out = fn()
                out = out if isinstance(out, list) else [out]
                _sync(ctx)
                yield _compare(name, ref, out, time.perf_counter() - t0)
            except Exception as e:
                yield {"step": "nvjpeg", "name": name, "ok": False,
                       "note": f"{type(e).__name__}: {str(e)[:200]}"}


def _nv_decode(ctx: Ctx, decoder, params, streams) -> List[torch.Tensor]:
    """nvImageCodec's decode of ``streams``: ``(C, h, w)`` uint8 tensors on ``ctx.device``."""
    import warnings

    import numpy as np

    images = decoder.decode(streams, params=params)
    if ctx.device.type == "cuda":
        return [torch.as_tensor(im, device=ctx.device) for im in images]
    with warnings.catch_warnings():  # its host buffer, read-only to numpy
        warnings.simplefilter("ignore")
        return [torch.from_numpy(np.asarray(im.cpu())) for im in images]


def step_roi_nvjpeg(ctx: Ctx) -> Iterator[dict]:
    """ROI decode on the device: nvImageCodec (nvJPEG) decoding only RandomResizedCrop(224)'s
    windows against its full decode of the same photos, img/s; each window equal to the full
    decode's window (the loader's CPU path relies on that; ``batchaug.data.roi_crop``)."""
    from batchaug.data import roi_decode

    if not roi_decode.available():
        yield {"step": "roi-nvjpeg", "name": "nvImageCodec", "ok": None,
               "note": "not installed (pip install nvidia-nvimgcodec-cu13): not checked"}
        return
    nv = roi_decode._nvimgcodec()
    n, out = ctx.size(256, 6), ctx.size(224, 8)
    sizes = [(ctx.size(300, 24) + (i * 37) % ctx.size(200, 16),
              ctx.size(300, 24) + (i * 53) % ctx.size(240, 16)) for i in range(n)]
    data = _encode([_images(1, h, w, seed=i)[0] for i, (h, w) in enumerate(sizes)])
    torch.manual_seed(0)
    windows = B.RandomResizedCrop(out).window(torch.tensor(sizes)).tolist()
    if ctx.device.type == "cuda":  # nvJPEG (hardware decoder or CUDA) first, as it chooses
        decoder = nv.Decoder(device_id=ctx.device.index or 0)
    else:  # the dry run: its CPU backend
        decoder = roi_decode._new_decoder(1)
    params = roi_decode._decoder(1)[1]
    full = [nv.CodeStream(d.numpy()) for d in data]
    roi = [cs.get_sub_code_stream(region=nv.Region(start=(t, l), end=(t + h, l + w)))
           for cs, (t, l, h, w) in zip(full, windows)]
    area = sum(h * w for _, _, h, w in windows) / sum(h * w for h, w in sizes)
    window = 0.0 if ctx.dry else 1.0
    t_full = _time(lambda: _nv_decode(ctx, decoder, params, full), ctx, window)
    t_roi = _time(lambda: _nv_decode(ctx, decoder, params, roi), ctx, window)
    whole = _nv_decode(ctx, decoder, params, full)
    part = _nv_decode(ctx, decoder, params, roi)
    same = sum(torch.equal(p, f[:, t:t + h, l:l + w])
               for p, f, (t, l, h, w) in zip(part, whole, windows))
    yield {"step": "roi-nvjpeg", "name": f"nvImageCodec full decode ({ctx.device.type})",
           "ok": None, "note": f"{n} JPEGs, {n / t_full:.0f} img/s"}
    yield {"step": "roi-nvjpeg", "name": f"nvImageCodec ROI decode ({ctx.device.type})",
           "ok": same == n, "note": f"RandomResizedCrop({out}) windows ({100 * area:.0f}% of "
                                    f"the pixels): {n / t_roi:.0f} img/s, {t_full / t_roi:.2f}x "
                                    f"the full decode; {same}/{n} equal to the full decode's "
                                    f"window"}


# ---------------------------------------------------------------------------------- sync
def _sync(ctx: Ctx) -> None:
    if ctx.device.type == "cuda":
        torch.cuda.synchronize(ctx.device)


class SyncProbe:
    """``probe(fn)``: did ``fn()`` wait for the device? (host-timing, see the module doc)"""

    def __init__(self, ctx: Ctx, sleep_ms: float = SLEEP_MS) -> None:
        self.ctx, self.sleep_ms, self.cycles = ctx, sleep_ms, 0
        if ctx.device.type == "cuda" and not ctx.dry:
            torch.cuda._sleep(1000)  # load the kernel
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(True)
            start.record()
            torch.cuda._sleep(20_000_000)
            end.record()
            end.synchronize()
            self.cycles = int(20_000_000 * sleep_ms / start.elapsed_time(end))

    def probe(self, fn: Callable[[], object]) -> Tuple[Optional[bool], str]:
        fn()  # warm-up: lazy initialisation, plans, the loader's first batch
        if not self.cycles:
            fn()
            return None, "dry run: called, not timed"
        _sync(self.ctx)
        time.sleep(0.05)  # a loader's reader thread refills its queue meanwhile
        t0 = time.perf_counter()
        fn()
        free = time.perf_counter() - t0
        _sync(self.ctx)
        time.sleep(0.05)
        torch.cuda._sleep(self.cycles)
        t0 = time.perf_counter()
        fn()
        busy = time.perf_counter() - t0
        _sync(self.ctx)
        waited = busy - free > 0.5 * self.sleep_ms / 1000
        return not waited, (f"{'WAITED for the device: ' if waited else ''}host {busy * 1e3:.1f} "
                            f"ms with the GPU busy {self.sleep_ms:.0f} ms, {free * 1e3:.1f} ms "
                            f"idle")


def transform_cases() -> Dict[str, Callable[[], torch.nn.Module]]:
    """Every public transform with its defaults (and the fewest required arguments)."""
    out = 48
    return {
        "CenterCrop": lambda: B.CenterCrop(out), "Normalize": lambda: B.Normalize(
            IMAGENET_MEAN, IMAGENET_STD), "Pad": lambda: B.Pad(4),
        "RandomCrop": lambda: B.RandomCrop(out, padding=4),
        "RandomHorizontalFlip": B.RandomHorizontalFlip, "RandomAffine": lambda: B.RandomAffine(
            15), "RandomPerspective": B.RandomPerspective,
        "RandomResizedCrop": lambda: B.RandomResizedCrop(out),
        "RandomRotation": lambda: B.RandomRotation(15), "RandomVerticalFlip":
            B.RandomVerticalFlip, "Resize": lambda: B.Resize(out),
        "ToDtype": lambda: B.ToDtype(torch.float32, scale=True), "ColorJitter": lambda:
            B.ColorJitter(0.4, 0.4, 0.4, 0.1), "Grayscale": B.Grayscale,
        "RandomGrayscale": B.RandomGrayscale, "RandomInvert": B.RandomInvert,
        "RandomPosterize": lambda: B.RandomPosterize(4), "RandomSolarize":
            lambda: B.RandomSolarize(128), "RandomAdjustSharpness":
            lambda: B.RandomAdjustSharpness(2.0), "RandomAutocontrast": B.RandomAutocontrast,
        "RandomEqualize": B.RandomEqualize, "GaussianBlur": lambda: B.GaussianBlur(5),
        "RandomErasing": B.RandomErasing, "TrivialAugmentWide": B.TrivialAugmentWide,
        "RandAugment": B.RandAugment, "AutoAugment": B.AutoAugment, "AugMix": B.AugMix,
        "RandomApply": lambda: B.RandomApply([B.ColorJitter(0.4)]),
        "RandomChoice": lambda: B.RandomChoice([B.RandomInvert(1.0), B.RandomSolarize(128)]),
        "RandomOrder": lambda: B.RandomOrder([B.RandomInvert(), B.RandomHorizontalFlip()]),
        "MixUp": lambda: B.MixUp(10), "CutMix": lambda: B.CutMix(10),
        "MixUpOrCutMix": lambda: B.MixUpOrCutMix(10), "TimmRandAugment": B.TimmRandAugment,
        "TimmAutoAugment": B.TimmAutoAugment, "TimmAugMix": B.TimmAugMix,
        "TimmRandomErasing": B.TimmRandomErasing, "TimmMixup": B.TimmMixup,
        "TimmRandomResizedCrop": lambda: B.TimmRandomResizedCrop(out),
        "Augment(rrc, flip, Normalize, erasing)": lambda: B.Augment(
            B.RandomResizedCrop(out), B.RandomHorizontalFlip(),
            B.Normalize(IMAGENET_MEAN, IMAGENET_STD), B.RandomErasing()),
    }


def _call(m: torch.nn.Module, x: torch.Tensor, labels: torch.Tensor,
          keys: Optional[torch.Tensor]) -> object:
    if getattr(m, "_mixes_labels", False):  # (images, labels): float images, class labels
        xf = x.float() / 255
        return m(xf, labels) if keys is None else m(xf, labels, keys)
    return m(x) if keys is None else m(x, keys)


def _sync_rows(ctx: Ctx) -> Iterator[Tuple[str, Callable[[], object]]]:
    n, s = ctx.size(64, 4), ctx.size(64, 56)
    x = _images(n, s, s).to(ctx.device)
    labels = (torch.arange(n) % 10).to(ctx.device)
    keys = B.sample_keys(0, 0, torch.arange(n)).to(ctx.device)
    xy = torch.rand(n, 4, 2, generator=_gen(2)) * (s - 16)
    targets = {"masks": (torch.arange(n * s * s).view(n, s, s) % 7).to(torch.uint8),
               "boxes": torch.cat((xy, xy + 12), 2), "keypoints": torch.rand(n, 5, 2) * s}
    targets = {k: v.to(ctx.device) for k, v in targets.items()}
    for name, make in transform_cases().items():
        m = make().to(ctx.device).train()
        yield name, (lambda m=m: _call(m, x, labels, None))
        if getattr(m, "takes_keys", False):
            yield f"{name} keyed", (lambda m=m: _call(m, x, labels, keys))
        if isinstance(m, B.GeometricTransform) or name.startswith("Augment("):
            yield f"{name}.with_targets", (lambda m=m: m.with_targets(x, dict(targets)))
            yield f"{name}.with_targets keyed", (lambda m=m: m.with_targets(x, dict(targets),
                                                                             keys))
    yield from _crop_stage_rows(ctx, x, keys)
    yield from _loader_rows(ctx)


def _crop_stage_rows(ctx: Ctx, x: torch.Tensor, keys: torch.Tensor
                     ) -> Iterator[Tuple[str, Callable[[], object]]]:
    from batchaug.data.crop import check_crop

    n, _, h, w = x.shape
    sizes = torch.stack([torch.arange(n) % (h // 2) + h // 2,
                         torch.arange(n) % (w // 3) + w // 2], 1).to(ctx.device)
    masks = (torch.arange(n * h * w).view(n, h, w) % 5).to(ctx.device)
    crops = {"rrc": lambda: B.RandomResizedCrop(32),
             "flip+rotation+rrc": lambda: B.Augment(B.RandomHorizontalFlip(),
                                                    B.RandomRotation(20), B.RandomResizedCrop(32)),
             "perspective+rrc": lambda: B.Augment(B.RandomPerspective(), B.RandomResizedCrop(32)),
             "resize+center crop": lambda: B.Augment(B.Resize(36), B.CenterCrop(32))}
    for name, make in crops.items():
        crop = check_crop(make())[0].to(ctx.device).train()
        yield f"crop stage {name}", lambda crop=crop: crop.with_sizes(x, sizes)
        yield f"crop stage {name} keyed", lambda crop=crop: crop.with_sizes(x, sizes, keys)
        yield f"crop stage {name} with_masks keyed", (
            lambda crop=crop: crop.with_targets(x, {"masks": masks, "sizes": sizes}, keys))


def _caches(root: Path, ctx: Ctx, n: int) -> Dict[str, Path]:
    """Fixed raw (plain, with masks, with boxes), ragged raw and JPEG caches of ``n`` small
    images, saved under ``root``."""
    from batchaug import DeviceCache
    from batchaug.data.ragged import RaggedImages

    s = ctx.size(64, 24)
    fixed = _images(n, s, s)
    ragged = [_images(1, s - i % 9, s + i % 13, seed=i)[0] for i in range(n)]
    labels = torch.arange(n) % 10
    paths = {name: root / name for name in ("fixed raw", "fixed raw + masks",
                                             "fixed raw + boxes", "ragged raw", "jpeg")}
    DeviceCache.from_tensors(fixed, labels, device="cpu").save(paths["fixed raw"])
    masks = (torch.arange(n * s * s).view(n, s, s) % 5).to(torch.uint8)
    DeviceCache.from_tensors(fixed, labels, device="cpu", masks=masks).save(
        paths["fixed raw + masks"])
    xy = torch.rand(n, 3, 2, generator=_gen(3)) * (s / 2)
    DeviceCache.from_tensors(fixed, labels, device="cpu", boxes=torch.cat((xy, xy + s / 4), 2)
                             ).save(paths["fixed raw + boxes"])
    DeviceCache(RaggedImages.from_list(ragged), labels, device="cpu").save(paths["ragged raw"])
    DeviceCache(RaggedImages.from_list(ragged, storage="jpeg", quality=90), labels,
                device="cpu").save(paths["jpeg"])
    return paths


_TMP: List[tempfile.TemporaryDirectory] = []  # kept until the process ends (disk placement)


def _loader_rows(ctx: Ctx) -> Iterator[Tuple[str, Callable[[], object]]]:
    from batchaug import DeviceCache, DeviceLoader

    tmp = tempfile.TemporaryDirectory(prefix="gpu_probe_")
    _TMP.append(tmp)
    batch = ctx.size(32, 4)
    paths = _caches(Path(tmp.name), ctx, batch * 12)
    for storage, path in paths.items():
        for placement in ("device", "host", "disk"):
            cache = DeviceCache.load(path, device=ctx.device, placement=placement)
            crops = [B.RandomResizedCrop(32)]
            if storage.startswith("fixed raw"):
                crops.insert(0, None)
            for crop in crops:
                loader = DeviceLoader(cache, batch, prefetch=2, rank=0, world_size=1,
                                      return_keys=True, crop=crop)
                it = iter(loader)
                label = f"next() {storage}, {placement}{', crop' if crop is not None else ''}"
                yield label, lambda it=it: next(it)


def step_sync(ctx: Ctx) -> Iterator[dict]:
    probe = SyncProbe(ctx)
    for name, fn in _sync_rows(ctx):
        try:
            ok, note = probe.probe(fn)
        except Exception as e:  # report and go on: one failure must not hide the rest
            ok, note = False, f"{type(e).__name__}: {str(e)[:200]}"
        yield {"step": "sync", "name": name, "ok": ok, "note": note}


# ---------------------------------------------------------------------------------- memory
def step_memory(ctx: Ctx) -> Iterator[dict]:
    from batchaug import DeviceCache, DeviceLoader

    cuda = ctx.device.type == "cuda"
    aug = B.Augment(B.RandomHorizontalFlip(), B.Normalize(IMAGENET_MEAN, IMAGENET_STD),
                    B.RandomErasing()).to(ctx.device)
    with tempfile.TemporaryDirectory(prefix="gpu_probe_") as tmp:
        batch = ctx.size(64, 4)
        paths = _caches(Path(tmp), ctx, batch * ctx.size(16, 3))
        for storage, placement in (("fixed raw", "device"), ("fixed raw", "host"),
                                   ("ragged raw", "host"), ("jpeg", "host"),
                                   ("jpeg", "device")):
            cache = DeviceCache.load(paths[storage], device=ctx.device, placement=placement)
            loader = DeviceLoader(cache, batch, prefetch=2, rank=0, world_size=1,
                                  return_keys=True, crop=B.RandomResizedCrop(32))
            allocated, reserved = [], []
            for _ in range(3):
                for images, labels, keys in loader:
                    aug(images, keys)
                _sync(ctx)
                if cuda:
                    allocated.append(torch.cuda.memory_allocated(ctx.device))
                    reserved.append(torch.cuda.memory_reserved(ctx.device))
            loader.close() if hasattr(loader, "close") else None
            del loader, cache
            name = f"3 epochs, {storage}, {placement}"
            if not cuda:
                yield {"step": "memory", "name": name, "ok": None, "note": "no CUDA: not measured"}
                continue
            # stable: the third epoch holds no more than the second (1 MiB of slack for the
            # allocator's rounding), and the cache of blocks does not grow
            ok = allocated[2] <= allocated[1] + 2**20 and reserved[2] <= reserved[1]
            yield {"step": "memory", "name": name, "ok": ok,
                   "note": "allocated MiB " + " / ".join(f"{a / 2**20:.1f}" for a in allocated)
                           + ", reserved MiB " + " / ".join(f"{r / 2**20:.1f}" for r in reserved)}


# ---------------------------------------------------------------------------------- prefetch
def step_prefetch(ctx: Ctx) -> Iterator[dict]:
    from batchaug import DeviceCache, DeviceLoader

    n, batch, s = ctx.size(8192, 32), ctx.size(256, 8), ctx.size(128, 16)
    with tempfile.TemporaryDirectory(prefix="gpu_probe_") as tmp:
        DeviceCache.from_tensors(_images(n, s, s), torch.arange(n) % 10, device="cpu").save(
            Path(tmp) / "c")
        cache = DeviceCache.load(Path(tmp) / "c", device=ctx.device, placement="host")
        for prefetch in (0, 2):
            loader = DeviceLoader(cache, batch, prefetch=prefetch, rank=0, world_size=1,
                                  crop=B.RandomResizedCrop(s - s // 8))
            for _ in loader:  # warm-up epoch (pinned buffers, kernels)
                pass
            _sync(ctx)
            t0 = time.perf_counter()
            batches = sum(1 for _ in loader)
            _sync(ctx)
            load_s = time.perf_counter() - t0
            if ctx.device.type != "cuda" or ctx.dry:
                yield {"step": "prefetch", "name": f"prefetch={prefetch}", "ok": None,
                       "note": f"{batches} batches; no CUDA: no fake step, not timed"}
                continue
            step_ms = 1e3 * load_s / batches  # the step as long as the loader: all can hide
            cycles = SyncProbe(ctx, step_ms).cycles
            _sync(ctx)
            t0 = time.perf_counter()
            for _ in range(batches):
                torch.cuda._sleep(cycles)
            _sync(ctx)
            step_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            for images, labels in loader:
                torch.cuda._sleep(cycles)
            _sync(ctx)
            both_s = time.perf_counter() - t0
            hidden = (load_s + step_s - both_s) / min(load_s, step_s)
            yield {"step": "prefetch", "name": f"prefetch={prefetch}",
                   "ok": hidden >= 0.5 if prefetch else None, "hidden": hidden,
                   "note": f"loader {load_s:.2f} s, fake step {step_s:.2f} s, together "
                           f"{both_s:.2f} s: {100 * hidden:.0f}% of the shorter hidden "
                           f"({batches} batches of {batch})"}


# ---------------------------------------------------------------------------------- graphs
def _time(fn: Callable[[], object], ctx: Ctx, window: float) -> float:
    """Seconds per call: calls until ``window`` seconds have passed (synchronised)."""
    fn()
    _sync(ctx)
    calls, t0 = 0, time.perf_counter()
    while True:
        fn()
        calls += 1
        if calls % 5 == 0 or ctx.dry:
            _sync(ctx)
            if time.perf_counter() - t0 >= window:
                return (time.perf_counter() - t0) / calls


def step_graphs(ctx: Ctx) -> Iterator[dict]:
    n, s, out = ctx.size(256, 4), ctx.size(256, 40), ctx.size(224, 32)
    window = 0.0 if ctx.dry else 1.0
    x = _images(n, s, s).to(ctx.device)
    keys = B.sample_keys(0, 0, torch.arange(n)).to(ctx.device)
    aug = B.Augment(B.RandomResizedCrop(out), B.RandomHorizontalFlip(),
                    B.Normalize(IMAGENET_MEAN, IMAGENET_STD),
                    B.RandomErasing(p=0.25)).to(ctx.device).train()
    row = {"step": "graphs", "batch": n}
    eager = _time(lambda: aug(x), ctx, window)
    yield {**row, "name": "eager", "ok": None, "images_per_s": n / eager,
           "note": f"{n / eager:.0f} img/s"}
    if ctx.device.type != "cuda":
        yield {**row, "name": "graphed replay", "ok": None, "note": "no CUDA: not captured"}
    else:
        try:
            g = B.graphed(aug, x)
            replay = _time(lambda: g(x), ctx, window)
            yield {**row, "name": "graphed replay", "ok": None, "images_per_s": n / replay,
                   "note": f"{n / replay:.0f} img/s, {eager / replay:.1f}x eager"}
            gk = B.graphed(aug, x, keys)
            keys2 = B.sample_keys(0, 1, torch.arange(n)).to(ctx.device)
            same = torch.equal(gk(x, keys2).clone(), aug(x, keys2))
            yield {**row, "name": "graphed keyed replay == eager", "ok": same,
                   "note": "bit for bit" if same else "DIFFERS from eager with the same keys"}
        except Exception as e:  # report and go on to the compiled row
            yield {**row, "name": "graphed", "ok": False,
                   "note": f"{type(e).__name__}: {str(e)[:300]}"}
    if ctx.dry:
        yield {**row, "name": "torch.compile", "ok": None, "note": "dry run: not compiled"}
        return
    torch._dynamo.reset()
    t0 = time.perf_counter()
    compiled = torch.compile(aug, fullgraph=True)
    compiled(x)
    _sync(ctx)
    compile_s = time.perf_counter() - t0
    sec = _time(lambda: compiled(x), ctx, window)
    yield {**row, "name": "torch.compile(fullgraph=True)", "ok": None, "images_per_s": n / sec,
           "note": f"{n / sec:.0f} img/s, {eager / sec:.1f}x eager (compiled in "
                   f"{compile_s:.0f} s)"}


#: Steps in the order they run: name -> function yielding rows. Add a check here.
STEPS: Dict[str, Callable[[Ctx], Iterator[dict]]] = {
    "versions": step_versions,
    "tf32": step_tf32,
    "keyed-boxes": step_keyed_boxes,
    "nvjpeg": step_nvjpeg,
    "roi-nvjpeg": step_roi_nvjpeg,
    "sync": step_sync,
    "memory": step_memory,
    "prefetch": step_prefetch,
    "graphs": step_graphs,
}


def main(argv: Optional[List[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", default=",".join(STEPS), help="comma-separated, from: "
                   + ", ".join(STEPS))
    p.add_argument("--dry-run", action="store_true", help="the CPU, tiny sizes, no timing")
    p.add_argument("--jsonl", help="append the rows here as they are made")
    a = p.parse_args(argv)
    steps = a.steps.split(",")
    for s in steps:
        if s not in STEPS:
            p.error(f"--steps: unknown step {s!r} (known: {', '.join(STEPS)})")
    if not a.dry_run and not torch.cuda.is_available():
        print("gpu_probe: CUDA is not available (use --dry-run on a CPU)")
        return 3
    ctx = Ctx(torch.device("cpu" if a.dry_run else "cuda"), a.dry_run)
    torch.manual_seed(0)
    out = open(a.jsonl, "a") if a.jsonl else None
    failed = 0
    try:
        for s in steps:
            t0 = time.perf_counter()
            rows = 0
            try:
                for row in STEPS[s](ctx):
                    rows += 1
                    failed += row.get("ok") is False
                    mark = {True: "ok  ", False: "FAIL", None: "    "}[row.get("ok")]
                    print(f"{mark} {s}: {row['name']}: {row.get('note', '')}", flush=True)
                    if out:
                        out.write(json.dumps(row) + "\n")
                        out.flush()
            except Exception as e:  # the step broke: say where, go on with the next step
                failed += 1
                row = {"step": s, "name": "(step)", "ok": False,
                       "note": f"{type(e).__name__}: {str(e)[:300]}"}
                print(f"FAIL {s}: step broke: {row['note']}", flush=True)
                if out:
                    out.write(json.dumps(row) + "\n")
                    out.flush()
            print(f"-- {s}: {rows} rows in {time.perf_counter() - t0:.1f} s", flush=True)
    finally:
        if out:
            out.close()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
