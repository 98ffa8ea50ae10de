"""MixUp, CutMix and MixUpOrCutMix: (images, labels) -> (images, targets).

The shared contract (tests/contract/) assumes x -> x modules, so its checks are written here
for the mixers: scripted == eager (every dtype, seeded and keyed), eval identity with one-hot
(smoothed) targets, empty batch, no in-place change, channels_last, seeds, per-sample draws,
gradients, torch.export with a dynamic batch, torch.compile(aot_eager).

Keyed invariance: sample i's draws (coin, λ, switch, box centre) are a function of keys[i]
alone, and its partner is the sample before it (the batch rolled by one). So sample i's output
is a function of (x[i], y[i], keys[i], x[i-1], y[i-1]): it is unchanged by rolling the whole
batch (every sample keeps its predecessor), by cutting the batch down to [x[i-1], x[i]], and by
torch's global seed. A different predecessor changes it by design. With ``per_sample=False``
the one batch draw is a function of the set of keys (any order).

The module-level tests run on every mixer (``FACTORIES``); each mixer's own behaviour is in its
class at the end (TestMixUp, TestCutMix, TestMixUpOrCutMix).
"""
from __future__ import annotations

import math
from typing import Callable, List, Tuple

import pytest
import torch
import torchvision.transforms.v2 as V2
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import Tensor, nn

import batchaug
import batchaug.functional as BF
import batchaug.transforms as T

K = 10
ALL_DTYPES = [torch.uint8, torch.float16, torch.bfloat16, torch.float32, torch.float64]

FACTORIES: List[Tuple[str, Callable[[], nn.Module]]] = [
    ("MixUp", lambda: T.MixUp(K, alpha=0.4)),
    ("MixUp-p-smooth-batch", lambda: T.MixUp(K, p=0.7, per_sample=False, label_smoothing=0.1)),
    ("CutMix", lambda: T.CutMix(K)),
    ("CutMix-p-smooth", lambda: T.CutMix(K, alpha=0.5, p=0.6, label_smoothing=0.2)),
    ("CutMix-batch", lambda: T.CutMix(K, per_sample=False)),
    ("MixUpOrCutMix", lambda: T.MixUpOrCutMix(K, label_smoothing=0.1)),
    ("MixUpOrCutMix-p-batch", lambda: T.MixUpOrCutMix(K, 0.2, 1.0, switch_prob=0.3, p=0.8,
                                                      per_sample=False)),
]
PER_SAMPLE = [f for f in FACTORIES if f[1]().per_sample]
ids = [f[0] for f in FACTORIES]


