"""JPEG decoders side by side on photos: full decode vs decoding only the crop's window.

The photo set is ``batchaug.bench.photos.make_photo_folder`` (scikit-image photographs cut to
mixed sizes, JPEG quality 95, 4:2:0). Each image gets one window drawn by torchvision's
``RandomResizedCrop.get_params`` (scale 0.08-1, ratio 3/4-4/3), the window the loader's
``RandomResizedCrop(224)`` would take. Per decoder, at one thread:

* ``full``: the whole image decoded (the crop is then a free view);
* ``roi``: only the window decoded (region-of-interest decode), checked to equal full decode +
  crop exactly, image by image;
* ``dct``: decoded at the smallest DCT scale (1/2, 1/4, 1/8) that keeps the window at least
  ``--size`` (224) px on each side. It changes pixels: the table gives the mean absolute
  difference of ``resize(window, size)`` against the same from the full decode (antialiased,
  uint8 levels). These photos' windows are rarely 448 px: use ``--size 112`` to see it work.

Candidates (each skipped, with the reason, when it cannot be imported): torchvision's
``decode_jpeg``, TorchCodec's ``decode_jpeg``, batchaug's ``decode_jpegs`` (the cache's decoder)
without and with ``windows=`` (ROI decode through nvImageCodec when installed, else full decode
+ crop), PIL (``Image.open`` + ``draft`` for DCT scale),
simplejpeg (``min_height``/``min_width`` for DCT scale), nvImageCodec's CPU backend (``Region``
for ROI decode; ``pip install nvidia-nvimgcodec-cu13``, no GPU needed).

Interleaved rounds of equal wall-clock windows (``batchaug.bench.timing``); img/s medians and
same-round ratios to torchvision's full decode.

    python benchmarks/bench_decode.py                        # ~1 minute
    python benchmarks/bench_decode.py --images 200 --rounds 5 --window 1.0 --json out.json
"""
from __future__ import annotations

import argparse
import io
import os
import sys
import tempfile
import warnings
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np
import torch

try:  # an installed batchaug wins; a bare checkout falls back to its own root (appended)
    import batchaug  # noqa: F401
except ImportError:  # pragma: no cover - depends on how the script is run
    sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from batchaug.bench import timing  # noqa: E402
from batchaug.bench.photos import make_photo_folder  # noqa: E402
from batchaug.bench.timing import Call  # noqa: E402

OUT = 224
Window = Tuple[int, int, int, int]  # top, left, height, width


def draw_windows(sizes: List[Tuple[int, int]], seed: int = 0) -> List[Window]:
    """One RandomResizedCrop window per image, drawn by torchvision's own ``get_params``."""
    import torchvision.transforms as T

    torch.manual_seed(seed)
    out = []
    for h, w in sizes:
        top, left, hh, ww = T.RandomResizedCrop.get_params(
            torch.empty(1, h, w), scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3))
        out.append((int(top), int(left), int(hh), int(ww)))
    return out


def dct_denominator(window: Window, out: Optional[int] = None) -> int:
    """The largest of 1, 2, 4, 8 that keeps the window's both sides >= ``out`` (default: the
    output side, ``--size``) once scaled."""
    out = OUT if out is None else out
    _, _, h, w = window
    for d in (8, 4, 2):
        if h // d >= out and w // d >= out:
            return d
    return 1


def _chw(array: np.ndarray) -> torch.Tensor:
    with warnings.catch_warnings():  # nvImageCodec's buffers are read-only to numpy
        warnings.simplefilter("ignore")
        a = torch.from_numpy(np.ascontiguousarray(array))
    return a.unsqueeze(0) if a.ndim == 2 else a.permute(2, 0, 1)


# --- decoders: name -> (mode, fn(bytes list, windows) -> list of CHW uint8) ---------------------


