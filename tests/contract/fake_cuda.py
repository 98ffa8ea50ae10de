"""Check CUDA's own rules without a GPU: fake CUDA tensors and a host-traffic recorder.

``FakeTensorMode`` places tensors on a fake ``"cuda"`` device on a machine without one, and
CUDA's dispatch rules then apply: ``out[i] = 2.0`` on a CUDA tensor copies a host scalar to the
device (ATen's ``copy_`` -> ``memcpy_and_sync``, a blocking copy), ``torch.tensor(data,
device="cuda")`` copies from the host, and ``.item()`` / ``nonzero`` raise (their output depends
on the data). ``HostTraffic`` records every op whose tensors sit on different devices, naming
the library line that issued it. 0-dim CPU tensors mixed into device arithmetic are not traffic
(CUDA reads them as kernel arguments); copying one into a device tensor is.

Usage::

    with fake_cuda():
        m = make().to("cuda")                       # built on the CPU, moved inside the mode
        x = torch.zeros(8, 3, 32, 32, dtype=torch.uint8, device="cuda")
        with HostTraffic() as traffic:
            m(x)
    assert not traffic.ops, traffic.report()
"""
from __future__ import annotations

import contextlib
import os
import traceback
from typing import Iterator, List, Tuple

import torch
from torch._subclasses.fake_tensor import (
    DataDependentOutputException,
    DynamicOutputShapeException,
    FakeTensor,
    FakeTensorMode,
    unset_fake_temporarily,
)
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

# Ops that move bytes between devices whatever the source's size (a 0-dim host value copied
# into a device tensor is a blocking copy, unlike a 0-dim host scalar read by a device kernel).
_COPIES = frozenset({
    "aten._to_copy.default", "aten.copy_.default", "aten.copy.default",
    "aten._copy_from.default", "aten._copy_from_and_resize.default",
    "aten.lift_fresh_copy.default",
})

_LIB = os.sep + "batchaug" + os.sep
_HERE = os.path.abspath(__file__)


def _caller() -> str:
    """The innermost batchaug line on the stack (else the innermost non-torch line)."""
    frames = traceback.extract_stack()[:-3]
    for f in reversed(frames):
        if _LIB in f.filename:
            return f"{f.filename.rsplit(_LIB, 1)[1]}:{f.lineno} ({f.name})"
    for f in reversed(frames):
        if os.sep + "torch" + os.sep not in f.filename and os.path.abspath(f.filename) != _HERE:
            return f"{os.path.basename(f.filename)}:{f.lineno} ({f.name})"
    return "?"


class HostTraffic(TorchDispatchMode):
    """Records ops that move data between the host and the device, with their caller.

    ``ops`` is a list of ``(op name, devices of its tensors, caller)``.
    """

    def __init__(self) -> None:
        super().__init__()
        self.ops: List[Tuple[str, List[str], str]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = str(func)
        ins = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        if name not in _COPIES:
            ins = [t for t in ins if t.dim() > 0]
        outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        devices = [t.device.type for t in ins + outs]
        if len(set(devices)) > 1:
            self.ops.append((name, devices, _caller()))
        return out

    def report(self) -> str:
        lines = [f"{len(self.ops)} host<->device op(s):"]
        lines += [f"  {name} {devs} at {where}" for name, devs, where in self.ops[:20]]
        return "\n".join(lines)


@contextlib.contextmanager
def fake_cuda() -> Iterator[FakeTensorMode]:
    """A FakeTensorMode in which ``device="cuda"`` works without a GPU.

    Real CPU tensors may enter (modules built on the CPU, then ``.to("cuda")`` inside the mode);
    ``.item()``, ``nonzero`` and other data-dependent outputs raise.
    """
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    with mode:
        yield mode


class CudaOnlyFake(FakeTensorMode):
    """``fake_cuda()`` for the host side too: ops on real CPU tensors alone (the loader's batch
    planning, which reads the cache's CPU index) run for real, so their values exist; CUDA
    tensors are fake, as in ``fake_cuda()``."""

    def __init__(self):
        super().__init__(allow_non_fake_inputs=True)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        flat = tree_flatten((args, kwargs))[0]
        device = kwargs.get("device")
        if (not any(isinstance(t, FakeTensor) for t in flat)
                and all(t.device.type == "cpu" for t in flat if isinstance(t, torch.Tensor))
                and (device is None or torch.device(device).type == "cpu")):
            with unset_fake_temporarily():
                return func(*args, **kwargs)
        return super().__torch_dispatch__(func, types, args, kwargs)


def assert_no_host_traffic(fn, *args, **kwargs):
    """Run ``fn(*args, **kwargs)`` (inside ``fake_cuda()``) and fail on any host<->device op."""
    with HostTraffic() as traffic:
        out = fn(*args, **kwargs)
    assert not traffic.ops, traffic.report()
    return out


def _raised_at(tb) -> str:
    """The innermost batchaug line of a traceback (where a data-dependent op was written)."""
    frames = traceback.extract_tb(tb)
    for f in reversed(frames):
        if _LIB in f.filename:
            return f"{f.filename.rsplit(_LIB, 1)[1]}:{f.lineno} ({f.name})"
    return "?"


@contextlib.contextmanager
def no_host_traffic(what: str) -> Iterator[HostTraffic]:
    """Inside ``fake_cuda()``: fail, naming the library line, on any host<->device op or any
    output whose value or size depends on the data (``.item()``, ``bool(t)``, ``nonzero``,
    boolean-mask indexing: each a device->host read on CUDA)."""
    try:
        with HostTraffic() as traffic:
            yield traffic
    except (DataDependentOutputException, DynamicOutputShapeException) as e:
        raise AssertionError(f"{what}: a data-dependent output ({type(e).__name__}: {e}) at "
                             f"{_raised_at(e.__traceback__)}") from e
    assert not traffic.ops, f"{what}: {traffic.report()}"
