"""batchaug._random: distributions, shapes, dtypes and devices of every draw, scripted too."""
from __future__ import annotations

import math

import torch

from batchaug import _random as R

N = 20000


def _x(n: int = N) -> torch.Tensor:
    return torch.zeros(n, 1, 1, 1)


def _within(count: float, n: int, p: float) -> bool:
    return abs(count - n * p) <= 5 * math.sqrt(n * p * (1 - p)) + 1


def test_uniform_and_degenerate_range():
    torch.manual_seed(0)
    u = R.uniform(_x(), 0.5, 1.5)
    assert u.shape == (N,) and u.dtype == torch.float32
    assert u.min() >= 0.5 and u.max() < 1.5 and abs(u.mean().item() - 1.0) < 0.01
    assert torch.equal(R.uniform(_x(5), 1.5, 1.5), torch.full((5,), 1.5))
    assert R.uniform(_x(5), 0, 1, 3).shape == (5, 3)


def test_integers_and_per_sample_bounds():
    torch.manual_seed(0)
    k = R.integers(_x(), 2, 7)
    assert k.dtype == torch.int64 and k.min() == 2 and k.max() == 6
    high = torch.tensor([1, 2, 5, 1000] * 500)
    v = R.integers_below(high)
    assert (v >= 0).all() and (v < high).all()
    assert (v[high == 1] == 0).all() and set(v[high == 2].tolist()) == {0, 1}


def test_bernoulli_beta_permutations_categorical():
    torch.manual_seed(0)
    assert _within(R.bernoulli(_x(), 0.3).sum().item(), N, 0.3)
    b = R.beta(_x(), 2.0, 5.0)
    assert (b >= 0).all() and (b <= 1).all() and abs(b.mean().item() - 2 / 7) < 0.01
    tiny = R.beta(_x(100), 1e-30, 1e-30)
    assert torch.isfinite(tiny).all()
    perms = R.permutations(_x(1000), 4)
    assert torch.equal(perms.sort(1).values, torch.arange(4).expand(1000, 4))
    c = R.categorical(_x(), torch.tensor([0.5, 0.0, 0.25, 0.25], dtype=torch.float64))
    counts = torch.bincount(c, minlength=4).tolist()
    assert counts[1] == 0
    assert all(_within(counts[k], N, p) for k, p in ((0, 0.5), (2, 0.25), (3, 0.25)))


class _Scripted(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([R.uniform(x, 0.0, 2.0), R.integers(x, 0, 9).float(),
                          R.bernoulli(x, 0.5).float(), R.permutations(x, 3).float().flatten(),
                          R.categorical(x, torch.tensor([0.2, 0.8], dtype=torch.float64)).float(),
                          R.integers_below(torch.full([x.shape[0]], 5)).float(),
                          R.noise_like(x).flatten(), R.beta(x, 0.5, 0.5)])


def test_every_draw_scripts_and_matches_eager():
    m = _Scripted()
    s = torch.jit.script(m)
    x = _x(9)
    torch.manual_seed(5)
    a = m(x)
    torch.manual_seed(5)
    assert torch.equal(s(x), a)
