"""The CPU chunk-size policy (one table of budgets in functional._utils) gives every kernel the
chunk sizes it had when each kernel kept its own budget: the expected values below are the old
per-site formulas, written out, not read from the code under test."""

import pytest
import torch

import batchaug.transforms as T
from batchaug.functional import _augment, _auto_augment, _color, _misc, _resize, _targets
from batchaug.functional import _utils, _warp
from batchaug.transforms import _color as T_color

MIB = 1024 * 1024
SHAPES = [(256, 3, 32, 32), (64, 3, 224, 224), (7, 1, 100, 60), (40, 3, 96, 128)]


def _old(n, budget, per_sample, per_thread):
    if per_thread:
        budget *= torch.get_num_threads()
    return max(1, min(n, budget // max(1, per_sample)))


def _record(monkeypatch, module):
    seen = []
    real = _utils.cpu_chunk_size

    def spy(x, bytes_per_sample, chunk_bytes, per_thread=False):
        k = real(x, bytes_per_sample, chunk_bytes, per_thread)
        seen.append(k)
        return k

    monkeypatch.setattr(module, "cpu_chunk_size", spy)
    return seen


def _u8(shape):
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, 256, shape, dtype=torch.uint8, generator=g)


@pytest.mark.parametrize("shape", SHAPES)
def test_kernel_chunk_sizes_are_the_old_ones(shape, monkeypatch):
    n, c, h, w = shape
    x = _u8(shape)
    xf = x.float()

    seen = _record(monkeypatch, _misc)
    for dtype, es in ((torch.float32, 4), (torch.float64, 8)):
        _misc.normalize(x, torch.tensor([0.5] * c), torch.tensor([0.2] * c), dtype)
        # with several torch threads each chunk runs on one of them (_normalize_threads): the
        # per-thread budget alone; with one, the same number either way
        assert seen.pop() == _old(n, 4 * MIB, es * c * h * w, False)

    seen = _record(monkeypatch, _augment)
    lam = torch.rand(n)
    for xx in (xf, xf.double()):
        _augment.blend_with_partner(xx, lam)
        assert seen.pop() == _old(n, 4 * MIB, 5 * h * w, False)
        _augment.mix_with_partner_(xx.clone(), lam, None)
        assert seen.pop() == _old(n, 4 * MIB, 5 * h * w + c * h * w * xx.element_size(), False)

    if c == 3:
        seen = _record(monkeypatch, _color)
        _color.adjust_sharpness(x, torch.rand(n) * 2)
        assert seen.pop() == _old(n, 8 * MIB, 16 * c * h * w, False)

        seen = _record(monkeypatch, T_color)
        T.ColorJitter(0.4, 0.4, 0.4, 0.1)(x)
        assert seen.pop() == _old(n, 4 * MIB, 4 * c * h * w, True)

    seen = _record(monkeypatch, _auto_augment)
    for xx in (x, xf):
        _auto_augment.apply_op(xx, "Brightness", torch.rand(n))
        assert seen.pop() == _old(n, 8 * MIB, c * h * w * xx.element_size(), True)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("out", [(224, 224), (32, 32), (17, 300)])
def test_warp_chunk_sizes_are_the_old_ones(shape, out):
    n, c, h, w = shape
    x = torch.empty(shape, dtype=torch.uint8)
    per_sample = 4 * ((c + 1) * h * w + (c + 3) * out[0] * out[1])
    assert _utils._chunk_size(x, out[0], out[1]) == _old(n, 24 * MIB, per_sample, False)
    # the warps, resizes and target masks size their chunks through that one function
    for module in (_warp, _resize, _targets):
        assert module._chunk_size is _utils._chunk_size


def test_budget_table():
    assert [_utils.l2_chunk_bytes(), _utils.mix_chunk_bytes(), _utils.color_chunk_bytes(),
            _utils.sharpness_chunk_bytes(), _utils.dispatch_chunk_bytes(),
            _utils.warp_chunk_bytes()] == [4 * MIB, 4 * MIB, 4 * MIB, 8 * MIB, 8 * MIB, 24 * MIB]
    # each budget is named in the policy table, so the table stays complete
    src = open(_utils.__file__).read()
    for name in ("l2_chunk_bytes", "mix_chunk_bytes", "color_chunk_bytes",
                 "sharpness_chunk_bytes", "dispatch_chunk_bytes", "warp_chunk_bytes"):
        assert f"# ``{name}``" in src
    # TorchScript compiles the kernels that call the budgets
    torch.jit.script(_misc.normalize_affine)
