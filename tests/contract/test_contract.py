"""Runs every contract check (tests/contract/) on every transform case, uint8 and float32."""
import pytest
import torch
from torch import nn

from tests.contract import CASE_CHECKS, CASES, CHECKS, DTYPES, check_no_host_sync


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).replace("torch.", ""))
@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__.replace("check_", ""))
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_contract(case, check, dtype, device):
    check(case, dtype, device)


@pytest.mark.parametrize("check", CASE_CHECKS, ids=lambda c: c.__name__.replace("check_", ""))
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_contract_once_per_case(case, check):
    """Gradients, compile, export with a dynamic batch and every input dtype: CPU, once a case."""
    check(case)


SYNC_DEVICES = ["meta"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", SYNC_DEVICES)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).replace("torch.", ""))
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_no_host_sync(case, dtype, device):
    """The module moved with .to(device) runs its default forward (train, eval, keyed) with no
    host read and no Python data copied to the device: on the meta device under a dispatch
    mode on every machine, on CUDA under torch.cuda.set_sync_debug_mode("error") when present."""
    check_no_host_sync(case, dtype, device)


_SYNCS = {
    "item": lambda t: t.sum().item(),
    "bool": lambda t: bool(t.any()),
    "tolist": lambda t: t.tolist(),
    "cpu": lambda t: t.cpu(),
    "nonzero": lambda t: torch.nonzero(t > 0),
    "mask index": lambda t: t[t > 0],
    "unique": lambda t: torch.unique(t),
    "bincount": lambda t: torch.bincount(t.long().view(-1), minlength=3),
    "tensor(list, device)": lambda t: torch.tensor([1.0, 2.0], device=t.device),
    "as_tensor(list, device)": lambda t: torch.as_tensor([1.0, 2.0], device=t.device),
    "cpu tensor .to(device)": lambda t: t + torch.ones(4).to(t.device),
    "lstsq": lambda t: torch.linalg.lstsq(t.view(2, 2), t.view(2, 2)),
    "linalg.solve": lambda t: torch.linalg.solve(t.view(2, 2), t.view(2, 2)),
}


@pytest.mark.parametrize("name", list(_SYNCS))
def test_no_host_sync_probe_catches(name):
    """The meta check fails on each kind of host read or host->device copy, naming it."""
    from tests.contract import HostSyncError, NoHostSync

    t = torch.empty(4, device="meta")
    with pytest.raises(HostSyncError):
        with NoHostSync("meta"):
            _SYNCS[name](t)
    assert torch.tensor is not None and torch.tensor([1]).device.type == "cpu"  # restored


def test_no_host_sync_probe_allows_device_work():
    """Device ops, fills, CPU scalars mixed in, and solve_ex pass the meta check."""
    from tests.contract import NoHostSync

    t = torch.empty(2, 2, device="meta")
    with NoHostSync("meta"):
        y = (t * torch.tensor(2.0) + torch.full([2, 2], 3.0, device="meta")).clamp(0, 1)
        sol = torch.linalg.solve_ex(t, t)[0]
        z = torch.where(t > 0, y, sol).sum(0)
        torch.tensor([1.0, 2.0])  # Python data on the host stays allowed
    assert z.shape == (2,)


def test_no_host_sync_catches_a_module_left_on_the_cpu():
    """A module whose constant buffer was not moved with .to(device) copies it per call: the
    check fails (the library copies rather than crashes, so training still runs)."""
    import batchaug
    from tests.contract import HostSyncError, NoHostSync

    m = batchaug.ColorJitter(0.4, 0.4, 0.4, 0.1)  # not moved
    x = torch.empty(4, 3, 8, 8, device="meta")
    with pytest.raises(HostSyncError, match="host->device copy"):
        with NoHostSync("meta"):
            m(x)
    m.to("meta")
    with NoHostSync("meta"):
        m(x)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64, torch.int64],
                         ids=str)
def test_small_tensor_fills_equal_torch_tensor(dtype):
    """Off the CPU a few Python numbers become a tensor by fill kernels: the same values (signed
    zero, rounding to the dtype) as torch.tensor builds on the CPU."""
    from batchaug.functional._utils import _filled, small_tensor

    for values in ([0.5], [1.0, -0.0, 0.1, 3.0], [-0.0, 0.0], [0.3, 0.3, 0.3], [60001.5, 2.0]):
        if dtype == torch.int64:
            values = [float(int(v)) for v in values]
        ref = torch.tensor(values, dtype=dtype)
        for got in (_filled(values, dtype, torch.device("cpu")),
                    small_tensor(values, dtype, torch.device("cpu"))):
            assert got.dtype == dtype and torch.equal(got, ref)
            assert torch.equal(torch.signbit(got), torch.signbit(ref))
    assert small_tensor([1.0, 2.0], torch.float32, torch.device("meta")).shape == (2,)


