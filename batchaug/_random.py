"""Every random draw of the transforms goes through here: one place to change the source.

Each function draws for a batch ``x`` (one value, or one row of ``size`` values, per sample) on
``x.device``, with torch's global generator. Shapes come from ``x.shape[0]`` without turning it
into a Python int, so a dynamic batch stays symbolic under ``torch.export``; all functions
script with TorchScript and trace under ``torch.compile(fullgraph=True)``.

**Keyed draws.** Every function takes ``keys`` (an int64 ``(N,)`` tensor, one key per sample,
values in ``[0, 2**63)``) and ``draw`` (a small int naming the call site within a transform).
With ``keys=None`` the draw uses torch's global generator, as torch does. With keys, sample i's
values are a pure function of ``(keys[i], draw, element)``: a counter-based generator (an integer
hash, ``_hash32``) computed with tensor ops on the keys' device, so they do not depend on the
batch size, the sample's position, the number of ranks or the GPU model. The integer part is
exact everywhere: 32-bit state held in int64, multiplied by constants below 2**31 in magnitude
so no product leaves int64, no float in the integer part. Floats are made from the top 24
(float32) or 32 or 53 (float64) bits of the hash, so CPU and CUDA agree bit for bit on the
integers and to float rounding on the rest.

A draw is launch-bound (a few hundred samples per batch), so each costs as few kernels as the
stream allows (one hash per call site, per container child, per Gamma row).

Keys come from ``sample_keys(seed, epoch, index)`` (what ``DeviceLoader(return_keys=True)``
yields); a container gives its i-th child ``substream(keys, i)`` so that two transforms never
share a stream.

Example:
    >>> import torch
    >>> from batchaug import _random
    >>> x = torch.zeros(4, 3, 8, 8)
    >>> _random.uniform(x, 0.5, 1.5).shape, _random.bernoulli(x, 0.5).dtype
    (torch.Size([4]), torch.bool)
"""
from __future__ import annotations

import math
from typing import List, Optional

import torch
from torch import Tensor


# Constants are written as literals below: TorchScript cannot read module-level ints. 0x7FEB352D
# and 0x846CA68B are lowbias32's multipliers (Wellons' hash-prospector); 0x9E3779B9 is the
# 32-bit golden-ratio step; 0xFFFFFFFF masks to 32 bits; the other salts are arbitrary odd words.


def _gamma_meta() -> Optional["torch.library.Library"]:
    """The Meta kernel of ``aten::_standard_gamma`` (the unkeyed Beta and Dirichlet draws), as
    torch 2.14 registers it (``torch/_meta_registrations.py``: ``empty_like``), where the
    installed torch has none (2.11): without it FakeTensor, ``torch.export`` and
    ``torch.compile`` cannot trace MixUp, CutMix or AugMix. Registered only where missing, so
    a torch that has one keeps its own; the drawn values are unchanged either way."""
    if torch._C._dispatch_has_kernel_for_dispatch_key("aten::_standard_gamma", "Meta"):
        return None
    lib = torch.library.Library("aten", "IMPL")
    lib.impl("_standard_gamma", lambda self, generator=None: torch.empty_like(self), "Meta")
    return lib


_GAMMA_META = _gamma_meta()  # the registration lasts as long as this reference


def _shape(x: Tensor, size: Optional[int]) -> List[int]:
    if size is None:
        return [x.shape[0]]
    return [x.shape[0], size]


def _mul32(a: Tensor, c: int) -> Tensor:
    """``(a * c) mod 2**32`` for int64 ``a`` in [0, 2**32) and a 32-bit constant ``c``: one
    multiply by ``c`` or ``c - 2**32`` (whichever is below 2**31 in magnitude), so the product
    stays inside int64 (no signed overflow) and its low 32 bits are ``a * c``'s (two's
    complement); two kernels instead of six for 16-bit limbs."""
    if c >= 0x80000000:
        c = c - 0x100000000
    return (a * c) & 0xFFFFFFFF


def _hash32(a: Tensor) -> Tensor:
    """lowbias32: a bijective 32-bit integer hash with full avalanche, on int64 in [0, 2**32)."""
    a = a ^ (a >> 16)
    a = _mul32(a, 0x7FEB352D)
    a = a ^ (a >> 15)
    a = _mul32(a, 0x846CA68B)
    return a ^ (a >> 16)


