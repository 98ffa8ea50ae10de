"""The ~64 MiB chunked read, write and convert loops of the data path, run with a chunk of a few
rows so a small cache crosses many chunk boundaries (issue 12 item 10): the result must equal
the one-chunk result and an independent reference, and the loops must really have chunked."""
import pytest
import torch

from batchaug import DeviceCache
from batchaug.data import format as fmt
from batchaug.data import storage

N, C, H, W = 11, 3, 5, 4  # 11 rows: chunks of 2 leave a short last one


def _images():
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, 256, (N, C, H, W), generator=g, dtype=torch.uint8)


def _counting(monkeypatch, module, name):
    calls = []
    real = getattr(module, name)

    def wrapper(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, wrapper)
    return calls


def _round_trip(tmp_path, dtype, channels_last, tag):
    cache = DeviceCache.from_tensors(_images(), torch.arange(N) % 3, device="cpu", dtype=dtype,
                                     channels_last=channels_last)
    cache.save(tmp_path / tag)
    return cache.images, DeviceCache.load(tmp_path / tag, device="cpu").images


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("channels_last", [False, True])
def test_small_chunks_equal_one_chunk(tmp_path, monkeypatch, dtype, channels_last):
    one_conv, one_loaded = _round_trip(tmp_path, dtype, channels_last, "one")
    row = C * H * W
    # Two rows per chunk: the convert loop sizes chunks in float32 rows, the file loops in
    # stored rows.
    monkeypatch.setattr(storage, "_CHUNK_BYTES", 2 * row * 4)
    monkeypatch.setattr(fmt, "_CHUNK_BYTES", 2 * row * dtype.itemsize)
    converts = _counting(monkeypatch, storage, "convert_images")
    writes = _counting(monkeypatch, fmt, "raw_rows")
    reads = _counting(monkeypatch, fmt, "_readinto")
    conv, loaded = _round_trip(tmp_path, dtype, channels_last, "small")
    if dtype != torch.uint8:
        assert len(converts) == 6  # ceil(11 / 2): the conversion really ran in chunks
    assert len(writes) == 6 and len(reads) >= 6
    for a, b in ((conv, one_conv), (loaded, one_loaded), (loaded, conv)):
        assert a.dtype == b.dtype and torch.equal(a, b)
    assert loaded.is_contiguous(memory_format=torch.channels_last) == channels_last
    # An independent reference for the values: v / 255 correctly rounded to the dtype.
    ref = (_images().double() / 255).to(dtype) if dtype.is_floating_point else _images()
    assert torch.equal(loaded, ref)