def batch(n: int, dtype: torch.dtype = torch.float32, seed: int = 0, h: int = 12,
          w: int = 16) -> Tuple[Tensor, Tensor]:
    """Images and labels with neighbours' labels distinct (so λ can be read from targets)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (n, 3, h, w), generator=g, dtype=torch.uint8)
    if dtype != torch.uint8:
        x = (x.to(torch.float32) / 255).to(dtype)
    labels = torch.arange(n) % K if n % K != 1 else torch.arange(n) % (K - 1)
    return x, labels


def keys_for(n: int, offset: int = 0) -> Tensor:
    return batchaug._random.sample_keys(3, 1, torch.arange(n) + offset)


def run(m: nn.Module, x: Tensor, y: Tensor, seed: int, keys=None) -> Tuple[Tensor, Tensor]:
    torch.manual_seed(seed)
    return m(x, y, keys)


def smoothed_one_hot(y: Tensor, eps: float) -> Tensor:
    return torch.nn.functional.one_hot(y, K).float() * (1 - eps) + eps / K


# ----------------------------------------------------------------------------- contract

@pytest.mark.parametrize("name, make", FACTORIES, ids=ids)
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32], ids=["uint8", "float32"])
def test_shape_dtype_and_targets(name, make, dtype):
    x, y = batch(9, dtype)
    for train in (True, False):
        out, t = make().train(train)(x, y)
        assert out.shape == x.shape and out.dtype == dtype  # uint8 stays uint8
        assert t.shape == (9, K) and t.dtype == torch.float32
        assert (t >= 0).all()
        torch.testing.assert_close(t.sum(1), torch.ones(9), atol=1e-6, rtol=0)
    # soft labels keep their dtype
    soft = torch.softmax(torch.randn(9, K, dtype=torch.float64), 1)
    _, t = make()(x, soft)
    assert t.dtype == torch.float64
    torch.testing.assert_close(t.sum(1), torch.ones(9, dtype=torch.float64), atol=1e-12, rtol=0)


@pytest.mark.parametrize("name, make", FACTORIES, ids=ids)
def test_script_matches_eager_every_dtype(name, make):
    m = make()
    s = torch.jit.script(m)
    for dtype in ALL_DTYPES:
        x, y = batch(7, dtype)
        for seed in (0, 1):
            a, b = run(s, x, y, seed), run(m, x, y, seed)
            assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]), (name, dtype, seed)
        k = keys_for(7)
        a, b = s(x, y, k), m(x, y, k)
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]), (name, dtype, "keys")
        m.eval()
        s.eval()
        assert torch.equal(s(x, y)[0], x) and torch.equal(s(x, y)[1], m(x, y)[1])
        m.train()
        s.train()


@pytest.mark.parametrize("name, make", FACTORIES, ids=ids)
def test_eval_is_identity_with_one_hot_targets(name, make):
    m = make().eval()
    x, y = batch(6)
    out, t = m(x, y)
    assert out is x
    torch.testing.assert_close(t, smoothed_one_hot(y, m.label_smoothing), atol=1e-7, rtol=0)


@pytest.mark.parametrize("name, make", FACTORIES, ids=ids)
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32], ids=["uint8", "float32"])
def test_empty_batch(name, make, dtype):
    x, y = batch(0, dtype)
    for train in (True, False):
        for keys in (None, keys_for(0)):
            out, t = make().train(train)(x, y, keys)
            assert out.shape == x.shape and out.dtype == dtype and t.shape == (0, K)


@pytest.mark.parametrize("name, make", FACTORIES, ids=ids)
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32], ids=["uint8", "float32"])
def test_no_inplace_change(name, make, dtype):
    x, y = batch(8, dtype)
    xb, yb = x.clone(), y.clone()
    xv, yv = x._version, y._version
    for train in (True, False):
        make().train(train)(x, y)
    assert x._version == xv and y._version == yv
    assert torch.equal(x, xb) and torch.equal(y, yb)


@pytest.mark.parametrize("name, make", FACTORIES, ids=ids)
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32], ids=["uint8", "float32"])
def test_channels_last_and_seeds(name, make, dtype):
    m = make()
    x, y = batch(16, dtype)
    xc = x.contiguous(memory_format=torch.channels_last)
    a, b = run(m, xc, y, 3), run(m, x, y, 3)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    c = run(m, x, y, 3)
    assert torch.equal(c[0], b[0]) and torch.equal(c[1], b[1])
    d = run(m, x, y, 4)
    assert not torch.equal(d[1], b[1]), "the output does not depend on the seed"


@pytest.mark.parametrize("name, make", FACTORIES, ids=ids)
def test_draws_per_sample_or_per_batch(name, make):
    m = make()
    x = torch.rand(64, 3, 12, 16)
    for keys in (None, keys_for(64)):
        torch.manual_seed(0)
        lam, box, mass = m.make_params(x, keys)
        assert lam.shape == (64,) and box.shape == (64, 4) and mass.shape == (64,)
        assert lam.device == x.device and box.dtype == torch.int64
        distinct = torch.unique(torch.cat([lam.double().view(-1, 1), box.double(),
                                           mass.view(-1, 1)], 1), dim=0).shape[0]
        if m.per_sample:
            assert distinct > 10, f"{name}: 64 samples, {distinct} distinct draws"
        else:
            assert distinct == 1, f"{name}: per_sample=False but {distinct} distinct draws"


@pytest.mark.parametrize("name, make", FACTORIES, ids=ids)
def test_keyed_invariance(name, make):
    m = make()
    x, y = batch(12)
    k = keys_for(12, offset=100)
    out, t = run(m, x, y, 0, k)
    # the global seed does not matter
    out2, t2 = run(m, x, y, 99, k)
    assert torch.equal(out, out2) and torch.equal(t, t2)
    # rolling the batch keeps every sample's predecessor: outputs roll with it
    for shift in (1, 5):
        r = lambda a: a.roll(shift, 0)  # noqa: E731
        out_r, t_r = m(r(x), r(y), r(k))
        assert torch.equal(out_r, r(out)) and torch.equal(t_r, r(t)), (name, shift)
    if m.per_sample:
        # sample i alone with its predecessor: [x[i-1], x[i]]
        for i in (0, 3, 11):
            idx = torch.tensor([(i - 1) % 12, i])
            o, tt = m(x[idx], y[idx], k[idx])
            assert torch.equal(o[1], out[i]) and torch.equal(tt[1], t[i]), (name, i)
    else:
        # one draw for the batch, from the set of keys: any order gives the same draw
        perm = torch.randperm(12, generator=torch.Generator().manual_seed(1))
        a = m.make_params(x, k)
        b = m.make_params(x[perm], k[perm])
        for u, v in zip(a, b):
            assert torch.equal(u, v), name


@pytest.mark.parametrize("name, make", FACTORIES, ids=ids)
def test_gradients(name, make):
    m = make()
    x, y = batch(5, torch.float64)
    k = keys_for(5)
    xg = x.clone().requires_grad_(True)
    out, t = m(xg, y, k)
    assert out.requires_grad and not t.requires_grad
    # keys fix the draws: the image map is linear in x, gradcheck it
    assert torch.autograd.gradcheck(lambda a: m(a, y, k)[0], (xg,), fast_mode=True)
    with torch.no_grad():
        assert not m(xg, y, k)[0].requires_grad
    # half inputs blend in float32 and keep their dtype, gradient included
    xh = x.to(torch.float16).requires_grad_(True)
    (g,) = torch.autograd.grad(m(xh, y, k)[0].float().sum(), xh)
    assert g.dtype == torch.float16 and g.shape == xh.shape


# export and compile are slow on the shared CPUs (keyed graphs most: a hash per draw, 8 gamma
# tries per Beta); the keyed combiner runs both image kernels (blend and paste).
@pytest.mark.parametrize("name, make, keyed, train", [
    ("MixUpOrCutMix-keyed", lambda: T.MixUpOrCutMix(K, label_smoothing=0.1, p=0.9), True, True),
    ("MixUpOrCutMix-eval", lambda: T.MixUpOrCutMix(K, label_smoothing=0.1), False, False),
    ("CutMix-batch", lambda: T.CutMix(K, per_sample=False), False, True),
    ("MixUp-batch-keyed", lambda: T.MixUp(K, per_sample=False, p=0.5), True, True),
], ids=["MixUpOrCutMix-keyed", "MixUpOrCutMix-eval", "CutMix-batch", "MixUp-batch-keyed"])
def test_export_dynamic_batch(name, make, keyed, train):
    """Exported with Dim("batch"), run at batch 1, 7 and 64: keyed or eval, equal to eager
    exactly; with torch's generator, eager's shapes and dtypes and rows summing to 1."""
    from torch.export import Dim, export

    m = make().train(train)
    b = Dim("batch")
    x, y = batch(4, torch.uint8)
    args = (x, y, keys_for(4)) if keyed else (x, y)
    ep = export(m, args, dynamic_shapes=({0: b},) * len(args))
    for n in (1, 7, 64):
        x, y = batch(n, torch.uint8, seed=n)
        args = (x, y, keys_for(n, offset=n)) if keyed else (x, y)
        got, ref = ep.module()(*args), m(*args)
        assert got[0].shape == x.shape and got[0].dtype == torch.uint8 and got[1].shape == (n, K)
        torch.testing.assert_close(got[1].sum(1), torch.ones(n), atol=1e-6, rtol=0)
        if keyed or not train:
            assert torch.equal(got[0], ref[0]) and torch.equal(got[1], ref[1]), (name, n)


@pytest.mark.parametrize("keyed", [False, True], ids=["generator", "keys"])
def test_compile_aot_eager(keyed):
    torch._dynamo.reset()
    # keyed graphs are large (a hash per draw, 8 gamma tries): compiling the combiner's two
    # keyed Betas took ~35 s here, CutMix's one is cheaper; the export test traces the combiner
    m = T.CutMix(K, p=0.9) if keyed else T.MixUpOrCutMix(K, label_smoothing=0.1, p=0.9)
    c = torch.compile(m, backend="aot_eager", fullgraph=True)
    x, y = batch(6)
    for keys in ([keys_for(6)] if keyed else [None]):
        xa = x.clone().requires_grad_(True)
        xb = x.clone().requires_grad_(True)
        a = run(m, xa, y, 2, keys)
        b = run(c, xb, y, 2, keys)
        torch.testing.assert_close(b[0], a[0], atol=1e-6, rtol=0)
        assert torch.equal(b[1], a[1])
        (ga,) = torch.autograd.grad(a[0].sum(), xa)
        (gb,) = torch.autograd.grad(b[0].sum(), xb)
        torch.testing.assert_close(gb, ga, atol=1e-6, rtol=0)


# ----------------------------------------------------------------------------- what it computes

def own_mass(t: Tensor, y: Tensor, eps: float) -> Tensor:
    """m_i: sample i's own label share, read back from its target (labels of neighbours differ)."""
    return ((t.double().gather(1, y.view(-1, 1)).squeeze(1) - eps / K) / (1 - eps))