def _mul32_int(a: int, c: int) -> int:
    """``_mul32`` on Python ints (for constants), in limbs for TorchScript's int64."""
    return (a * (c & 0xFFFF) + (((a * (c >> 16)) & 0xFFFF) << 16)) & 0xFFFFFFFF


def _hash32_int(a: int) -> int:
    """``_hash32`` of one Python int in [0, 2**32): constants are hashed once, not per sample."""
    a = a ^ (a >> 16)
    a = _mul32_int(a, 0x7FEB352D)
    a = a ^ (a >> 15)
    a = _mul32_int(a, 0x846CA68B)
    return a ^ (a >> 16)


def _draw_const(draw: int, salt: int) -> int:
    return _hash32_int(_mul32_int(draw & 0xFFFFFFFF, 0x9E3779B9) ^ salt)


def _site(keys: Tensor, draw: int) -> Tensor:
    """(N,) int64 in [0, 2**32): what call site ``draw`` hashes for each key,
    ``lo ^ (hi * m_d mod 2**32) ^ c_d`` of the key's 32 low and 31 high bits (``m_d`` odd and
    below 2**31, so the product stays inside int64). For one ``hi`` (one seed and epoch) it is
    a bijection of ``lo`` (the sample index), so samples of an epoch never share a draw; for
    keys differing in ``hi`` two sites coincide with probability 2**-32, independently per
    site (``m_d`` and ``c_d`` differ per site). Five kernels, so that a draw costs one hash."""
    m = (_draw_const(draw, 0x2545F491) & 0x7FFFFFFF) | 1
    return ((keys >> 32) * m ^ keys ^ _draw_const(draw, 1)) & 0xFFFFFFFF


def _words(keys: Tensor, draw: int, size: Optional[int]) -> Tensor:
    """32-bit hash words, (N,) or (N, size): word j of sample i is a function of
    ``(keys[i], draw, j)`` only. One hash of the site for (N,); for (N, size) that hash xor
    ``j`` is hashed again (counter mode), so every row is a pseudo-random sequence even for
    keys that differ in one bit."""
    state = _hash32(_site(keys, draw))
    if size is None:
        return state
    # a counter: the state is already a hash, so state ^ j is distinct per j and pseudo-random
    # across samples and sites
    return _hash32(state.unsqueeze(1) ^ torch.arange(size, device=keys.device))


def keyed_rand(keys: Tensor, draw: int, size: Optional[int] = None) -> Tensor:
    """float32 uniform in [0, 1) from the top 24 bits of a hash word, (N,) or (N, size)."""
    return (_words(keys, draw, size) >> 8).to(torch.float32) * (1.0 / 16777216.0)


def keyed_rand64(keys: Tensor, draw: int, size: Optional[int] = None) -> Tensor:
    """float64 uniform in [0, 1) from 53 bits of two hash words, (N,) or (N, size)."""
    w = _words(keys, draw, size)
    hi = w >> 5  # 27 bits
    lo = _hash32(w ^ 0x5BD1E995) >> 6  # 26 bits
    return (hi * 67108864 + lo).to(torch.float64) * (1.0 / 9007199254740992.0)


def _keyed_open64(keys: Tensor, draw: int, size: Optional[int]) -> Tensor:
    """float64 ``(word + 0.5) / 2**32``: uniform on 2**32 points in (0, 1), never 0 or 1 (a
    log needs no clamp), from one word."""
    return (_words(keys, draw, size).to(torch.float64) + 0.5) * (1.0 / 4294967296.0)


def _rand64(x: Tensor, size: Optional[int], keys: Optional[Tensor], draw: int) -> Tensor:
    if keys is None:
        return torch.rand(_shape(x, size), device=x.device, dtype=torch.float64)
    return _keyed_open64(keys.to(x.device), draw, size)


