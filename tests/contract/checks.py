"""The checks every case gets: per input dtype (CHECKS, ``check_x(case, dtype, device)``) and
once per case (CASE_CHECKS, ``check_x(case)``: gradients, export, script, keys, fast paths).
"""
from __future__ import annotations

from typing import Callable, List, Optional, Tuple

import torch
from torch import Tensor, nn

from tests.contract.cases import Case, expected_dtype, expected_shape, make_batch
from tests.contract.references import _REFERENCES


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
        m = case.factory().to(device)
        m.train(mode == "train")
        y = m(x)
        if case.random and mode == "eval":
            assert y.shape == x.shape and y.dtype == x.dtype
            continue
        assert tuple(y.shape) == expected_shape(case, x.shape[0]), (mode, y.shape)
        assert y.dtype == expected_dtype(case, dtype), (mode, y.dtype)
        assert y.device == x.device


def check_script_matches_eager(case: Case, dtype: torch.dtype, device: str) -> None:
    m = case.factory().to(device)
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
    m = case.factory().to(device).eval()
    x = make_batch(case, dtype, device)
    y = m(x)
    if case.random:
        assert y is x or torch.equal(y, x), f"{case.id}: random transform must be identity in eval"
    else:
        # deterministic transforms always run, the same in train and eval
        m2 = case.factory().to(device).train()
        assert torch.equal(y, m2(x)), f"{case.id}: deterministic transform differs train/eval"


def check_empty_batch(case: Case, dtype: torch.dtype, device: str) -> None:
    x = make_batch(case, dtype, device, n=0)
    for train in (True, False):
        m = case.factory().to(device).train(train)
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
        m = case.factory().to(device).train(train)
        y = m(x)
        assert x._version == version, f"{case.id}: input modified in place (version bumped)"
        assert torch.equal(x, before), f"{case.id}: input values changed"
        if y.data_ptr() == x.data_ptr() and y.numel() and not (case.random and not train):
            # A view of the input is only allowed as the identity.
            assert torch.equal(y, x)


def check_channels_last(case: Case, dtype: torch.dtype, device: str) -> None:
    x = make_batch(case, dtype, device)
    xc = x.contiguous(memory_format=torch.channels_last)
    m = case.factory().to(device)
    _assert_close(_run(m, xc, 3), _run(m, x, 3), True, f"{case.id}: channels_last vs contiguous")


def check_seed_reproduces(case: Case, dtype: torch.dtype, device: str) -> None:
    m = case.factory().to(device)
    x = make_batch(case, dtype, device, n=16)
    assert torch.equal(_run(m, x, 7), _run(m, x, 7)), f"{case.id}: same seed, different output"


def check_per_sample(case: Case, dtype: torch.dtype, device: str) -> None:
    if not case.random:
        return
    m = case.factory().to(device)
    x = make_batch(case, dtype, device, n=1).expand(64, -1, -1, -1).contiguous()
    y = _run(m, x, 11)
    flat = y.reshape(y.shape[0], -1)
    distinct = torch.unique(flat, dim=0).shape[0]
    assert distinct > 1, f"{case.id}: 64 identical images all came out the same (one draw per batch?)"
    # and a different seed gives a different batch
    assert not torch.equal(y, _run(m, x, 12)), f"{case.id}: output does not depend on the seed"


def check_make_params(case: Case, dtype: torch.dtype, device: str) -> None:
    m = case.factory().to(device)
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


# ----------------------------------------------------------------------------- once-per-case
# Gradients, export with a dynamic batch, compile, and every input dtype. They do not depend on
# the contract's input dtype (uint8/float32 above), so tests/contract/test_contract.py runs each of them
# once per case (CASE_CHECKS). A new transform needs a torchvision reference in _REFERENCES.

ALL_DTYPES = [torch.uint8, torch.float16, torch.bfloat16, torch.float32, torch.float64]



def _seeded(m: nn.Module, seed: int, keys: Optional[Tensor] = None) -> Callable[[Tensor], Tensor]:
    """m with fixed random parameters: the same draw on every call (gradcheck calls it often);
    with ``keys``, ``m(x, keys)``."""
    def f(x: Tensor) -> Tensor:
        torch.manual_seed(seed)
        return m(x) if keys is None else m(x, keys)
    return f