def rectangle(mask: Tensor) -> bool:
    """True if the (H, W) bool mask is empty or exactly one filled axis-aligned rectangle."""
    if not mask.any():
        return True
    rows = mask.any(1).nonzero().squeeze(1)
    cols = mask.any(0).nonzero().squeeze(1)
    box = torch.zeros_like(mask)
    box[rows.min():rows.max() + 1, cols.min():cols.max() + 1] = True
    return torch.equal(box, mask)


def _ks2(a: Tensor, b: Tensor) -> float:
    """Two-sample Kolmogorov-Smirnov statistic: the largest gap between the empirical CDFs."""
    a, b = a.double().flatten().sort().values, b.double().flatten().sort().values
    grid = torch.cat([a, b])
    fa = torch.searchsorted(a, grid, right=True).double() / a.numel()
    fb = torch.searchsorted(b, grid, right=True).double() / b.numel()
    return (fa - fb).abs().max().item()


def _ks2_bound(n: int, m: int) -> float:
    """The statistic's 1 - 1e-6 quantile (asymptotic; conservative with ties)."""
    return math.sqrt(-0.5 * math.log(0.5e-6)) * math.sqrt((n + m) / (n * m))


# (module, torchvision's per-batch CutMix alpha): CutMix alone and inside MixUpOrCutMix with
# resnet50_v2's alphas (mixup 0.2, cutmix 1.0) and the other way round, every sample cut.
CUT_AREAS = [
    ("CutMix-1.0", lambda: T.CutMix(K, alpha=1.0), 1.0),
    ("CutMix-0.3", lambda: T.CutMix(K, alpha=0.3), 0.3),
    ("resnet50_v2", lambda: T.MixUpOrCutMix(K, 0.2, 1.0, switch_prob=1.0), 1.0),
    ("swapped", lambda: T.MixUpOrCutMix(K, 1.0, 0.2, switch_prob=1.0), 0.2),
]


@pytest.mark.parametrize("make", [lambda: T.MixUp(K, p=0.0, label_smoothing=0.1),
                                  lambda: T.CutMix(K, p=0.0),
                                  lambda: T.MixUpOrCutMix(K, p=0.0, label_smoothing=0.3)])
def test_p_zero_is_identity_with_one_hot_targets(make):
    m = make()
    for dtype in (torch.uint8, torch.float32):
        x, y = batch(10, dtype)
        for keys in (None, keys_for(10)):
            out, t = m(x, y, keys)
            assert torch.equal(out, x)
            assert torch.equal(t, smoothed_one_hot(y, m.label_smoothing))


def test_per_batch_draws_equal_torchvision():
    """per_sample=False is torchvision's batch-level MixUp/CutMix: with torchvision's λ and
    centre, the same box, corrected λ, images and targets."""
    x, y = batch(6, h=23, w=31)
    for seed in range(20):
        tv = V2.CutMix(num_classes=K)
        torch.manual_seed(seed)
        lam = tv._dist.sample(())
        cx = torch.randint(31, (1,))
        cy = torch.randint(23, (1,))
        torch.manual_seed(seed)
        params = tv.make_params([x])
        top, left, bh, bw, kept = BF.cutmix_boxes(lam.view(1).float(), cx, cy, 23, 31)
        x1, y1, x2, y2 = params["box"]
        assert (int(top), int(left), int(bh), int(bw)) == (y1, x1, y2 - y1, x2 - x1)
        assert float(kept) == params["lam_adjusted"]
        torch.manual_seed(seed)
        tv_out, tv_t = tv(x, y)
        out = BF.paste_from_partner(x, x, top.expand(6), left.expand(6), bh.expand(6),
                                    bw.expand(6))
        assert torch.equal(out, tv_out)
        torch.testing.assert_close(BF.mix_targets(BF.smooth_targets(y, K), kept.expand(6)),
                                   tv_t, atol=1e-7, rtol=0)
    torch.manual_seed(0)
    tv_out, tv_t = V2.MixUp(num_classes=K, alpha=0.4)(x, y)
    lam = tv_t[0, y[0]]
    torch.testing.assert_close(BF.blend_with_partner(x, lam.expand(6)), tv_out, atol=1e-6,
                               rtol=0)