def sample_keys(seed: int, epoch: int, index: Tensor) -> Tensor:
    """int64 keys naming ``(seed, epoch, sample index)``: ``index`` is an integer tensor of
    global sample indices, each in [0, 2**31); the result has its shape and device. ``seed``
    and ``epoch`` are ints in [0, 2**63).

    The top 31 bits hash all of ``(seed, epoch)`` (no two seeds fold onto one), the low bits
    are the index itself, so distinct samples of one epoch never share a key. The index is
    checked: an index that is not an integer tensor is a TypeError, one outside [0, 2**31) a
    ValueError (on the CPU; on another device the check is a device-side assertion, which
    costs no host sync and fails the next synchronising call).

    Example:
        >>> import torch
        >>> from batchaug import _random
        >>> k = _random.sample_keys(0, 3, torch.arange(4))
        >>> bool((k[1:] - k[:-1] == 1).all())  # the index is the key's low bits
        True
    """
    for name, v in (("seed", seed), ("epoch", epoch)):
        if isinstance(v, bool) or not isinstance(v, int) and not hasattr(v, "__index__"):
            raise TypeError(f"sample_keys: {name} must be an int, got {type(v).__name__}")
    seed, epoch = int(seed), int(epoch)
    if not 0 <= seed < 2**63 or not 0 <= epoch < 2**63:
        raise ValueError(f"sample_keys: seed and epoch must be in [0, 2**63), got {seed} and "
                         f"{epoch}")
    if not isinstance(index, Tensor):
        raise TypeError(f"sample_keys: index must be an integer tensor, got "
                        f"{type(index).__name__}")
    if index.dtype.is_floating_point or index.dtype.is_complex or index.dtype == torch.bool:
        raise TypeError(f"sample_keys: index must be an integer tensor (sample indices), got "
                        f"{index.dtype}")
    idx = index.to(torch.int64)
    bad = (idx < 0) | (idx >= 2**31)
    if idx.device.type == "cpu":
        if idx.numel() > 0 and bool(bad.any()):  # a CPU read costs no device sync
            raise ValueError(f"sample_keys: index must be in [0, 2**31), got values from "
                             f"{int(idx.min())} to {int(idx.max())}")
    else:
        torch._assert_async(~bad.any(), "sample_keys: index must be in [0, 2**31)")
    # seeds and epochs below 2**32 keep their keys from earlier releases; above, their high
    # halves go through two more hash rounds instead of being folded onto the low halves
    top = _hash32_int(_hash32_int((seed & 0xFFFFFFFF) ^ 0x1B873593) ^ (epoch & 0xFFFFFFFF))
    if seed >> 32 or epoch >> 32:
        top = _hash32_int(_hash32_int(top ^ _hash32_int((seed >> 32) ^ 0x68E31DA4))
                          ^ (epoch >> 32))
    return ((top & 0x7FFFFFFF) << 32) | idx


def substream(keys: Optional[Tensor], i: int) -> Optional[Tensor]:
    """The keys of child ``i`` of a container (``None`` stays ``None``): for each ``i`` a
    bijection of ``[0, 2**63)``, one Feistel round over the key's 31 high and 32 low bits with
    a per-child constant xored into the low word (``hi ^= F_i(lo)``, ``lo ^= c_i``), so
    distinct samples keep distinct keys in every child, and children's draws are independent
    of each other and of the parent's (every draw hashes ``hi`` and ``lo`` together). The
    constant makes nesting order matter: ``substream(substream(k, i), j)`` is neither ``k``
    (for ``i == j``) nor ``substream(substream(k, j), i)``."""
    if keys is None:
        return None
    k = keys.to(torch.int64)
    f = (_hash32((k & 0xFFFFFFFF) ^ _draw_const(i, 0x3C6EF372)) & 0x7FFFFFFF) << 32
    return k ^ (f | _draw_const(i, 0x5851F42D))


def uniform(x: Tensor, low: float, high: float, size: Optional[int] = None,
            keys: Optional[Tensor] = None, draw: int = 0) -> Tensor:
    """float32 values uniform in [low, high), shape (N,) or (N, size). ``low == high`` gives
    exactly ``low`` (a degenerate range is a fixed value, as in torchvision)."""
    if keys is None:
        r = torch.rand(_shape(x, size), device=x.device)
        if low == high:
            return torch.full_like(r, low)
        return r * (high - low) + low
    w = (_words(keys.to(x.device), draw, size) >> 8).to(torch.float32)
    if low == high:
        return torch.full_like(w, low)
    # (w / 2**24) * (high - low) with the power of two folded into the factor: the same float32
    # rounding, one kernel less
    r = w * ((high - low) * (1.0 / 16777216.0))
    if low == 0.0:
        return r
    return r + low


