"""No host sync: NoHostSync (a dispatch mode on the meta device) and check_no_host_sync."""
from __future__ import annotations

from typing import List

import torch
from torch import Tensor

from tests.contract.cases import Case, expected_dtype, expected_shape, make_batch


# ----------------------------------------------------------------------------- host syncs
# A default forward off the CPU must not read the device from the host (a sync: the CPU can no
# longer run ahead) nor build a tensor from Python data on it (torch.tensor(list, device=cuda)
# is a blocking copy). The meta device has no data, so a batch on it runs every device op while
# any host read fails; a dispatch mode names the op (rather than meta's own error) and also
# catches what meta lets pass: a copy between the host and the device, linalg's error checks.

class HostSyncError(AssertionError):
    """A forward on a non-CPU device read the device from the host or copied host data to it."""


def _host_read_ops():
    aten = torch.ops.aten
    names = [
        "_local_scalar_dense",       # .item(), bool(t), int(t), float(t)
        "nonzero", "nonzero_static", "argwhere", "masked_select", "unique_dim", "_unique",
        "_unique2", "unique_consecutive", "unique_dim_consecutive", "bincount", "equal",
        "is_nonzero", "allclose", "histc", "repeat_interleave",
        "linalg_lstsq",              # its CUDA path checks the solver's info on the host
        "_linalg_check_errors",      # linalg.solve/inv/cholesky (non-_ex) read info: a sync
    ]
    return {getattr(aten, n) for n in names if hasattr(aten, n)}


def _caller() -> str:
    """file:line of the innermost batchaug frame on the stack (where the sync is written)."""
    import traceback

    frames = [f for f in traceback.extract_stack()
              if "batchaug" in f.filename and "tests" not in f.filename]
    if not frames:
        return "?"
    f = frames[-1]
    return f"{f.filename.split('batchaug', 1)[-1].lstrip('/')}:{f.lineno}"


def _devices(args) -> List[torch.device]:
    from torch.utils._pytree import tree_leaves

    return [a.device for a in tree_leaves(args) if isinstance(a, Tensor)]


class NoHostSync:
    """Context manager: any host read or host->device copy on ``device`` raises HostSyncError.

    On the meta device a TorchDispatchMode rejects the ops that read the device from the host
    (``.item()``/``bool()``, ``.tolist()``/``.cpu()`` (a meta->cpu copy), ``nonzero``,
    ``unique``, ``bincount``, boolean-mask indexing, ``linalg.lstsq``/``solve`` error checks)
    and host->device copies (``torch.tensor(data, device=...)``, ``.to(device)`` of a CPU
    tensor); 0-dim CPU tensors mixed into device ops are fine (CUDA reads them as scalars). On
    CUDA, ``torch.cuda.set_sync_debug_mode("error")`` does the same job on the real device.
    Both wrap ``torch.tensor``/``torch.as_tensor`` so that Python data built on the device fails
    with the caller named, not a later symptom.
    """

    def __init__(self, device: str) -> None:
        self.device = torch.device(device)
        self._mode = None
        self._saved = None

    def _wrap(self, fn, name):
        device = self.device

        def wrapped(data, *args, **kwargs):
            dev = kwargs.get("device")
            if dev is not None and torch.device(dev).type == device.type:
                raise HostSyncError(
                    f"torch.{name}(<Python data>, device={dev}) at {_caller()} in a forward on "
                    f"{device}: build it once per (device, dtype) or with device ops")
            return fn(data, *args, **kwargs)
        return wrapped

    def __enter__(self) -> "NoHostSync":
        self._saved = (torch.tensor, torch.as_tensor)
        torch.tensor = self._wrap(torch.tensor, "tensor")
        torch.as_tensor = self._wrap(torch.as_tensor, "as_tensor")
        try:
            if self.device.type == "meta":
                self._mode = _MetaHostSyncMode()
                self._mode.__enter__()
            elif self.device.type == "cuda":
                torch.cuda.synchronize()
                torch.cuda.set_sync_debug_mode("error")
        except BaseException:
            torch.tensor, torch.as_tensor = self._saved
            raise
        return self

    def __exit__(self, *exc) -> None:
        try:
            if self._mode is not None:
                self._mode.__exit__(*exc)
                self._mode = None
            elif self.device.type == "cuda":
                torch.cuda.set_sync_debug_mode("default")
        finally:
            torch.tensor, torch.as_tensor = self._saved


