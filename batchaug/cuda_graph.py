"""``graphed``: an augmentation captured once in a CUDA graph and replayed per batch.

A recipe issues a few hundred ops per batch, each with its own launch (docs/performance.md,
"Launches and CUDA graphs"); a graph replays them as one. The transforms draw on the device or
from keys, without host<->device traffic, so capturing them needs static shapes only.
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor, nn

from ._validation import check_keys


def _check_like(got: object, want: Tensor, name: str) -> None:
    """ValueError unless ``got`` is a tensor with ``want``'s shape, dtype and device (the static
    buffer it will be copied into: a graph replays fixed addresses and sizes)."""
    if not isinstance(got, Tensor):
        raise TypeError(f"graphed: {name} must be a tensor, got {type(got).__name__}")
    if got.shape != want.shape or got.dtype != want.dtype or got.device != want.device:
        raise ValueError(
            f"graphed: {name} must match the example the graph was captured with: "
            f"{tuple(want.shape)} {want.dtype} on {want.device}, got {tuple(got.shape)} "
            f"{got.dtype} on {got.device}; capture another graph (batchaug.graphed) for "
            f"another shape, e.g. the last, smaller batch, or drop it (drop_last=True)")


class GraphedAugment:
    """A captured augmentation, built by :func:`graphed`: ``g(images, keys=None)`` copies its
    inputs into the graph's static buffers, replays the graph and returns the static output.
    """

    def __init__(self, graph: "torch.cuda.CUDAGraph", images: Tensor, keys: Optional[Tensor],
                 output: Tensor, module: Optional[nn.Module] = None) -> None:
        self.graph = graph
        #: the captured augment, held: the graph's kernels read its buffers by address
        self.module = module
        self.static_images = images
        self.static_keys = keys
        self.static_output = output

    def __call__(self, images: Tensor, keys: Optional[Tensor] = None) -> Tensor:
        _check_like(images, self.static_images, "images")
        if (keys is None) != (self.static_keys is None):
            raise ValueError(
                "graphed: keys must be given exactly when the graph was captured with keys ("
                f"captured {'with' if self.static_keys is not None else 'without'} them)")
        if keys is not None and self.static_keys is not None:
            _check_like(keys, self.static_keys, "keys")
            self.static_keys.copy_(keys)
        self.static_images.copy_(images)
        self.graph.replay()
        return self.static_output

    def __repr__(self) -> str:
        s = self.static_images
        return (f"GraphedAugment(images={tuple(s.shape)} {s.dtype} on {s.device}, "
                f"keys={self.static_keys is not None})")


def graphed(augment: nn.Module, example_images: Tensor, keys: Optional[Tensor] = None,
            warmup: int = 3) -> GraphedAugment:
    """Capture ``augment`` on batches shaped like ``example_images`` in a CUDA graph.

    Returns a callable ``g(images, keys=None) -> Tensor`` that copies ``images`` (and ``keys``)
    into static buffers, replays the graph and returns the graph's static output: the same
    tensor at every call, overwritten by the next one, so ``.clone()`` it to keep a batch
    across calls. Pass ``keys`` (int64 ``(N,)``, e.g. from ``DeviceLoader(return_keys=True)``)
    to capture the keyed path: every call must then give keys, and a replay equals
    ``augment(images, keys)`` bit for bit. Without keys the draws come from torch's CUDA
    generator, new at every replay. The module's ``train()`` / ``eval()`` mode and its
    arguments are frozen into the graph; no autograd history is recorded (augmentation has no
    parameters to train).

    ``warmup`` eager calls run first on a side stream (as ``torch.cuda.make_graphed_callables``
    does), so lazy initialisation never lands inside the capture, which runs on that stream.
    The graph holds ``augment`` and reads its device buffers by address: capture again after
    changing the module. Other threads may allocate during the capture (a ``DeviceLoader``
    reader). Inputs of another shape, dtype or device, and ``example_images`` off CUDA, are a
    ``ValueError``.

    Example:
        >>> aug = batchaug.Augment(batchaug.RandomResizedCrop(224),
        ...                        batchaug.RandomHorizontalFlip()).cuda()  # doctest: +SKIP
        >>> x = torch.zeros(256, 3, 256, 256, dtype=torch.uint8, device="cuda")  # doctest: +SKIP
        >>> g = batchaug.graphed(aug, x)  # doctest: +SKIP
        >>> for images, labels in loader:  # doctest: +SKIP
        ...     loss = criterion(model(g(images)), labels)  # full batches: drop_last=True
    """
    if not isinstance(augment, nn.Module):
        raise TypeError(f"graphed: augment must be an nn.Module, got {type(augment).__name__}")
    if not isinstance(example_images, Tensor):
        raise TypeError(f"graphed: example_images must be a tensor, got "
                        f"{type(example_images).__name__}")
    if example_images.device.type != "cuda":
        raise ValueError(
            f"graphed: example_images must be on a CUDA device (CUDA graphs replay GPU "
            f"kernels), got {example_images.device}; on the CPU call the augment directly")
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 1:
        raise ValueError(f"graphed: warmup must be an int >= 1, got {warmup!r}")
    if keys is not None:
        check_keys(keys, example_images, "graphed")
        if keys.device != example_images.device:
            raise ValueError(f"graphed: keys must be on {example_images.device} like the "
                             f"images, got {keys.device}")
    takes_keys = bool(getattr(augment, "takes_keys", False))
    if keys is not None and not takes_keys:
        raise ValueError(f"graphed: keys were given but {type(augment).__name__} does not "
                         f"take keys (its takes_keys is not true)")

    static_images = example_images.detach().clone()
    static_keys = None if keys is None else keys.detach().clone()

    def call() -> Tensor:
        if static_keys is not None:
            return augment(static_images, static_keys)
        return augment(static_images)

    device = static_images.device
    # torch.cuda.graph's default capture stream is made once per process on the device current
    # then: our own stream on the images' device, with that device current, captures there
    with torch.no_grad(), torch.cuda.device(device):
        side = torch.cuda.Stream(device=device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for _ in range(warmup):
                call()
        torch.cuda.current_stream(device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        try:
            # "thread_local": this thread's unsafe calls (a sync, a cudaMalloc outside the
            # graph's pool) still fail the capture, but a reader thread's pinned allocations
            # and stream syncs, which do not touch the captured stream, no longer do ("global"
            # would fail on them; "relaxed" would also let this thread's go unnoticed)
            with torch.cuda.graph(graph, stream=side, capture_error_mode="thread_local"):
                output = call()
        except RuntimeError as e:
            raise RuntimeError(
                f"graphed: could not capture {type(augment).__name__} in a CUDA graph (an op "
                f"that reads a value back to the host, copies from the host or changes shape "
                f"with the data cannot be captured): {e}") from e
    if not isinstance(output, Tensor):
        raise TypeError(f"graphed: augment must return a tensor, got {type(output).__name__}")
    return GraphedAugment(graph, static_images, static_keys, output, augment)
