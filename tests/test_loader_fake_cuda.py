"""The loader on CUDA without a GPU (tests/fake_cuda.py): its crop stage's batched path and its
per-batch assembly issue no host<->device copy and read no device value on the host.

What cannot be faked is stated where it is stood in for: FakeTensorMode has no streams, events,
pinned memory or ``torch.cuda.is_available()``; those calls are replaced by recorders, so the
checks here are about which tensors cross between host and device, and how (pinned,
non-blocking, on which stream), not about timing.
"""
import pytest
import torch

from batchaug import (Augment, CenterCrop, RandomAffine, RandomCrop, RandomHorizontalFlip,
                      RandomPerspective, RandomResizedCrop, RandomRotation, RandomVerticalFlip,
                      Resize)
from batchaug.data.crop import make_crop_stage
from fake_cuda import HostTraffic, fake_cuda

CROPS = {
    "warps+rrc": lambda: Augment(RandomHorizontalFlip(), RandomVerticalFlip(),
                                 RandomRotation(30), RandomAffine(10, shear=5),
                                 RandomPerspective(0.5, p=1.0), RandomResizedCrop(24)),
    "perspective+rrc": lambda: Augment(RandomPerspective(0.4, p=0.5, interpolation="nearest"),
                                       RandomResizedCrop(20)),
    "resize+center": lambda: Augment(Resize(40), CenterCrop(32)),
    "flip+resize+random": lambda: Augment(RandomHorizontalFlip(), Resize(40),
                                          RandomCrop(32, pad_if_needed=True)),
    "rotation+center": lambda: Augment(RandomRotation(20), CenterCrop(30)),
    "random crop": lambda: RandomCrop(30, pad_if_needed=True, padding_mode="reflect"),
    "resize hw": lambda: Resize((20, 30)),
}


@pytest.mark.parametrize("keyed", [False, True])
@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
@pytest.mark.parametrize("name", list(CROPS))
def test_crop_stage_batched_path_has_no_host_traffic_on_cuda(name, dtype, train, keyed):
    stage = make_crop_stage(CROPS[name]()).train(train)  # built on the CPU
    with fake_cuda():
        stage = stage.to("cuda")
        x = torch.zeros(8, 3, 64, 80, dtype=dtype, device="cuda")
        sizes = torch.ones(8, 2, dtype=torch.int64, device="cuda")
        keys = torch.zeros(8, dtype=torch.int64, device="cuda") if keyed else None
        with HostTraffic() as traffic:
            out = stage(x, sizes, keys)
    assert not traffic.ops, traffic.report()
    assert out.device.type == "cuda" and out.dtype == dtype
    assert tuple(out.shape[2:]) == stage.output_size
