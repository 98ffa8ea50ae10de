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
exact everywhere: 32-bit state held in int64, multiplied in 16-bit limbs so no product reaches
2**63, no float in the integer part. Floats are made from the top 24 (float32) or 53 (float64)
bits of the hash, so CPU and CUDA agree bit for bit on the integers and to float rounding on
the rest.

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
# 32-bit golden-ratio step; 0xFFFFFFFF masks to 32 bits.


def _shape(x: Tensor, size: Optional[int]) -> List[int]:
    if size is None:
        return [x.shape[0]]
    return [x.shape[0], size]


def _mul32(a: Tensor, c: int) -> Tensor:
    """``(a * c) mod 2**32`` for int64 ``a`` in [0, 2**32) and a 32-bit constant ``c``, in two
    16-bit limbs of ``c`` so every product stays below 2**48 (no signed overflow)."""
    lo = c & 0xFFFF
    hi = c >> 16
    return (a * lo + (((a * hi) & 0xFFFF) << 16)) & 0xFFFFFFFF


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


def _key_state(keys: Tensor, draw: int) -> Tensor:
    """(N,) 32-bit state for one call site: ``hash(hash(hi ^ c_draw) ^ lo)`` of the key's two
    32-bit halves. For one ``hi`` (one seed and epoch) it is a bijection of ``lo`` (the sample
    index), so samples of an epoch never share a state; for keys differing in ``hi`` (children's
    keys) two states coincide with probability 2**-32 per call site, independently per site,
    never for a whole stream at once."""
    k = keys.to(torch.int64)
    hi = _hash32(((k >> 32) & 0xFFFFFFFF) ^ _draw_const(draw, 1))
    return _hash32(hi ^ (k & 0xFFFFFFFF))


def _words(keys: Tensor, draw: int, size: Optional[int]) -> Tensor:
    """32-bit hash words, (N,) or (N, size): word j of sample i is a function of
    ``(keys[i], draw, j)`` only."""
    state = _key_state(keys, draw)
    if size is None:
        return _hash32(state)
    j = torch.arange(size, device=keys.device, dtype=torch.int64)
    return _hash32(state.unsqueeze(1) ^ _hash32((j * 0x9E3779B9 + 0x632BE5AB) & 0xFFFFFFFF))


def keyed_rand(keys: Tensor, draw: int, size: Optional[int] = None) -> Tensor:
    """float32 uniform in [0, 1) from the top 24 bits of a hash word, (N,) or (N, size)."""
    return (_words(keys, draw, size) >> 8).to(torch.float32) * (1.0 / 16777216.0)


def keyed_rand64(keys: Tensor, draw: int, size: Optional[int] = None) -> Tensor:
    """float64 uniform in [0, 1) from 53 bits of two hash words, (N,) or (N, size)."""
    hi = _words(keys, draw, size) >> 5  # 27 bits
    lo = _words(keys, draw + 0x5BD1E995, size) >> 6  # 26 bits
    return (hi * 67108864 + lo).to(torch.float64) * (1.0 / 9007199254740992.0)


def _rand(x: Tensor, size: Optional[int], keys: Optional[Tensor], draw: int) -> Tensor:
    if keys is None:
        return torch.rand(_shape(x, size), device=x.device)
    return keyed_rand(keys.to(x.device), draw, size)


def _rand64(x: Tensor, size: Optional[int], keys: Optional[Tensor], draw: int) -> Tensor:
    if keys is None:
        return torch.rand(_shape(x, size), device=x.device, dtype=torch.float64)
    return keyed_rand64(keys.to(x.device), draw, size)


def sample_keys(seed: int, epoch: int, index: Tensor) -> Tensor:
    """int64 keys naming ``(seed, epoch, sample index)``: ``index`` is an integer tensor of
    global sample indices (each in [0, 2**31)), the result has its shape and device.

    The top 32 bits hash ``(seed, epoch)``, the low 31 bits are the index itself, so distinct
    samples of one epoch never share a key.

    Example:
        >>> import torch
        >>> from batchaug import _random
        >>> k = _random.sample_keys(0, 3, torch.arange(4))
        >>> bool((k[1:] - k[:-1] == 1).all())  # the index is the key's low bits
        True
    """
    if not 0 <= seed < 2**63 or not 0 <= epoch < 2**63:
        raise ValueError(f"seed and epoch must be in [0, 2**63), got {seed} and {epoch}")
    idx = index.to(torch.int64)
    s = torch.full_like(idx, (seed ^ (seed >> 32)) & 0xFFFFFFFF)
    e = torch.full_like(idx, (epoch ^ (epoch >> 32)) & 0xFFFFFFFF)
    top = _hash32(_hash32(s ^ 0x1B873593) ^ e) & 0x7FFFFFFF
    return (top << 32) | (idx & 0x7FFFFFFF)


def substream(keys: Optional[Tensor], i: int) -> Optional[Tensor]:
    """The keys of child ``i`` of a container (``None`` stays ``None``): for each ``i`` a
    bijection of ``[0, 2**63)`` (a 2-round Feistel network over the key's 31 high and 32 low
    bits; ``_key_state`` hashes the result twice more), so distinct samples keep distinct keys
    in every child, and children's draws are independent of each other and of the parent's."""
    if keys is None:
        return None
    k = keys.to(torch.int64)
    hi = (k >> 32) & 0x7FFFFFFF
    lo = k & 0xFFFFFFFF
    hi = hi ^ (_hash32(lo ^ _draw_const(i, 0x3C6EF372)) & 0x7FFFFFFF)
    lo = lo ^ _hash32(hi ^ _draw_const(i, 0x5851F42D))
    return (hi << 32) | lo


