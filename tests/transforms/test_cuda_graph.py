"""batchaug.graphed: an Augment captured in a CUDA graph replays bit-identically to eager with the
same keys; its argument checks run (and are tested) without a GPU."""
import pytest
import torch

import batchaug as B
from batchaug.cuda_graph import GraphedAugment, _check_like
from batchaug.recipes import IMAGENET_MEAN, IMAGENET_STD

CUDA = torch.cuda.is_available()


def _recipe() -> B.Augment:
    return B.Augment(B.RandomResizedCrop(64), B.RandomHorizontalFlip(),
                     B.Normalize(IMAGENET_MEAN, IMAGENET_STD), B.RandomErasing(p=0.5))


def test_graphed_is_exported():
    assert B.graphed is B.cuda_graph.graphed and "graphed" in B.__all__


def test_graphed_refuses_a_cpu_example_naming_the_argument():
    x = torch.zeros(4, 3, 80, 80, dtype=torch.uint8)
    with pytest.raises(ValueError, match=r"example_images must be on a CUDA device.*got cpu; "
                                         r"on the CPU call the augment directly"):
        B.graphed(_recipe(), x)


def test_graphed_checks_its_arguments_before_touching_cuda():
    x = torch.zeros(4, 3, 8, 8, dtype=torch.uint8)
    with pytest.raises(TypeError, match="augment must be an nn.Module, got function"):
        B.graphed(lambda t: t, x)
    with pytest.raises(TypeError, match="example_images must be a tensor, got list"):
        B.graphed(_recipe(), [x])


def test_the_call_checks_name_the_argument_and_the_captured_shape():
    want = torch.zeros(4, 3, 8, 8, dtype=torch.uint8)
    _check_like(torch.ones(4, 3, 8, 8, dtype=torch.uint8), want, "images")  # same: no error
    for bad in (torch.zeros(3, 3, 8, 8, dtype=torch.uint8), torch.zeros(4, 3, 8, 8),
                torch.zeros(4, 3, 8, 9, dtype=torch.uint8)):
        with pytest.raises(ValueError, match=r"images must match the example the graph was "
                                             r"captured with: \(4, 3, 8, 8\) torch.uint8 on cpu"):
            _check_like(bad, want, "images")
    with pytest.raises(TypeError, match="keys must be a tensor, got list"):
        _check_like([1, 2], want, "keys")


def test_a_replay_copies_inputs_into_the_static_buffers_and_checks_keys():
    # the object's logic with a stand-in graph (CPU buffers): what replay reads and returns
    class Graph:
        def __init__(self):
            self.seen = []

        def replay(self):
            self.seen.append((images.clone(), keys.clone()))
            out.copy_(images.float() + keys.view(-1, 1, 1, 1))

    images = torch.zeros(2, 1, 2, 2, dtype=torch.uint8)
    keys = torch.zeros(2, dtype=torch.int64)
    out = torch.zeros(2, 1, 2, 2)
    g = GraphedAugment(Graph(), images, keys, out)
    x, k = torch.full((2, 1, 2, 2), 3, dtype=torch.uint8), torch.tensor([10, 20])
    got = g(x, k)
    assert got is out and torch.equal(got[:, 0, 0, 0], torch.tensor([13.0, 23.0]))
    assert torch.equal(g.graph.seen[0][0], x) and torch.equal(g.graph.seen[0][1], k)
    with pytest.raises(ValueError, match="keys must be given exactly when the graph was "
                                         "captured with keys"):
        g(x)
    with pytest.raises(ValueError, match=r"keys must match the example.*\(2,\) torch.int64"):
        g(x, torch.tensor([1, 2, 3]))
    assert "keys=True" in repr(g)
    # the reverse: keys given to a graph captured without them would be ignored by the replay
    unkeyed = GraphedAugment(Graph(), images, None, out)
    with pytest.raises(ValueError, match=r"keys must be given exactly when the graph was "
                                         r"captured with keys \(captured without them\)"):
        unkeyed(x, k)


@pytest.mark.skipif(not CUDA, reason="CUDA graphs need a GPU")
def test_keyed_replay_equals_eager_bit_for_bit():
    dev = torch.device("cuda")
    g0 = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (16, 3, 80, 96), dtype=torch.uint8, generator=g0).to(dev)
    aug = _recipe().to(dev).train()
    keys = B.sample_keys(0, 0, torch.arange(16, device=dev))
    g = B.graphed(aug, x, keys)
    for epoch in range(3):  # other inputs and keys each call: the static buffers follow
        x2 = torch.randint(0, 256, x.shape, dtype=torch.uint8, generator=g0).to(dev)
        k2 = B.sample_keys(0, epoch, torch.arange(16, device=dev))
        got = g(x2, k2).clone()
        assert torch.equal(got, aug(x2, k2)), epoch
    with pytest.raises(ValueError, match="images must match the example"):
        g(x[:8], keys[:8])


