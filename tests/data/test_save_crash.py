"""Crash-safety of ``DeviceCache.save`` (``batchaug.data.atomic``): killed with SIGKILL/SIGTERM at
every protocol step and at random moments, PATH still loads as the complete old or new cache, and
the next save of PATH leaves no hidden copies. Also symlinks, read-only caches, concurrent saves.
"""
import contextlib
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import pytest
import torch

import batchaug.data.atomic as atomic
from batchaug import DeviceCache

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# One child process imports batchaug once, then forks a grandchild per job that saves NEW over
# the job's cache and is killed: by itself at a named protocol step, or by the child after a
# random delay. (A subprocess per kill would spend seconds importing torch each time.)
CHILD = r"""
import json, os, random, signal, sys, time
import torch
torch.set_num_threads(1)
from batchaug import DeviceCache
import batchaug.data.atomic as atomic

jobs, new_dirs, seed = json.loads(sys.argv[1])
news = {k: DeviceCache.load(v, device="cpu") for k, v in new_dirs.items()}
t0 = time.perf_counter()  # how long a save of the big cache takes, to spread the random kills
news["big"].save(os.path.join(os.path.dirname(new_dirs["big"]), "timing"), overwrite=True)
span = time.perf_counter() - t0
rng = random.Random(seed)
results = []
for job in jobs:
    sig = getattr(signal, job["signal"])
    pid = os.fork()
    if pid == 0:
        if job.get("step"):
            def hook(name, step=job["step"], sig=sig):
                if name == step:
                    os.kill(os.getpid(), sig)
                    time.sleep(10)  # the signal is delivered before this returns
            atomic._step = hook
        if job.get("no_exchange"):
            def unsupported(a, b):
                raise OSError(22, "RENAME_EXCHANGE unsupported here")
            atomic._exchange = unsupported
        news[job["new"]].save(job["path"], overwrite=True)
        os._exit(0)
    delay = None
    if job.get("step") is None:
        delay = rng.uniform(0.0, span)  # some land mid-write, some after the swap
        time.sleep(delay)
        os.kill(pid, sig)
    _, status = os.waitpid(pid, 0)
    results.append({"killed": os.WIFSIGNALED(status), "delay": delay, "span": span})
print(json.dumps(results))
"""

STEPS_BEFORE = ["locked", "cleaned", "staged", "written"]  # PATH still holds the old cache
STEPS_AFTER = ["exchanged", "published", "removed-old"]  # PATH holds the new cache


def make(n, seed, shape=(3, 8, 8)):
    g = torch.Generator().manual_seed(seed)
    return DeviceCache.from_tensors(torch.randint(0, 256, (n, *shape), dtype=torch.uint8,
                                                  generator=g),
                                    torch.randint(0, 3, (n,), generator=g), device="cpu",
                                    classes=["a", "b", "c"])


def same(a, b):
    return torch.equal(a.images, b.images) and torch.equal(a.labels, b.labels)


def hidden(parent):
    return sorted(p for p in os.listdir(parent) if p.startswith("."))