def _make_meta_mode():
    from torch.utils._python_dispatch import TorchDispatchMode

    reads = _host_read_ops()
    aten = torch.ops.aten
    copies = {aten._to_copy.default, aten.copy_.default, aten.copy.default,
              aten._copy_from.default, aten._copy_from_and_resize.default}
    index_ops = {aten.index.Tensor, aten.index_put.default, aten.index_put_.default,
                 aten._index_put_impl_.default}

    class Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            try:
                return self._check(func, args, kwargs)
            except HostSyncError as e:
                raise HostSyncError(f"{e} (at {_caller()})") from None

        def _check(self, func, args, kwargs):
            if func.overloadpacket in reads:
                raise HostSyncError(f"{func} reads the device from the host")
            if func in copies:
                src = [d.type for d in _devices(args)]
                dst = kwargs.get("device")
                to_cpu = func is aten._to_copy.default and dst is not None \
                    and torch.device(dst).type == "cpu" and "meta" in src
                to_meta = func is aten._to_copy.default and dst is not None \
                    and torch.device(dst).type == "meta" and "cpu" in src
                if func is not aten._to_copy.default and len(set(src)) > 1:
                    to_cpu = src[0] == "cpu"
                    to_meta = src[0] == "meta"
                if to_cpu:
                    raise HostSyncError(f"{func}: a device->host copy (.cpu()/.tolist()/"
                                        "numpy()) reads the device")
                if to_meta:
                    raise HostSyncError(f"{func}: a host->device copy (torch.tensor(data, "
                                        "device=...) or .to(device) of a CPU tensor) blocks")
            if func in index_ops:
                from torch.utils._pytree import tree_leaves

                for a in tree_leaves(args[1]):
                    if isinstance(a, Tensor) and a.dtype in (torch.bool, torch.uint8):
                        raise HostSyncError(f"{func} with a boolean mask: its output size "
                                            "depends on the data (a nonzero on the device)")
            return func(*args, **kwargs)

    return Mode


_MODE_CLASS = None


def _MetaHostSyncMode():
    global _MODE_CLASS
    if _MODE_CLASS is None:
        _MODE_CLASS = _make_meta_mode()
    return _MODE_CLASS()


def check_no_host_sync(case: Case, dtype: torch.dtype, device: str) -> None:
    """The default forward, moved with ``.to(device)`` (train and eval, with and without keys),
    runs on a ``device`` batch without a host read or Python data built on the device."""
    from batchaug import _random

    m = case.factory().to(device)
    x = make_batch(case, dtype, "cpu", n=6).to(device)
    keys = _random.sample_keys(0, 0, torch.arange(6)).to(device)
    runs = [("train", None), ("eval", None)]
    if case.random:
        runs.append(("train", keys))
    if device != "meta":
        for mode, k in runs:  # warm-up outside the checked region (lazy initialisation syncs)
            m.train(mode == "train")
            m(x) if k is None else m(x, k)
    for mode, k in runs:
        m.train(mode == "train")
        what = f"{case.id} on {device} ({dtype}, {mode}{', keyed' if k is not None else ''})"
        try:
            with NoHostSync(device):
                y = m(x) if k is None else m(x, k)
        except HostSyncError as e:
            raise HostSyncError(f"{what}: {e}") from e
        assert y.device.type == torch.device(device).type, what
        if mode == "train" or not case.random:
            assert tuple(y.shape) == expected_shape(case, 6), what
            assert y.dtype == expected_dtype(case, dtype), what
