"""StallMeter: pairing of wait/compute per step, summary arithmetic, warm-up skipping, errors."""
import doctest
import time

import pytest
import torch

import batchaug.stall
from batchaug import StallMeter


def _slow_batches(n, delay):
    for i in range(n):
        time.sleep(delay)
        yield torch.full((2, 3), float(i)), torch.zeros(2, dtype=torch.int64)


def test_wait_and_compute_are_split_per_step():
    meter = StallMeter("cpu")
    seen = []
    for x, _ in meter.wrap(_slow_batches(3, 0.03)):
        with meter.compute():
            seen.append(float(x[0, 0]))
            time.sleep(0.002)
    assert seen == [0.0, 1.0, 2.0]  # items pass through unchanged and in order
    times = meter.step_times()
    assert len(times) == 3
    # Sleeps give lower bounds; the wait dominates by construction (30 ms vs 2 ms).
    assert all(w >= 29.0 and c >= 1.9 for w, c in times)
    s = meter.summary()
    assert s.steps == 3
    assert s.wait_ms_total == pytest.approx(sum(w for w, _ in times))
    assert s.compute_ms_total == pytest.approx(sum(c for _, c in times))
    assert s.wait_ms_mean == pytest.approx(s.wait_ms_total / 3)
    total = s.wait_ms_total + s.compute_ms_total
    assert s.wait_fraction == pytest.approx(s.wait_ms_total / total)
    assert s.wait_fraction > 0.5
    assert "data-wait fraction" in str(s)


def test_skip_first_and_reset():
    meter = StallMeter("cpu", skip_first=2)
    for _ in meter.wrap(_slow_batches(5, 0.0)):
        with meter.compute():
            pass
    assert len(meter.step_times()) == 5
    assert meter.summary().steps == 3
    meter.reset()
    empty = meter.summary()
    assert empty.steps == 0 and empty.wait_fraction == 0.0 and empty.wait_ms_mean == 0.0


def test_incomplete_step_is_not_counted():
    meter = StallMeter("cpu")
    it = meter.wrap(_slow_batches(2, 0.0))
    next(it)
    with meter.compute():
        pass
    next(it)  # fetched, but its compute never ran
    assert meter.summary().steps == 1


@pytest.mark.parametrize("bad", [-1, 1.5, True, "2"])
def test_bad_skip_first(bad):
    with pytest.raises(ValueError, match="skip_first"):
        StallMeter("cpu", skip_first=bad)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error on a CPU-only machine")
def test_cuda_without_cuda():
    with pytest.raises(ValueError, match="CUDA is not available"):
        StallMeter("cuda")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_events():
    meter = StallMeter("cuda")
    batches = [(torch.randn(64, 64, device="cuda"), None) for _ in range(3)]
    w = torch.randn(64, 64, device="cuda")
    torch.cuda.set_sync_debug_mode("error")  # no host synchronisation inside the steps
    try:
        for x, _ in meter.wrap(batches):
            with meter.compute():
                for _ in range(50):
                    x = x @ w
    finally:
        torch.cuda.set_sync_debug_mode("default")
    s = meter.summary()
    assert s.steps == 3 and s.compute_ms_total > 0 and 0 <= s.wait_fraction < 1


def test_docstring_example():
    failures, tried = doctest.testmod(batchaug.stall, verbose=False)
    assert tried > 0 and failures == 0