@pytest.mark.skipif(not CUDA, reason="CUDA graphs need a GPU")
def test_unkeyed_replay_draws_anew_and_keeps_the_recipe_s_output():
    dev = torch.device("cuda")
    x = torch.randint(0, 256, (32, 3, 80, 80), dtype=torch.uint8, device=dev)
    aug = B.Augment(B.RandomResizedCrop(64), B.RandomHorizontalFlip()).to(dev).train()
    g = B.graphed(aug, x)
    a, b = g(x).clone(), g(x).clone()
    assert a.shape == (32, 3, 64, 64) and a.dtype == torch.uint8
    assert not torch.equal(a, b)  # the generator's offset advances at each replay
    assert g(x) is g(x)  # the static output: clone to keep it


def test_capture_warms_up_on_a_side_stream_then_captures_on_static_buffers(monkeypatch):
    # the capture sequence without a GPU: fake CUDA tensors and stand-ins for torch.cuda's
    # stream and graph objects, recording what ran where
    import contextlib

    from tests.contract.fake_cuda import fake_cuda

    events = []

    class Stream:
        def __init__(self, device=None):
            self.name = "side"

        def wait_stream(self, other):
            events.append(f"{self.name} waits for {other.name}")

    class Current(Stream):
        def __init__(self):
            self.name = "current"

    @contextlib.contextmanager
    def on(stream):
        events.append(f"enter {stream.name}")
        yield
        events.append(f"leave {stream.name}")

    class Graph:
        def replay(self):
            events.append("replay")

    @contextlib.contextmanager
    def capture(graph, pool=None, stream=None, capture_error_mode="global"):
        events.append(f"capture on {stream.name if stream is not None else 'default'} "
                      f"({capture_error_mode})")
        yield
        events.append("end capture")

    @contextlib.contextmanager
    def on_device(d):
        events.append(f"device {d}")
        yield
        events.append(f"device back")

    current = Current()
    monkeypatch.setattr(torch.cuda, "Stream", Stream)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: current)
    monkeypatch.setattr(torch.cuda, "stream", on)
    monkeypatch.setattr(torch.cuda, "CUDAGraph", Graph)
    monkeypatch.setattr(torch.cuda, "graph", capture)
    monkeypatch.setattr(torch.cuda, "device", on_device)

    seen = []

    class Spy(torch.nn.Module):
        takes_keys = True

        def forward(self, x, keys=None):
            seen.append((x, keys))
            events.append("augment")
            return x.float() * 2

    keys_cpu = B.sample_keys(0, 0, torch.arange(4))
    with fake_cuda():
        x = torch.zeros(4, 3, 8, 8, dtype=torch.uint8, device="cuda")
        keys = keys_cpu.to("cuda")
        g = B.graphed(Spy(), x, keys, warmup=2)
        # the images' device current throughout; the capture on the side stream, in
        # "thread_local" mode (another thread's allocations, a loader's reader, are not errors)
        assert events == ["device cuda:0", "side waits for current", "enter side", "augment",
                          "augment", "leave side", "current waits for side",
                          "capture on side (thread_local)", "augment", "end capture",
                          "device back"]
        # every call saw the graph's own buffers, never the caller's tensors
        assert all(a is g.static_images and k is g.static_keys for a, k in seen)
        assert g.static_images is not x and g.static_keys is not keys
        out = g(x, keys)
        assert events[-1] == "replay" and out is g.static_output
        assert out.shape == (4, 3, 8, 8) and out.dtype == torch.float32
        with pytest.raises(ValueError, match="keys were given but Identity does not take keys"):
            B.graphed(torch.nn.Identity(), x, keys)
        with pytest.raises(ValueError, match="warmup must be an int >= 1, got 0"):
            B.graphed(Spy(), x, warmup=0)


def test_the_graph_keeps_its_module_and_so_its_buffers_alive(monkeypatch):
    """The captured kernels read the module's device buffers (Normalize's constants) by
    address: ``graphed(make().cuda(), x)`` must not let the module, and them, be freed."""
    import contextlib
    import gc
    import weakref

    from tests.contract.fake_cuda import fake_cuda

    class Stream:
        def __init__(self, device=None):
            pass

        def wait_stream(self, other):
            pass

    monkeypatch.setattr(torch.cuda, "Stream", Stream)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: Stream())
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "device", lambda d: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "CUDAGraph", lambda: object())
    monkeypatch.setattr(torch.cuda, "graph", lambda g, **kw: contextlib.nullcontext())
    with fake_cuda():
        x = torch.zeros(4, 3, 8, 8, dtype=torch.uint8, device="cuda")
        aug = B.Augment(B.Normalize(IMAGENET_MEAN, IMAGENET_STD)).to("cuda")
        alive, buffers = weakref.ref(aug), [weakref.ref(b) for b in aug.buffers()]
        assert buffers
        g = B.graphed(aug, x)
        del aug
        gc.collect()
        assert alive() is not None and all(b() is not None for b in buffers)
        assert g.module is alive()
        del g
        gc.collect()
        assert alive() is None  # held by the graph only, not leaked
