"""Internals shared by the kernels: how CPU work is split (chunks of samples for a kernel, threads
by images for the loader), grad checks, layouts, per-sample select.

Speed notes (the figures are in docs/performance.md, "Kernel choices"):
- ``torch.where(mask[:, None, None, None], a, b)`` on uint8 costs several plain copies (the
  select kernel is not vectorised for a broadcast condition), so per-sample selection views
  each sample's bytes as int64 words: an eighth of the elements, same result.
- A per-sample crop is one ``index_select`` over an overlapping ``as_strided`` view whose rows
  are "the window starting at storage offset k": a memcpy per window, far faster than a 4-D
  advanced-indexing gather.
- Constant padding writes into a preallocated tensor (fill + one strided copy), faster than
  ``F.pad`` and it keeps channels_last.
- ``index_select`` copies a window with one memcpy only when the window is contiguous; hence
  ``pad_crop`` (pad + crop without the padded batch, one contiguous run per channel plane).
- Flips blend into their fresh flipped tensor with int64 xor/and/xor (faster than ``where``).
- Ops that make several passes over a float buffer (``normalize``) run per chunk of samples
  on CPU (``cpu_chunk_size`` and the budget table below); accelerators and compiled graphs get one.
- Each small op costs its dispatch, so fixed per-call overhead is a visible share of a CIFAR
  recipe at batch 256; big allocations can also page-fault depending on glibc's heap state,
  which makes single measurements noisy: compare interleaved medians.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import threading
from typing import Callable, Iterator, List, Optional

import torch
from torch import Tensor


# CPU chunk-size policy. Every kernel that splits a CPU batch into chunks of samples takes its
# byte budget from one of the functions below and its sample count from ``cpu_chunk_size``
# (functions, not module globals: TorchScript cannot read module globals).
#
# ===========================  ======  ==========  ==========================================
# budget                       size    per thread  used by (bytes per sample counted)
# ===========================  ======  ==========  ==========================================
# ``l2_chunk_bytes``           4 MiB   yes         normalize (float32/64 buffer: es*C*H*W)
# ``mix_chunk_bytes``          4 MiB   no          MixUp/CutMix blends (5*H*W of weights and
#                                                  mask, + the sample's bytes when in place)
# ``color_chunk_bytes``        4 MiB   yes         ColorJitter grouped steps (4*C*H*W float32)
# ``sharpness_chunk_bytes``    8 MiB   no          adjust_sharpness uint8 (16*C*H*W temps)
# ``dispatch_chunk_bytes``     8 MiB   yes         auto-augment grouped dispatch (input bytes)
# ``warp_chunk_bytes``         24 MiB  no          grid_sample warps, resize, target masks via
#                                                  ``_chunk_size`` (float32 in, grid, out)
# ===========================  ======  ==========  ==========================================
#
# Why these sizes: the 4 MiB budgets keep several-pass float temporaries in cache while a
# CIFAR-sized batch stays one chunk (each chunk's dispatch costs more than the cache saves on
# small images); the 8 and 24 MiB budgets keep every temporary below glibc's 32 MiB
# mmap threshold, so buffers are recycled instead of paying fresh page faults on every call.


# normalize: smaller chunks only add dispatch on a CIFAR batch, and at 224 px every chunk
# size from 384 KiB up was level (docs/performance.md, "Kernel choices").
def l2_chunk_bytes() -> int:
    """CPU chunk budget of ``normalize`` (per thread): 4 MiB."""
    return 4 * 1024 * 1024


def mix_chunk_bytes() -> int:
    """CPU chunk budget of the MixUp/CutMix blends: 4 MiB of per-pixel weights and mask, which
    stay in cache instead of being a fresh batch-sized buffer."""
    return 4 * 1024 * 1024


def color_chunk_bytes() -> int:
    """CPU chunk budget of ColorJitter's grouped steps (per thread): 4 MiB of float32 (swept
    0.25 MiB to the whole batch at 32 and 224 px)."""
    return 4 * 1024 * 1024


def sharpness_chunk_bytes() -> int:
    """CPU chunk budget of uint8 ``adjust_sharpness``: 8 MiB of float temporaries, which stay
    in cache where one piece would not (docs/performance.md, "Kernel choices")."""
    return 8 * 1024 * 1024


def dispatch_chunk_bytes() -> int:
    """CPU chunk budget of the auto-augment grouped dispatch (per thread): 8 MiB of input, so
    every copy and float temporary stays under glibc's 32 MiB mmap threshold."""
    return 8 * 1024 * 1024


