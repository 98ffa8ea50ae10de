"""The JPEG codec of a ragged column: encode on write, decode (and window-decode) on load.

Encoding uses TorchCodec's ``JpegEncoder`` if installed, else ``torchvision.io.encode_jpeg`` (the
same libjpeg-turbo). ``decode_jpegs`` decodes with TorchCodec's ``decode_jpeg`` (libjpeg-turbo on
the CPU, split over threads by ``batchaug.functional._utils.image_threads``; nvJPEG for a CUDA
device, one batched call), else
``torchvision.io.decode_jpeg``, which decodes the same bytes to the same pixels on the CPU. A
source file's own JPEG bytes are kept instead of a second, lossy encode when they decode to
exactly the image (``jpeg_file_bytes``, ``original_if_exact``).
"""
from __future__ import annotations

import warnings
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from batchaug.functional._utils import for_each, image_threads
from batchaug.data.meta import CacheFormatError


def encode_jpeg(image: Tensor, quality: int) -> Tensor:
    """A ``(C, h, w)`` uint8 CPU image (C = 1 or 3) as a 1-D uint8 tensor of JPEG bytes
    (TorchCodec's encoder if installed, else torchvision's: the same libjpeg-turbo)."""
    if image.shape[0] not in (1, 3):
        raise ValueError(f"storage='jpeg' holds 1- or 3-channel images, got {image.shape[0]} "
                         f"channels; convert them (e.g. im.convert('RGB')) or use storage='raw'")
    JpegEncoder = _torchcodec("encoder")
    if JpegEncoder is not None:
        return JpegEncoder(image.contiguous()).to_tensor(quality=quality).clone()
    from torchvision.io import encode_jpeg as _encode

    with warnings.catch_warnings():  # torchvision 0.29 deprecates its codecs for TorchCodec
        warnings.simplefilter("ignore")
        return _encode(image.contiguous(), quality=quality)


_CODEC: Dict[str, Any] = {}


def _torchcodec(name: str) -> Any:
    """TorchCodec's ``"encoder"`` (``JpegEncoder``) or ``"decoder"`` (``decode_jpeg``); None
    where TorchCodec is missing or its native library does not load (a wheel built for another
    CUDA runtime or FFmpeg raises ``OSError`` or ``RuntimeError`` on import): torchvision's
    codec is used then, with one warning. Looked up once per process."""
    if name not in _CODEC:
        try:
            if name == "encoder":
                from torchcodec.encoders import JpegEncoder as found
            else:
                from torchcodec.decoders import decode_jpeg as found
        except ImportError:
            found = None
        except (OSError, RuntimeError) as exc:
            found = None
            if "failed" not in _CODEC:  # one warning for the encoder and decoder together
                warnings.warn(f"TorchCodec is installed but does not load ({exc}); encoding "
                              f"and decoding JPEG with torchvision's codec instead",
                              RuntimeWarning, stacklevel=3)
            _CODEC["failed"] = True
        _CODEC[name] = found
    return _CODEC[name]


def _decoder():
    """``decode(list of byte tensors, device) -> list of (C, h, w)``: TorchCodec if installed."""
    tc_decode = _torchcodec("decoder")
    if tc_decode is not None:
        # TorchCodec applies EXIF orientation and has no switch for it; the other decoders
        # (torchvision, nvImageCodec's window decode) and ImageFolder + PIL do not: it is given
        # the bytes with the orientation tag set to 1, so every decoder gives the same pixels.
        return lambda data, device: tc_decode([without_orientation(b) for b in data],
                                              mode="UNCHANGED", device=device)
    # torchvision's: the same libjpeg-turbo, the same pixels on the CPU
    from torchvision.io import ImageReadMode, decode_jpeg as tv_decode

    def decode(data, device):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = tv_decode(list(data), mode=ImageReadMode.UNCHANGED, device=device)
        return out if isinstance(out, list) else [out]

    return decode


_DECODE = None