def test_killed_saves_leave_old_or_new_and_the_next_save_cleans_up(tmp_path):
    old, small, big = make(5, 0), make(9, 1), make(16000, 2, (3, 32, 32))  # big: 48 MiB
    small.save(tmp_path / "src" / "small")
    big.save(tmp_path / "src" / "big")
    jobs = []

    def job(name, new, fresh=False, **kw):
        d = tmp_path / name
        d.mkdir()
        if not fresh:
            old.save(d / "c")
        jobs.append(dict(name=name, path=str(d / "c"), new=new, fresh=fresh,
                         signal=kw.pop("signal", "SIGKILL"), **kw))

    for step in STEPS_BEFORE + STEPS_AFTER:
        job(f"step-{step}", "small", step=step)
    job("fresh-written", "small", fresh=True, step="written")
    job("sigterm-written", "small", step="written", signal="SIGTERM")
    job("fallback-aside", "small", step="renamed-aside", no_exchange=True)
    for i in range(5):
        job(f"random-{i}", "big", step=None)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=REPO)
    new_dirs = {k: str(tmp_path / "src" / k) for k in ("small", "big")}
    run = subprocess.run([sys.executable, "-c", CHILD, json.dumps([jobs, new_dirs, 0])],
                         capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 0, run.stderr
    results = json.loads(run.stdout.strip().splitlines()[-1])
    news = {"small": small, "big": big}
    for j, res in zip(jobs, results):
        path, parent, new = tmp_path / j["name"] / "c", tmp_path / j["name"], news[j["new"]]
        assert res["killed"] or j["step"] is None, j
        if j.get("no_exchange"):
            # Without RENAME_EXCHANGE there is a window where PATH is missing; loading says
            # where the previous cache is.
            with pytest.raises(FileNotFoundError, match=r"interrupted.*\.c\.old-"):
                DeviceCache.load(path, device="cpu")
        elif j["fresh"]:
            assert not path.exists()
        else:
            back = DeviceCache.load(path, device="cpu", verify=True)  # complete, every byte
            is_old, is_new = same(back, old), same(back, new)
            assert is_old or is_new, j
            if j["step"] in STEPS_BEFORE:
                assert is_old, j
            if j["step"] in STEPS_AFTER:
                assert is_new, j
        # The next save of PATH removes every leftover of the killed one (and its lock file).
        other = make(4, 3)
        other.save(path, overwrite=True)
        assert os.listdir(parent) == ["c"], (j, os.listdir(parent))
        assert same(DeviceCache.load(path, device="cpu", verify=True), other)


def test_a_live_save_keeps_its_files_and_waits_for_the_lock(tmp_path):
    # A second save of the same path waits for the first; neither deletes the other's files.
    make(5, 0).save(tmp_path / "c")
    entered, release = threading.Event(), threading.Event()
    real = atomic._step

    def hold(name):
        if name == "written" and threading.current_thread().name == "first":
            entered.set()
            release.wait(10)

    atomic._step = hold
    try:
        first = threading.Thread(target=make(9, 1).save, args=(tmp_path / "c",),
                                 kwargs={"overwrite": True}, name="first")
        first.start()
        assert entered.wait(10)
        staged = [p for p in hidden(tmp_path) if ".tmp-" in p]
        assert len(staged) == 1
        second = threading.Thread(target=make(4, 2).save, args=(tmp_path / "c",),
                                  kwargs={"overwrite": True}, name="second")
        second.start()
        time.sleep(0.3)
        assert second.is_alive()  # waiting for the lock
        assert staged[0] in hidden(tmp_path)  # its staging directory was not taken away
        release.set()
        first.join(10)
        second.join(10)
    finally:
        atomic._step = real
        release.set()
    assert os.listdir(tmp_path) == ["c"]
    assert same(DeviceCache.load(tmp_path / "c", device="cpu"), make(4, 2))


def test_leftovers_of_others_and_of_live_processes_are_kept(tmp_path):
    make(5, 0).save(tmp_path / "c")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    keep = [
        f".c.tmp-{os.getppid()}-0123abcd",  # a live process's staging directory
        ".c.tmp-0123456789ab",  # 0.1.0 name but holding something that is not ours
        ".d.tmp-0123456789ab",  # another cache's
        ".c.tmp-notours",
    ]
    for name in keep:
        (tmp_path / name).mkdir()
        (tmp_path / name / "images.npy").write_bytes(b"x")
    (tmp_path / ".c.tmp-0123456789ab" / "thesis.tex").write_text("precious")
    gone = [f".c.tmp-{dead}-89abcdef", ".c.old-ba9876543210"]  # dead pid; a 0.1.0 leftover
    for name in gone:
        (tmp_path / name).mkdir()
        (tmp_path / name / "meta.json").write_text("{}")
        os.chmod(tmp_path / name, 0o555)  # read-only leftovers go too
    make(9, 1).save(tmp_path / "c", overwrite=True)
    assert hidden(tmp_path) == sorted(keep)


def test_symlink_is_followed_and_kept(tmp_path):
    (tmp_path / "disk").mkdir()
    make(5, 0).save(tmp_path / "disk" / "cache")
    os.symlink(tmp_path / "disk" / "cache", tmp_path / "link")
    make(9, 1).save(tmp_path / "link", overwrite=True)
    assert os.path.islink(tmp_path / "link")  # still a link, to the replaced target
    assert os.listdir(tmp_path / "disk") == ["cache"] and os.listdir(tmp_path) == ["disk", "link"]
    assert same(DeviceCache.load(tmp_path / "link", device="cpu"), make(9, 1))
    with pytest.raises(FileExistsError, match="overwrite"):
        make(4, 2).save(tmp_path / "link")
    os.symlink(tmp_path / "disk" / "new", tmp_path / "dangling")
    make(4, 2).save(tmp_path / "dangling")  # a dangling link: its target is created
    assert os.path.islink(tmp_path / "dangling")
    assert sorted(os.listdir(tmp_path / "disk")) == ["cache", "new"]


@contextlib.contextmanager
def unprivileged():
    """As root (who may delete anything), act as 'nobody' for a moment (effective ids only)."""
    if os.geteuid() != 0:
        yield False
        return
    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no 'nobody' user to drop privileges to")
    os.setegid(nobody.pw_gid)
    os.seteuid(nobody.pw_uid)
    try:
        yield True
    finally:
        os.seteuid(0)
        os.setegid(0)


def test_read_only_old_cache(tmp_path):
    x = lambda n: DeviceCache.from_tensors(torch.full((n, 1, 2, 2), n, dtype=torch.uint8),  # noqa
                                           torch.zeros(n, dtype=torch.long), device="cpu")
    root = tempfile.mkdtemp(dir="/tmp")  # pytest's tmp_path is private to its user
    try:
        os.chmod(root, 0o777)
        theirs = os.path.join(root, "theirs")
        x(2).save(os.path.join(theirs, "c"))  # made by root when we are root
        os.chmod(theirs, 0o777)  # we may create entries next to it, not inside it
        os.chmod(os.path.join(theirs, "c"), 0o555)
        with unprivileged() as dropped:
            mine = os.path.join(root, "mine")
            x(3).save(os.path.join(mine, "c"))
            for f in os.listdir(os.path.join(mine, "c")):
                os.chmod(os.path.join(mine, "c", f), 0o444)
            os.chmod(os.path.join(mine, "c"), 0o555)
            x(5).save(os.path.join(mine, "c"), overwrite=True)  # our own read-only cache
            assert len(DeviceCache.load(os.path.join(mine, "c"), device="cpu")) == 5
            assert os.listdir(mine) == ["c"]
            if dropped:
                # Someone else's read-only cache: refused before writing, nothing left behind.
                with pytest.raises(PermissionError, match="read-only and owned by another"):
                    x(7).save(os.path.join(theirs, "c"), overwrite=True)
                assert os.listdir(theirs) == ["c"]
        assert len(DeviceCache.load(os.path.join(theirs, "c"), device="cpu")) == 2
    finally:
        shutil.rmtree(root)


def test_a_load_during_a_save_returns_one_cache_never_a_mix(tmp_path, monkeypatch):
    # Same shape, different content: sizes cannot tell the two apart. The save swaps the new
    # directory in after the load has read the old labels but before it reads the images.
    import batchaug.data.format as fmt

    old, new = make(6, 0), make(6, 1)
    old.save(tmp_path / "c")
    real, calls = fmt.open_npy, []

    def open_then_swap(fp, *args, **kwargs):
        out = real(fp, *args, **kwargs)
        calls.append(fp.name)
        if calls == ["images.npy", "labels.npy"]:
            new.save(tmp_path / "c", overwrite=True)
        return out

    monkeypatch.setattr(fmt, "open_npy", open_then_swap)
    back = DeviceCache.load(tmp_path / "c", device="cpu")
    assert same(back, new) and len(calls) == 4  # read once more, all from the new cache
    # What a reader that does not compare PATH's identity gets: old labels, new images.
    old.save(tmp_path / "c", overwrite=True)
    calls.clear()
    monkeypatch.setattr(fmt, "_identity", lambda path: None)
    mixed = DeviceCache.load(tmp_path / "c", device="cpu")
    assert not same(mixed, old) and not same(mixed, new)
