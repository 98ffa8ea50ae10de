"""Error bounds derived from the arithmetic, for comparing with a float64 reference.

A test that allows more than the maths does passes real bugs (issue 12 item 8: Normalize was
checked with atol 2e-4 in float32 and 1.2 in bfloat16, where the measured errors are 2e-6 and
0). These bounds say where each term comes from, so a failure means a wrong computation.
"""
import torch

EPS = {torch.float16: 2.0 ** -10, torch.bfloat16: 2.0 ** -7, torch.float32: 2.0 ** -23,
       torch.float64: 2.0 ** -52}
TINY = {d: torch.finfo(d).tiny for d in EPS}  # smallest normal: below it the spacing is fixed


def ulp(value: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The spacing of ``dtype`` numbers at ``|value|`` (float64 tensor)."""
    mag = value.abs().clamp_min(TINY[dtype])
    return torch.exp2(torch.floor(torch.log2(mag))) * EPS[dtype]


def normalize_reference(x: torch.Tensor, mean, std) -> torch.Tensor:
    """``(x / scale - mean) / std`` in float64 with the float32 mean/std a module stores."""
    c = x.shape[1]
    m = torch.tensor(mean, dtype=torch.float32).double().view(1, -1, 1, 1).expand(1, c, 1, 1)
    s = torch.tensor(std, dtype=torch.float32).double().view(1, -1, 1, 1).expand(1, c, 1, 1)
    v = x.double() / 255 if x.dtype == torch.uint8 else x.double()
    return (v - m) / s


def normalize_bound(x: torch.Tensor, mean, std, out_dtype: torch.dtype) -> torch.Tensor:
    """Elementwise bound on ``|normalize(x) - normalize_reference(x)|``.

    The kernel computes ``x * factor + shift`` in float32 (float64 for float64 output) with
    ``factor = (1/255)/std`` and ``shift = -mean/std``: two roundings in factor, one in shift,
    one in the product, one in the sum (and one converting float64 input to float32), each at
    most half an ulp of its own magnitude: 4 eps (|x*factor| + |shift|) covers them. A
    float16/bfloat16 output is then rounded once: half an ulp of the output type.
    """
    ct = torch.float64 if out_dtype == torch.float64 else torch.float32
    c = x.shape[1]
    s = torch.tensor(std, dtype=torch.float32).double().view(1, -1, 1, 1).expand(1, c, 1, 1)
    m = torch.tensor(mean, dtype=torch.float32).double().view(1, -1, 1, 1).expand(1, c, 1, 1)
    v = x.double() / 255 if x.dtype == torch.uint8 else x.double()
    compute = 4 * EPS[ct] * ((v / s).abs() + (m / s).abs())
    if out_dtype in (torch.float16, torch.bfloat16):
        exact = (v - m) / s
        return compute + 0.5 * ulp(exact + compute * exact.sign(), out_dtype)
    return compute


def assert_normalize_close(out: torch.Tensor, x: torch.Tensor, mean, std) -> None:
    ref = normalize_reference(x, mean, std)
    bound = normalize_bound(x, mean, std, out.dtype)
    err = (out.double() - ref).abs()
    worst = (err - bound).max() if err.numel() else torch.tensor(0.0)
    assert bool((err <= bound).all()), f"error exceeds the bound by {float(worst):.3g}"