def candidates() -> Tuple[Dict[str, Tuple[str, Callable]], Dict[str, str]]:
    found: Dict[str, Tuple[str, Callable]] = {}
    skipped: Dict[str, str] = {}

    from torchvision.io import decode_jpeg as tv_decode

    def tv_full(data, windows):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return [tv_decode(torch.frombuffer(d, dtype=torch.uint8)) for d in data]

    found["torchvision full"] = ("full", tv_full)
    try:
        from torchcodec.decoders import decode_jpeg as tc_decode
    except Exception as exc:  # ImportError, or a native library that does not load
        skipped["torchcodec"] = f"{type(exc).__name__}: {exc}"
    else:
        def tc_full(data, windows):
            return [tc_decode(torch.frombuffer(d, dtype=torch.uint8)) for d in data]

        found["torchcodec full"] = ("full", tc_full)

    from PIL import Image

    def pil(data, windows, draft: bool):
        out = []
        for d, win in zip(data, windows):
            with Image.open(io.BytesIO(d)) as im:
                if draft:
                    den = dct_denominator(win)
                    im.draft("RGB", (im.width // den, im.height // den))
                out.append(_chw(np.asarray(im.convert("RGB"))))
        return out

    from batchaug.data.jpeg import decode_jpegs

    cpu = torch.device("cpu")

    def ours(data, windows, roi: bool):
        tensors = [torch.frombuffer(d, dtype=torch.uint8) for d in data]
        return decode_jpegs(tensors, cpu, 1, windows=torch.tensor(windows) if roi else None)

    found["batchaug decode_jpegs"] = ("full", lambda d, w: ours(d, w, False))
    found["batchaug decode_jpegs windows="] = ("roi", lambda d, w: ours(d, w, True))
    found["PIL full"] = ("full", lambda d, w: pil(d, w, False))
    found["PIL draft"] = ("dct", lambda d, w: pil(d, w, True))
    try:
        import simplejpeg
    except Exception as exc:
        skipped["simplejpeg"] = f"{type(exc).__name__}: {exc}; pip install simplejpeg"
    else:
        def sj(data, windows, dct: bool):
            out = []
            for d, win in zip(data, windows):
                if dct:
                    h, w, _, _ = simplejpeg.decode_jpeg_header(d)
                    den = dct_denominator(win)
                    out.append(_chw(simplejpeg.decode_jpeg(d, min_height=-(-h // den),
                                                           min_width=-(-w // den))))
                else:
                    out.append(_chw(simplejpeg.decode_jpeg(d)))
            return out

        found["simplejpeg full"] = ("full", lambda d, w: sj(d, w, False))
        found["simplejpeg dct"] = ("dct", lambda d, w: sj(d, w, True))
    try:
        from nvidia import nvimgcodec as nv

        decoder = nv.Decoder(device_id=nv.NVIMGCODEC_DEVICE_CPU_ONLY, max_num_cpu_threads=1,
                             backends=[nv.Backend(nv.BackendKind.CPU_ONLY)])
    except Exception as exc:
        skipped["nvimgcodec"] = (f"{type(exc).__name__}: {exc}; pip install "
                                 f"nvidia-nvimgcodec-cu13")
    else:
        def nvi(data, windows, roi: bool):
            streams = [nv.CodeStream(d) for d in data]
            if roi:
                streams = [s.get_sub_code_stream(region=nv.Region(start=(t, l),
                                                                  end=(t + h, l + w)))
                           for s, (t, l, h, w) in zip(streams, windows)]
            return [_chw(np.asarray(img.cpu())) for img in decoder.decode(streams)]

        found["nvimgcodec full"] = ("full", lambda d, w: nvi(d, w, False))
        found["nvimgcodec roi"] = ("roi", lambda d, w: nvi(d, w, True))
    return found, skipped


def check(name: str, mode: str, fn: Callable, data: List[bytes], windows: List[Window],
          full: List[torch.Tensor]) -> Optional[str]:
    """``roi``: 'k/n exact'; ``dct``: the mean |difference| after resizing to 224."""
    from torchvision.transforms.v2 import functional as TF

    got = fn(data, windows)
    if mode == "roi":
        same = sum(int(g.shape == f[:, t:t + h, l:l + w].shape and
                       torch.equal(g, f[:, t:t + h, l:l + w]))
                   for g, f, (t, l, h, w) in zip(got, full, windows))
        return f"{same}/{len(data)} exact"
    if mode == "dct":
        diffs = []
        for g, f, (t, l, h, w) in zip(got, full, windows):
            ref = TF.resize(f[:, t:t + h, l:l + w], [OUT, OUT], antialias=True)
            sy, sx = g.shape[1] / f.shape[1], g.shape[2] / f.shape[2]
            box = g[:, round(t * sy):round((t + h) * sy), round(l * sx):round((l + w) * sx)]
            diffs.append((TF.resize(box, [OUT, OUT], antialias=True).float() - ref.float())
                         .abs().mean().item())
        return f"mean |diff| {np.mean(diffs):.2f} levels (changes pixels)"
    same = sum(int(torch.equal(g, f)) for g, f in zip(got, full))
    return f"{same}/{len(data)} equal torchvision"


def main(argv=None) -> int:
    global OUT
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--images", type=int, default=96)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--size", type=int, default=OUT,
                    help="the crop's output side: sets the DCT scale (e.g. 112 for a "
                    "low-resolution phase of progressive resizing)")
    timing.add_arguments(ap, rounds=3, window=0.6, threads="1")
    args = ap.parse_args(argv)
    OUT = args.size
    with tempfile.TemporaryDirectory(prefix="batchaug-decode-") as root:
        paths = make_photo_folder(root, args.images)
        data = [open(p, "rb").read() for p in paths]
    found, skipped = candidates()
    full = found["torchvision full"][1](data, [None] * len(data))
    windows = draw_windows([(int(f.shape[1]), int(f.shape[2])) for f in full])
    area = np.mean([h * w / (f.shape[1] * f.shape[2]) for f, (_, _, h, w) in zip(full, windows)])
    dens = [dct_denominator(w) for w in windows]
    print(f"{len(data)} photos, {min(f.shape[1] for f in full)}-{max(f.shape[1] for f in full)} "
          f"x {min(f.shape[2] for f in full)}-{max(f.shape[2] for f in full)} px; windows cover "
          f"{area:.2f} of the image on average; DCT scale 1/{{1,2,4,8}}: "
          f"{[dens.count(d) for d in (1, 2, 4, 8)]} images")
    for name, why in skipped.items():
        print(f"skipped {name}: {why}")
    checks = {name: check(name, mode, fn, data, windows, full)
              for name, (mode, fn) in found.items()}
    batches = [(data[a:a + args.batch], windows[a:a + args.batch])
               for a in range(0, len(data), args.batch)]
    summary = timing.compare([Call(name, fn, batches) for name, (_, fn) in found.items()],
                             args, "decode", quiet=False)
    base = "torchvision full"
    print(f"\nbatches of {args.batch}; ratio: same-round, it / {base}")
    print("| decoder | mode | threads | img/s | ratio median [min-max] | pixels |")
    print("|---|---|---|---|---|---|")
    rows = {}
    for name, (mode, _) in found.items():
        for t in args.threads:
            s = summary[(name, t)]
            rows[name] = {"mode": mode, "threads": t, "images_per_s": s["images_per_s"],
                          "ratio": s["ratios"][base], "check": checks[name]}
            print(f"| {name} | {mode} | {t} | {s['images_per_s']:,.0f} | "
                  f"{timing.spread(s['ratios'][base])} | {checks[name]} |")
    timing.write_json(args.json, {"skipped": skipped, "decoders": rows,
                                  "window_area": float(area)})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