def decode_jpegs(data: Sequence[Tensor], device: torch.device, threads: int = 1,
                 names: Optional[Sequence[int]] = None,
                 windows: Optional[Tensor] = None) -> List[Tensor]:
    """Decode 1-D uint8 CPU byte tensors to ``(C, h, w)`` uint8 images on ``device``.

    CPU: split into ``threads`` contiguous parts decoded in parallel (the decoder releases the
    GIL). CUDA: one batched call; should it fail (a hardware decoder's error), the batch is
    decoded on the CPU and copied over, with one warning. A corrupt or truncated bitstream is a
    ``ValueError`` naming its sample (``names[k]``, the cache index; else its position).

    ``windows``: an ``(N, 4)`` integer tensor of (top, left, height, width), one per image; each
    output is then only that window, equal to the full decode cropped to it. On the CPU with
    nvImageCodec installed (``pip install nvidia-nvimgcodec-cu13``) only the window is decoded
    (``batchaug.data.roi_decode``); elsewhere the image is decoded whole and cropped.

    Example:
        >>> data = [encode_jpeg(torch.zeros(3, 64, 80, dtype=torch.uint8), 90)]
        >>> window = torch.tensor([[8, 4, 32, 40]])  # top, left, height, width
        >>> decode_jpegs(data, torch.device("cpu"), windows=window)[0].shape
        torch.Size([3, 32, 40])
    """
    global _DECODE
    if _DECODE is None:
        _DECODE = _decoder()
    data = list(data)
    names = list(range(len(data))) if names is None else list(names)
    for k, b in enumerate(data):  # SOI at the start, EOI at the end: a truncation shows here
        n = b.numel()
        if n < 4 or int(b[0]) != 0xFF or int(b[1]) != 0xD8 or int(b[n - 2]) != 0xFF or \
                int(b[n - 1]) != 0xD9:
            raise corrupt_sample(names[k], "does not start and end like a JPEG bitstream")
    if windows is not None:
        return _decode_windows(data, device, threads, names, windows)
    if not data:
        return []
    if device.type == "cuda":
        try:
            return _DECODE(data, device)
        except RuntimeError as exc:
            warnings.warn(f"decoding JPEGs on {device} failed ({exc}); decoding this batch on "
                          f"the CPU instead", RuntimeWarning, stacklevel=2)
            return [x.to(device) for x in decode_jpegs(data, torch.device("cpu"), threads,
                                                       names)]
    threads = max(1, min(int(threads), len(data)))
    if threads == 1:
        return _decode_cpu(data, names)
    out: List[Tensor] = [None] * len(data)  # type: ignore[list-item]

    def part(a: int) -> None:
        out[a::threads] = _decode_cpu(data[a::threads], names[a::threads])

    with image_threads(threads):  # this thread and the kept pool, one part each
        for_each(part, threads)
    return out


def _decode_windows(data: List[Tensor], device: torch.device, threads: int,
                    names: List[int], windows: Tensor) -> List[Tensor]:
    """``decode_jpegs`` with ``windows``: ROI decode where it can, else full decode + crop."""
    from batchaug.data import roi_decode

    rows = roi_decode.check_windows(windows, len(data))
    out: List[Optional[Tensor]] = [None] * len(data)
    if device.type == "cpu" and roi_decode.available():
        out = roi_decode.decode_windows(data, rows, threads)
    rest = [k for k, x in enumerate(out) if x is None]
    if rest:
        full = decode_jpegs([data[k] for k in rest], device, threads, [names[k] for k in rest])
        for k, image in zip(rest, full):
            roi_decode.check_inside(k, rows[k], int(image.shape[1]), int(image.shape[2]))
            t, l, h, w = rows[k]
            out[k] = image[:, t:t + h, l:l + w]
    return out  # type: ignore[return-value]


def _decode_cpu(data: List[Tensor], names: List[int]) -> List[Tensor]:
    try:
        return _DECODE(data, torch.device("cpu"))
    except RuntimeError:
        for b, name in zip(data, names):  # find the one that failed, name it
            try:
                _DECODE([b], torch.device("cpu"))
            except RuntimeError as exc:
                raise corrupt_sample(name, f"cannot be decoded ({exc})") from None
        raise


def corrupt_sample(index: int, problem: str) -> CacheFormatError:
    """The error for sample ``index``'s stored JPEG bytes: ``problem``, then how to recover."""
    return CacheFormatError(f"sample {index}", f"its JPEG bytes {problem}: the cache is "
                                               f"corrupted (DeviceCache.load(path, verify=True) "
                                               f"checks every file's SHA-256); rebuild it")


def jpeg_file_bytes(data: bytes) -> Optional[Tensor]:
    """A file's bytes as a 1-D uint8 tensor if they are a JPEG bitstream (SOI first), cut after
    its end marker (some writers append padding, a thumbnail or a motion-photo video after
    it), else None (also where the marker segments do not parse)."""
    if len(data) < 4 or data[:2] != b"\xff\xd8":
        return None
    end = _jpeg_end(data)
    if end is None:
        return None
    return torch.frombuffer(bytearray(data[:end]), dtype=torch.uint8)


