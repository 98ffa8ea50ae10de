"""The bench's timing rules: equal windows, untimed start-up, rotating order, workers stopped,
spreads and the strongest contender, checked on contenders whose speed is known."""
import multiprocessing
import os
import subprocess
import sys
import time

import pytest
import torch

from batchaug.bench import contenders as C
from batchaug.bench import report, timing
from batchaug.bench.timing import Measurement


class Sleepy(C.Contender):
    """Batches of ``batch`` images, each taking ``seconds``; the first takes ``first`` instead."""

    def __init__(self, key, seconds, batch=4, first=None, startup=1, log=None):
        self.key = self.label = key
        self.seconds, self.batch, self.first = seconds, batch, first
        self.startup_batches = startup
        self.log = log if log is not None else []
        self.closed = 0

    def open_stream(self):
        def batches():
            k = 0
            while True:
                time.sleep(self.first if (k == 0 and self.first is not None) else self.seconds)
                k += 1
                self.log.append(self.key)
                yield torch.zeros(self.batch, 1), torch.zeros(self.batch)

        def close():
            self.closed += 1

        return C.Stream(batches(), close)


CPU = torch.device("cpu")


def test_window_is_wall_clock_and_startup_is_untimed():
    slow_start = Sleepy("s", seconds=0.01, first=0.5)
    n, seconds = timing.measure(slow_start, 0.1, CPU)
    # The 0.5 s first batch is start-up: not in `seconds`, not in `n` (sleeps may run long on a
    # loaded machine, hence the loose bounds).
    assert 0.1 <= seconds < 0.45
    assert n % 4 == 0 and 4 <= n <= 4 * 11
    assert slow_start.closed == 1


def test_window_ends_with_the_batch_that_crosses_it():
    # A slow contender: the window is exceeded by less than one batch, never cut short.
    n, seconds = timing.measure(Sleepy("s", seconds=0.08), 0.1, CPU)
    assert n in (4, 8) and 0.1 <= seconds < 0.1 + 0.08 + 0.1


def test_one_startup_batch_per_worker_is_untimed():
    c = Sleepy("w", seconds=0.05, startup=3)
    n, seconds = timing.measure(c, 0.01, CPU)
    assert n == 4 and c.log == ["w"] * 4


def test_rounds_rotate_the_order_and_use_equal_windows():
    log = []
    cs = [Sleepy(k, seconds=0.001, log=log) for k in "abc"]
    ms = timing.run_rounds("r", cs, [1], rounds=3, window=0.02, device=CPU, log=lambda s: None)
    firsts = [m.contender for m in ms[::3]]
    assert firsts == ["a", "b", "c"]
    assert [m.contender for m in ms[3:6]] == ["b", "c", "a"]
    assert all(m.seconds >= 0.02 for m in ms)
    assert all(c.closed == 3 + 1 for c in cs)  # every window's stream closed, and the warm-up's


def test_dataloader_workers_are_stopped_after_each_window():
    images = torch.randint(0, 256, (32, 3, 8, 8), dtype=torch.uint8)
    recipe = C.make_recipe("cifar", 3, (8, 8))
    hwc = images.permute(0, 2, 3, 1).contiguous().numpy()
    c = C.TorchvisionPerSample(recipe, hwc, torch.arange(32).numpy(), 8, 2, CPU)
    assert c.startup_batches == 2
    before = set(multiprocessing.active_children())
    n, seconds = timing.measure(c, 0.05, CPU)
    assert n > 0
    # No worker is left to keep augmenting prefetched batches in the next contender's window.
    assert set(multiprocessing.active_children()) == before


class _Busy(torch.utils.data.Dataset):
    """Each item burns ``seconds`` of CPU (not a sleep: the test reads the workers' CPU time)."""

    def __init__(self, seconds):
        self.seconds = seconds

    def __len__(self):
        return 64

    def __getitem__(self, i):
        end = time.process_time() + self.seconds
        while time.process_time() < end:
            pass
        return torch.zeros(3), 0


