"""Padding a ragged batch on the device: ``pad_rows`` (one gather of row windows out of the packed
bytes) gives every image's pixels as the per-image copies do, and issues the same few ops
whatever the batch size (``pad_images`` on CUDA used one copy per image: ~B launches per batch
from the reader thread)."""
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from batchaug.data.ragged import RaggedImages, pad_images, pad_rows, raw_parts
from tests.contract.fake_cuda import CudaOnlyFake


def _images(n, c, seed, hwc=False):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        h, w = (int(v) for v in torch.randint(1, 70, (2,), generator=g))
        x = torch.randint(0, 256, (h, w, c) if hwc else (c, h, w), dtype=torch.uint8,
                          generator=g)
        out.append(x.permute(2, 0, 1) if hwc else x)  # HWC memory, CHW view: as nvJPEG's
    return out


def _check_images(batch, images):
    assert batch.shape[:2] == (len(images), images[0].shape[0])
    for i, p in enumerate(images):
        _, h, w = p.shape
        assert torch.equal(batch[i, :, :h, :w], p), i


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("c", [1, 3])
def test_pad_rows_gives_each_image_as_the_per_image_copies(seed, c):
    images = _images(9, c, seed)
    column = RaggedImages.from_list(images)
    rows, sizes = column.index, column.index[:, 2:4].contiguous()
    spare = torch.cat([column.data, torch.zeros(int(sizes[:, 1].max()), dtype=torch.uint8)])
    got = pad_rows(spare, rows[:, 0], sizes, c, False)
    ref = pad_images(raw_parts(column.data, rows, c), sizes, c)  # the CPU path: one copy each
    assert got.shape == ref.shape and got.is_contiguous()
    _check_images(got, images)
    buffer = torch.empty(got.numel() + 7, dtype=torch.uint8)  # a reused, larger buffer
    out = pad_rows(spare, rows[:, 0], sizes, c, False, buffer)
    assert out.data_ptr() == buffer.data_ptr()
    _check_images(out, images)


@pytest.mark.parametrize("seed", range(3))
def test_pad_rows_of_hwc_images_keeps_them_channels_last(seed):
    images = _images(7, 3, seed, hwc=True)
    flat = [p.permute(1, 2, 0).reshape(-1) for p in images]
    sizes = torch.tensor([p.shape[1:] for p in images])
    offsets = torch.tensor([0] + [f.numel() for f in flat[:-1]]).cumsum(0)
    packed = torch.cat(flat + [torch.zeros(int(sizes[:, 1].max()) * 3, dtype=torch.uint8)])
    got = pad_rows(packed, offsets, sizes, 3, True)
    assert got.is_contiguous(memory_format=torch.channels_last)
    _check_images(got, images)


def test_pad_rows_refuses_packed_bytes_without_a_row_to_spare():
    images = [torch.zeros(3, 5, 9, dtype=torch.uint8), torch.ones(3, 4, 6, dtype=torch.uint8)]
    column = RaggedImages.from_list(images)  # the last image narrower than the batch
    sizes = column.index[:, 2:4].contiguous()
    with pytest.raises(ValueError, match="packed must hold a whole row"):
        pad_rows(column.data, column.index[:, 0], sizes, 3, False)


def _launches(func) -> bool:
    """An op that runs a kernel or a copy (a view, or asking a tensor's device, does not)."""
    returns = func._schema.returns
    view = bool(returns) and all(r.alias_info is not None and not r.alias_info.is_write
                                 for r in returns)
    return not view and func.namespace != "prim"


class _CudaOps(TorchDispatchMode):
    """Counts the ops that touch a CUDA tensor and launch work there (a kernel, a copy)."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        flat = tree_flatten((args, kwargs, out))[0]
        if _launches(func) and any(isinstance(t, torch.Tensor) and t.device.type == "cuda"
                                   for t in flat):
            self.ops.append(str(func))
        return out


@pytest.mark.parametrize("hwc", [False, True])
def test_the_device_pad_issues_a_few_ops_whatever_the_batch_size(monkeypatch, hwc):
    # fake CUDA: no pinned memory without a driver (the row starts' copy is checked for being
    # pinned and non-blocking by tests/data/test_loader_fake_cuda.py)
    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda t: t.clone())
    counts = {}
    for n in (4, 64):
        images = _images(n, 3, 1, hwc)
        sizes = torch.tensor([p.shape[1:] for p in images])
        with CudaOnlyFake():
            parts = [p.to("cuda") if not hwc else
                     p.permute(1, 2, 0).to("cuda").permute(2, 0, 1) for p in images]
            with _CudaOps() as rec:
                out = pad_images(parts, sizes, 3)
        assert out.device.type == "cuda" and tuple(out.shape[:2]) == (n, 3)
        counts[n] = rec.ops
    assert len(counts[4]) == len(counts[64]) <= 6, counts
    assert "aten.index_select.default" in counts[64] or \
        "aten.index_select.out" in counts[64], counts[64]