@settings(max_examples=80)  # small tensors: cheap; the ci profile's 20 cover little
@given(n=st.integers(1, 12), h=st.integers(1, 9), w=st.integers(1, 9),
       alpha=st.floats(0.05, 20), p=st.floats(0, 1), eps=st.floats(0, 1),
       which=st.sampled_from(["MixUp", "CutMix", "MixUpOrCutMix"]),
       per_sample=st.booleans(), keyed=st.booleans(), seed=st.integers(0, 2**31 - 1),
       dtype=st.sampled_from([torch.uint8, torch.float32, torch.float64]))
def test_properties(n, h, w, alpha, p, eps, which, per_sample, keyed, seed, dtype):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (n, 3, h, w), generator=g, dtype=torch.uint8)
    if dtype != torch.uint8:
        x = x.to(dtype) / 255
    y = torch.randint(0, K, (n,), generator=g)
    kw = dict(p=p, per_sample=per_sample, label_smoothing=eps)
    m = (T.MixUpOrCutMix(K, alpha, alpha, **kw) if which == "MixUpOrCutMix"
         else getattr(T, which)(K, alpha, **kw))
    keys = keys_for(n, offset=seed % 1000) if keyed else None
    torch.manual_seed(seed)
    lam, box, mass = m.make_params(x, keys)
    torch.manual_seed(seed)
    out, t = m(x, y, keys)
    assert out.shape == x.shape and out.dtype == x.dtype
    assert (t >= 0).all() and torch.allclose(t.sum(1), torch.ones(n), atol=1e-5)
    assert ((lam >= 0) & (lam <= 1)).all() and ((mass >= 0) & (mass <= 1)).all()
    top, left, bh, bw = box.unbind(1)
    assert ((top >= 0) & (left >= 0) & (top + bh <= h) & (left + bw <= w)).all()
    torch.testing.assert_close(mass[bh * bw > 0], 1 - (bh * bw).double()[bh * bw > 0] / (h * w))
    j = (torch.arange(n) - 1) % n
    lo = torch.minimum(x, x[j]).double()
    hi = torch.maximum(x, x[j]).double()
    tol = 0.5 if dtype == torch.uint8 else 1e-6
    assert ((out.double() >= lo - tol) & (out.double() <= hi + tol)).all()
    ref = BF.mix_targets(BF.smooth_targets(y, K, eps), mass)
    assert torch.equal(t, ref)


@pytest.mark.parametrize("name, make", FACTORIES, ids=ids)
def test_no_host_sync(name, make):
    """Off the CPU nothing is read back to the host: the module moved with .to(device) runs
    seeded and keyed, uint8 and float32, on the meta device under contract.NoHostSync (host
    reads, host->device copies and Python data built on the device fail), and on CUDA (when
    present) under sync debug mode "error", its inputs and keys copied there beforehand."""
    from tests.contract import NoHostSync

    devices = ["meta"] + (["cuda"] if torch.cuda.is_available() else [])
    for device in devices:
        m = make().to(device)
        for dtype in (torch.uint8, torch.float32):
            xc, yc = batch(6, dtype)
            x, y, k = xc.to(device), yc.to(device), keys_for(6).to(device)
            if device != "meta":
                for keys in (None, k):  # warm-up outside the region: lazy init may sync
                    m(x, y, keys)
            with NoHostSync(device):
                for keys in (None, k):
                    out, t = m(x, y, keys)
            assert out.shape == x.shape and out.dtype == dtype and t.shape == (6, K)
            assert out.device.type == t.device.type == device


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name, make", FACTORIES, ids=ids)
def test_cuda_keyed_matches_cpu(name, make):
    """Keyed draws are integer hashes: CUDA gives CPU's λ to float rounding, so targets agree
    within one pixel's share (a box edge at a rounding boundary) and almost every pixel."""
    m = make()
    h, w = 12, 16
    for dtype in (torch.uint8, torch.float32):
        x, y = batch(64, dtype, h=h, w=w)
        k = keys_for(64)
        out, t = m(x, y, k)
        out_c, t_c = m(x.cuda(), y.cuda(), k.cuda())
        assert out_c.dtype == dtype and t_c.dtype == torch.float32
        assert (t_c.cpu() - t).abs().max() <= 1.0 / (h * w) + 1e-5
        close = (out_c.cpu().double() - out.double()).abs() <= (1.0 if dtype == torch.uint8
                                                                else 1e-5)
        assert close.double().mean() > 0.99, name


# ----------------------------------------------------------------------------- errors, Augment

@pytest.mark.parametrize("make", [lambda: T.MixUp(K), lambda: T.CutMix(K),
                                  lambda: T.MixUpOrCutMix(K)])
