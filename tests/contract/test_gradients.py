"""Gradients through the CPU fast paths (issue 7 items 1 and 2): the bit-blend flips and the
flat zero-padding crop must give the same output and gradient as the plain path. The generic
gradient checks for every transform live in the contract (tests/contract/)."""
import pytest
import torch

import batchaug as B
from batchaug import functional as F


@pytest.mark.parametrize("shape", [(2, 3, 32, 32), (3, 3, 5, 7), (2, 1, 4, 2)])
@pytest.mark.parametrize("cl", [False, True], ids=["contiguous", "channels_last"])
@pytest.mark.parametrize("vertical", [False, True], ids=["hflip", "vflip"])
def test_flip_gradient(shape, cl, vertical, device):
    """On CUDA this covers select_samples' word-view branch (it used to detach the output)."""
    flip = B.RandomVerticalFlip if vertical else B.RandomHorizontalFlip
    dim = -2 if vertical else -1
    x = torch.rand(*shape, device=device)
    if cl:
        x = x.contiguous(memory_format=torch.channels_last)
    x.requires_grad_(True)
    w = torch.rand(shape, device=device)
    (flip(p=0.0)(x) * w).sum().backward()  # the repro: identity, gradient w
    assert torch.equal(x.grad, w)
    x.grad = None
    (flip(p=1.0)(x) * w).sum().backward()
    assert torch.equal(x.grad, w.flip(dim))
    x.grad = None
    mask = torch.tensor([True, False, True][: shape[0]], device=device)
    y = F.vflip_where(x, mask) if vertical else F.hflip_where(x, mask)
    assert torch.equal(y.detach(), F.vflip_where(x.detach(), mask) if vertical
                       else F.hflip_where(x.detach(), mask))  # fast path (no grad) == plain
    y.mul(w).sum().backward()
    ref = torch.where(mask.view(-1, 1, 1, 1), w.flip(dim), w)
    assert torch.equal(x.grad, ref)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_random_crop_keeps_requires_grad(dtype, device):
    """The issue's repro: RandomCrop(32, padding=4) on a contiguous CPU float batch."""
    x = torch.rand(4, 3, 32, 32, dtype=dtype, device=device, requires_grad=True)
    top = torch.tensor([0, 4, 8, 3], device=device)
    left = torch.tensor([8, 0, 4, 5], device=device)
    y = F.pad_crop(x, top, left, 32, 32, [4, 4, 4, 4])
    assert y.requires_grad
    with torch.no_grad():
        fast = F.pad_crop(x, top, left, 32, 32, [4, 4, 4, 4])  # flat fast path
    assert not fast.requires_grad and torch.equal(y.detach(), fast)
    w = torch.rand_like(y)
    (g,) = torch.autograd.grad((y * w).sum(), x)
    ref = torch.zeros(4, 3, 40, 40, dtype=dtype, device=device)
    for i in range(4):
        ref[i, :, top[i]:top[i] + 32, left[i]:left[i] + 32] = w[i]
    assert torch.equal(g, ref[:, :, 4:36, 4:36])
    torch.manual_seed(0)
    assert B.RandomCrop(32, padding=4)(x).requires_grad