@pytest.mark.skipif(C._cpu_seconds([os.getpid()]) is None, reason="needs Linux /proc")
def test_persistent_workers_are_idle_when_the_window_ends():
    # A persistent-worker contender (the photos recipe's DataLoader(num_workers=2)) keeps its
    # workers between windows; closing its stream must not leave them working on prefetched
    # batches inside the next contender's window.
    loader = C._endless_loader(_Busy(0.02), 4, 2, CPU, persistent=True)
    it = iter(loader)
    try:
        pids = [w.pid for w in it._workers]
        stream = C._loader_stream(it, CPU, stop=False)
        for _ in range(3):
            next(stream)
        stream.close()
        before = C._cpu_seconds(pids)
        time.sleep(0.3)
        # each worker had up to 2 batches (8 items, 0.16 s of CPU) prefetched at the close
        assert C._cpu_seconds(pids) - before < 0.03
    finally:
        it._shutdown_workers()


@pytest.mark.skipif(C._cpu_seconds([os.getpid()]) is None, reason="needs Linux /proc")
def test_a_process_with_work_left_is_running_one_waiting_is_not():
    # wait_idle's second condition: a worker that got no CPU over a poll on a loaded machine
    # still shows state R; one waiting on its queue sleeps (S)
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        deadline = time.perf_counter() + 10  # the sleeper's interpreter starts first
        while C._running([idle.pid]) and time.perf_counter() < deadline:
            time.sleep(0.05)
        assert not C._running([idle.pid]) and C._running([busy.pid])
        start = time.perf_counter()
        C.wait_idle([busy.pid], limit=0.5)  # never idle: returns at its limit
        assert time.perf_counter() - start >= 0.5
    finally:
        busy.kill()
        idle.kill()
        busy.wait()
        idle.wait()


def _ms(key, rates):
    return [Measurement("r", key, 1, r, int(rate), 1.0) for r, rate in enumerate(rates)]


def test_summary_spread_and_strongest():
    ms = _ms("batchaug", [100, 120, 90]) + _ms("torchvision_w0", [10, 10, 30]) + _ms(
        "torchvision_w2", [20, 12, 10])
    s = timing.summarize(ms)
    r = s[("batchaug", 1)]["ratios"]["torchvision_w0"]
    assert (r["median"], r["min"], r["max"]) == (10.0, 3.0, 12.0)
    assert s[("batchaug", 1)]["ratios"]["torchvision_w2"]["samples"] == [5.0, 10.0, 9.0]
    # torchvision_w2 has the higher median images/s (12 > 10): it is the strongest.
    assert timing.strongest(s, ["torchvision_w0", "torchvision_w2"], 1) == "torchvision_w2"
    assert timing.strongest(s, ["kornia"], 1) is None


def test_headline_names_the_strongest_with_its_spread():
    ms = _ms("batchaug", [100, 120, 90]) + _ms("torchvision_w0", [10, 10, 30]) + _ms(
        "torchvision_w2", [20, 12, 10])
    s = timing.summarize(ms)
    keys = ["torchvision_w0", "torchvision_w2", "batchaug"]
    recipe = {"name": "r", "strongest_usual": {"1": "torchvision_w2"},
              "contenders": [{"key": k, "label": f"<{k}>", "by_threads": {"1": s[(k, 1)]}}
                             for k in keys]}
    line = report.headline(recipe, 1)
    assert line == ("r (1 thread): batchaug = 9.0x (5.0-10.0x) the strongest usual per-sample "
                    "pipeline, <torchvision_w2>; 10.0x (3.0-12.0x) torchvision per-sample "
                    "num_workers=0")


def test_scaling_is_the_same_round_ratio_to_the_fewest_threads_and_printed():
    """batchaug at 2 threads over itself at 1, round by round; the headline says it, and the
    ratio to DataLoader(num_workers=2) beside num_workers=0 and the decode-only ceiling."""
    def at(key, threads, rates):
        return [Measurement("r", key, threads, r, int(rate), 1.0) for r, rate in enumerate(rates)]

    ms = (at("batchaug", 1, [100, 100, 50]) + at("batchaug", 2, [150, 210, 100])
          + at("torchvision_w0", 2, [50, 70, 50]) + at("torchvision_w2", 2, [100, 100, 100])
          + at("decode_ceiling", 2, [300, 300, 200]))
    s = timing.summarize(ms)
    sc = s[("batchaug", 2)]["scaling"]
    assert (sc["threads"], sc["samples"]) == (1, [1.5, 2.1, 2.0]) and sc["median"] == 2.0
    assert s[("batchaug", 1)]["scaling"] == {}
    keys = ["torchvision_w0", "torchvision_w2", "decode_ceiling", "batchaug"]
    recipe = {"name": "r", "strongest_usual": {"2": "torchvision_w0"},
              "contenders": [{"key": k, "label": f"<{k}>", "by_threads": {"2": s[(k, 2)]}}
                             for k in keys]}
    line = report.headline(recipe, 2)
    assert "1.5x (1.0-2.1x) torchvision DataLoader(num_workers=2)" in line
    assert "0.5x (0.5-0.7x) the decode-only ceiling" in line
    assert line.endswith("batchaug at 2 threads = 2.0x (1.5-2.1x) its own 1-thread rate")


