"""Keyed randomness (issue 11): batchaug._random's counter-based draws, Augment(x, keys) and
DeviceLoader(return_keys=True).

A sample's augmentation must be a pure function of (seed, epoch, sample index): the same
whatever the batch size, its position, the world size, the placement, a resume, TorchScript,
compile or export. The integer hash must be exact (checked against a pure-Python lowbias32),
and the draws must look uniform and independent (KS and correlation bounds over 10^5 keys).
The per-transform checks (every registered Case) are ``check_keyed`` and the keyed export in
tests/contract/.
"""
from __future__ import annotations

import math
import os
import random
import tempfile
import warnings
from pathlib import Path

import pytest
import torch
import torch.utils._python_dispatch

import batchaug
from batchaug import Augment, AugmentedModel, DeviceCache, DeviceLoader, _random as R
from batchaug import recipes
from batchaug.transforms import (ColorJitter, RandomApply, RandomChoice, RandomCrop,
                                 RandomHorizontalFlip, RandomInvert, RandomOrder,
                                 RandomRotation)

M32 = 0xFFFFFFFF
N = 100_000


# ------------------------------------------------------------------ pure-Python reference

def _ref_hash32(a: int) -> int:
    """lowbias32 (Wellons' hash-prospector) on Python's unbounded ints."""
    a ^= a >> 16
    a = (a * 0x7FEB352D) & M32
    a ^= a >> 15
    a = (a * 0x846CA68B) & M32
    return a ^ (a >> 16)


def _ref_draw_const(draw: int, salt: int) -> int:
    return _ref_hash32((((draw & M32) * 0x9E3779B9) & M32) ^ salt)


def _ref_site(key: int, draw: int) -> int:
    m = (_ref_draw_const(draw, 0x2545F491) & 0x7FFFFFFF) | 1
    return (((key >> 32) * m) ^ key ^ _ref_draw_const(draw, 1)) & M32


def _ref_word(key: int, draw: int, j=None) -> int:
    s = _ref_hash32(_ref_site(key, draw))
    if j is None:
        return s
    return _ref_hash32(s ^ j)


def _ref_substream(key: int, i: int) -> int:
    f = (_ref_hash32((key & M32) ^ _ref_draw_const(i, 0x3C6EF372)) & 0x7FFFFFFF) << 32
    return key ^ f ^ _ref_draw_const(i, 0x5851F42D)


def _ref_sample_key(seed: int, epoch: int, index: int) -> int:
    top = _ref_hash32(_ref_hash32((seed & M32) ^ 0x1B873593) ^ (epoch & M32))
    if seed >> 32 or epoch >> 32:  # the high halves: two more rounds
        top = _ref_hash32(_ref_hash32(top ^ _ref_hash32((seed >> 32) ^ 0x68E31DA4))
                          ^ (epoch >> 32))
    return ((top & 0x7FFFFFFF) << 32) | index


def test_hash32_is_lowbias32_exactly():
    rng = random.Random(0)
    vals = [0, 1, 2**16 - 1, 2**16, 2**31 - 1, 2**31, 2**32 - 2, 2**32 - 1]
    vals += [rng.getrandbits(32) for _ in range(20_000)]
    got = R._hash32(torch.tensor(vals, dtype=torch.int64)).tolist()
    assert got == [_ref_hash32(v) for v in vals]
    assert [R._hash32_int(v) for v in vals[:500]] == [_ref_hash32(v) for v in vals[:500]]
    # the limb multiply equals the true product mod 2**32 for the largest factors
    a = torch.tensor(vals, dtype=torch.int64)
    for c in (0x7FEB352D, 0x846CA68B, 0x9E3779B9, M32):
        assert R._mul32(a, c).tolist() == [(v * c) & M32 for v in vals]


def test_words_substreams_and_sample_keys_match_the_reference_up_to_int64_max():
    rng = random.Random(1)
    keys = [0, 1, 2**31 - 1, 2**32 - 1, 2**32, 2**62, 2**63 - 2, 2**63 - 1]
    keys += [rng.getrandbits(63) for _ in range(300)]
    k = torch.tensor(keys, dtype=torch.int64)
    for draw in (0, 1, 7, 0x5BD1E995):
        assert R._words(k, draw, None).tolist() == [_ref_word(v, draw) for v in keys]
    w = R._words(k, 3, 5)
    assert w.tolist() == [[_ref_word(v, 3, j) for j in range(5)] for v in keys]
    assert (w >= 0).all() and (w <= M32).all()
    for i in (0, 1, 12):
        sub = R.substream(k, i)
        assert sub.tolist() == [_ref_substream(v, i) for v in keys]
        assert (sub >= 0).all()  # children's keys stay in [0, 2**63)
    # integers: the multiply-shift of a word, exactly; floats: the top bits of the words
    x = torch.zeros(len(keys), 1)
    assert R.integers(x, -5, 1000, keys=k, draw=6).tolist() == \
        [((_ref_word(v, 6) * 1005) >> 32) - 5 for v in keys]
    big = R.integers(x, 0, 2**31, 3, keys=k, draw=6)
    assert big.tolist() == [[(_ref_word(v, 6, j) * 2**31) >> 32 for j in range(3)] for v in keys]
    assert torch.equal(R.keyed_rand(k, 2), (R._words(k, 2, None) >> 8).double().float() / 2**24)
    idx = torch.tensor([0, 1, 5, 2**31 - 1])
    for seed, epoch in ((0, 0), (7, 3), (2**63 - 1, 2**63 - 1)):
        assert R.sample_keys(seed, epoch, idx).tolist() == \
            [_ref_sample_key(seed, epoch, i) for i in idx.tolist()]
    with pytest.raises(ValueError, match=r"seed and epoch must be in \[0, 2\*\*63\)"):
        R.sample_keys(-1, 0, idx)


