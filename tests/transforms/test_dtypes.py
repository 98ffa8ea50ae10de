"""Output dtypes (issue 7 items 7 and 12): ToDtype to half types is the same scripted and eager
(and equals torchvision); Normalize follows a model's .to(dtype) with exact statistics."""
import pytest
import torch
import torchvision.transforms.v2.functional as TF
from torch import nn
from torch.export import Dim, export

import batchaug as B

MEAN, STD = [0.4914, 0.4822, 0.4465], [0.2470, 0.2435, 0.2616]
ALL_U8 = torch.arange(256, dtype=torch.uint8).view(1, 1, 16, 16)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64])
def test_to_dtype_scale_all_uint8_values(dtype):
    eager = B.ToDtype(dtype, scale=True)
    scripted = torch.jit.script(eager)
    y = eager(ALL_U8)
    assert torch.equal(scripted(ALL_U8), y)  # bit for bit (was 126/256 off for bfloat16)
    assert torch.equal(y, TF.to_dtype(ALL_U8, dtype, scale=True))
    if dtype in (torch.float16, torch.bfloat16):  # correctly rounded v / 255
        assert torch.equal(y, (ALL_U8.double() / 255).to(dtype))
    back = B.ToDtype(torch.uint8, scale=True)
    assert torch.equal(back(y), ALL_U8) and torch.equal(torch.jit.script(back)(y), ALL_U8)


def _bf16_model():
    conv = nn.Conv2d(3, 8, 3)
    aug = B.Augment(B.RandomHorizontalFlip(), B.Normalize(MEAN, STD))
    return B.AugmentedModel(aug, conv).to(torch.bfloat16)


def test_bf16_model_takes_uint8_and_normalizes_in_float32():
    torch.manual_seed(0)
    m = _bf16_model().eval()
    norm = m.augment[1]
    assert norm.mean.dtype == torch.float64 and norm.mean.tolist() == MEAN  # exact, not bf16
    assert norm.std.tolist() == STD
    x = torch.randint(0, 256, (4, 3, 16, 16), dtype=torch.uint8)
    ref = B.functional.normalize(x, torch.tensor(MEAN), torch.tensor(STD)).to(torch.bfloat16)
    assert torch.equal(m.augment(x), ref)  # float32 arithmetic, rounded once
    y = m(x)
    assert y.dtype == torch.bfloat16 and torch.equal(y, m.model(ref))
    assert torch.equal(torch.jit.script(m)(x), y)
    ep = export(m, (x,), dynamic_shapes=({0: Dim("batch")},))
    for n in (1, 7):
        xn = torch.randint(0, 256, (n, 3, 16, 16), dtype=torch.uint8)
        assert torch.equal(ep.module()(xn), m(xn))
    m.train()(x)  # train mode too


def test_normalize_dtype_rules():
    x = torch.randint(0, 256, (2, 3, 4, 4), dtype=torch.uint8)
    n = B.Normalize(MEAN, STD)
    assert n(x).dtype == torch.float32 and "dtype=None" in repr(n)
    assert n.half()(x).dtype == torch.float16
    assert n.double()(x).dtype == torch.float64
    assert n.float()(x).dtype == torch.float32
    fixed = B.Normalize(MEAN, STD, dtype=torch.float16).to(torch.bfloat16)
    assert fixed(x).dtype == torch.float16  # an explicit dtype is kept
    # float64 output is computed in float64 from the exact statistics
    ref = (x.double() / 255 - torch.tensor(MEAN, dtype=torch.float64).view(1, 3, 1, 1)) \
        / torch.tensor(STD, dtype=torch.float64).view(1, 3, 1, 1)
    torch.testing.assert_close(B.Normalize(MEAN, STD, dtype=torch.float64)(x), ref,
                               rtol=1e-12, atol=1e-12)


def test_normalize_cast_to_a_narrower_dtype_that_would_overflow_is_refused():
    norm = B.Normalize([0.5], [1e-5])  # fine in float32: (0.5 + 1) / 1e-5 = 1.5e5
    assert torch.isfinite(norm(torch.full((1, 1, 2, 2), 255, dtype=torch.uint8))).all()
    with pytest.raises(ValueError, match="overflows torch.float16"):
        norm.half()
    # an explicit dtype is not changed by .to(), so nothing to check there
    fixed = B.Normalize([0.5], [1e-5], dtype=torch.float32).half()
    assert fixed(torch.zeros(1, 1, 2, 2, dtype=torch.uint8)).dtype == torch.float32
