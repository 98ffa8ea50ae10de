"""The shared transform contract: every transform in CASES gets the common checks.

Adding a transform means adding one entry to CASES (see the format under the warp marker).
``tests/test_contract.py`` runs every function in ``CHECKS`` on every case, for uint8 and
float32 input, so a new transform gets scripting, eval behaviour, empty batch, no in-place
change, channels_last, seeding and per-sample independence checks from one line.

Each check is ``check_x(case, dtype, device)`` and raises ``AssertionError`` on failure.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, List, Optional, Tuple

import torch
from torch import Tensor, nn


@dataclass(frozen=True)
class Case:
    """One transform under the contract.

    id:        test id (usually the class name plus a hint of the arguments)
    factory:   builds a fresh module; called once per check (import inside the lambda body is
               fine: ``lambda: T.RandomRotation(30)`` with ``T = batchaug.transforms``)
    random:    True for per-sample random transforms: they must have ``make_params(x)``, be the
               identity in ``eval()``, reproduce under a seed and give per-sample different
               outputs for a batch of identical images. False: deterministic, always runs.
    out_dtype: the output dtype when the transform's job is to change it (Normalize, ToDtype);
               None means "same as input".
    out_size:  (H, W) of the output when it differs from the input, else None.
    in_size:   (H, W) of the test input batch.
    channels:  channel count of the test input (Normalize needs its own).
    exact_script: scripted output must equal eager exactly (set False only for kernels whose
               float arithmetic legitimately differs by rounding when scripted; the check then
               allows 1 uint8 step / 1e-5 float).
    """

    id: str
    factory: Callable[[], nn.Module]
    random: bool = True
    out_dtype: Optional[torch.dtype] = None
    out_size: Optional[Tuple[int, int]] = None
    in_size: Tuple[int, int] = (20, 24)
    channels: int = 3
    exact_script: bool = True


def _T():
    import batchaug.transforms as T

    return T


CASES: List[Case] = [
    # --- basic transform cases ---
    Case("RandomHorizontalFlip", lambda: _T().RandomHorizontalFlip(0.5)),
    Case("RandomVerticalFlip", lambda: _T().RandomVerticalFlip(0.5)),
    Case("RandomCrop-pad4-constant", lambda: _T().RandomCrop(20, padding=4), out_size=(20, 20)),
    Case("RandomCrop-reflect", lambda: _T().RandomCrop((16, 18), padding=(2, 3),
                                                       padding_mode="reflect"),
         out_size=(16, 18)),
    Case("RandomCrop-symmetric-4pad", lambda: _T().RandomCrop(
        24, padding=[1, 2, 3, 4], padding_mode="symmetric", pad_if_needed=True),
         out_size=(24, 24)),
    Case("RandomCrop-edge", lambda: _T().RandomCrop(12, padding=2, padding_mode="edge"),
         out_size=(12, 12)),
    Case("CenterCrop", lambda: _T().CenterCrop((10, 30)), random=False, out_size=(10, 30)),
    Case("Normalize", lambda: _T().Normalize([0.5, 0.4, 0.3], [0.2, 0.25, 0.3]), random=False,
         out_dtype=torch.float32),
    Case("Normalize-fp16", lambda: _T().Normalize([0.5], [0.2], dtype=torch.float16),
         random=False, out_dtype=torch.float16, channels=1),
    Case("ToDtype-float-scale", lambda: _T().ToDtype(torch.float32, scale=True), random=False,
         out_dtype=torch.float32),
    Case("ToDtype-uint8-scale", lambda: _T().ToDtype(torch.uint8, scale=True), random=False,
         out_dtype=torch.uint8),
    # --- warp transform cases ---
    # One entry per transform, e.g.
    #   Case("RandomRotation", lambda: _T().RandomRotation(30)),
    #   Case("RandomResizedCrop", lambda: _T().RandomResizedCrop(16), out_size=(16, 16)),
    #   Case("Resize", lambda: _T().Resize((10, 12)), random=False, out_size=(10, 12)),
    # Fields: see Case above (random=False for deterministic ones; out_dtype/out_size when the
    # output differs from the input; exact_script=False only if scripting changes rounding).
    Case("RandomRotation-nearest", lambda: _T().RandomRotation(30)),
    Case("RandomRotation-bilinear-fill-center", lambda: _T().RandomRotation(
        (-20, 45), interpolation="bilinear", center=(3, 5), fill=[10, 20, 30])),
    # eval_crop_pct=None: eval() is the identity (the contract's rule for random transforms);
    # the default eval() centre crop + resize is tested in tests/test_warp.py.
    Case("RandomResizedCrop", lambda: _T().RandomResizedCrop(16, eval_crop_pct=None),
         out_size=(16, 16)),
    Case("RandomResizedCrop-nearest", lambda: _T().RandomResizedCrop(
        (10, 30), scale=(0.2, 0.9), interpolation="nearest", eval_crop_pct=None),
         out_size=(10, 30)),
    Case("Resize", lambda: _T().Resize((10, 12)), random=False, out_size=(10, 12)),
    Case("Resize-shorter-side-nearest", lambda: _T().Resize(10, interpolation="nearest"),
         random=False, out_size=(10, 12)),
]

DTYPES = [torch.uint8, torch.float32]


# ----------------------------------------------------------------------------- helpers

def make_batch(case: Case, dtype: torch.dtype, device: str, n: int = 6, seed: int = 0) -> Tensor:
    """A random (n, C, H, W) batch with distinct content per sample (so flips etc. show)."""
    g = torch.Generator().manual_seed(seed)
    h, w = case.in_size
    x = torch.randint(0, 256, (n, case.channels, h, w), generator=g, dtype=torch.uint8)
    if dtype != torch.uint8:
        x = (x.to(torch.float32) / 255).to(dtype)
    return x.to(device)


def expected_dtype(case: Case, dtype: torch.dtype) -> torch.dtype:
    return dtype if case.out_dtype is None else case.out_dtype


def expected_shape(case: Case, n: int) -> Tuple[int, int, int, int]:
    h, w = case.out_size if case.out_size is not None else case.in_size
    return (n, case.channels, h, w)


def _run(module: nn.Module, x: Tensor, seed: int) -> Tensor:
    torch.manual_seed(seed)
    if x.is_cuda:
        torch.cuda.manual_seed_all(seed)
    return module(x)


def _assert_close(a: Tensor, b: Tensor, exact: bool, what: str) -> None:
    assert a.shape == b.shape, f"{what}: shapes differ {a.shape} vs {b.shape}"
    assert a.dtype == b.dtype, f"{what}: dtypes differ {a.dtype} vs {b.dtype}"
    if exact:
        assert torch.equal(a, b), f"{what}: outputs differ (max abs diff " \
            f"{(a.double() - b.double()).abs().max().item() if a.numel() else 0})"
    else:
        atol = 1.0 if a.dtype == torch.uint8 else 1e-5
        torch.testing.assert_close(a.double(), b.double(), atol=atol, rtol=0, msg=what)


# ----------------------------------------------------------------------------- checks

def check_shape_dtype_device(case: Case, dtype: torch.dtype, device: str) -> None:
    x = make_batch(case, dtype, device)
    for mode in ("train", "eval"):
        m = case.factory()
        m.train(mode == "train")
        y = m(x)
        if case.random and mode == "eval":
            assert y.shape == x.shape and y.dtype == x.dtype
            continue
        assert tuple(y.shape) == expected_shape(case, x.shape[0]), (mode, y.shape)
        assert y.dtype == expected_dtype(case, dtype), (mode, y.dtype)
        assert y.device == x.device


def check_script_matches_eager(case: Case, dtype: torch.dtype, device: str) -> None:
    m = case.factory()
    s = torch.jit.script(m)
    x = make_batch(case, dtype, device)
    for seed in (0, 1):
        _assert_close(_run(s, x, seed), _run(m, x, seed), case.exact_script,
                      f"{case.id} scripted vs eager (train, seed {seed})")
    m.eval()
    s.eval()
    # eval must be exact: nothing random happens there.
    _assert_close(s(x), m(x), True, f"{case.id} scripted vs eager (eval)")


def check_eval_behaviour(case: Case, dtype: torch.dtype, device: str) -> None:
    m = case.factory().eval()
    x = make_batch(case, dtype, device)
    y = m(x)
    if case.random:
        assert y is x or torch.equal(y, x), f"{case.id}: random transform must be identity in eval"
    else:
        # deterministic transforms always run, the same in train and eval
        m2 = case.factory().train()
        assert torch.equal(y, m2(x)), f"{case.id}: deterministic transform differs train/eval"


def check_empty_batch(case: Case, dtype: torch.dtype, device: str) -> None:
    x = make_batch(case, dtype, device, n=0)
    for train in (True, False):
        m = case.factory().train(train)
        y = m(x)
        assert y.shape[0] == 0, f"{case.id}: empty batch gave {y.shape}"
        if train or not case.random:
            assert tuple(y.shape) == expected_shape(case, 0)
            assert y.dtype == expected_dtype(case, dtype)


def check_no_inplace(case: Case, dtype: torch.dtype, device: str) -> None:
    x = make_batch(case, dtype, device)
    before = x.clone()
    version = x._version
    for train in (True, False):
        m = case.factory().train(train)
        y = m(x)
        assert x._version == version, f"{case.id}: input modified in place (version bumped)"
        assert torch.equal(x, before), f"{case.id}: input values changed"
        if y.data_ptr() == x.data_ptr() and y.numel() and not (case.random and not train):
            # A view of the input is only allowed as the identity.
            assert torch.equal(y, x)


def check_channels_last(case: Case, dtype: torch.dtype, device: str) -> None:
    x = make_batch(case, dtype, device)
    xc = x.contiguous(memory_format=torch.channels_last)
    m = case.factory()
    _assert_close(_run(m, xc, 3), _run(m, x, 3), True, f"{case.id}: channels_last vs contiguous")


def check_seed_reproduces(case: Case, dtype: torch.dtype, device: str) -> None:
    m = case.factory()
    x = make_batch(case, dtype, device, n=16)
    assert torch.equal(_run(m, x, 7), _run(m, x, 7)), f"{case.id}: same seed, different output"


def check_per_sample(case: Case, dtype: torch.dtype, device: str) -> None:
    if not case.random:
        return
    m = case.factory()
    x = make_batch(case, dtype, device, n=1).expand(64, -1, -1, -1).contiguous()
    y = _run(m, x, 11)
    flat = y.reshape(y.shape[0], -1)
    distinct = torch.unique(flat, dim=0).shape[0]
    assert distinct > 1, f"{case.id}: 64 identical images all came out the same (one draw per batch?)"
    # and a different seed gives a different batch
    assert not torch.equal(y, _run(m, x, 12)), f"{case.id}: output does not depend on the seed"


def check_make_params(case: Case, dtype: torch.dtype, device: str) -> None:
    m = case.factory()
    if not case.random:
        return
    assert callable(getattr(m, "make_params", None)), f"{case.id}: random transform lacks make_params"
    x = make_batch(case, dtype, device)
    params = m.make_params(x)
    tensors = list(params) if isinstance(params, (tuple, list)) else [params]
    for p in tensors:
        if isinstance(p, Tensor):
            assert p.device == x.device, f"{case.id}: make_params drew on {p.device}, not {x.device}"
            assert p.shape[0] == x.shape[0], f"{case.id}: params are not per sample: {p.shape}"


CHECKS: List[Callable[[Case, torch.dtype, str], None]] = [
    check_shape_dtype_device,
    check_script_matches_eager,
    check_eval_behaviour,
    check_empty_batch,
    check_no_inplace,
    check_channels_last,
    check_seed_reproduces,
    check_per_sample,
    check_make_params,
]