def test_sample_keys_checks_its_index_and_hashes_the_whole_seed():
    i = torch.tensor([0, 5, 2**31 - 1])
    # seeds and epochs no longer fold their high half onto the low one
    for (s1, e1), (s2, e2) in [((2**32, 0), (1, 0)), ((0, 2**32), (0, 1)),
                               ((2**32 + 7, 3), (7, 3)), ((2**40, 2**33), (2**8, 2))]:
        assert not torch.equal(R.sample_keys(s1, e1, i), R.sample_keys(s2, e2, i)), (s1, e1)
    tops = {int(R.sample_keys((h << 32) | 5, 9, i)[0]) >> 32 for h in range(200)}
    assert len(tops) == 200  # the high half of the seed reaches the key
    # below 2**32 the keys are 0.1's: seed ^ (seed >> 32) was the seed itself there
    for seed, epoch in ((0, 0), (3, 7), (2**32 - 1, 2**32 - 1)):
        old = _ref_hash32(_ref_hash32(seed ^ 0x1B873593) ^ epoch) & 0x7FFFFFFF
        assert R.sample_keys(seed, epoch, i).tolist() == [(old << 32) | v for v in i.tolist()]
    for bad in ([2**31], [-1], [0, 2**40], [3, -2**40]):
        with pytest.raises(ValueError, match=r"sample_keys: index must be in \[0, 2\*\*31\)"):
            R.sample_keys(0, 0, torch.tensor(bad))
    for bad in (torch.tensor([1.7]), torch.tensor([True]), [1, 2]):
        with pytest.raises(TypeError, match="sample_keys: index must be an integer tensor"):
            R.sample_keys(0, 0, bad)
    for seed in (1.5, True, "0"):
        with pytest.raises(TypeError, match="sample_keys: seed must be an int"):
            R.sample_keys(seed, 0, i)
    with pytest.raises(ValueError, match=r"seed and epoch must be in \[0, 2\*\*63\)"):
        R.sample_keys(0, 2**63, i)
    assert R.sample_keys(0, 0, i.int()).dtype == torch.int64  # any integer dtype
    assert R.sample_keys(0, 0, i[:0]).shape == (0,)


def test_substream_is_a_bijection_and_states_of_an_epoch_never_collide():
    k = R.sample_keys(5, 9, torch.arange(200_000))
    assert torch.unique(R._site(k, 4)).numel() == k.numel()  # bijective in the index
    for i in (0, 3):
        assert torch.unique(R.substream(k, i)).numel() == k.numel()


# ------------------------------------------------------------------ statistics over 10^5 keys

def _ks_uniform(u: torch.Tensor) -> float:
    s = u.double().sort().values
    n = s.numel()
    i = torch.arange(1, n + 1, dtype=torch.float64)
    return max((i / n - s).max().item(), (s - (i - 1) / n).max().item())