def _defaults():
    """Every exported transform built with its default arguments (the required ones filled
    in), plus the default paths the cases above do not take (eval crop of RandomResizedCrop,
    random erasing values, fills, bicubic, the default policies)."""
    import batchaug as B

    required = {
        "RandomCrop": (16,), "CenterCrop": (16,), "Pad": (2,), "Normalize": ([0.5], [0.2]),
        "ToDtype": (torch.float32,), "RandomRotation": (30,), "RandomAffine": (30,),
        "RandomResizedCrop": (16,), "TimmRandomResizedCrop": (16,), "Resize": (16,),
        "GaussianBlur": (3,),
        "RandomPosterize": (3,), "RandomSolarize": (0.5,), "RandomAdjustSharpness": (2.0,),
        "RandomApply": ([B.RandomInvert()],),
        "RandomOrder": ([B.RandomInvert(), B.RandomHorizontalFlip()],),
        "RandomChoice": ([B.RandomInvert(), B.RandomGrayscale()],),
        "Augment": (B.RandomHorizontalFlip(),),
        "DeployedModel": ([B.Resize(20), B.CenterCrop(16)], nn.Identity()),
    }
    out = []
    for name in B.__all__:
        cls = getattr(B, name)
        if (isinstance(cls, type) and issubclass(cls, nn.Module)
                and name not in ("MixUp", "CutMix", "MixUpOrCutMix", "TimmMixup",
                                 "AugmentedModel", "Transform", "GeometricTransform")):
            # (the protocol's base classes are not transforms themselves)
            out.append((name, lambda cls=cls, a=required.get(name, ()): cls(*a)))
    out += [
        ("RandomErasing-random", lambda: B.RandomErasing(value="random")),
        ("RandomRotation-fill", lambda: B.RandomRotation(30, fill=[1, 2, 3])),
        ("RandomAffine-bilinear-fill", lambda: B.RandomAffine(
            30, translate=(0.1, 0.1), shear=10, interpolation="bilinear", fill=7)),
        ("RandomResizedCrop-bicubic", lambda: B.RandomResizedCrop(16, interpolation="bicubic")),
        ("TrivialAugmentWide-fill", lambda: B.TrivialAugmentWide(fill=[1, 2, 3])),
        ("AutoAugment-cifar10", lambda: B.AutoAugment("cifar10")),
        ("Resize-bicubic", lambda: B.Resize(30, interpolation="bicubic")),
    ]
    return out


@pytest.mark.parametrize("name, make", _defaults(), ids=[d[0] for d in _defaults()])
def test_no_host_sync_default_arguments(name, make):
    """Default arguments, moved to the meta device: train and eval, keyed where it takes keys,
    uint8 and float32, with no host read or host->device copy (contract.NoHostSync)."""
    from batchaug import _random
    from tests.contract import NoHostSync

    m = make().to("meta")
    keys = _random.sample_keys(0, 0, torch.arange(6)).to("meta")
    for dtype in (torch.uint8, torch.float32):
        x = torch.empty(6, 3, 24, 28, dtype=dtype, device="meta")
        for train in (True, False):
            m.train(train)
            for k in ((None, keys) if getattr(m, "takes_keys", False) else (None,)):
                with NoHostSync("meta"):
                    y = m(x) if k is None else m(x, k)
                assert y.device.type == "meta" and y.shape[0] == 6, (name, dtype, train)


@pytest.mark.parametrize("kw", [{}, {"mode": "elem", "cutmix_alpha": 1.0},
                                {"mode": "pair", "cutmix_alpha": 1.0},
                                {"cutmix_alpha": 1.0, "cutmix_minmax": (0.2, 0.8)}], ids=str)
def test_no_host_sync_timm_mixup(kw):
    """TimmMixup (images, labels) on the meta device: no host read or host->device copy
    (the other mixers: tests/transforms/test_mix.py)."""
    import batchaug
    from tests.contract import NoHostSync

    m = batchaug.TimmMixup(num_classes=10, **kw).to("meta")
    labels = torch.empty(6, dtype=torch.int64, device="meta")
    for dtype in (torch.uint8, torch.float32):
        x = torch.empty(6, 3, 8, 10, dtype=dtype, device="meta")
        with NoHostSync("meta"):
            out, t = m(x, labels)
        assert out.shape == x.shape and out.dtype == dtype and t.shape == (6, 10)
