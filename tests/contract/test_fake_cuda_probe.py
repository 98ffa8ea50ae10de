"""The fake-CUDA recorder (tests/contract/fake_cuda.py) catches each kind of host traffic CUDA would do."""
import pytest
import torch
from torch._subclasses.fake_tensor import DataDependentOutputException, DynamicOutputShapeException

from tests.contract.fake_cuda import HostTraffic, fake_cuda

_TRAFFIC = {
    "setitem scalar": lambda t: t.__setitem__(0, 2.0),
    "tensor(list, device)": lambda t: torch.tensor([1.0, 2.0], device=t.device),
    "cpu tensor .to(device)": lambda t: t + torch.ones(4).to(t.device),
    "copy_ from host": lambda t: t.copy_(torch.zeros(4)),
    ".cpu()": lambda t: t.cpu(),
}


@pytest.mark.parametrize("name", list(_TRAFFIC))
def test_fake_cuda_records_host_traffic(name):
    with fake_cuda():
        t = torch.zeros(4, device="cuda")
        with HostTraffic() as traffic:
            _TRAFFIC[name](t)
    assert traffic.ops, name
    assert "test_fake_cuda_probe.py" in traffic.report()


def test_fake_cuda_device_work_is_not_traffic():
    with fake_cuda():
        t = torch.zeros(2, 2, device="cuda")
        with HostTraffic() as traffic:
            y = (t * torch.tensor(2.0) + torch.full([2, 2], 3.0, device="cuda")).clamp(0, 1)
            y.narrow(0, 0, 1).fill_(2.0)
            torch.linalg.solve_ex(t + torch.eye(2, device="cuda"), t)
    assert not traffic.ops, traffic.report()
    assert y.device.type == "cuda"


@pytest.mark.parametrize("op", ["item", "nonzero"])
def test_fake_cuda_refuses_data_dependent_outputs(op):
    with fake_cuda():
        t = torch.zeros(4, device="cuda")
        with pytest.raises((DataDependentOutputException, DynamicOutputShapeException)):
            t.sum().item() if op == "item" else torch.nonzero(t)


@pytest.mark.parametrize("op", ["item", "nonzero", "mask index", "copy from host"])
def test_no_host_traffic_fails_naming_what(op):
    """no_host_traffic turns host traffic and data-dependent outputs into an AssertionError
    that says what happened (the contract's failure message)."""
    from tests.contract.fake_cuda import no_host_traffic

    ops = {"item": lambda t: t.sum().item(), "nonzero": lambda t: torch.nonzero(t),
           "mask index": lambda t: t[t > 0], "copy from host": lambda t: t.copy_(torch.ones(4))}
    with fake_cuda():
        t = torch.zeros(4, device="cuda")
        with pytest.raises(AssertionError, match="data-dependent output|host<->device"):
            with no_host_traffic(op):
                ops[op](t)