@pytest.mark.parametrize("bad", ["0", "-1", "inf", "x"])
def test_window_argument_is_positive_and_finite(bad):
    import argparse

    from batchaug.cli import _positive_float

    with pytest.raises(argparse.ArgumentTypeError, match="expected a positive number"):
        _positive_float(bad)


# --- the benchmarks/ scripts' contenders: Call and Epochs ------------------------------------


def test_call_cycles_its_inputs_and_counts_images():
    seen = []
    call = timing.Call("c", lambda v: seen.append(v) or torch.zeros(v), [(2,), (3,)])
    stream = call.open_stream()
    outs = [next(stream)[0] for _ in range(5)]
    stream.close()
    assert seen == [2, 3, 2, 3, 2]
    assert [call.count(o) for o in outs] == [2, 3, 2, 3, 2]  # the output's length
    fixed = timing.Call("f", lambda: None, images=7)
    n, seconds = timing.measure(fixed, 0.01, CPU)
    assert n % 7 == 0 and n >= 7 and seconds >= 0.01
    with pytest.raises(ValueError, match="inputs must hold at least one"):
        timing.Call("e", lambda: None, [])


def test_epochs_rereads_its_loader_and_counts_the_first_item():
    batches = [(torch.zeros(4, 1), torch.zeros(4)), (torch.zeros(3, 1), torch.zeros(3))]
    epochs = timing.Epochs("e", batches, startup_batches=0)
    stream = epochs.open_stream()
    counts = [epochs.count(next(stream)[0]) for _ in range(5)]
    stream.close()
    assert counts == [4, 3, 4, 3, 4]
    with pytest.raises(ValueError, match="produced no batch"):
        next(timing.Epochs("empty", []).open_stream())


def test_thread_list_and_compare_arguments():
    default = torch.get_num_threads()
    assert timing.thread_list("1,default") == ([1] if default == 1 else [1, default])
    assert timing.thread_list("2,2,1") == [2, 1]
    for bad in ("0", "x", "1,-2"):
        with pytest.raises(ValueError, match="thread counts are integers >= 1 or 'default'"):
            timing.thread_list(bad)
    import argparse

    for rounds, window in ((0, 0.1), (1, 0.0)):
        with pytest.raises(ValueError, match="--rounds must be >= 1 and --window > 0"):
            timing.compare([], argparse.Namespace(rounds=rounds, window=window, threads=[1]))


def test_compare_and_table_give_same_round_ratios_to_the_base():
    import argparse

    fast = Sleepy("fast", seconds=0.005, startup=0)
    slow = Sleepy("slow", seconds=0.02, startup=0)
    args = argparse.Namespace(rounds=2, window=0.06, threads=[1])
    summary = timing.compare([fast, slow], args, "t")
    ratio = summary[("fast", 1)]["ratios"]["slow"]
    assert 1.5 < ratio["median"] < 8 and len(ratio["samples"]) == 2
    rows = timing.table(summary, "fast", "case")
    assert rows[0].startswith("| case | contender | threads | img/s | fast / it")
    slow_row = next(r for r in rows if "| slow |" in r)
    assert slow_row.endswith(f"| {timing.spread(ratio)} |")
    assert timing.table(summary, "fast", header=False)[0].startswith("|  | fast | 1 |")
    per_call = timing.table(summary, "fast", per_call=4)
    assert "ms per call" in per_call[0]
    assert timing.spread(None) == "-"
    assert timing.spread({"median": 1.234, "min": 1.0, "max": 1.5}) == "1.23x [1.00-1.50]"