def _ks_two_sample(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double().sort().values, b.double().sort().values
    grid = torch.cat([a, b])
    fa = torch.searchsorted(a, grid, right=True).double() / a.numel()
    fb = torch.searchsorted(b, grid, right=True).double() / b.numel()
    return (fa - fb).abs().max().item()


# KS critical values at alpha = 1e-6 (the keys are fixed, so this is a fixed check; a real
# defect shows as a statistic many times larger)
KS1 = math.sqrt(-math.log(0.5e-6) / (2 * N))
KS2 = KS1 * math.sqrt(2)
CORR = 5.5 / math.sqrt(N)  # |r| of independent samples: sd 1/sqrt(n), 5.5 sd ~ 4e-8


def _corr(a: torch.Tensor, b: torch.Tensor) -> float:
    return torch.corrcoef(torch.stack([a.double(), b.double()]))[0, 1].item()


def _keys(seed: int = 11, epoch: int = 2) -> torch.Tensor:
    return R.sample_keys(seed, epoch, torch.arange(N))


def _chi2_pairs(u: torch.Tensor, v: torch.Tensor, bins: int = 10) -> float:
    """Chi-square of the (u, v) pairs over a bins x bins grid (uniform in the unit square)."""
    cell = (u.double() * bins).long().clamp_max(bins - 1) * bins + \
        (v.double() * bins).long().clamp_max(bins - 1)
    counts = torch.bincount(cell, minlength=bins * bins).double()
    expected = u.numel() / bins ** 2
    return ((counts - expected) ** 2 / expected).sum().item()


CHI2_99 = 99 + 7 * math.sqrt(2 * 99)  # chi-square, 99 dof: mean 99, sd 14; 7 sd


@pytest.mark.parametrize("name", ["uniform", "rand64", "integers", "integers_below", "bernoulli",
                                  "categorical", "permutations", "noise_uint8", "noise_float",
                                  "beta"])
def test_keyed_draws_are_uniform_and_consecutive_keys_independent(name):
    """Each draw function, through its keyed path, has the right distribution (KS bound, or
    counts within 6 sd) and the values of consecutive keys, of two draw numbers of one key,
    of two children and of two epochs are uncorrelated (and their pairs uniform in the unit
    square, chi-square over a 10 x 10 grid)."""
    k = _keys()
    x = torch.zeros(N, 1, 1, 1)
    # u: a per-key value mapped to [0, 1) by its distribution function, for the pair tests
    if name == "uniform":
        def u_of(keys, draw):
            return R.uniform(x, 0.0, 1.0, keys=keys, draw=draw)
    elif name == "rand64":
        def u_of(keys, draw):
            return R.keyed_rand64(keys, draw)
    elif name == "integers":
        def u_of(keys, draw):
            v = R.integers(x, -3, 1000, keys=keys, draw=draw)
            assert v.min() == -3 and v.max() == 999
            return (v + 3 + 0.5) / 1003
    elif name == "integers_below":
        high = torch.full((N,), 977)
        def u_of(keys, draw):
            v = R.integers_below(high, keys=keys, draw=draw)
            assert v.min() == 0 and v.max() == 976
            return (v + 0.5) / 977
    elif name == "bernoulli":
        c = R.bernoulli(x, 0.3, keys=k, draw=0).sum().item()
        assert abs(c - 0.3 * N) < 6 * math.sqrt(N * 0.21)
        a, b = R.bernoulli(x, 0.5, keys=k, draw=1), R.bernoulli(x, 0.5, keys=k, draw=2)
        both = (a[:-1] & a[1:]).sum().item()  # consecutive keys: P(both) = 1/4
        assert abs(both - N / 4) < 6 * math.sqrt(N * 3 / 16)
        assert abs((a & b).sum().item() - N / 4) < 6 * math.sqrt(N * 3 / 16)
        return
    elif name == "categorical":
        probs = torch.tensor([0.1, 0.0, 0.6, 0.3], dtype=torch.float64)
        c = torch.bincount(R.categorical(x, probs, keys=k, draw=0), minlength=4).tolist()
        assert c[1] == 0
        for j in (0, 2, 3):
            p = probs[j].item()
            assert abs(c[j] - p * N) < 6 * math.sqrt(N * p * (1 - p)), (j, c)
        return
    elif name == "permutations":
        p = R.permutations(x, 3, keys=k, draw=0)
        code = p[:, 0] * 9 + p[:, 1] * 3 + p[:, 2]
        counts = torch.bincount(code, minlength=27)
        counts = counts[counts > 0]
        assert counts.numel() == 6  # every permutation of 3, nothing else
        assert ((counts.double() - N / 6).abs() < 6 * math.sqrt(N * 5 / 36)).all(), counts
        nxt = (code[:-1] == code[1:]).sum().item()  # consecutive keys: P(same) = 1/6
        assert abs(nxt - N / 6) < 6 * math.sqrt(N * 5 / 36)
        return
    elif name == "noise_uint8":
        img = torch.zeros(N // 100, 1, 10, 10, dtype=torch.uint8)
        v = R.noise_like(img, keys=k[:N // 100], draw=0).flatten()
        counts = torch.bincount(v.long(), minlength=256).double()
        chi2 = ((counts - N / 256) ** 2 / (N / 256)).sum().item()
        assert chi2 < 255 + 7 * math.sqrt(2 * 255)
        assert abs(_corr(v[:-1].float(), v[1:].float())) < CORR  # neighbouring pixels
        return
    elif name == "noise_float":
        img = torch.zeros(N // 100, 1, 10, 10)
        z = R.noise_like(img, keys=k[:N // 100], draw=0).flatten()
        assert _ks_uniform(torch.special.ndtr(z.double())) < KS1
        assert abs(_corr(z[:-1], z[1:])) < CORR
        return
    else:  # beta: against torch's own Beta sampler (two-sample KS)
        def u_of(keys, draw):
            return R.beta(x, 0.4, 2.5, keys=keys, draw=draw)
        g = torch.Generator().manual_seed(0)
        ref = torch._standard_gamma(torch.full((N,), 0.4), generator=g)
        ref = ref / (ref + torch._standard_gamma(torch.full((N,), 2.5), generator=g))
        assert _ks_two_sample(u_of(k, 0), ref) < KS2
        # (a, a): both gammas from one hash call (the mixers' case), below and above 1
        for a_, b_ in ((3.0, 0.7), (0.2, 0.2), (0.8, 0.8), (4.0, 4.0)):
            ref = torch._standard_gamma(torch.full((N,), a_), generator=g)
            ref = ref / (ref + torch._standard_gamma(torch.full((N,), b_), generator=g))
            assert _ks_two_sample(R.beta(x, a_, b_, keys=k, draw=8), ref) < KS2, (a_, b_)
        assert _ks_uniform(R.beta(x, 1.0, 1.0, keys=k, draw=8).double()) < KS1  # Beta(1, 1)
        # Dirichlet: each coordinate of Dirichlet(alpha * 1_3) is Beta(alpha, 2 alpha)
        for alpha in (1.0, 0.3):
            d = R.dirichlet(x, alpha, 3, keys=k, draw=3)
            torch.testing.assert_close(d.sum(1), torch.ones(N), atol=1e-5, rtol=0)
            ref = torch.distributions.Dirichlet(torch.full((3,), alpha)).sample((N,))
            for j in range(3):
                assert _ks_two_sample(d[:, j], ref[:, j]) < KS2, (alpha, j)
            assert abs(_corr(d[:, 0], d[:, 1]) + 0.5) < 0.02  # -1/(k-1) for k = 3
        b = u_of(k, 0)
        other = u_of(k, 2)  # draws 0 and 1 are this beta's, 2 the next call site's
        for a, c in ((b[:-1], b[1:]), (b, other)):
            assert abs(_corr(a, c)) < CORR
        return
    u = u_of(k, 0)
    assert u.shape == (N,)
    if name in ("uniform", "rand64"):
        assert u.min() >= 0 and u.max() < 1
        assert _ks_uniform(u) < KS1
    else:
        assert _ks_uniform(u) < 1.5 / 977 + KS1  # discrete: the step adds to the distance
    pairs = [
        (u[:-1], u[1:]),                                  # consecutive keys
        (u, u_of(k, 1)),                                  # two call sites of one key
        (u_of(R.substream(k, 0), 0), u_of(R.substream(k, 1), 0)),  # two children
        (u, u_of(R.sample_keys(11, 3, torch.arange(N)), 0)),       # the next epoch
        (u, u_of(R.sample_keys(12, 2, torch.arange(N)), 0)),       # another seed
    ]
    for a, b in pairs:
        assert abs(_corr(a, b)) < CORR
        assert _chi2_pairs(a, b) < CHI2_99


# ------------------------------------------------------------------ modules with keys

def _batch(n: int, size: int = 20, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n, 3, size, size), dtype=torch.uint8, generator=g)


def _containers(group: bool) -> Augment:
    return Augment(
        RandomCrop(16, padding=2),
        RandomApply([RandomRotation(20), RandomInvert(0.5)], p=0.6, group_by_branch=group),
        RandomChoice([RandomHorizontalFlip(1.0), ColorJitter(0.4, 0.4, 0.4, 0.1),
                      RandomInvert(1.0)], p=[1, 2, 1], group_by_branch=group),
        RandomOrder([RandomInvert(), ColorJitter(0.5), RandomHorizontalFlip()],
                    group_by_branch=group),
    )


def test_grouped_and_static_containers_give_the_same_keyed_result():
    x = _batch(24)
    k = R.sample_keys(0, 4, torch.arange(24))
    y = _containers(True)(x, k)
    assert torch.equal(_containers(False)(x, k), y)
    torch.manual_seed(0)
    assert not torch.equal(_containers(True)(x), _containers(False)(x))  # unkeyed: they differ


@pytest.mark.parametrize("recipe", ["cifar10", "imagenet", "simclr"])
def test_recipe_keyed_independent_of_batch_position_and_torch_seed(recipe):
    aug = recipes.get(recipe, size=16)
    x = _batch(9, 24)
    k = R.sample_keys(2, 5, torch.arange(100, 109))
    torch.manual_seed(0)
    y = aug(x, k)
    torch.manual_seed(1)
    perm = torch.tensor([8, 3, 0, 5])
    assert torch.equal(aug(x[perm], k[perm]), y[perm])
    assert torch.equal(aug(x[6:7], k[6:7]), y[6:7])
    assert not torch.equal(aug(x, R.sample_keys(2, 6, torch.arange(100, 109))), y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        s = torch.jit.script(aug)
    assert torch.equal(s(x, k), y)


def test_augment_checks_keys_and_passes_them_through_augmented_model():
    aug = recipes.cifar10(16)
    x = _batch(4, 16)
    with pytest.raises(ValueError, match="Augment: keys must have one key per image: got 3 keys "
                                         "for a batch of 4 images"):
        aug(x, R.sample_keys(0, 0, torch.arange(3)))
    with pytest.raises(ValueError, match=r"keys must be a 1-D tensor of shape \(N,\)"):
        aug(x, R.sample_keys(0, 0, torch.arange(4)).view(2, 2))
    with pytest.raises(TypeError, match="keys must be an int64"):
        aug(x, torch.zeros(4, dtype=torch.int32))
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 16 * 16, 2))
    m = AugmentedModel(aug, net)
    k = R.sample_keys(0, 0, torch.arange(4))
    assert torch.equal(m(x, k), net(aug(x, k)))
    # a plain augment module without keys: called as augment(x)
    plain = AugmentedModel(torch.nn.Identity(), net)
    assert torch.equal(plain(x.float(), k), net(x.float()))
    with pytest.raises(ValueError, match="AugmentedModel: keys must have one key per image: got "
                                         "3 keys for a batch of 4 images"):
        plain(x.float(), k[:3])  # checked even when the augment module takes no keys


def test_transform_called_with_wrong_length_keys_raises_instead_of_dropping_samples():
    # the reported case: 6 images, 1 key, 1 row came back
    x6 = torch.randint(0, 256, (6, 3, 16, 16), dtype=torch.uint8)
    with pytest.raises(ValueError, match="ColorJitter: keys must have one key per image: got 1 "
                                         "keys for a batch of 6 images"):
        batchaug.ColorJitter(.4, .4, .4, .1)(x6, batchaug.sample_keys(0, 0, torch.arange(1)))
    with pytest.raises(ValueError, match="RandomResizedCrop: .*got 7 keys for a batch of 6"):
        batchaug.RandomResizedCrop(8)(x6, batchaug.sample_keys(0, 0, torch.arange(7)))
    ok = batchaug.ColorJitter(.4, .4, .4, .1)(x6, batchaug.sample_keys(0, 0, torch.arange(6)))
    assert ok.shape == x6.shape


def test_keys_check_compiles_fullgraph_and_exports_with_a_dynamic_batch():
    """check_keys takes no Python int from the batch size: compiled (fullgraph, dynamic) and
    exported with a shared Dim("batch") the keyed module runs at batch 1, 7 and 64 as eager
    does, and keys of the wrong length still fail (compile: at trace time, with the message;
    export: the program's guard that the two sizes are equal)."""
    from torch.export import Dim, export

    m = Augment(RandomHorizontalFlip(), RandomCrop(6, padding=1)).train()
    torch._dynamo.reset()
    c = torch.compile(m, backend="aot_eager", fullgraph=True, dynamic=True)
    b = Dim("batch")
    ep = export(m, (_batch(4, 8).float(), R.sample_keys(0, 0, torch.arange(4))),
                dynamic_shapes=({0: b}, {0: b})).module()
    for n in (1, 7, 64):
        x, k = _batch(n, 8, seed=n).float(), R.sample_keys(1, 2, torch.arange(n))
        ref = m(x, k)
        torch.testing.assert_close(c(x, k), ref, atol=1e-6, rtol=0)
        torch.testing.assert_close(ep(x, k), ref, atol=1e-6, rtol=0)
    x, k = _batch(7, 8).float(), R.sample_keys(1, 2, torch.arange(6))
    with pytest.raises(Exception, match="keys must have one key per image"):
        c(x, k)
    with pytest.raises(Exception, match=r"keys.size\(\)\[0\] == x.size\(\)\[0\]"):
        ep(x, k)


class _OpCounter(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts the aten ops a call dispatches (one kernel launch each on a GPU)."""

    def __init__(self) -> None:
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.n += 1
        return func(*args, **(kwargs or {}))


def _ops(fn) -> int:
    with _OpCounter() as c:
        fn()
    return c.n


def test_keyed_draws_cost_at_most_twice_the_ops_of_unkeyed_ones():
    """Keyed draws are launch-bound: a recipe with keys dispatches at most twice the ops it
    does without (one hash per draw site, one Feistel round per child). Counted on the meta
    device (the batched path a GPU takes) for RRC + flip + Normalize + RandomErasing at batch
    256, and on the CPU for a policy; MixUpOrCutMix (two Betas) is bounded at 2.5x, its time
    is what benchmarks/bench_keys.py --sections mix compares."""
    from batchaug.transforms import (MixUpOrCutMix, Normalize, RandomErasing,
                                     RandomResizedCrop, TrivialAugmentWide)

    aug = Augment(RandomResizedCrop(32), RandomHorizontalFlip(), Normalize([0.5] * 3, [0.2] * 3),
                  RandomErasing(p=0.5)).to("meta")
    x = torch.zeros(256, 3, 64, 64, dtype=torch.uint8, device="meta")
    k = R.sample_keys(0, 1, torch.arange(256)).to("meta")
    plain, keyed = _ops(lambda: aug(x)), _ops(lambda: aug(x, k))
    assert keyed <= 2 * plain, (plain, keyed)
    pol = Augment(TrivialAugmentWide())
    xc = _batch(256, 32)
    kc = R.sample_keys(0, 1, torch.arange(256))
    plain, keyed = _ops(lambda: pol(xc)), _ops(lambda: pol(xc, kc))
    assert keyed <= 2 * plain, (plain, keyed)
    mix = MixUpOrCutMix(10)
    xf, y = xc.float(), torch.arange(256) % 10
    plain, keyed = _ops(lambda: mix(xf, y)), _ops(lambda: mix(xf, y, kc))
    assert keyed <= 2.5 * plain, (plain, keyed)


def _all_random_cases():
    from tests.contract import CASES, make_batch

    return [c for c in CASES if c.random], make_batch


class _AllDraws(torch.nn.Module):
    def forward(self, x: torch.Tensor, k: torch.Tensor):
        return (R.uniform(x, -1.0, 3.0, 3, keys=k, draw=0), R.integers(x, 2, 9, keys=k, draw=1),
                R.integers_below(torch.full_like(k, 7), keys=k, draw=2),
                R.bernoulli(x, 0.3, keys=k, draw=3), R.permutations(x, 4, keys=k, draw=4),
                R.categorical(x, torch.tensor([0.2, 0.8], dtype=torch.float64), keys=k,
                              draw=5),
                R.beta(x, 0.5, 2.0, keys=k, draw=6), R.noise_like(x, keys=k, draw=14),
                R.noise_like(x.to(torch.uint8), keys=k, draw=16), R.substream(k, 3))


def test_every_draw_function_keyed_scripts_compiles_and_exports():
    """Every keyed draw function in one module: TorchScript, torch.compile(fullgraph=True,
    backend="aot_eager") and torch.export (keys sharing Dim("batch")) equal eager exactly."""
    from torch.export import Dim, export

    m = _AllDraws()
    x, k = torch.zeros(5, 2, 3, 3), R.sample_keys(4, 1, torch.arange(5))
    want = m(x, k)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        scripted = torch.jit.script(m)
    torch._dynamo.reset()
    compiled = torch.compile(m, backend="aot_eager", fullgraph=True)
    batch = Dim("batch")
    run = export(m, (x, k), dynamic_shapes=({0: batch}, {0: batch})).module()
    for got in (scripted(x, k), compiled(x, k)):
        assert all(a.dtype == b.dtype and torch.equal(a, b) for a, b in zip(got, want))
    for n in (1, 7):
        xn, kn = torch.zeros(n, 2, 3, 3), R.sample_keys(4, 1, torch.arange(n))
        assert all(torch.equal(a, b) for a, b in zip(run(xn, kn), m(xn, kn)))


def test_keyed_containers_compile_like_eager():
    """Augment of containers compiled (static path, every branch on the whole batch) equals
    eager (grouped path, branches on their own samples) with the same keys."""
    aug = Augment(RandomCrop(16, padding=2),
                  RandomApply([RandomInvert(1.0), RandomHorizontalFlip(1.0)], p=0.5),
                  RandomChoice([RandomHorizontalFlip(1.0), RandomInvert(1.0)]),
                  RandomOrder([RandomInvert(), RandomHorizontalFlip()])).train()
    x = _batch(6)
    k = R.sample_keys(0, 2, torch.arange(6))
    torch._dynamo.reset()
    c = torch.compile(aug, backend="aot_eager", fullgraph=True)
    assert torch.equal(c(x, k), aug(x, k))


@pytest.mark.skipif(os.environ.get("BATCHAUG_SLOW") != "1",
                    reason="~150 s on 2 cores: set BATCHAUG_SLOW=1 (the suite keeps the "
                           "draw-function and container compile tests above)")
def test_every_random_case_draws_keyed_under_compile():
    """Every random Case's keyed make_params compiled (fullgraph, aot_eager), one graph per
    case: the draws equal eager's exactly (transforms added later are covered)."""
    cases, make_batch = _all_random_cases()
    k = R.sample_keys(1, 1, torch.arange(5) + 40)
    for i, case in enumerate(cases):
        m = case.factory().train()
        x = make_batch(case, torch.float32, "cpu", n=5, seed=i)

        def draws(x_, keys):
            p = m.make_params(x_, keys)
            return list(p) if isinstance(p, (tuple, list)) else [p]

        torch._dynamo.reset()
        got = torch.compile(draws, backend="aot_eager", fullgraph=True)(x, k)
        want = draws(x, k)
        assert len(got) == len(want), case.id
        for a, b in zip(got, want):
            assert a.dtype == b.dtype and torch.equal(a, b), case.id


def test_export_augment_with_keys_at_batch_1_7_64():
    from torch.export import Dim, export

    aug = Augment(recipes.cifar10(16),  # nested Augment: its own substream
                  RandomApply([RandomInvert(1.0)], p=0.5)).train()
    batch = Dim("batch")
    x4 = _batch(4, 16).float() / 255
    ep = export(aug, (x4, R.sample_keys(0, 0, torch.arange(4))),
                dynamic_shapes=({0: batch}, {0: batch}))
    run = ep.module()
    for n in (1, 7, 64):
        x = _batch(n, 16, seed=n).float() / 255
        k = R.sample_keys(3, 1, torch.arange(n))
        torch.testing.assert_close(run(x, k), aug(x, k), atol=1e-6, rtol=0)


# ------------------------------------------------------------------ loader, world size, resume

def _augmented_by_sample(loader, aug, epoch):
    """{sample label: augmented image} over one epoch of ``loader``."""
    loader.set_epoch(epoch)
    out = {}
    for x, y, k in loader:
        assert k.dtype == torch.int64 and k.shape == y.shape and k.device == x.device
        z = aug(x, k)
        for i, label in enumerate(y.tolist()):
            out.setdefault(label, z[i])
            assert torch.equal(out[label], z[i])  # a repeated (padding) sample: same again
    return out


def _cache(n=29, size=20):
    return DeviceCache.from_tensors(_batch(n, size, seed=3), torch.arange(n), device="cpu")


def test_same_augmentation_for_any_batch_size_world_size_and_placement():
    aug = recipes.imagenet(16)
    cache = _cache()
    ref = _augmented_by_sample(DeviceLoader(cache, 8, seed=5, rank=0, world_size=1,
                                            return_keys=True), aug, 3)
    assert sorted(ref) == list(range(29))
    two = {}
    for rank in (0, 1):
        two.update(_augmented_by_sample(DeviceLoader(cache, 3, seed=5, rank=rank, world_size=2,
                                                     return_keys=True, order="quasi_random"),
                                        aug, 3))
    assert sorted(two) == list(range(29))
    with tempfile.TemporaryDirectory() as tmp:
        cache.save(Path(tmp) / "c")
        for placement in ("host", "disk"):
            c = DeviceCache.load(Path(tmp) / "c", device="cpu", placement=placement)
            got = _augmented_by_sample(DeviceLoader(c, 5, seed=5, rank=0, world_size=1,
                                                    return_keys=True, prefetch=1), aug, 3)
            assert all(torch.equal(got[i], ref[i]) for i in ref), placement
        parts = {}
        for rank in range(3):
            c = DeviceCache.load(Path(tmp) / "c", device="cpu", shard=(rank, 3))
            parts.update(_augmented_by_sample(DeviceLoader(c, 4, seed=5, return_keys=True),
                                              aug, 3))
        assert sorted(parts) == list(range(29))
        assert all(torch.equal(parts[i], ref[i]) for i in ref), "partitioned"
    for i in ref:
        assert torch.equal(two[i], ref[i]), i
    other = _augmented_by_sample(DeviceLoader(cache, 8, seed=5, rank=0, world_size=1,
                                              return_keys=True), aug, 4)
    assert sum(torch.equal(other[i], ref[i]) for i in ref) == 0  # a new epoch, new draws


def test_resume_gives_bit_identical_keys_and_augmentations():
    aug = recipes.simclr(16)
    cache = _cache()

    def loader():
        ld = DeviceLoader(cache, 6, seed=9, rank=0, world_size=1, return_keys=True)
        ld.set_epoch(2)
        return ld

    full = [(y, k, aug(x, k)) for x, y, k in loader()]
    first = loader()
    it = iter(first)
    next(it), next(it)
    state = first.state_dict()
    resumed = DeviceLoader(cache, 6, seed=9, rank=0, world_size=1, return_keys=True)
    resumed.load_state_dict(state)
    resumed.set_epoch(2)
    rest = [(y, k, aug(x, k)) for x, y, k in resumed]
    assert len(rest) == len(full) - 2
    for (y0, k0, z0), (y1, k1, z1) in zip(full[2:], rest):
        assert torch.equal(y0, y1) and torch.equal(k0, k1) and torch.equal(z0, z1)


def test_return_keys_is_a_bool_and_plain_loader_yields_pairs():
    cache = _cache(5)
    with pytest.raises(TypeError, match="return_keys must be a bool"):
        DeviceLoader(cache, 2, return_keys=1)
    assert all(len(b) == 2 for b in DeviceLoader(cache, 2))


# ------------------------------------------------------------------ CUDA (skipped without)

@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_keyed_cuda_matches_cpu():
    """The integer stream is identical on CUDA and CPU; floats within float32 rounding; a
    recipe's draws (make_params) equal and its output within kernel rounding."""
    k = R.sample_keys(3, 7, torch.arange(50_000))
    kc = k.cuda()
    assert torch.equal(R.sample_keys(3, 7, torch.arange(50_000, device="cuda")).cpu(), k)
    for draw in (0, 5):
        assert torch.equal(R._words(kc, draw, 6).cpu(), R._words(k, draw, 6))
        assert torch.equal(R.substream(kc, draw).cpu(), R.substream(k, draw))
        assert torch.equal(R.keyed_rand(kc, draw).cpu(), R.keyed_rand(k, draw))
        assert torch.equal(R.keyed_rand64(kc, draw).cpu(), R.keyed_rand64(k, draw))
    x, xc = torch.zeros(50_000, 1, 1, 1), torch.zeros(50_000, 1, 1, 1, device="cuda")
    assert torch.equal(R.integers(xc, 0, 97, keys=kc).cpu(), R.integers(x, 0, 97, keys=k))
    torch.testing.assert_close(R.uniform(xc, -3.0, 5.0, 4, keys=kc).cpu(),
                               R.uniform(x, -3.0, 5.0, 4, keys=k), atol=0, rtol=2e-7)
    torch.testing.assert_close(R.beta(xc, 0.4, 0.4, keys=kc).cpu(),
                               R.beta(x, 0.4, 0.4, keys=k), atol=1e-6, rtol=1e-5)
    img = torch.zeros(8, 3, 16, 16)
    torch.testing.assert_close(R.noise_like(img.cuda(), keys=kc[:8]).cpu(),
                               R.noise_like(img, keys=k[:8]), atol=1e-5, rtol=1e-5)
    aug = recipes.cifar10(16)  # integer draws (crop offsets, flips): identical on both
    xb = _batch(16, 24)
    kb = k[:16]
    torch.testing.assert_close(aug.cuda()(xb.cuda(), kb.cuda()).cpu(), aug.cpu()(xb, kb),
                               atol=1e-5, rtol=0)


# ------------------------------------------------------------------ show with keys

def _cell(png, row: int, col: int, size: int, labels=(None, None)) -> torch.Tensor:
    import numpy as np
    from PIL import Image

    from tests.cli.pictures import cell_origin

    img = torch.from_numpy(np.array(Image.open(png)))
    top, left = cell_origin(row, col, size, size, 3, labels[0], labels[1])
    return img[top:top + size, left:left + size]


def _as_png_cell(z: torch.Tensor, norm) -> torch.Tensor:
    """What show draws for one augmented sample: Normalize undone, [0, 1] -> uint8 HWC."""
    from batchaug.picture import _displayable

    return (_displayable(z.unsqueeze(0), norm)[0] * 255).round().to(torch.uint8).permute(1, 2, 0)


def test_show_with_keys_is_the_training_time_sample(tmp_path, capsys):
    """Train-time: DeviceLoader(return_keys=True) + recipe(x, keys). `batchaug show CACHE
    --index I J --epoch E F --seed S` draws those samples exactly as training did."""
    from batchaug.cli import main
    from batchaug.picture import _last_normalize

    n, size, seed = 13, 24, 7
    images = _batch(n, size, seed=1)
    DeviceCache.from_tensors(images, torch.arange(n), device="cpu").save(tmp_path / "c")
    cache = DeviceCache.load(tmp_path / "c", device="cpu")
    aug = recipes.simclr(size)
    trained = {}
    for epoch in (1, 3):
        loader = DeviceLoader(cache, 4, seed=seed, rank=0, world_size=1, return_keys=True)
        trained[epoch] = _augmented_by_sample(loader, aug, epoch)
    out = tmp_path / "g.png"
    assert main(["show", str(tmp_path / "c"), "--out", str(out), "--recipe", "simclr",
                 "--index", "5", "11", "--epoch", "1", "3", "--seed", str(seed)]) == 0
    assert "epochs [1, 3]" in capsys.readouterr().out
    norm = _last_normalize(aug)
    # the CLI labels rows "#INDEX CLASS" and columns "original", "epoch E"
    labels = batchaug.picture.cell_labels([5, 11], [5, 11], None, [1, 3], 2)
    for row, i in enumerate((5, 11)):
        assert torch.equal(_cell(out, row, 0, size, labels), images[i].permute(1, 2, 0))
        for col, epoch in enumerate((1, 3), start=1):
            assert torch.equal(_cell(out, row, col, size, labels),
                               _as_png_cell(trained[epoch][i], norm)), (i, epoch)
    # the Python API: the same columns from sample_keys
    keys = torch.stack([R.sample_keys(seed, e, torch.tensor([5, 11])) for e in (1, 3)])
    path = batchaug.show(aug, images[[5, 11]], tmp_path / "api.png", keys=keys)
    for row in range(2):
        for col in range(3):
            assert torch.equal(_cell(path, row, col, size), _cell(out, row, col, size, labels))
    with pytest.raises(ValueError, match="keys must be an int64"):
        batchaug.show(aug, images[:2], tmp_path / "x.png", keys=keys[:, :1])
    assert main(["show", str(tmp_path / "c"), "--out", str(out), "--index", "13",
                 "--epoch", "0"]) == 2
    assert "out of range" in capsys.readouterr().err


# ------------------------------------- keyed values pinned by the reference (issue 28 item 9)

def _ref_open64(key: int, draw: int, j: int) -> float:
    return (_ref_word(key, draw, j) + 0.5) / 2**32


def _ref_gammas(key: int, draw: int, alpha: float, cols: int) -> list:
    """Marsaglia-Tsang with 8 tries and the U**(1/alpha) boost below 1, on Python floats:
    try t of column c reads words ``c * 25 + t`` (normal's radius), ``+ 8`` (its angle),
    ``+ 16`` (the acceptance test) and ``c * 25 + 24`` (the boost)."""
    a = alpha if alpha >= 1.0 else alpha + 1.0
    d = a - 1.0 / 3.0
    c = 1.0 / math.sqrt(9.0 * d)
    out = []
    for col in range(cols):
        u = [_ref_open64(key, draw, col * 25 + j) for j in range(25)]
        g = d
        for t in range(8):
            z = math.sqrt(-2.0 * math.log(u[t])) * math.cos(2.0 * math.pi * u[8 + t])
            v = (1.0 + c * z) ** 3
            if v > 0 and math.log(u[16 + t]) < 0.5 * z * z + d - d * v + d * math.log(v):
                g = d * v
                break
        if alpha < 1.0:
            g *= u[24] ** (1.0 / alpha)
        out.append(g)
    return out


def _close(got: list, want: list, rel: float) -> bool:
    return all(math.isclose(a, b, rel_tol=rel, abs_tol=1e-30) for a, b in zip(got, want)) \
        and len(got) == len(want)


def test_keyed_gammas_beta_dirichlet_and_noise_match_the_reference():
    """The values of keyed Beta, Dirichlet and noise draws, not only their law: a change that
    keeps the distribution (another Box-Muller variate, the last accepted try, another byte of
    the word, a shared stream) changes every keyed augmentation and must be seen."""
    keys = [0, 1, 2**31 - 1, 2**32 + 7, 2**62 + 12345, 2**63 - 1] + \
        [random.Random(2).getrandbits(63) for _ in range(40)]
    k = torch.tensor(keys, dtype=torch.int64)
    x = torch.zeros(len(keys), 1)
    for a, b in ((0.4, 2.5), (0.2, 0.2), (1.0, 1.0), (3.0, 3.0), (2.0, 0.7)):
        got = R.beta(x, a, b, keys=k, draw=5).tolist()
        if a == b == 1.0:  # one uniform
            want = [(_ref_word(v, 5) >> 8) / 2**24 for v in keys]
        else:
            if a == b:  # both gammas of a row from one call
                g = [_ref_gammas(v, 5, a, 2) for v in keys]
            else:  # draws 5 and 6
                g = [[_ref_gammas(v, 5, a, 1)[0], _ref_gammas(v, 6, b, 1)[0]] for v in keys]
            want = [g1 / (g1 + g2) for g1, g2 in g]
        assert _close(got, want, 1e-6), (a, b)
    for alpha in (0.3, 1.0, 2.5):
        got = R.dirichlet(x, alpha, 3, keys=k, draw=9)
        for row, v in zip(got.tolist(), keys):
            g = _ref_gammas(v, 9, alpha, 3)
            assert _close(row, [gi / sum(g) for gi in g], 1e-5), alpha
    img = torch.zeros(len(keys), 2, 3, 4, dtype=torch.uint8)
    got = R.noise_like(img, keys=k, draw=3).flatten(1).tolist()
    assert got == [[_ref_word(v, 3, j) >> 24 for j in range(24)] for v in keys]
    got = R.noise_like(img.float(), keys=k, draw=3).flatten(1).tolist()
    for row, v in zip(got, keys):
        want = []
        for j in range(24):
            u1 = max((_ref_word(v, 3, j) >> 8) / 2**24, 2.0 ** -25)
            u2 = (_ref_word(v, 4, j) >> 8) / 2**24
            want.append(math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2))
        assert all(abs(a - b) <= 1e-5 * (1 + abs(b)) for a, b in zip(row, want))