def test_bad_labels_and_keys(make):
    m = make()
    name = type(m).__name__
    x, y = batch(4)
    cases = [
        (y.float(), TypeError, "integer dtype"),
        (y.bool(), TypeError, "integer dtype"),
        (torch.zeros(4, K, dtype=torch.int64), TypeError, "must be floating"),
        (torch.zeros(4, K + 1), ValueError, "num_classes is 10"),
        (y[:3], ValueError, "3 labels for a batch of 4"),
        (y.view(2, 2, 1), ValueError, "class indices"),
        (torch.tensor([0, 1, K, 2]), ValueError, r"in \[0, 10\)"),
        (torch.tensor([0, -1, 3, 2]), ValueError, r"in \[0, 10\)"),
    ]
    s = torch.jit.script(m)
    for labels, err, msg in cases:
        with pytest.raises(err, match=f"{name}: .*{msg}"):
            m(x, labels)
        with pytest.raises(torch.jit.Error, match=msg):
            s(x, labels)
    assert m(x, y.to(torch.int32))[1].shape == (4, K)  # any integer dtype
    with pytest.raises(ValueError, match=f"{name}: keys must have one key per image: got 3 "
                                         f"keys for a batch of 4 images"):
        m(x, y, keys_for(3))
    with pytest.raises(TypeError, match=f"{name}: keys must be an int64 tensor"):
        m(x, y, keys_for(4).int())
    with pytest.raises(torch.jit.Error, match="got 5 keys for a batch of 4 images"):
        s(x, y, keys_for(5))
    with pytest.raises(ValueError, match=f"{name}: expected an .N, C, H, W. batch"):
        m(x[0], y)


@pytest.mark.parametrize("kwargs, err, msg", [
    (dict(num_classes=0), ValueError, r"num_classes must be in \[1, 1048576\], got 0"),
    (dict(num_classes=2.0), TypeError, r"num_classes must be an int, got float 2\.0"),
    (dict(num_classes=True), TypeError, r"num_classes must be an int, got bool True"),
    (dict(num_classes=1 << 21), ValueError, r"num_classes must be in \[1, 1048576\], got 2097152"),
    (dict(num_classes=3, alpha=0.0), ValueError, r"alpha must be in \[0\.05, 10000\], got 0\.0"),
    (dict(num_classes=3, alpha=math.nan), ValueError, r"alpha must be a finite number, got nan"),
    (dict(num_classes=3, alpha=1e5), ValueError,
     r"alpha must be in \[0\.05, 10000\], got 100000\.0"),
    (dict(num_classes=3, p=1.5), ValueError, r"^p must be in \[0, 1\], got 1\.5"),
    (dict(num_classes=3, per_sample=1), TypeError, r"per_sample must be a bool, got int 1"),
    (dict(num_classes=3, label_smoothing=-0.1), ValueError,
     r"label_smoothing must be in \[0, 1\], got -0\.1"),
])
def test_bad_arguments(kwargs, err, msg):
    """Each bad argument is refused with the type and the message that names it and its range
    (MixUpOrCutMix: ``alpha`` is ``mixup_alpha``/``cutmix_alpha``)."""
    for cls in (T.MixUp, T.CutMix):
        with pytest.raises(err, match=msg):
            cls(**kwargs)
    mk = {("mixup_alpha" if k == "alpha" else k): v for k, v in kwargs.items()}
    with pytest.raises(err, match=msg.replace("alpha", "mixup_alpha")):
        T.MixUpOrCutMix(**mk)
    with pytest.raises(ValueError, match=r"cutmix_alpha must be in \[0\.05, 10000\], got 0"):
        T.MixUpOrCutMix(3, cutmix_alpha=0)
    with pytest.raises(ValueError, match=r"switch_prob must be in \[0, 1\], got 2"):
        T.MixUpOrCutMix(3, switch_prob=2)


def test_augment_refuses_label_mixers():
    for mixer in (T.MixUp(K), T.CutMix(K), T.MixUpOrCutMix(K)):
        with pytest.raises(TypeError, match="goes after the Augment"):
            batchaug.Augment(T.RandomHorizontalFlip(), mixer)
        with pytest.raises(TypeError, match="goes after the Augment"):
            T.RandomApply([mixer])
    for tv, ours in ((V2.MixUp(num_classes=K), "batchaug.MixUp"),
                     (V2.CutMix(num_classes=K), "batchaug.CutMix")):
        with pytest.raises(TypeError, match=f"use {ours}.*after the Augment"):
            batchaug.Augment(tv)


def test_repr_reads_like_the_code():
    assert repr(T.MixUpOrCutMix(5, 0.8, 1.0, switch_prob=0.5, label_smoothing=0.1)) == (
        "MixUpOrCutMix(num_classes=5, mixup_alpha=0.8, cutmix_alpha=1.0, switch_prob=0.5, "
        "p=1.0, per_sample=True, label_smoothing=0.1)")
    assert repr(T.CutMix(5)) == ("CutMix(num_classes=5, alpha=1.0, p=1.0, per_sample=True, "
                                 "label_smoothing=0.0)")


# ----------------------------------------------------------------------------- recipes

@pytest.mark.parametrize("name", ["resnet50_v2", "deit"])
def test_training_recipes_run_a_step(name):
    from batchaug import recipes

    make = getattr(recipes, name)
    r = make(num_classes=K, size=32, eval_resize=36, **({"eval_size": 32}
                                                         if name == "resnet50_v2" else {}))
    assert isinstance(r.augment, batchaug.Augment) and isinstance(r.eval_augment,
                                                                 batchaug.Augment)
    assert r.mix.label_smoothing == 0.1 and r.mix.switch_prob == 0.5
    assert (r.mix.mixup_alpha, r.mix.cutmix_alpha) == ((0.2, 1.0) if name == "resnet50_v2"
                                                        else (0.8, 1.0))
    images = torch.randint(0, 256, (6, 3, 40, 40), dtype=torch.uint8)
    labels = torch.arange(6) % K
    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                        nn.Linear(4, K))
    torch.manual_seed(0)
    x, targets = r.mix(r.augment(images), labels)
    assert x.shape == (6, 3, 32, 32) and x.dtype == torch.float32
    loss = torch.nn.functional.cross_entropy(net(x), targets)
    loss.backward()
    assert torch.isfinite(loss)
    # scripted pieces give the same step
    torch.manual_seed(0)
    xs, ts = torch.jit.script(r.mix)(torch.jit.script(r.augment)(images), labels)
    assert torch.equal(xs, x) and torch.equal(ts, targets)
    assert r.eval_augment(images).shape == (6, 3, 32, 32)