def integers(x: Tensor, low: int, high: int, size: Optional[int] = None,
             keys: Optional[Tensor] = None, draw: int = 0) -> Tensor:
    """int64 values uniform in [low, high) (``high > low``), shape (N,) or (N, size).
    Keyed, a range up to 2**31 is ``(word * range) >> 32`` of one 32-bit hash word: integers
    only (so CPU and CUDA agree exactly), below 2**63, bias at most range / 2**32."""
    if keys is None:
        return torch.randint(low, high, _shape(x, size), device=x.device)
    if high - low <= 2**31:
        return ((_words(keys.to(x.device), draw, size) * (high - low)) >> 32) + low
    r = keyed_rand64(keys.to(x.device), draw, size)
    return (r * float(high - low)).floor().to(torch.int64).clamp_max(high - low - 1) + low


def integers_below(high: Tensor, keys: Optional[Tensor] = None, draw: int = 0) -> Tensor:
    """int64 values uniform in [0, high) elementwise, for a per-sample bound ``high`` (int64,
    each >= 1, and at most 2**31 with keys; shape (N,) or (N, size)); same shape and device as
    ``high``. Keyed, ``(word * high) >> 32`` as :func:`integers`."""
    if keys is None:
        r = torch.rand(high.shape, device=high.device, dtype=torch.float64)
        # float64: r * high < high for every float64 r < 1 and high < 2**52: floor in range
        return torch.minimum((r * high.to(torch.float64)).floor().to(torch.int64), high - 1)
    if high.dim() == 1:
        w = _words(keys.to(high.device), draw, None)
    else:
        w = _words(keys.to(high.device), draw, high.shape[1])
    return (w * high) >> 32


def bernoulli(x: Tensor, p: float, size: Optional[int] = None,
              keys: Optional[Tensor] = None, draw: int = 0) -> Tensor:
    """bool, True with probability ``p``, shape (N,) or (N, size). Keyed: a 32-bit word below
    ``p * 2**32`` (the probability exactly, to 2**-32)."""
    if keys is None:
        return torch.rand(_shape(x, size), device=x.device) < p
    return _words(keys.to(x.device), draw, size) < int(p * 4294967296.0)


def _keyed_gammas(keys: Tensor, draw: int, alpha: float, cols: int) -> Tensor:
    """(N, cols) float64 independent Gamma(alpha, 1) values by Marsaglia-Tsang with a fixed
    number of tries (a rejection loop has no fixed shape) and the ``U**(1/alpha)`` boost for
    alpha < 1, every uniform of a row from one hash call. A try is rejected with probability
    below 0.049 (alpha = 1 is the worst case), so all 8 are with probability below 3e-11; such
    a value is the mode's ``d`` instead."""
    a = alpha if alpha >= 1.0 else alpha + 1.0
    d = a - 1.0 / 3.0
    c = 1.0 / math.sqrt(9.0 * d)
    tries = 8
    per = 3 * tries + 1
    u = _keyed_open64(keys, draw, cols * per).unflatten(1, (cols, per))
    u1 = u.narrow(2, 0, tries)
    u2 = u.narrow(2, tries, tries)
    u3 = u.narrow(2, 2 * tries, tries)
    z = torch.sqrt(-2.0 * torch.log(u1)) * torch.cos(2.0 * math.pi * u2)
    v = (1.0 + c * z) ** 3
    ok = (v > 0) & (torch.log(u3) < 0.5 * z * z + d - d * v + d * torch.log(v.clamp_min(1e-300)))
    # the first accepted try (argmax of a descending score finds the first True)
    first = torch.where(ok, torch.arange(tries, 0, -1, device=keys.device), 0).argmax(2, True)
    g = torch.where(ok.any(2), (d * v).gather(2, first).squeeze(2), d)
    if alpha < 1.0:
        g = g * u.select(2, per - 1) ** (1.0 / alpha)
    return g


