"""Decoding only a window of each JPEG on the CPU (region-of-interest decode), with nvImageCodec.

libjpeg-turbo (through nvImageCodec's CPU backend) skips the IDCT, upsampling and colour
conversion of the rows and columns outside the window, and stops after its last row; what it
gives equals the same window of the full decode, pixel for pixel (tested on odd sizes, 4:2:0,
4:4:4, grayscale and progressive files in tests/data/test_roi_decode.py), so a crop stage that knows
its window before decoding may decode only that. Optional: ``pip install nvidia-nvimgcodec-cu13``
(no GPU needed; ``batchaug[roi]``). Without it, ``available()`` is False and the caller decodes
whole images and crops.

``benchmarks/bench_decode.py`` measures it against full decodes (torchvision, TorchCodec, PIL,
simplejpeg) on photos with RandomResizedCrop windows.
"""
from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
import tempfile
import threading
import warnings
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch import Tensor

Window = Tuple[int, int, int, int]  # top, left, height, width

_STATE: Dict[str, Any] = {}
_LOCK = threading.Lock()


@contextlib.contextmanager
def _fd2_captured() -> Any:
    """fd 2 into a temporary file for the duration: nvImageCodec's C library prints its
    plugin-loading messages there itself (not through Python's sys.stderr), at import."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as log:
        os.dup2(log.fileno(), 2)
        try:
            yield log
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def _nvimgcodec() -> Any:
    """The ``nvidia.nvimgcodec`` module, or None where it is missing or its CPU decoder does
    not work. Looked up once per process. Its messages about the GPU codecs it cannot load on
    a machine without CUDA (nvJPEG, nvJPEG2000, nvTIFF) are dropped when the CPU decoder
    works; when it is installed but does not work, one warning says so."""
    if "module" not in _STATE:
        found = None
        if importlib.util.find_spec("nvidia") is not None \
                and importlib.util.find_spec("nvidia.nvimgcodec") is not None:
            try:
                with _fd2_captured() as log:
                    from nvidia import nvimgcodec as found
                    _new_decoder(1, found)  # the probe: the CPU decoder decode_windows uses
            except Exception as exc:  # its native library failing to load, or no CPU backend
                found = None
                warnings.warn(
                    f"nvImageCodec is installed but its CPU decoder does not work here "
                    f"({type(exc).__name__}: {str(exc).strip()[:200]}); batchaug decodes whole "
                    f"JPEGs and crops them instead of decoding only each window (same pixels, "
                    f"slower)", RuntimeWarning, stacklevel=2)
        _STATE["module"] = found
    return _STATE["module"]


def available() -> bool:
    """Whether ROI decode on the CPU can run here (nvImageCodec imports)."""
    return _nvimgcodec() is not None


_LOCAL = threading.local()


def _new_decoder(threads: int, nv: Any = None) -> Any:
    nv = _nvimgcodec() if nv is None else nv
    return nv.Decoder(device_id=nv.NVIMGCODEC_DEVICE_CPU_ONLY, max_num_cpu_threads=threads,
                      backends=[nv.Backend(nv.BackendKind.CPU_ONLY)])


def _decoder(threads: int) -> Tuple[Any, Any]:
    """(decoder, params): a CPU-only decoder, kept: one per calling thread for ``threads == 1``
    (the loader's decode pool runs one part of a batch per thread, each with its own decoder,
    in parallel), else one per thread count shared under ``_LOCK``; planar output in the
    stream's own channels (``mode="UNCHANGED"``), EXIF orientation not applied (as the full
    decode of ``batchaug.data.jpeg.decode_jpegs``)."""
    nv = _nvimgcodec()
    if "params" not in _STATE:
        _STATE["params"] = nv.DecodeParams(apply_exif_orientation=False,
                                           color_spec=nv.ColorSpec.UNCHANGED,
                                           sample_format=nv.SampleFormat.P_UNCHANGED)
    if threads == 1:
        if getattr(_LOCAL, "decoder", None) is None:
            _LOCAL.decoder = _new_decoder(1)
        return _LOCAL.decoder, _STATE["params"]
    key = f"decoder{threads}"
    if key not in _STATE:
        _STATE[key] = _new_decoder(threads)
    return _STATE[key], _STATE["params"]


def check_windows(windows: Any, n: int) -> List[Window]:
    """``windows`` as a list of ``n`` (top, left, height, width) ints; ValueError/TypeError
    naming ``windows`` otherwise (bounds are checked against each image where it is read)."""
    if not isinstance(windows, Tensor):
        raise TypeError(f"windows must be an (N, 4) integer tensor of (top, left, height, "
                        f"width), got {type(windows).__name__}")
    if windows.dtype.is_floating_point or windows.dtype.is_complex or windows.dtype == torch.bool:
        raise TypeError(f"windows must hold integers, got {windows.dtype}")
    if windows.dim() != 2 or windows.shape[1] != 4 or windows.shape[0] != n:
        raise ValueError(f"windows must have shape ({n}, 4) (one (top, left, height, width) per "
                         f"image), got {tuple(windows.shape)}")
    rows = [tuple(int(v) for v in row) for row in windows.cpu().tolist()]
    for k, (t, l, h, w) in enumerate(rows):
        if t < 0 or l < 0 or h < 1 or w < 1:
            raise ValueError(f"windows[{k}] = {(t, l, h, w)}: top and left must be >= 0, "
                             f"height and width >= 1")
    return rows  # type: ignore[return-value]


def check_inside(k: int, window: Window, height: int, width: int) -> None:
    """A ValueError naming ``windows[k]`` unless it fits its ``height x width`` image."""
    t, l, h, w = window
    if t + h > height or l + w > width:
        raise ValueError(f"windows[{k}] = {tuple(window)} does not fit image {k} "
                         f"({height}x{width})")


def decode_windows(data: Sequence[Tensor], windows: Sequence[Window], threads: int
                   ) -> List[Optional[Tensor]]:
    """Each JPEG's window as ``(C, h, w)`` uint8, or None for an image this path does not take
    (not a 1- or 3-channel JPEG, or a decode error: the caller's full decode handles, and
    names, it). A window that does not fit its image is a ValueError naming ``windows``."""
    nv = _nvimgcodec()
    streams, where = [], []
    for k, (b, win) in enumerate(zip(data, windows)):
        try:
            cs = nv.CodeStream(b.numpy())
            ok = cs.codec_name == "jpeg" and cs.num_channels in (1, 3)
            height, width = int(cs.height), int(cs.width)
        except Exception:  # an unreadable header: the full decode names the sample
            continue
        if ok:
            check_inside(k, win, height, width)
        # A window one pixel wide is decoded whole: on 4:2:0 files libjpeg-turbo's cropped
        # decode upsamples a 1-column output's chroma differently (up to 15 levels off at the
        # first or last column); from 2 columns on it equals the full decode, tested.
        if ok and win[3] > 1:
            t, l, h, w = win
            streams.append(cs.get_sub_code_stream(region=nv.Region(start=(t, l),
                                                                   end=(t + h, l + w))))
            where.append(k)
    out: List[Optional[Tensor]] = [None] * len(data)
    if not streams:
        return out
    threads = max(1, int(threads))
    decoder, params = _decoder(threads)
    try:
        # a thread's own decoder needs no lock; one per thread count is shared by the loaders
        # of this process
        with contextlib.nullcontext() if threads == 1 else _LOCK:
            images = decoder.decode(streams, params=params)
    except Exception:  # e.g. a corrupt bitstream: the full decode names the sample
        return out
    with warnings.catch_warnings():  # nvImageCodec's host buffer, read-only to numpy
        warnings.simplefilter("ignore")
        for k, img in zip(where, images):
            if img is not None:
                out[k] = torch.from_numpy(np.asarray(img.cpu()))
    return out