def uniform(x: Tensor, low: float, high: float, size: Optional[int] = None,
            keys: Optional[Tensor] = None, draw: int = 0) -> Tensor:
    """float32 values uniform in [low, high), shape (N,) or (N, size). ``low == high`` gives
    exactly ``low`` (a degenerate range is a fixed value, as in torchvision)."""
    r = _rand(x, size, keys, draw)
    if low == high:
        return torch.full_like(r, low)
    return r * (high - low) + low


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
    each >= 1, shape (N,) or (N, size)); same shape and device as ``high``."""
    if keys is None:
        r = torch.rand(high.shape, device=high.device, dtype=torch.float64)
    elif high.dim() == 1:
        r = keyed_rand64(keys.to(high.device), draw, None)
    else:
        r = keyed_rand64(keys.to(high.device), draw, high.shape[1])
    # float64: r * high < high for every float64 r < 1 and high < 2**52, so the floor is in range
    return torch.minimum((r * high.to(torch.float64)).floor().to(torch.int64), high - 1)


def bernoulli(x: Tensor, p: float, size: Optional[int] = None,
              keys: Optional[Tensor] = None, draw: int = 0) -> Tensor:
    """bool, True with probability ``p``, shape (N,) or (N, size)."""
    return _rand(x, size, keys, draw) < p


def _keyed_gamma(keys: Tensor, draw: int, alpha: float) -> Tensor:
    """(N,) float32 Gamma(alpha, 1) by Marsaglia-Tsang with a fixed number of tries (a
    rejection loop has no fixed shape; with 16 tries all reject with probability < 1e-20) and
    the ``U**(1/alpha)`` boost for alpha < 1. Computed in float64."""
    a = alpha if alpha >= 1.0 else alpha + 1.0
    d = a - 1.0 / 3.0
    c = 1.0 / math.sqrt(9.0 * d)
    tries = 16
    u1 = keyed_rand64(keys, draw, tries).clamp_min(1e-300)
    u2 = keyed_rand64(keys, draw + 1, tries)
    z = torch.sqrt(-2.0 * torch.log(u1)) * torch.cos(2.0 * math.pi * u2)
    v = (1.0 + c * z) ** 3
    u = keyed_rand64(keys, draw + 2, tries).clamp_min(1e-300)
    ok = (v > 0) & (torch.log(u) < 0.5 * z * z + d - d * v + d * torch.log(v.clamp_min(1e-300)))
    # the first accepted try; the mode d if none is (probability < 1e-20)
    first = torch.where(ok, torch.arange(tries, 0, -1, device=keys.device), 0).argmax(1)
    g = torch.where(ok.any(1), (d * v).gather(1, first.unsqueeze(1)).squeeze(1),
                    torch.full_like(u1[:, 0], d))
    if alpha < 1.0:
        g = g * keyed_rand64(keys, draw + 3, None).clamp_min(1e-300) ** (1.0 / alpha)
    return g.to(torch.float32)


def beta(x: Tensor, alpha: float, beta_: float, keys: Optional[Tensor] = None,
         draw: int = 0) -> Tensor:
    """float32 Beta(alpha, beta_) values (both > 0), shape (N,), as G1 / (G1 + G2) with
    G1 ~ Gamma(alpha), G2 ~ Gamma(beta_). Keyed, it uses draws ``draw`` to ``draw + 7``."""
    if keys is None:
        n = _shape(x, None)
        g1 = torch._standard_gamma(torch.full(n, alpha, device=x.device))
        g2 = torch._standard_gamma(torch.full(n, beta_, device=x.device))
    else:
        k = keys.to(x.device)
        g1 = _keyed_gamma(k, draw, alpha)
        g2 = _keyed_gamma(k, draw + 4, beta_)
    total = g1 + g2
    # both gammas underflow to 0 for tiny alpha/beta: split evenly rather than return nan
    return torch.where(total > 0, g1 / total.clamp_min(1e-38), torch.full_like(g1, 0.5))


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
    """(N, k) int64: an independent uniformly random permutation of ``range(k)`` per sample."""
    if keys is None:
        return torch.rand(_shape(x, k), device=x.device).argsort(dim=1)
    return keyed_rand64(keys.to(x.device), draw, k).argsort(dim=1)


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
    draws (a row whose gammas all underflow gets equal weights). Keyed, column j is
    ``_keyed_gamma`` of ``substream(keys, j)`` with draws ``draw`` to ``draw + 3``."""
    if keys is None:
        g = torch._standard_gamma(torch.full([x.shape[0], k], alpha, device=x.device))
    else:
        kk = keys.to(x.device)
        cols: List[Tensor] = []
        for j in range(k):
            sub = substream(kk, j)
            assert sub is not None
            cols.append(_keyed_gamma(sub, draw, alpha))
        g = torch.stack(cols, dim=1)
    g = g.clamp_min(1e-30)
    return g / g.sum(dim=1, keepdim=True)