def test_from_torchvision_points_label_mixers_to_the_training_step():
    with pytest.raises(ValueError, match=r"MixUp.*batchaug\.MixUp\(num_classes=10, alpha=0\.2\)"
                       r".*training step"):
        batchaug.from_torchvision(V2.Compose([V2.RandomHorizontalFlip(),
                                              V2.MixUp(num_classes=10, alpha=0.2)]))


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32, torch.float64])
@pytest.mark.parametrize("chunk_bytes", [1, 200, 1 << 30])
def test_chunked_kernels_equal_the_rolled_batch(dtype, chunk_bytes, monkeypatch):
    """The kernels write one fresh output chunk by chunk (no rolled copy); with chunks of one
    sample, of a few, and the whole batch they equal the lerp/where on ``x.roll(1, 0)`` bit for
    bit, sample 0 taking the last sample as its partner; with gradients they take the rolled
    path and stay differentiable."""
    from batchaug.functional import _augment as FA

    monkeypatch.setattr(FA, "mix_chunk_bytes", lambda: chunk_bytes)
    x, _ = batch(9, dtype, h=5, w=4)
    m = T.MixUpOrCutMix(K, switch_prob=0.5)
    torch.manual_seed(2)
    lam, box, _ = m.make_params(x)
    b = box.unbind(1)
    mask = BF.box_mask(*b, 5, 4)
    compute = torch.float64 if dtype == torch.float64 else torch.float32

    def done(y):
        return y.round().clamp(0, 255).to(dtype) if dtype == torch.uint8 else y

    rolled = x.roll(1, 0).to(compute)
    lam4 = lam.to(compute).view(-1, 1, 1, 1)
    assert torch.equal(BF.blend_with_partner(x, lam),
                       done(torch.lerp(rolled, x.to(compute), lam4)))
    assert torch.equal(BF.blend_and_paste(x, lam, *b),
                       done(torch.lerp(rolled, x.to(compute), torch.where(mask, 0.0, lam4))))
    assert torch.equal(BF.paste_from_partner(x, x, *b), torch.where(mask, x.roll(1, 0), x))
    if dtype != torch.uint8:
        xg = x.clone().requires_grad_(True)
        BF.blend_and_paste(xg, lam, *b).sum().backward()
        assert xg.grad is not None and xg.grad.shape == x.shape


@pytest.mark.parametrize("name, make", FACTORIES, ids=ids)
def test_inplace_equals_out_of_place(name, make, monkeypatch):
    """``inplace=True`` overwrites the images with exactly the out-of-place result (every
    dtype, keyed or not, chunks of 1 sample, a few, or the whole batch, scripted too) and
    returns that same tensor; eval leaves them alone; autograd-recorded images are refused."""
    from batchaug.functional import _augment as FA

    m, mi = make().train(), make().train()
    mi.inplace = True
    scripted = torch.jit.script(make().train())
    scripted.inplace = True
    assert "inplace=True" in repr(mi)
    for chunk_bytes in (1, 8000, 1 << 30):
        monkeypatch.setattr(FA, "mix_chunk_bytes", lambda: chunk_bytes)
        for dtype in ALL_DTYPES:
            x, y = batch(9, dtype, seed=chunk_bytes % 7)
            for keys in (None, keys_for(9)):
                want, want_t = run(m, x, y, 3, keys)
                xi = x.clone()
                got, got_t = run(mi, xi, y, 3, keys)
                assert got.data_ptr() == xi.data_ptr() and torch.equal(xi, want), (dtype, keys)
                assert torch.equal(got_t, want_t)
                if chunk_bytes == 8000:
                    xs = x.clone()
                    assert torch.equal(run(scripted, xs, y, 3, keys)[0], want) and \
                        torch.equal(xs, want)
    x, y = batch(6)
    xi = x.clone()
    assert torch.equal(mi.eval()(xi, y)[0], x) and torch.equal(xi, x)
    e = torch.empty(0, 3, 4, 4)
    assert mi.train()(e, torch.zeros(0, dtype=torch.int64))[0].shape == e.shape
    with pytest.raises(ValueError, match="inplace=True"):
        mi(x.clone().requires_grad_(True), y)
    with pytest.raises(ValueError, match="share memory.*dim 0"):
        mi(x[:1].expand(6, -1, -1, -1), y)
    with pytest.raises(TypeError, match="inplace"):
        T.MixUp(K, inplace=1)


def test_inplace_exports_with_a_dynamic_batch():
    """``inplace=True`` under torch.export (Dim("batch"), keyed, float32): at batch 1, 7 and 64
    the exported program overwrites its input with exactly the out-of-place eager result."""
    from torch.export import Dim, export

    m = T.MixUpOrCutMix(K, inplace=True).train()
    plain = T.MixUpOrCutMix(K).train()
    b = Dim("batch")
    x, y = batch(4)
    ep = export(m, (x.clone(), y, keys_for(4)), dynamic_shapes=({0: b},) * 3)
    for n in (1, 7, 64):
        x, y = batch(n, seed=n)
        k = keys_for(n, offset=n)
        want, want_t = plain(x, y, k)
        xi = x.clone()
        got, got_t = ep.module()(xi, y, k)
        assert torch.equal(got, want) and torch.equal(xi, want) and torch.equal(got_t, want_t)