def _jpeg_end(data: bytes) -> Optional[int]:
    """The offset just past the EOI marker that ends the JPEG stream starting at 0: found by
    walking the marker segments (whose payloads, e.g. a comment or EXIF thumbnail, may hold
    ``FF D9`` themselves) and the entropy-coded data after each SOS (where ``FF`` is followed
    by ``00`` stuffing or a restart marker). None if the stream ends first."""
    n, i = len(data), 2
    while True:
        if i + 1 >= n or data[i] != 0xFF:
            return None
        while i + 1 < n and data[i + 1] == 0xFF:  # fill bytes before a marker
            i += 1
        if i + 1 >= n:
            return None
        marker = data[i + 1]
        if marker == 0xD9:
            return i + 2
        if 0xD0 <= marker <= 0xD7 or marker == 0x01:  # standalone markers: no length
            i += 2
            continue
        if i + 3 >= n:
            return None
        i += 2 + ((data[i + 2] << 8) | data[i + 3])
        if marker != 0xDA:
            continue
        while True:  # entropy-coded data after SOS, up to the next real marker
            j = data.find(b"\xff", i)
            if j < 0 or j + 1 >= n:
                return None
            nxt = data[j + 1]
            if nxt == 0x00 or 0xD0 <= nxt <= 0xD7:
                i = j + 2
            elif nxt == 0xFF:
                i = j + 1
            else:
                i = j
                break


def _orientation_at(b: Tensor) -> Optional[Tuple[int, bool]]:
    """(offset, little-endian) of the EXIF orientation value in JPEG bytes ``b`` where the tag
    is present and not 1 (the identity), else None. Reads the APPn segments before the frame
    header only (EXIF is APP1, before the first other marker), a few dozen byte reads."""
    d = memoryview(b.numpy())  # ints on indexing, no copy
    n, i = len(d), 2
    while i + 4 <= n and d[i] == 0xFF and 0xE0 <= d[i + 1] <= 0xEF:
        length = (d[i + 2] << 8) | d[i + 3]
        start, end = i + 4, min(n, i + 2 + length)
        if d[i + 1] == 0xE1 and end - start >= 14 and bytes(d[start:start + 6]) == b"Exif\0\0":
            found = _tiff_orientation(d, start + 6, end)
            if found is not None:
                return found
        i += 2 + length
    return None


def _tiff_orientation(d: Any, t0: int, end: int) -> Optional[Tuple[int, bool]]:
    order = bytes(d[t0:t0 + 2])
    if order not in (b"II", b"MM"):
        return None
    little = order == b"II"

    def num(at: int, size: int) -> int:
        return int.from_bytes(bytes(d[at:at + size]), "little" if little else "big")

    ifd = t0 + num(t0 + 4, 4)
    if ifd + 2 > end:
        return None
    for k in range(num(ifd, 2)):
        entry = ifd + 2 + 12 * k
        if entry + 12 > end:
            return None
        if num(entry, 2) == 0x0112 and num(entry + 2, 2) == 3:  # Orientation, SHORT
            value = num(entry + 8, 2)
            return (entry + 8, little) if value != 1 else None
    return None


def without_orientation(b: Tensor) -> Tensor:
    """JPEG bytes ``b`` with an EXIF orientation other than 1 set to 1 (a copy), else ``b``
    itself: what a decoder that applies the tag then gives is the stored pixels, unrotated."""
    found = _orientation_at(b)
    if found is None:
        return b
    at, little = found
    out = b.clone()
    out[at:at + 2] = torch.tensor([1, 0] if little else [0, 1], dtype=torch.uint8)
    return out


def original_if_exact(original: Optional[Tensor], image: Tensor) -> Optional[Tensor]:
    """``original`` (JPEG bytes) if this library's decoder turns them into exactly ``image``
    (``(C, h, w)`` uint8), else None: the pre-transform changed pixels, or the file is a kind
    the pipeline converts (grayscale or CMYK read as RGB, ...). The check is a decode, so what
    the loader later decodes is what the pipeline gave, bit for bit."""
    if original is None or image.dtype != torch.uint8 or image.dim() != 3:
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            decoded = decode_jpegs([original], torch.device("cpu"))[0]
    except (ValueError, RuntimeError):
        return None
    if decoded.shape != image.shape or not torch.equal(decoded, image.cpu()):
        return None
    return original
