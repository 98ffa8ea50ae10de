"""Shared test settings. Transform contract helpers live in tests/contract/."""
import os
import re
import warnings

import pytest
import torch
from hypothesis import HealthCheck, settings

# This VM has bursts where 2-thread OpenMP work is 10-70x slower; deadlines would flake.
# ci draws the same examples every run (derandomize): a landing is judged on the code, not on
# which examples a run happened to draw; dev and thorough explore new ones (use them locally).
settings.register_profile(
    "ci", max_examples=20, deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "dev", max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "thorough", max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

warnings.filterwarnings("ignore", message=".*TorchScript.*")
warnings.filterwarnings("ignore", message=".*torch.jit.*")

# TorchScript's profiling executor specialises a scripted graph on its first calls to build
# fusion groups: 10-40 s per scripted container's with_targets on this CPU (measured), most of the
# suite's scripting time. Without a GPU no fuser can run (torch._C._jit_can_fuse_on_cpu() is
# False), so the graph computes the same ops without that step: scripted == eager is still
# checked, tens of times faster. With CUDA the default stays (fusion changes what runs there).
# test_compose_export.py runs a scripted model in a subprocess under the default strategy.
if not torch.cuda.is_available() and not torch._C._jit_can_fuse_on_cpu():
    torch.jit.set_fusion_strategy([("STATIC", 0), ("DYNAMIC", 0)])

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture(params=DEVICES)
def device(request) -> str:
    return request.param


# `pytest -m gpu` (gpu/gpu_check.sh): the tests that run only with CUDA, marked at collection
# from what already says so: a "cuda" `device` parameter, or a skip whose reason is that CUDA (or
# a GPU) is needed. A test skipped *with* CUDA ("checks the no-CUDA message") is not one of them.
_NEEDS_GPU = re.compile(r"\bneeds? (a )?(CUDA|GPU)\b|\bneed a GPU\b")


def pytest_collection_modifyitems(config, items):
    for item in items:
        spec = getattr(item, "callspec", None)
        on_cuda = spec is not None and str(spec.params.get("device", "")).startswith("cuda")
        needs = any(_NEEDS_GPU.search(str(m.kwargs.get("reason", "")))
                    for m in item.iter_markers("skipif"))
        if on_cuda or needs:
            item.add_marker(pytest.mark.gpu)