# --------------------------------------------------------------------- one class per mixer

class TestMixUp:
    """MixUp: the blend read back from the targets, lambda ~ Beta(alpha, alpha)."""

    @pytest.mark.parametrize("eps", [0.0, 0.1])
    @pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.uint8])
    def test_mixup_output_is_the_blend_read_from_targets(self, dtype, eps):
        m = T.MixUp(K, alpha=1.0, p=0.8, label_smoothing=eps)
        x, y = batch(20, dtype)
        out, t = run(m, x, y, 5)
        lam = own_mass(t, y, eps)
        j = (torch.arange(20) - 1) % 20
        # the partner j is where the rest of the mass sits
        rest = t.double().clone()
        rest.scatter_(1, y.view(-1, 1), -1.0)
        mixed = lam < 1 - 1e-6
        assert mixed.sum() > 5 and (~mixed).sum() > 0
        assert torch.equal(rest.argmax(1)[mixed], y[j][mixed])
        torch.testing.assert_close(rest.max(1).values, (1 - lam) * (1 - eps) + eps / K, atol=1e-6,
                                   rtol=0)
        expected = lam.view(-1, 1, 1, 1) * x.double() + (1 - lam.view(-1, 1, 1, 1)) * x[j].double()
        if dtype == torch.uint8:
            assert ((out.double() - expected).abs() <= 0.5 + 1e-4).all()
        else:
            torch.testing.assert_close(out.double(), expected, atol=1e-6, rtol=0)
        assert torch.equal(out[~mixed], x[~mixed])  # unmixed samples exactly unchanged

    @pytest.mark.parametrize("alpha", [0.2, 1.0, 3.0])
    @pytest.mark.parametrize("keyed", [False, True])
    def test_lambda_matches_beta(self, alpha, keyed):
        n = 20000
        x = torch.zeros(n, 1, 4, 4)
        keys = keys_for(n) if keyed else None
        torch.manual_seed(1)
        lam = T.MixUp(K, alpha=alpha).make_params(x, keys)[0].double()
        var = 1 / (4 * (2 * alpha + 1))  # Beta(a, a)
        assert abs(lam.mean().item() - 0.5) < 5 * math.sqrt(var / n)
        # var of the sample variance: (mu4 - var^2) / n, mu4 of Beta(a, a) = 3 var^2 (2a+1)/(2a+3)
        mu4 = 3 * var ** 2 * (2 * alpha + 1) / (2 * alpha + 3)
        assert abs(lam.var().item() - var) < 5 * math.sqrt((mu4 - var ** 2) / n)
        # p: the share of samples mixed at all
        lam_p = T.MixUp(K, alpha=alpha, p=0.25).make_params(x, keys)[0]
        assert abs((lam_p < 1).double().mean().item() - 0.25) < 5 * math.sqrt(0.25 * 0.75 / n)


class TestCutMix:
    """CutMix: one rectangle of the partner pasted, the kept share and the box positions as
    torchvision's."""

    @pytest.mark.parametrize("make", [lambda: T.CutMix(K, alpha=0.5, p=0.8, label_smoothing=0.1),
                                      lambda: T.MixUpOrCutMix(K, switch_prob=1.0, p=0.9,
                                                              label_smoothing=0.1)],
                             ids=["CutMix", "MixUpOrCutMix-all-cut"])
    @pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
    def test_cutmix_pastes_one_rectangle_of_the_partner(self, make, dtype):
        m = make()
        n, h, w = 40, 13, 17
        g = torch.Generator().manual_seed(0)
        # every pixel of a sample differs from its predecessor's
        base = torch.randint(0, 120, (n, 3, h, w), generator=g, dtype=torch.uint8)
        x = base + (torch.arange(n) % 2 * 128).to(torch.uint8).view(-1, 1, 1, 1)
        if dtype != torch.uint8:
            x = x.to(dtype) / 255
        y = torch.arange(n) % K
        out, t = run(m, x, y, 7)
        j = (torch.arange(n) - 1) % n
        from_self = (out == x).all(1)
        from_partner = (out == x[j]).all(1)
        assert (from_self | from_partner).all(), "a pixel came from neither x_i nor its partner"
        pasted = 0
        for i in range(n):
            assert rectangle(from_partner[i]), f"sample {i}: pasted region is not one rectangle"
            frac = from_partner[i].double().mean()
            mass = own_mass(t[i:i + 1], y[i:i + 1], 0.1)[0]
            assert abs(frac - (1 - mass)) <= 1.0 / (h * w) + 1e-9, (i, frac, mass)
            pasted += int(from_partner[i].any())
        assert pasted > n // 3

    @pytest.mark.parametrize("name, make, alpha", CUT_AREAS, ids=[c[0] for c in CUT_AREAS])
    @pytest.mark.parametrize("keyed", [False, True])
    def test_cutmix_kept_share_matches_torchvision(self, name, make, alpha, keyed):
        """Each sample's CutMix box follows torchvision's rule with lambda ~ Beta(cutmix_alpha,
        cutmix_alpha): its kept share (1 - pasted area, what the target uses) has the distribution
        of torchvision's ``lam_adjusted`` drawn call by call (two-sample KS, 64x48 images)."""
        n = 4000
        x = torch.zeros(n, 1, 48, 64)
        torch.manual_seed(11)
        lam, box, mass = make().make_params(x, keys_for(n) if keyed else None)
        assert torch.equal(lam, torch.ones(n))  # every sample cut, none blended
        torch.testing.assert_close(mass, 1 - (box[:, 2] * box[:, 3]).double() / (48 * 64))
        tv = V2.CutMix(num_classes=K, alpha=alpha)
        torch.manual_seed(12)
        ref = torch.tensor([tv.make_params([x[:1]])["lam_adjusted"] for _ in range(n)])
        d = _ks2(mass, ref)
        assert d <= _ks2_bound(n, n), (
            f"{name}: KS {d:.3f}, mean {mass.mean():.3f} vs {ref.mean():.3f}")

    @pytest.mark.parametrize("keyed", [False, True])
    def test_cutmix_boxes_cover_every_position_as_torchvision(self, keyed):
        """With lambda pinned near 1/2 (alpha 1e4) the box size is fixed and its position follows
        the centre: on a 4x6 image each of the 24 centres (the last row and column included) gives
        one clipped box. The boxes' frequencies match torchvision's CutMix boxes drawn call by call
        (chi-square test of homogeneity), and every box torchvision draws is drawn."""
        n, h, w = 4800, 4, 6
        x = torch.zeros(n, 1, h, w)
        torch.manual_seed(14)
        _, box, _ = T.CutMix(K, alpha=1e4).make_params(x, keys_for(n) if keyed else None)
        ours = [tuple(b) for b in box.tolist()]
        tv = V2.CutMix(num_classes=K, alpha=1e4)
        torch.manual_seed(15)
        ref = []
        for _ in range(n):
            x1, y1, x2, y2 = tv.make_params([x[:1]])["box"]
            ref.append((y1, x1, y2 - y1, x2 - x1))
        cats = sorted(set(ours) | set(ref))
        assert set(ours) == set(ref), f"only ours: {set(ours) - set(ref)}, only torchvision's: " \
                                      f"{set(ref) - set(ours)}"
        a = torch.tensor([ours.count(c) for c in cats], dtype=torch.float64)
        b = torch.tensor([ref.count(c) for c in cats], dtype=torch.float64)
        pooled = (a + b) / (2 * n)
        chi2 = (((a - n * pooled) ** 2 + (b - n * pooled) ** 2) / (n * pooled)).sum().item()
        dof = len(cats) - 1
        q = 2.0 / (9.0 * dof)
        assert chi2 <= dof * (1 - q + 5 * math.sqrt(q)) ** 3, f"chi2 {chi2:.1f} with {dof} dof"