def _case_keys(case: Case, n: int, seed: int) -> Optional[Tensor]:
    """Keys for a ``keyed_draws`` case, else None."""
    if not case.keyed_draws:
        return None
    from batchaug import _random

    return _random.sample_keys(seed, 0, torch.arange(n))


def _cotangent(shape, seed: int = 5) -> Tensor:
    return torch.rand(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _grad_of(f: Callable[[Tensor], Tensor], x: Tensor) -> Tuple[Tensor, Tensor]:
    """(output, d(sum(output * w))/dx) for the fixed random cotangent w = _cotangent(shape)."""
    x = x.detach().clone().requires_grad_(True)
    y = f(x)
    (g,) = torch.autograd.grad((y * _cotangent(y.shape).to(y.dtype)).sum(), x)
    return y, g


def _float_batch(case: Case, n: int = 2, dtype: torch.dtype = torch.float64) -> Tensor:
    return make_batch(case, torch.float32, "cpu", n=n, seed=1).to(dtype)


def check_requires_grad(case: Case) -> None:
    """A floating input that requires grad gives a floating output that requires grad (and
    its gradient reaches the input), in train and eval, contiguous and channels_last; under
    no_grad nothing requires grad. A uint8 output cannot carry a gradient. The output equals
    the one for the same input without grad (where the CPU fast paths run) exactly."""
    for dtype in (torch.float32, torch.float64, torch.float16):
        for train in (True, False):
            for cl in (False, True):
                m = case.factory().train(train)
                x = _float_batch(case, n=3, dtype=dtype)
                if cl:
                    x = x.contiguous(memory_format=torch.channels_last)
                x.requires_grad_(True)
                y = _run(m, x, 0)
                what = f"{case.id} ({dtype}, train={train}, channels_last={cl})"
                if not y.is_floating_point():
                    assert not y.requires_grad, what
                    continue
                assert y.requires_grad, f"{what}: output detached from a requires_grad input"
                # The fast paths run only without grad: they must give the plain path's values.
                _assert_close(y.detach(), _run(m, x.detach(), 0), True, f"{what}: fast vs plain")
                (g,) = torch.autograd.grad(y.float().sum(), x)
                assert g.shape == x.shape and g.dtype == x.dtype, what
                with torch.no_grad():
                    y = _run(m, x, 0)
                    # (eval() of a random transform may return x itself, which requires grad)
                    assert y is x or not y.requires_grad, what


def check_gradients(case: Case) -> None:
    """float64 gradcheck with fixed parameters, and the gradient of sum(y * w) equals the one
    through torchvision's per-sample functional with the same parameters (the output too)."""
    m = case.factory().train()
    if case.out_dtype is not None and not case.out_dtype.is_floating_point:
        return  # uint8 output: not differentiable (check_requires_grad covers it)
    x = _float_batch(case)
    reference = _REFERENCES.get(type(m).__name__)
    assert reference is not None, f"{case.id}: add a torchvision reference to _REFERENCES"
    for train in (True, False):
        m.train(train)
        for seed in (0, 1):
            keys = _case_keys(case, x.shape[0], seed)
            f = _seeded(m, seed, keys)
            torch.manual_seed(seed)
            params = m.make_params(x) if case.random and train else None
            if keys is not None and case.random and train:
                params = (m.make_params(x, keys), keys)
            if case.random and not train:
                ref_f: Callable[[Tensor], Tensor] = lambda t: t.clone()  # noqa: E731
            else:
                ref_f = lambda t: reference(m, t, params)  # noqa: E731
            y, g = _grad_of(f, x)
            what = f"{case.id} (train={train}, seed {seed})"
            g_ref: Optional[Tensor] = None
            try:
                if case.tv_grad or not train:
                    y_ref, g_ref = _grad_of(ref_f, x)
                else:  # torchvision's kernel is not differentiable: compare outputs only
                    y_ref = ref_f(x)
            except RuntimeError as e:
                # torchvision's bilinear fill blends in place (sub_/mul_/add_ on views of one
                # grid_sample output): it has no backward. The adjoint test below still holds.
                if "inplace operation" not in str(e):
                    raise
                y_ref = ref_f(x)
            assert y.dtype == y_ref.dtype, f"{what}: dtype {y.dtype} vs torchvision {y_ref.dtype}"
            tol = 1e-3 if y.dtype in (torch.float16, torch.bfloat16) else 1e-6
            torch.testing.assert_close(y.double(), y_ref.double(), atol=tol, rtol=0,
                                       msg=f"{what}: output vs torchvision")
            if g_ref is not None:
                torch.testing.assert_close(g, g_ref, atol=1e-6, rtol=0,
                                           msg=f"{what}: gradient vs torchvision")
            # With its parameters fixed an affine transform is y = A x + b, so the gradient
            # g = A^T w must satisfy <g, v> = <w, A v> with A v from torchvision.
            w = _cotangent(y.shape)
            with torch.no_grad():
                if train and not case.affine:
                    v_count = 0  # clamped/piecewise: gradcheck below covers the gradient
                else:
                    v_count = 2
                b = ref_f(torch.zeros_like(x)).double()
                for k in range(v_count):
                    v = torch.rand(x.shape, generator=torch.Generator().manual_seed(10 + k),
                                   dtype=torch.float64)
                    lhs = (g.double() * v).sum()
                    rhs = (w * (ref_f(v).double() - b)).sum()
                    assert torch.allclose(lhs, rhs, rtol=tol, atol=tol), \
                        f"{what}: <grad, v> {lhs.item()} != <w, A v> {rhs.item()} (torchvision)"
            if y.dtype == torch.float64:
                xg = x.detach().clone().requires_grad_(True)
                assert torch.autograd.gradcheck(f, (xg,), fast_mode=True), what


def check_compiled_gradients(case: Case) -> None:
    """torch.compile(fullgraph=True, backend="aot_eager"): same output, requires_grad and
    gradient as eager under the same seed (train mode, where the random path runs)."""
    m = case.factory().train()
    x = _float_batch(case, n=4, dtype=torch.float32)
    torch._dynamo.reset()
    compiled = torch.compile(m, backend="aot_eager", fullgraph=True)
    if case.out_dtype is not None and not case.out_dtype.is_floating_point:
        assert not _run(compiled, x.requires_grad_(True), 3).requires_grad, case.id
        return
    keys = _case_keys(case, x.shape[0], 3)
    y, g = _grad_of(_seeded(m, 3, keys), x)
    yc, gc = _grad_of(_seeded(compiled, 3, keys), x)
    torch.testing.assert_close(yc, y, atol=1e-5, rtol=0, msg=f"{case.id}: compiled output")
    torch.testing.assert_close(gc, g, atol=1e-5, rtol=0, msg=f"{case.id}: compiled gradient")


def check_export_dynamic_batch(case: Case) -> None:
    """torch.export with a dynamic batch, eval and train: the program runs at batch 1, 7 and
    64; eval equals eager exactly, train gives eager's shapes and dtypes. A random case in
    train with float32 input is exported with keys as the second input (the batch dimension
    shared with x) and must equal eager with the same keys (1e-5: compile/export may take a
    batched kernel where eager takes a per-sample CPU path)."""
    from torch.export import Dim, export

    from batchaug import _random

    for train in (False, True):
        for dtype in (torch.uint8, torch.float32):
            m = case.factory().train(train)
            keyed = train and case.random and dtype == torch.float32
            batch = Dim("batch")
            if keyed:
                ep = export(m, (make_batch(case, dtype, "cpu", n=4),
                                _random.sample_keys(0, 0, torch.arange(4))),
                            dynamic_shapes=({0: batch}, {0: batch}))
            else:
                ep = export(m, (make_batch(case, dtype, "cpu", n=4),),
                            dynamic_shapes=({0: batch},))
            run = ep.module()
            for n in (1, 7, 64):
                x = make_batch(case, dtype, "cpu", n=n, seed=n)
                what = f"{case.id} exported (train={train}, {dtype}, batch {n})"
                if keyed:
                    k = _random.sample_keys(1, 2, torch.arange(n) + 50)
                    torch.testing.assert_close(run(x, k), m(x, k), atol=1e-5, rtol=0,
                                               msg=f"{what}, keyed")
                    continue
                y = run(x)
                ref = _run(m, x, 0)
                if train:
                    assert y.shape == ref.shape and y.dtype == ref.dtype, what
                else:
                    _assert_close(y, ref, True, what)


def _run_keyed(module: nn.Module, x: Tensor, keys: Tensor, seed: int) -> Tensor:
    torch.manual_seed(seed)  # a different torch seed per call: keyed output must not care
    return module(x, keys)


def check_keyed(case: Case) -> None:
    """Keyed randomness (issue 11), uint8 and float32: a random transform has ``takes_keys`` and
    takes ``forward(x, keys)``; with keys its output ignores torch's generator and each
    sample's output depends only on its image and key: exactly the same in a batch of any size
    and at any position; identical images with distinct keys do not all come out the same;
    scripted == eager. (Compile: tests/transforms/test_keyed.py; export with keys:
    check_export_dynamic_batch.)"""
    if not case.random:
        return
    from batchaug import _random

    m = case.factory().train()
    assert getattr(m, "takes_keys", False) is True, f"{case.id}: random transform lacks takes_keys"
    s = torch.jit.script(m)
    n = 7
    keys = _random.sample_keys(3, 2, torch.arange(n) + 1000)
    for dtype in (torch.uint8, torch.float32):
        what = f"{case.id} keyed ({dtype})"
        x = make_batch(case, dtype, "cpu", n=n, seed=2)
        y = _run_keyed(m, x, keys, 1)
        assert torch.equal(_run_keyed(m, x, keys, 2), y), f"{what}: depends on torch's seed"
        perm = torch.tensor([5, 0, 3])
        assert torch.equal(_run_keyed(m, x[perm], keys[perm], 3), y[perm]), \
            f"{what}: depends on batch size or position"
        assert torch.equal(_run_keyed(m, x[4:5], keys[4:5], 4), y[4:5]), \
            f"{what}: a sample alone differs from it in the batch"
        same = make_batch(case, dtype, "cpu", n=1).expand(16, -1, -1, -1).contiguous()
        ys = m(same, _random.sample_keys(0, 0, torch.arange(16)))
        assert torch.unique(ys.reshape(16, -1), dim=0).shape[0] > 1, \
            f"{what}: 16 identical images with distinct keys all came out the same"
        _assert_close(_run_keyed(s, x, keys, 5), y, case.exact_script, f"{what}: scripted")


def _raises(fn: Callable[[], object], error: type, words: str, what: str) -> None:
    try:
        fn()
    except error as e:
        assert words in str(e), f"{what}: message {str(e)!r} lacks {words!r}"
        return
    raise AssertionError(f"{what}: no {error.__name__}")


def check_keys_length(case: Case) -> None:
    """A random transform called as ``t(x, keys)`` with keys of the wrong length (fewer, more,
    one) raises a ValueError naming ``keys`` and both lengths, in train and eval, eager and
    scripted (torch.jit.Error with the same words), instead of dropping, repeating or
    broadcasting samples; a 2-D keys tensor is a ValueError, int32 keys a TypeError."""
    if not case.random:
        return
    from batchaug import _random

    m = case.factory()
    s = torch.jit.script(m)
    x = make_batch(case, torch.float32, "cpu", n=6)
    for train in (True, False):
        m.train(train)
        s.train(train)
        for nk in (1, 5, 7):
            keys = _random.sample_keys(0, 0, torch.arange(nk))
            words = f"keys must have one key per image: got {nk} keys for a batch of 6 images"
            what = f"{case.id} (train={train}) with {nk} keys for 6 images"
            _raises(lambda: m(x, keys), ValueError, words, what)
            _raises(lambda: s(x, keys), torch.jit.Error, words, f"{what}, scripted")
        keys = _random.sample_keys(0, 0, torch.arange(6))
        _raises(lambda: m(x, keys.view(2, 3)), ValueError,
                "keys must be a 1-D tensor of shape (N,)", f"{case.id}: 2-D keys")
        _raises(lambda: m(x, keys.int()), TypeError, "keys must be an int64 tensor",
                f"{case.id}: int32 keys")


def check_script_every_dtype(case: Case) -> None:
    """Scripted == eager for uint8, float16, bfloat16, float32 and float64 input: exactly in
    eval, and in train under the same seed (within rounding where exact_script is False);
    output dtype and shape as the case says."""
    m = case.factory()
    s = torch.jit.script(m)
    for dtype in ALL_DTYPES:
        x = make_batch(case, dtype, "cpu")
        for train in (True, False):
            m.train(train)
            s.train(train)
            what = f"{case.id} scripted vs eager ({dtype}, train={train})"
            y = _run(m, x, 4)
            exact = case.exact_script or not train
            if dtype in (torch.float16, torch.bfloat16) and not exact:
                torch.testing.assert_close(_run(s, x, 4).double(), y.double(), atol=1e-2, rtol=0,
                                           msg=what)
            else:
                _assert_close(_run(s, x, 4), y, exact, what)
            if train or not case.random:
                assert tuple(y.shape) == expected_shape(case, x.shape[0]), what
                assert y.dtype == expected_dtype(case, dtype), what


def _plain(case: Case, reads: Optional[List[int]] = None):
    """Context manager: ``case.plain_path``'s predicate patched to False (eager only), each
    call counted in ``reads[0]``."""
    from unittest import mock

    module, name = case.plain_path.rsplit(".", 1)
    reads = [0] if reads is None else reads

    def plain(*args, **kwargs):
        reads[0] += 1
        return False
    return mock.patch(f"{module}.{name}", plain)


def check_fast_path_matches_plain(case: Case) -> None:
    """For a case with a CPU fast path: the fast path's output equals the plain path's (within
    ``plain_tol``) for uint8, float32 and float64 input, contiguous, channels_last and
    non-contiguous (a column slice), and the empty batch; same dtype and layout; with a
    requires_grad float64 input both require grad and their gradients agree (1e-6)."""
    if case.plain_path is None:
        return
    m = case.factory().train()
    reads = [0]
    for dtype in (torch.uint8, torch.float32, torch.float64):
        base = make_batch(case, dtype, "cpu", n=5)
        wide = torch.cat([base, base[..., :3]], dim=-1)
        layouts = {
            "contiguous": base,
            "channels_last": base.contiguous(memory_format=torch.channels_last),
            "non-contiguous": wide[..., :base.shape[-1]],
            "empty": base[:0],
        }
        for layout, x in layouts.items():
            what = f"{case.id} fast vs plain ({dtype}, {layout})"
            fast = _run(m, x, 21)
            with _plain(case, reads):
                plain = _run(m, x, 21)
            assert fast.dtype == plain.dtype and fast.shape == plain.shape, what
            assert fast.is_contiguous(memory_format=torch.channels_last) == \
                plain.is_contiguous(memory_format=torch.channels_last), f"{what}: layout"
            if fast.numel():
                diff = (fast.double() - plain.double()).abs().max().item()
                tol = case.plain_tol if dtype == torch.uint8 else min(case.plain_tol, 1e-5)
                assert diff <= tol, f"{what}: max diff {diff} > {tol}"
    # a plain_path the case never reads would compare the fast path with itself
    assert reads[0] > 0, f"{case.id}: plain_path {case.plain_path} is never called"
    x = _float_batch(case, n=3)
    for layout in ("contiguous", "channels_last"):
        xl = x.contiguous(memory_format=torch.channels_last) if layout == "channels_last" else x
        y, g = _grad_of(_seeded(m, 5), xl)
        with _plain(case):
            yp, gp = _grad_of(_seeded(m, 5), xl)
        assert y.requires_grad and yp.requires_grad, f"{case.id}: detached output ({layout})"
        torch.testing.assert_close(g, gp, atol=1e-6, rtol=0,
                                   msg=f"{case.id}: fast vs plain gradient ({layout})")


CASE_CHECKS: List[Callable[[Case], None]] = [
    check_fast_path_matches_plain,
    check_requires_grad,
    check_gradients,
    check_compiled_gradients,
    check_export_dynamic_batch,
    check_script_every_dtype,
    check_keyed,
    check_keys_length,
]
