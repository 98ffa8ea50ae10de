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


def test_totals_cover_every_step_while_only_the_latest_are_kept(monkeypatch):
    # A fake clock: every reading advances by the next of 1, 2, 3, ... ms, so each step's wait
    # and compute are known exactly; 500 steps, 10 kept.
    ticks = iter(range(1, 10_000))
    now = [0.0]

    def clock():
        now[0] += next(ticks) / 1e3
        return now[0]

    monkeypatch.setattr(batchaug.stall.time, "perf_counter", clock)
    meter = StallMeter("cpu", skip_first=3, history=10)
    for _ in meter.wrap(range(500)):
        with meter.compute():
            pass
    # step i (0-based) reads the clock 4 times: marks 4i+1..4i+4, with a failed last read
    # (StopIteration) after step 499; wait = tick 4i+2, compute = tick 4i+4
    expected = [(4 * i + 2, 4 * i + 4) for i in range(500)]
    times = meter.step_times()
    assert len(times) == 10
    assert [v for t in times for v in t] == pytest.approx([v for t in expected[-10:] for v in t])
    s = meter.summary()
    assert s.steps == 497
    assert s.wait_ms_total == pytest.approx(sum(w for w, _ in expected[3:]))
    assert s.compute_ms_total == pytest.approx(sum(c for _, c in expected[3:]))
    assert len(meter._waits) == len(meter._computes) == 0  # nothing held per step


class _FakeEvent:
    """torch.cuda.Event on a fake device whose work completes when ``done[0]`` says."""

    made = 0

    def __init__(self, clock, done, enable_timing=False):
        type(self).made += 1
        self.clock, self.done, self.t, self.stream, self.synced = clock, done, None, None, False

    def record(self, stream):
        self.clock[0] += 1.5
        self.t, self.stream, self.synced = self.clock[0], stream, False

    def query(self):
        return self.done[0]

    def synchronize(self):
        self.synced = True

    def elapsed_time(self, other):
        for e in (self, other):  # as torch: cudaErrorNotReady for an unfinished event
            assert e.t is not None and (e.done[0] or e.synced), "event not ready"
        return other.t - self.t


@pytest.mark.parametrize("device_done", [True, False])
def test_cuda_meter_uses_the_device_index_and_a_bounded_set_of_events(monkeypatch, device_done):
    # CUDA faked on the CPU: current device 1. "cuda" means cuda:1 from the start, and the
    # events are recorded on cuda:1's stream. Events are reused once folded; a device that
    # never reports completion (a CPU far ahead) still holds at most MAX_PENDING steps.
    clock, done = [0.0], [device_done]
    streams = []
    _FakeEvent.made = 0
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    monkeypatch.setattr(torch.cuda, "Event", lambda enable_timing=False: _FakeEvent(clock, done))
    monkeypatch.setattr(torch.cuda, "current_stream",
                        lambda device=None: streams.append(device) or ("stream", device))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    meter = StallMeter("cuda")
    assert meter.device == torch.device("cuda", 1)
    for _ in meter.wrap(range(1000)):
        with meter.compute():
            pass
    assert set(streams) == {torch.device("cuda", 1)}
    limit = 4 * (StallMeter.MAX_PENDING + 2)
    assert _FakeEvent.made <= (5 if device_done else limit)
    assert len(meter._waits) <= StallMeter.MAX_PENDING + 1
    s = meter.summary()
    assert s.steps == 1000
    assert s.wait_ms_total == pytest.approx(1000 * 1.5) and s.compute_ms_total == pytest.approx(
        1000 * 1.5)
    assert StallMeter(torch.device("cuda", 0)).device == torch.device("cuda", 0)


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_bad_history(bad):
    with pytest.raises(ValueError, match=r"history must be an int >= 1"):
        StallMeter("cpu", history=bad)


@pytest.mark.parametrize("half", ["wrap only", "compute only"])
def test_marks_without_their_other_half_stay_bounded(monkeypatch, half):
    # a loop that wraps its batches but never enters compute() (or the reverse): without a
    # bound, two CUDA events per step would be held forever
    clock, done = [0.0], [True]
    _FakeEvent.made = 0
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "Event", lambda enable_timing=False: _FakeEvent(clock, done))
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: ("stream", device))
    for meter in (StallMeter("cuda"), StallMeter("cpu")):
        if half == "wrap only":
            for _ in meter.wrap(range(1000)):
                pass
        else:
            for _ in range(1000):
                with meter.compute():
                    pass
        assert len(meter._waits) + len(meter._computes) <= StallMeter.MAX_PENDING
        assert meter.summary().steps == 0
    assert _FakeEvent.made <= 2 * (StallMeter.MAX_PENDING + 2)
    # the meter still pairs correctly once both halves come
    meter = StallMeter("cpu")
    for _ in meter.wrap(range(3)):
        with meter.compute():
            pass
    assert meter.summary().steps == 3
