"""The batched ragged kernels (functional._sized) on large batches and under reduced matmul
precision: bounded temporaries, no weights materialised over the channels, full float32."""
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from batchaug.functional import _sized as R


class _Sizes(TorchDispatchMode):
    """Records the shape and byte size of every tensor an op returns."""

    def __init__(self):
        super().__init__()
        self.out = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        res = func(*args, **(kwargs or {}))
        for t in tree_flatten(res)[0]:
            if isinstance(t, torch.Tensor):
                self.out.append((str(func), tuple(t.shape), t.numel() * t.element_size()))
        return res


def _batch(n=6, c=3, h=37, w=41, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (n, c, h, w), dtype=torch.uint8, generator=g)
    hs = torch.randint(8, h + 1, (n,), generator=g)
    ws = torch.randint(8, w + 1, (n,), generator=g)
    return x, torch.stack((hs, ws), 1)


def _tf32(t):
    """``t`` (float32) rounded to TF32's 10 mantissa bits, as a TF32 matmul reads it."""
    bits = t.contiguous().view(torch.int32)
    return ((bits + 0x1000) & ~0x1FFF).view(torch.float32)


def _reduced_precision_matmuls(monkeypatch):
    """CPU bmm/matmul that, like cuBLAS under ``set_float32_matmul_precision("high")``, read
    float32 operands in TF32 unless the backend's precision is "ieee" for the call."""
    bmm, matmul = torch.bmm, torch.matmul

    def lossy(fn):
        def run(a, b, *args, **kwargs):
            if a.dtype == torch.float32 and torch.backends.mkldnn.matmul.fp32_precision != "ieee":
                a, b = _tf32(a), _tf32(b)
            return fn(a, b, *args, **kwargs)
        return run

    monkeypatch.setattr(torch, "bmm", lossy(bmm))
    monkeypatch.setattr(torch, "matmul", lossy(matmul))
    monkeypatch.setattr(torch.Tensor, "__matmul__", lambda a, b: torch.matmul(a, b))


def _window_args(x, sizes, seed=1):
    g = torch.Generator().manual_seed(seed)
    resized = R.resized_sizes(sizes, 29, None)
    top = torch.randint(-3, 6, (x.shape[0],), generator=g)
    left = torch.randint(-3, 6, (x.shape[0],), generator=g)
    return resized, top, left


@pytest.mark.parametrize("interpolation,antialias", [("bilinear", True), ("bicubic", False),
                                                     ("bilinear", False)])
def test_resize_window_is_full_float32_under_tf32(monkeypatch, interpolation, antialias):
    x, sizes = _batch(n=4, h=64, w=72)
    resized, top, left = _window_args(x, sizes)
    args = (x, sizes, resized, top, left, 27, 25, interpolation, antialias, [0.0])
    want = R.resize_window(*args)
    _reduced_precision_matmuls(monkeypatch)
    saved = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    try:
        got = R.resize_window(*args)
    finally:
        torch.set_float32_matmul_precision(saved)
    assert torch.equal(got, want)


def test_resize_window_does_not_materialise_the_weights_over_the_channels():
    n, c, oh, ow = 3, 5, 9, 11
    x, sizes = _batch(n=n, c=c, h=40, w=44)
    resized, top, left = _window_args(x, sizes)
    with _Sizes() as rec:
        R.resize_window(x, sizes, resized, top, left, oh, ow, "bilinear", True, [0.0] * c)
    # (B, C, oh, H) or (B * C, oh, H): the row weights copied once per channel
    broadcast = [(f, s) for f, s, _ in rec.out if len(s) >= 3 and s[-2:] == (oh, 40)
                 and s[:-2] in ((n, c), (n * c,))]
    assert not broadcast, broadcast


@pytest.mark.parametrize("kernel", ["warp", "resize_window"])
def test_ragged_kernels_bound_their_temporaries_and_keep_their_results(monkeypatch, kernel):
    x, sizes = _batch(n=8, c=3, h=48, w=52, seed=3)
    if kernel == "warp":
        angle = torch.linspace(-30, 30, 8)
        m = R.centered_to_edge(R.rotation_matrix(angle, 48, 52), sizes)

        def run():
            return R.warp(x, sizes, m, "bilinear", [10.0, 20.0, 30.0])
    else:
        resized, top, left = _window_args(x, sizes)

        def run():
            return R.resize_window(x, sizes, resized, top, left, 30, 28, "bilinear", True,
                                   [0.0])
    whole = run()
    with _Sizes() as rec:
        run()
    biggest = max(b for _, _, b in rec.out)
    budget = biggest // 3  # about two samples' temporaries
    monkeypatch.setattr(R, "CHUNK_BYTES", budget)
    with _Sizes() as rec:
        chunked = run()
    assert torch.equal(chunked, whole)
    over = [(f, s, b) for f, s, b in rec.out if b > budget and s != tuple(whole.shape)]
    assert not over, over


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_resize_window_on_cuda_is_full_float32_under_tf32():
    x, sizes = _batch(n=4, h=200, w=240)
    args = [t.cuda() for t in (x, sizes, *_window_args(x, sizes))]
    rest = (120, 110, "bilinear", True, [0.0])
    saved = torch.get_float32_matmul_precision()
    want = R.resize_window(*args, *rest)
    torch.set_float32_matmul_precision("high")
    try:
        got = R.resize_window(*args, *rest)
    finally:
        torch.set_float32_matmul_precision(saved)
    assert torch.equal(got, want)