def beta(x: Tensor, alpha: float, beta_: float, keys: Optional[Tensor] = None,
         draw: int = 0) -> Tensor:
    """float32 Beta(alpha, beta_) values (both > 0), shape (N,), as G1 / (G1 + G2) with
    G1 ~ Gamma(alpha), G2 ~ Gamma(beta_). Keyed, it uses draws ``draw`` and ``draw + 1``;
    Beta(1, 1) is the uniform distribution and is drawn as one uniform."""
    if keys is None:
        n = _shape(x, None)
        g1 = torch._standard_gamma(torch.full(n, alpha, device=x.device))
        g2 = torch._standard_gamma(torch.full(n, beta_, device=x.device))
    else:
        k = keys.to(x.device)
        if alpha == 1.0 and beta_ == 1.0:
            return keyed_rand(k, draw)
        if alpha == beta_:
            g = _keyed_gammas(k, draw, alpha, 2)
            g1, g2 = g.select(1, 0), g.select(1, 1)
        else:
            g1 = _keyed_gammas(k, draw, alpha, 1).squeeze(1)
            g2 = _keyed_gammas(k, draw + 1, beta_, 1).squeeze(1)
    total = g1 + g2
    # both gammas underflow to 0 for tiny alpha/beta: split evenly rather than return nan.
    # Keyed gammas are float64: the ratio rounds once, to float32
    tiny = 1e-38 if keys is None else 1e-300
    return torch.where(total > 0, g1 / total.clamp_min(tiny),
                       torch.full_like(g1, 0.5)).to(torch.float32)


def noise_like(x: Tensor, keys: Optional[Tensor] = None, draw: int = 0) -> Tensor:
    """Random values shaped like ``x``: standard normal in x's floating dtype (drawn in
    float32), uniform bytes 0-255 for uint8. Keyed, element j of sample i (in contiguous
    order of one sample) is a function of ``(keys[i], draw, j)``."""
    if keys is not None:
        per = x[0:0].flatten(1).shape[1]  # elements per sample, symbolic-friendly
        k = keys.to(x.device)
        if x.dtype == torch.uint8:
            w = _words(k, draw, per) >> 24
            return w.to(torch.uint8).view(x.shape)
        u1 = keyed_rand(k, draw, per).clamp_min(2.0 ** -25)
        u2 = keyed_rand(k, draw + 1, per)
        z = torch.sqrt(-2.0 * torch.log(u1)) * torch.cos(2.0 * math.pi * u2)
        return z.view(x.shape).to(x.dtype)
    if x.dtype == torch.uint8:
        return torch.randint(0, 256, x.shape, dtype=torch.uint8, device=x.device)
    return torch.randn(x.shape, device=x.device).to(x.dtype)


def permutations(x: Tensor, k: int, keys: Optional[Tensor] = None, draw: int = 0) -> Tensor:
    """(N, k) int64: an independent uniformly random permutation of ``range(k)`` per sample
    (keyed: the stable argsort of k hash words, so ties, probability below k**2 / 2**33, break
    the same way on every device)."""
    if keys is None:
        return torch.rand(_shape(x, k), device=x.device).argsort(dim=1)
    return torch.argsort(_words(keys.to(x.device), draw, k), dim=1, stable=True)


def categorical(x: Tensor, probs: Tensor, keys: Optional[Tensor] = None,
                draw: int = 0) -> Tensor:
    """(N,) int64 in [0, len(probs)), index j with probability probs[j] (probs sums to 1,
    float64 on any device: it is moved to ``x.device``)."""
    cdf = probs.to(device=x.device, dtype=torch.float64).cumsum(0)
    r = _rand64(x, None, keys, draw) * cdf[-1]
    # searchsorted(right=True): r in [cdf[j-1], cdf[j]) -> j; a zero-probability branch never
    # wins because its interval is empty
    idx = torch.searchsorted(cdf, r, right=True)
    return idx.clamp_max(probs.shape[0] - 1)


def dirichlet(x: Tensor, alpha: float, k: int, keys: Optional[Tensor] = None,
              draw: int = 0) -> Tensor:
    """(N, k) float32 Dirichlet(alpha, ..., alpha) rows (alpha > 0), normalised Gamma(alpha)
    draws (a row whose gammas all underflow gets equal weights). Keyed, the k gammas of a row
    come from one hash call of draw ``draw``."""
    if keys is None:
        g = torch._standard_gamma(torch.full([x.shape[0], k], alpha, device=x.device))
    else:
        g = _keyed_gammas(keys.to(x.device), draw, alpha, k).to(torch.float32)
    g = g.clamp_min(1e-30)
    return g / g.sum(dim=1, keepdim=True)