def warp_chunk_bytes() -> int:
    """CPU chunk budget of the ``grid_sample`` warps and resizes: a 24 MiB working set."""
    return 24 * 1024 * 1024


def cpu_chunk_size(
    x: Tensor, bytes_per_sample: int, chunk_bytes: int, per_thread: bool = False
) -> int:
    """How many samples of ``x`` a kernel should process per chunk: ``chunk_bytes`` worth on
    CPU (eager or TorchScript), the whole batch anywhere else. ``per_thread``: ``chunk_bytes``
    per intra-op thread (for cache-sized chunks, each thread has its own L2; TorchScript,
    which cannot query the thread count, counts one).

    Compiled/exported graphs (``torch.compile``, ``torch.export``) and accelerators get one
    chunk: they plan their own buffers and fusions, and one static call keeps the graph small.
    Always at least 1, so ``range(0, n, k)`` loops are safe for empty batches.
    """
    n = x.shape[0]
    if x.device.type != "cpu":
        return max(1, n)
    if torch.compiler.is_compiling() and not torch.jit.is_scripting():
        return max(1, n)
    if not torch.jit.is_scripting():
        if per_thread:
            chunk_bytes *= torch.get_num_threads()
    return max(1, min(n, chunk_bytes // max(1, bytes_per_sample)))


def _chunked(x: Tensor) -> bool:
    """Whether a warp may split the batch into CPU chunks: eager or TorchScript on CPU only.
    The chunk loop derives Python ints from the batch size, which would specialise a compiled
    or exported graph's dynamic batch; those (and accelerators) warp the batch in one call."""
    return x.device.type == "cpu" and not torch.compiler.is_compiling()


def _chunk_size(x: Tensor, out_h: int, out_w: int) -> int:
    """How many samples to warp per ``grid_sample`` call: all of them, except on CPU (eager or
    TorchScript) where big batches go in chunks with a working set of about 24 MiB.

    Why: large CPU allocations are fresh mmaps whose page faults cost more than the arithmetic;
    chunks below glibc's 32 MiB mmap threshold are recycled instead (docs/performance.md, "Kernel choices").
    """
    c = x.shape[1]
    # float32 input (+ mask channel), grid, output (+ mask channel)
    per_sample = 4 * ((c + 1) * x.shape[2] * x.shape[3] + (c + 3) * out_h * out_w)
    return cpu_chunk_size(x, per_sample, warp_chunk_bytes())


def group_on_host(x: Tensor) -> bool:
    """Whether a per-sample choice may run grouped (samples sorted by branch, each branch on
    its own samples, the branch counts read as Python ints): on the CPU in eager mode and
    TorchScript, where that read is free. On an accelerator it is a device sync per step (the
    CPU stops running ahead of the GPU), and compiled/exported graphs need fixed shapes: there
    every branch runs on the whole batch and ``torch.where`` picks per sample (static)."""
    if x.device.type != "cpu":
        return False
    if torch.jit.is_scripting():
        return True
    return not torch.compiler.is_compiling()


def on_device(constant: Tensor, x: Tensor) -> Tensor:
    """A module's constant buffer on ``x``'s device: the buffer itself once the module has
    followed ``.to(device)`` (no copy, no sync); a module left behind still works, at the price
    of a blocking host-to-device copy per call (move it with the model, as its parameters)."""
    if constant.device == x.device:
        return constant
    return constant.to(x.device)


def small_tensor(values: List[float], dtype: torch.dtype, device: torch.device) -> Tensor:
    """A 1-D tensor of a few Python numbers on ``device``. Off the CPU it is written by fill
    kernels: ``torch.tensor(values, device=cuda)`` is a blocking host-to-device copy (the CPU
    waits for the GPU), a fill is queued like any other kernel. Same values on every device."""
    if device.type == "cpu":
        return torch.tensor(values, dtype=dtype, device=device)
    return _filled(values, dtype, device)


def _filled(values: List[float], dtype: torch.dtype, device: torch.device) -> Tensor:
    # one fill kernel per element: ``out[i] = v`` on CUDA builds ``v`` as a host tensor and
    # copies it (a blocking copy), while ``fill_`` takes the number as a kernel argument
    out = torch.empty([len(values)], dtype=dtype, device=device)
    for i in range(len(values)):
        out.narrow(0, i, 1).fill_(values[i])
    return out


def _needs_grad(x: Tensor) -> bool:
    """True when autograd records ops on ``x``: then only the plain (differentiable) path may run.

    The bit-level fast paths reinterpret bytes (``view(dtype)``) or write in place through such a
    view, which autograd cannot see: they would detach the output or give wrong gradients.
    """
    return x.requires_grad and torch.is_grad_enabled()


def _compute_dtype(x: Tensor) -> torch.dtype:
    """The float dtype a kernel computes in: float64 for float64 input, float32 otherwise."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def _is_channels_last(x: Tensor) -> bool:
    # A tensor that is both (e.g. C == 1) is treated as contiguous.
    return (not x.is_contiguous()) and x.is_contiguous(memory_format=torch.channels_last)


def match_layout(y: Tensor, x: Tensor) -> Tensor:
    """``y`` in ``x``'s memory format: channels_last if ``x`` is, else contiguous (a copy only
    where they differ). Paths that build their output differently (grouped by branch on the
    CPU, static elsewhere) then give the same layout for the same input."""
    if _is_channels_last(x):
        return y.contiguous(memory_format=torch.channels_last)
    return y.contiguous()


def _empty_like_layout(x: Tensor, shape: List[int], dtype: torch.dtype) -> Tensor:
    """A new tensor of ``shape`` on x's device, channels_last iff x is channels_last."""
    if _is_channels_last(x):
        return torch.empty(shape, dtype=dtype, device=x.device, memory_format=torch.channels_last)
    return torch.empty(shape, dtype=dtype, device=x.device)


def select_samples(mask: Tensor, a: Tensor, b: Tensor) -> Tensor:
    """Per-sample ``a[i] if mask[i] else b[i]`` for same-shape, same-dtype batches.

    ``mask`` is a (N,) bool tensor. Equivalent to ``torch.where(mask[:, None, None, None], a, b)``.
    """
    if a.numel() == 0:  # also an empty batch; numel() keeps a dynamic batch size symbolic
        return a.clone()
    if _is_channels_last(a) and _is_channels_last(b):
        # channels_last memory is a contiguous (N, H, W, C) tensor: select on that view.
        return _select_dense(mask, a.permute(0, 2, 3, 1), b.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
    return _select_dense(mask, a, b)


def _select_dense(mask: Tensor, a: Tensor, b: Tensor) -> Tensor:
    if torch.jit.is_scripting():
        # TorchScript has no dtype view: pick rows of [b; a] instead (one memcpy per sample,
        # still faster than the broadcast torch.where on uint8). Differentiable.
        n = a.shape[0]
        index = torch.arange(n, device=a.device) + mask.to(torch.int64) * n
        return torch.cat([b, a]).index_select(0, index)
    # The int64 word view is a fast path for plain data only: a dtype view is not
    # differentiable (it would return a detached result).
    if (a.is_contiguous() and b.is_contiguous() and _word_aligned(a) and _word_aligned(b)
            and not (_needs_grad(a) or _needs_grad(b))):
        row_bytes = a.shape[1] * a.shape[2] * a.shape[3] * a.element_size()
        if row_bytes % 8 == 0:
            # Select whole 8-byte words: the values are only copied, never interpreted.
            a64 = a.reshape(a.shape[0], -1).view(torch.uint8).view(torch.int64)
            b64 = b.reshape(b.shape[0], -1).view(torch.uint8).view(torch.int64)
            out = torch.where(mask.view(-1, 1), a64, b64)
            return out.view(torch.uint8).view(a.dtype).view(a.shape)
    return torch.where(mask.view(-1, 1, 1, 1), a, b)


def _word_aligned(x: Tensor) -> bool:
    # A dtype view to int64 needs the first byte on an 8-byte boundary: a view into a larger
    # buffer (an image of a ragged cache, a slice) may start anywhere. reshape() gives the
    # words standard strides, so the offset is the one thing left to check. (torch.compile
    # cannot trace storage_offset(); it is left as it was there.)
    if torch.compiler.is_compiling():
        return True
    return (x.storage_offset() * x.element_size()) % 8 == 0


def _select_into(mask: Tensor, a: Tensor, b: Tensor) -> Tensor:
    """``select_samples(mask, a, b)``, allowed to write the result into ``a`` (a fresh tensor
    the caller owns, same layout as ``b``).

    On CPU, for dense rows of whole 8-byte words, it blends in place with bitwise ops on int64
    words, ``a = b ^ ((a ^ b) & m)`` with ``m`` all ones where ``mask``: three vectorised passes
    beat one broadcast ``torch.where``.
    """
    if torch.jit.is_scripting():
        return select_samples(mask, a, b)
    # Eager CPU only, and only on plain data: the in-place write goes through a dtype view
    # that autograd cannot see (it gave flip's gradient for an unflipped sample).
    if (a.device.type != "cpu" or a.numel() == 0 or _needs_grad(a) or _needs_grad(b)
            or torch.compiler.is_compiling()):
        return select_samples(mask, a, b)
    n = a.shape[0]
    if _is_channels_last(a) and _is_channels_last(b):
        a_d, b_d = a.permute(0, 2, 3, 1), b.permute(0, 2, 3, 1)
    else:
        a_d, b_d = a, b
    row_bytes = a.shape[1] * a.shape[2] * a.shape[3] * a.element_size()
    if (not (a_d.is_contiguous() and b_d.is_contiguous()) or row_bytes % 8 != 0
            or not (_word_aligned(a) and _word_aligned(b))):
        return select_samples(mask, a, b)
    a64 = a_d.reshape(n, -1).view(torch.uint8).view(torch.int64)
    b64 = b_d.reshape(n, -1).view(torch.uint8).view(torch.int64)
    m = mask.to(torch.int64).neg_().view(n, 1)  # -1 = all bits set
    a64.bitwise_xor_(b64).bitwise_and_(m).bitwise_xor_(b64)
    return a


def _max_value(dtype: torch.dtype) -> float:
    # Only uint8 among integer dtypes is supported by batchaug.
    return 255.0 if dtype == torch.uint8 else 1.0


# ---------------------------------------------------------------------------------------------
# Threads by images: the loader's CPU work split over cores as DataLoader workers split it
# ---------------------------------------------------------------------------------------------
# The loader's CPU stages (JPEG decode, padding, the crop's per-image warps and resizes) are
# many small kernels. Split by torch's intra-op (OpenMP) threads, each kernel pays a parallel
# region, and on a busy machine such regions stall in bursts (docs/performance.md, "Photos of
# different sizes", gives the figures of ``benchmarks/bench_photos.py``); one thread per image,
# as DataLoader workers do it, scales instead. Inside ``image_threads(n)`` every ``for_each``
# loop runs its images on ``n`` threads (the calling one and ``n - 1`` of a kept pool), each
# torch op on one intra-op thread. The images' random draws are made before the loop, on the
# calling thread, so the results do not depend on ``n`` (nor on which thread ran which image).

_LOCAL = threading.local()
_POOL: Optional[concurrent.futures.ThreadPoolExecutor] = None
_POOL_SIZE = 0
_POOL_LOCK = threading.Lock()


def cpu_count() -> int:
    """The cores this process may run on (``os.sched_getaffinity``: a ``taskset`` or container
    limit counts), else ``os.cpu_count()``: the default thread count of the loader's CPU work.

    Example:
        >>> cpu_count() >= 1
        True
    """
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not on Linux
        return max(1, os.cpu_count() or 1)


def _one_intra_op_thread() -> None:
    torch.set_num_threads(1)
    _LOCAL.worker = True  # its own for_each loops run inline: a worker never waits on the pool


def pool(workers: int) -> concurrent.futures.ThreadPoolExecutor:
    """The kept worker threads (each with one intra-op thread), at least ``workers`` of them:
    started once and grown when a caller asks for more (a pool per batch would start and join
    threads every batch)."""
    global _POOL, _POOL_SIZE
    with _POOL_LOCK:
        if _POOL is None or _POOL_SIZE < workers:
            if _POOL is not None:
                _POOL.shutdown(wait=False)  # its running tasks finish; it takes no more
            _POOL = concurrent.futures.ThreadPoolExecutor(
                max(1, workers), thread_name_prefix="batchaug-cpu",
                initializer=_one_intra_op_thread)
            _POOL_SIZE = max(1, workers)
        return _POOL


def _forget_pool() -> None:
    """In a forked child: the parent's workers do not exist there, so a kept pool would take
    tasks that never run; the child starts its own when it needs one."""
    global _POOL, _POOL_SIZE, _POOL_LOCK
    _POOL, _POOL_SIZE, _POOL_LOCK = None, 0, threading.Lock()
    _LOCAL.__dict__.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


@contextlib.contextmanager
def single_threaded() -> Iterator[None]:
    """Torch ops of the calling thread on one intra-op thread, then its count as it was.

    ``torch.set_num_threads`` acts on the calling thread's OpenMP count (another thread keeps
    its own).
    """
    n = torch.get_num_threads()
    if n == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)


@contextlib.contextmanager
def image_threads(threads: int) -> Iterator[None]:
    """In this block (on this thread), :func:`for_each` runs its images on ``threads`` threads
    and torch ops on one intra-op thread each.

    Example:
        >>> out = [0] * 8
        >>> with image_threads(2):
        ...     for_each(lambda i: out.__setitem__(i, i * i), 8)
        >>> out
        [0, 1, 4, 9, 16, 25, 36, 49]
    """
    before = getattr(_LOCAL, "threads", 1)
    _LOCAL.threads = max(1, int(threads))
    try:
        with single_threaded():
            yield
    finally:
        _LOCAL.threads = before


def current_threads() -> int:
    """The thread count :func:`for_each` uses here (1 outside :func:`image_threads`, and on a
    pool worker)."""
    if getattr(_LOCAL, "worker", False):
        return 1
    return getattr(_LOCAL, "threads", 1)


def for_each(fn: Callable[[int], None], n: int) -> None:
    """``fn(i)`` for every ``i`` in ``range(n)``: in order on this thread, or inside
    :func:`image_threads` on this thread and the pool, each thread taking the next index
    not yet taken (images of different sizes: a thread that drew small ones takes more, no
    thread idles while another still has a queue of its own). ``fn`` must write only its
    own image's results, and build no autograd graph (the loader's uint8 batches; autograd
    does not record from several threads into one tensor). After an exception no new index
    starts; it is raised once the running ones have finished (no thread keeps writing into a
    batch the caller has given up)."""
    t = min(current_threads(), n)
    if t <= 1:
        for i in range(n):
            fn(i)
        return

    grad = torch.is_grad_enabled()  # thread-local: the workers take the caller's
    # next() on a shared iterator is atomic under the GIL: each index is taken once
    indices = iter(range(n))
    failed: List[BaseException] = []

    def part() -> None:
        with torch.set_grad_enabled(grad):
            for i in indices:
                if failed:
                    return
                try:
                    fn(i)
                except BaseException as exc:
                    failed.append(exc)
                    return

    ahead = [pool(t - 1).submit(part) for _ in range(1, t)]
    part()
    for f in ahead:
        f.result()
    if failed:
        raise failed[0]