class TestMixUpOrCutMix:
    """MixUpOrCutMix: the per-sample switch, MixUp's lambda inside it, the one-pass
    blend-and-paste kernel."""

    def test_mixup_or_cutmix_switches_per_sample(self):
        m = T.MixUpOrCutMix(K, mixup_alpha=0.8, cutmix_alpha=1.0, switch_prob=0.3)
        n = 20000
        x = torch.zeros(n, 1, 16, 16)
        for keys in (None, keys_for(n)):
            torch.manual_seed(0)
            lam, box, mass = m.make_params(x, keys)
            cut = (box[:, 2] * box[:, 3]) > 0
            blended = lam < 1
            assert not (cut & blended).any()  # one method per sample
            frac = cut.double().mean().item()
            # an empty box (λ near 1) is possible for a CutMix sample: a small deficit
            assert abs(frac - 0.3) < 0.02, frac
            assert abs(blended.double().mean().item() - 0.7) < 5 * math.sqrt(0.21 / n)
            # MixUp samples: Beta(0.8, 0.8)
            lm = lam[blended].double()
            assert abs(lm.mean().item() - 0.5) < 5 * math.sqrt(0.25 / 2.6 / lm.numel())

    @pytest.mark.parametrize("keyed", [False, True])
    def test_mixup_lambda_inside_mixup_or_cutmix_is_beta_mixup_alpha(self, keyed):
        """MixUpOrCutMix's MixUp samples draw lambda ~ Beta(mixup_alpha, mixup_alpha), whatever
        cutmix_alpha is: KS against torchvision's MixUp distribution (resnet50_v2's 0.2, and
        3.0)."""
        n = 4000
        x = torch.zeros(n, 1, 4, 4)
        for mixup_alpha, cutmix_alpha in ((0.2, 1.0), (3.0, 0.5)):
            torch.manual_seed(13)
            m = T.MixUpOrCutMix(K, mixup_alpha, cutmix_alpha, switch_prob=0.0)
            lam = m.make_params(x, keys_for(n) if keyed else None)[0]
            ref = V2.MixUp(num_classes=K, alpha=mixup_alpha)._dist.sample((n,))
            d = _ks2(lam, ref)
            assert d <= _ks2_bound(n, n), f"alpha {mixup_alpha}: KS {d:.3f}"

    @pytest.mark.parametrize("dtype", [torch.uint8, torch.float16, torch.float32, torch.float64])
    def test_blend_and_paste_equals_blend_then_paste(self, dtype):
        """The combiner's one-pass kernel against the two kernels it replaces, exactly."""
        x, _ = batch(30, dtype, h=11, w=13)
        m = T.MixUpOrCutMix(K, switch_prob=0.5, p=0.9)
        torch.manual_seed(4)
        lam, box, _ = m.make_params(x)
        assert (box[:, 2] * box[:, 3] > 0).any() and ((lam > 0) & (lam < 1)).any()
        b = box.unbind(1)
        two = BF.paste_from_partner(x, BF.blend_with_partner(x, lam), *b)
        one = BF.blend_and_paste(x, lam, *b)
        assert one.dtype == dtype and torch.equal(one, two)
        for script in (False, True):
            f = torch.jit.script(BF.blend_and_paste) if script else BF.blend_and_paste
            assert torch.equal(f(x, lam, *b), one)
