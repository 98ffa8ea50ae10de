"""What the resampling transforms share (RandomRotation, RandomResizedCrop, Resize): dtype kept,
empty batch and seeds, compile and export, argument and input errors, fills outside the dtype's
range, CPU chunks; and the resized-crop kernel's device paths (batched bmm, matmul precision,
CUDA division), against torchvision references. Each transform's own tests are its class in
test_geometry.py (Resize, RandomResizedCrop) and test_warps.py (RandomRotation), with the
tolerances stated there.

The generic checks (scripted == eager, eval, empty batch, no in-place change, channels_last,
seeds, per-sample independence) run on these transforms through tests/contract/.
"""

import os

import pytest
import torch
from torchvision.transforms.v2 import functional as TF

import batchaug.functional as BF
from batchaug.transforms import RandomResizedCrop, RandomRotation, Resize


def _batch(n, c, h, w, dtype, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (n, c, h, w), generator=g, dtype=torch.uint8)
    if dtype != torch.uint8:
        x = (x.to(torch.float32) / 255).to(dtype)
    return x.to(device)


# ----------------------------------------------------------------------------- common behaviour

FACTORIES = {
    "RandomRotation": lambda: RandomRotation(40, interpolation="bilinear"),
    "RandomResizedCrop": lambda: RandomResizedCrop(12),
    "Resize": lambda: Resize((12, 10)),
}


@pytest.mark.parametrize("name", sorted(FACTORIES))
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float16, torch.float32])
def test_dtype_kept_empty_batch_and_seeds(name, dtype):
    m = FACTORIES[name]()
    x = _batch(16, 3, 20, 24, dtype, "cpu")
    torch.manual_seed(5)
    a = m(x)
    torch.manual_seed(5)
    b = m(x)
    assert a.dtype == dtype and torch.equal(a, b)
    empty = m(x[:0])
    assert empty.shape[0] == 0 and empty.shape[1:] == a.shape[1:] and empty.dtype == dtype
    if name != "Resize":  # random: identical images come out different
        same = x[:1].expand(16, -1, -1, -1).contiguous()
        y = m(same)
        assert torch.unique(y.reshape(16, -1), dim=0).shape[0] > 1


def test_compile_fullgraph_train_matches_eager():
    torch._dynamo.reset()
    m = torch.nn.Sequential(RandomRotation(20, "bilinear"), RandomResizedCrop(16), Resize(12))
    x = _batch(4, 3, 24, 20, torch.uint8, "cpu")
    # fallback_random: the compiled graph draws with eager's RNG, so outputs are comparable
    with torch._inductor.config.patch(fallback_random=True):
        c = torch.compile(m, fullgraph=True)
        torch.manual_seed(0)
        a = c(x)
    torch.manual_seed(0)
    b = m(x)
    assert a.shape == b.shape and a.dtype == b.dtype
    if tuple(int(v) for v in torch.__version__.split("+")[0].split(".")[:2]) < (2, 14):
        # as tests/contract/test_compose_export.py: torch 2.11's compiled
        # RandomResizedCrop.make_params draws other boxes than eager under fallback_random
        pytest.skip("compiled draws differ from eager's under fallback_random before torch 2.14")
    # fused float arithmetic may round a pixel the other way
    assert (a.int() - b.int()).abs().max() <= 1


def test_export_eval():
    m = torch.nn.Sequential(RandomRotation(20), RandomResizedCrop(16), Resize(12)).eval()
    x = _batch(2, 3, 24, 20, torch.uint8, "cpu")
    ep = torch.export.export(m, (x,))
    assert torch.equal(ep.module()(x), m(x))


# ----------------------------------------------------------------------------- bad arguments

@pytest.mark.parametrize("factory,exc,match", [
    (lambda: RandomRotation(-1), ValueError, r"degrees must be in \[0, 100000\]"),
    (lambda: RandomRotation((10, 5)), ValueError,
         r"degrees must be \(min, max\) with min <= max"),
    (lambda: RandomRotation(float("nan")), ValueError, r"degrees must be a finite number"),
    (lambda: RandomRotation((1, 2, 3)), TypeError,
         r"degrees must be a sequence \(min, max\) of two numbers"),
    (lambda: RandomRotation(True), TypeError,
         r"degrees must be a non-negative number or a \(min, max\)"),
    (lambda: RandomRotation(10, interpolation="bicubic"), ValueError,
         r"interpolation must be one of \['nearest', 'bilinear'\]"),
    (lambda: RandomRotation(10, expand=True), ValueError,
         r"expand=True is not supported: the expanded size depends"),
    (lambda: RandomRotation(10, center=(1,)), TypeError,
         r"center must be None or a sequence \(x, y\) of two numbers"),
    (lambda: RandomRotation(10, fill="white"), TypeError,
         r"fill must be a number or a non-empty sequence of numbers"),
    (lambda: RandomResizedCrop(0), ValueError, r"size must be positive"),
    (lambda: RandomResizedCrop(-3), ValueError, r"size must be positive"),
    (lambda: RandomResizedCrop((10, 0)), ValueError, r"size must be positive"),
    (lambda: RandomResizedCrop(10, scale=(0.5, 0.1)), ValueError,
         r"scale must be \(min, max\) with min <= max"),
    (lambda: RandomResizedCrop(10, scale=(0.0, 1.0)), ValueError,
         r"scale values must be in \[1e-06, 1e\+06\]"),
    (lambda: RandomResizedCrop(10, ratio=(2.0, 1.0)), ValueError,
         r"ratio must be \(min, max\) with min <= max"),
    (lambda: RandomResizedCrop(10, ratio=(-1.0, 1.0)), ValueError,
         r"ratio values must be in \[1e-06, 1e\+06\]"),
    (lambda: RandomResizedCrop(10, ratio=0.5), TypeError,
         r"ratio must be a sequence \(min, max\) of two numbers"),
    (lambda: RandomResizedCrop(10, interpolation="area"), ValueError,
         r"interpolation must be one of \['nearest', 'bilinear', 'bicubic'\]"),
    (lambda: RandomResizedCrop(10, eval_crop_pct=0.0), ValueError,
         r"eval_crop_pct must be in \(0, 1\]"),
    (lambda: RandomResizedCrop(10, eval_crop_pct=1.5), ValueError,
         r"eval_crop_pct must be in \(0, 1\]"),
    (lambda: RandomResizedCrop(10, antialias="yes"), TypeError, r"antialias must be a bool"),
    (lambda: Resize(0), ValueError, r"size must be positive"),
    (lambda: Resize((5, -1)), ValueError, r"size must be positive"),
    (lambda: Resize((1, 2, 3)), TypeError,
         r"size must be an int or a sequence of 1 or 2 ints"),
    (lambda: Resize(2.5), TypeError,
         r"size must be an int or a sequence of 1 or 2 ints"),
    (lambda: Resize(10, interpolation="area"), ValueError,
         r"interpolation must be one of \['nearest', 'bilinear', 'bicubic'\]"),
    # non-finite and absurd values (issue 7 item 8)
    (lambda: RandomRotation(float("inf")), ValueError, r"degrees must be a finite number"),
    (lambda: RandomRotation(1e308), ValueError, r"degrees must be in \[0, 100000\]"),
    (lambda: RandomRotation(10**400), ValueError, r"degrees must be finite"),
    (lambda: RandomRotation((-float("inf"), 0)), ValueError,
         r"degrees values must be finite numbers"),
    (lambda: RandomRotation((float("nan"), 1)), ValueError,
         r"degrees values must be finite numbers"),
    (lambda: RandomRotation(("a", 1)), TypeError,
         r"degrees must be a sequence \(min, max\) of two numbers"),
    (lambda: RandomRotation("30"), TypeError,
         r"degrees must be a non-negative number or a \(min, max\)"),
    (lambda: RandomRotation(10, center=(float("nan"), 1)), ValueError,
         r"center must be a finite number"),
    (lambda: RandomRotation(10, center=(1e300, 1)), ValueError,
         r"center must be in \[-1e\+06, 1e\+06\]"),
    (lambda: RandomRotation(10, center=(True, 1)), TypeError, r"center must be a number"),
    (lambda: RandomRotation(10, fill=float("nan")), ValueError, r"fill must be finite"),
    (lambda: RandomRotation(10, fill=[0, float("inf"), 0]), ValueError, r"fill must be finite"),
    (lambda: RandomRotation(10, fill=[]), TypeError,
         r"fill must be a number or a non-empty sequence of numbers"),
    (lambda: RandomResizedCrop(10, scale=(float("nan"), 1)), ValueError,
         r"scale values must be finite numbers"),
    (lambda: RandomResizedCrop(10, scale=(0.1, float("inf"))), ValueError,
         r"scale values must be finite numbers"),
    (lambda: RandomResizedCrop(10, scale=(0.1, 1e300)), ValueError,
         r"scale values must be in \[1e-06, 1e\+06\]"),
    (lambda: RandomResizedCrop(10, ratio=(1e-300, 1.0)), ValueError,
         r"ratio values must be in \[1e-06, 1e\+06\]"),
    (lambda: RandomResizedCrop(10, ratio=(0.5, float("nan"))), ValueError,
         r"ratio values must be finite numbers"),
    (lambda: RandomResizedCrop(10, eval_crop_pct=float("nan")), ValueError,
         r"eval_crop_pct must be a finite number"),
    (lambda: RandomResizedCrop(10, eval_crop_pct=True), TypeError,
         r"eval_crop_pct must be a number"),
    (lambda: RandomResizedCrop(10**6), ValueError,
         r"size must be at most 65536 pixels per side"),
    (lambda: Resize(10**6), ValueError, r"size must be at most 65536 pixels per side"),
])
def test_bad_arguments(factory, exc, match):
    with pytest.raises(exc, match=match):
        factory()


@pytest.mark.parametrize("name", sorted(FACTORIES))
@pytest.mark.parametrize("bad,exc", [
    (torch.zeros(3, 8, 8, dtype=torch.uint8), ValueError),
    (torch.zeros(1, 2, 3, 8, 8), ValueError),
    (torch.zeros(2, 3, 8, 8, dtype=torch.int64), TypeError),
    (torch.zeros(2, 3, 8, 8, dtype=torch.bool), TypeError),
    (torch.zeros(2, 3, 0, 8, dtype=torch.uint8), ValueError),  # zero-size images
    (torch.zeros(2, 3, 8, 0), ValueError),
    (torch.zeros(2, 3, 0, 0), ValueError),
])
def test_bad_input_at_call_time(name, bad, exc):
    m = FACTORIES[name]()
    with pytest.raises(exc, match=name):
        m(bad)
    if name != "Resize":
        with pytest.raises(exc, match=name):
            m.eval()(bad)  # checked in eval too, not only when augmenting


@pytest.mark.parametrize("fill,dtype", [
    (300, torch.uint8), (-1, torch.uint8), ([0, 256, 0], torch.uint8), (1e5, torch.float16),
    (1e39, torch.float32),
])
@pytest.mark.parametrize("make", [
    lambda fill: RandomRotation(10, fill=fill),
    lambda fill: __import__("batchaug").RandomCrop(8, padding=2, fill=fill),
], ids=["RandomRotation", "RandomCrop"])
def test_fill_outside_the_dtype_range_is_one_error_everywhere(make, fill, dtype):
    """One rule for every transform with a fill: a fill the input dtype cannot hold is a
    ValueError at call time naming the transform and the fill (not a clamp, not a raw
    RuntimeError)."""
    m = make(fill)
    name = type(m).__name__
    x = torch.zeros(2, 3, 8, 8, dtype=dtype)
    with pytest.raises(ValueError, match=rf"{name}: fill \[.*\] is outside the range of {dtype}"):
        m(x)
    with pytest.raises(torch.jit.Error, match="outside the range"):
        torch.jit.script(m)(x)
    assert torch.equal(m.eval()(x), x)  # eval: no fill is used, nothing to check


def test_fill_inside_the_range_including_fractions_for_uint8():
    x = torch.zeros(2, 3, 8, 8, dtype=torch.uint8)
    for fill in (0, 255, 127.6, [0, 128.5, 255]):
        assert RandomRotation(45, fill=fill)(x).dtype == torch.uint8
        assert __import__("batchaug").RandomCrop(8, padding=2, fill=fill)(x).dtype == torch.uint8


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32])
def test_large_cpu_batches_in_chunks_equal_per_sample(dtype):
    # 200x200 images are big enough that the CPU kernels split the batch into chunks
    # (see functional._utils._chunk_size); the result must not depend on the split.
    x = _batch(20, 3, 200, 200, dtype, "cpu")
    n = x.shape[0]
    assert BF._utils._chunk_size(x, 200, 200) < n
    angle = torch.linspace(-170, 170, n)
    top, left = torch.arange(n) * 3, torch.arange(n) * 2
    h, w = 200 - top, 150 - left
    y = BF.rotate(x, angle, "bilinear", [7.0])
    z = BF.resized_crop(x, top, left, h, w, [180, 190])
    for i in range(n):
        assert torch.equal(y[i:i + 1], BF.rotate(x[i:i + 1], angle[i:i + 1], "bilinear", [7.0]))
        assert torch.equal(z[i:i + 1], BF.resized_crop(
            x[i:i + 1], top[i:i + 1], left[i:i + 1], h[i:i + 1], w[i:i + 1], [180, 190]))


def test_resize_bicubic_uint8_float_path_clamps_and_rounds():
    """Off the CPU native path (GPU, or a 1x1 output) uint8 bicubic is float32, clamped to
    [0, 255] and rounded: torchvision's rule for its float path."""
    x = torch.zeros(2, 3, 8, 8, dtype=torch.uint8)
    x[..., ::2, ::2] = 255  # a checkerboard overshoots under bicubic
    ref = torch.nn.functional.interpolate(x.float(), size=[1, 1], mode="bicubic",
                                          align_corners=False, antialias=False)
    y = BF.resize(x, [1, 1], "bicubic", antialias=False)
    assert torch.equal(y, ref.clamp(0, 255).round().to(torch.uint8))
    big = torch.nn.functional.interpolate(x.float(), size=[13, 13], mode="bicubic",
                                          align_corners=False)
    assert big.max() > 255 and big.min() < 0  # the overshoot that the clamp removes


# ----------------------------------------------------------------------------- device paths

def _broadcast_reference(x, top, left, height, width, oh, ow, interpolation, antialias):
    """The batched resized crop written as the plain broadcast matmuls (weights (B, 1, oh, H)
    against the image (B, C, H, W)), the obviously-equal formula the bmm path replaces."""
    from batchaug.functional._resize import _aa_weights, _cubic_weights

    ct = torch.float64 if x.dtype == torch.float64 else torch.float32
    make = (_cubic_weights if interpolation == "bicubic" and not antialias else
            lambda *a: _aa_weights(*a, interpolation))
    wy = make(top, height, oh, x.shape[-2], ct).unsqueeze(1)
    wx = make(left, width, ow, x.shape[-1], ct).unsqueeze(1).transpose(-1, -2)
    if x.dtype == torch.uint8 and interpolation == "bicubic":
        y = torch.matmul(wy, torch.matmul(x.to(ct), wx).round().clamp(0, 255))
    else:
        y = torch.matmul(torch.matmul(wy, x.to(ct)), wx)
    if x.dtype == torch.uint8:
        return y.round().clamp(0, 255).to(torch.uint8)
    return y.to(x.dtype)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("mode", [("bilinear", True), ("bicubic", True), ("bicubic", False)],
                         ids=lambda m: f"{m[0]}-aa{m[1]}")
def test_resized_crop_batched_bmm_equals_broadcast_matmul(dtype, mode):
    """The batched path (accelerators, compile, export) multiplies per-sample weights with all
    channels in one bmm: bit for bit the broadcast matmul on CPU, any layout and size (a
    256 -> 224 crop and a 300-row image, where BLAS blocks the sums)."""
    from batchaug.functional._resize import _resized_crop_aa_batched

    interpolation, antialias = mode
    g = torch.Generator().manual_seed(3)
    for (h, w, oh, ow, c, n) in [(20, 24, 16, 16, 3, 5), (256, 256, 224, 224, 3, 2),
                                 (300, 200, 64, 64, 3, 2), (96, 80, 17, 90, 1, 3)]:
        x = torch.randint(0, 256, (n, c, h, w), generator=g, dtype=torch.uint8)
        if dtype != torch.uint8:
            x = (x.float() / 255).to(dtype)
        bh = torch.randint(1, h + 1, (n,), generator=g)
        bw = torch.randint(1, w + 1, (n,), generator=g)
        top = (torch.rand(n, generator=g, dtype=torch.float64) * (h - bh + 1)).long()
        left = (torch.rand(n, generator=g, dtype=torch.float64) * (w - bw + 1)).long()
        ref = _broadcast_reference(x, top, left, bh, bw, oh, ow, interpolation, antialias)
        for cl in (False, True):
            xi = x.contiguous(memory_format=torch.channels_last) if cl else x
            y = _resized_crop_aa_batched(xi, top, left, bh, bw, oh, ow, interpolation, antialias)
            if dtype == torch.float64:
                # float64 products go to the BLAS library, whose kernels on some CPUs (AMD EPYC
                # with this torch build) sum a 1-channel bmm in another order than the
                # broadcast matmul: 1 ulp apart. uint8 and float32 stay bit for bit.
                torch.testing.assert_close(y, ref, rtol=0, atol=4 * torch.finfo(dtype).eps,
                                           msg=str((h, w, oh, ow, cl)))
            else:
                assert torch.equal(y, ref), (h, w, oh, ow, cl)
            assert y.is_contiguous(memory_format=torch.channels_last) == cl or c == 1


def test_resized_crop_batched_never_broadcasts_the_weights_over_channels():
    """On a meta batch of 256 x 3 x 256 x 240 -> 224 x 200 no intermediate has the shape of
    the weights expanded over the channels ((B, C, oh, H): 176 MB in float32 at this size)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from batchaug.functional._resize import _resized_crop_aa_batched

    shapes = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if isinstance(out, torch.Tensor):
                shapes.append((str(func), tuple(out.shape)))
            return out

    n, c, h, w, oh, ow = 256, 3, 256, 240, 224, 200
    x = torch.empty(n, c, h, w, dtype=torch.uint8, device="meta")
    box = torch.zeros(n, dtype=torch.int64, device="meta")
    size = torch.full((n,), 200, dtype=torch.int64, device="meta")
    for interpolation, antialias in (("bilinear", True), ("bicubic", True), ("bicubic", False)):
        shapes.clear()
        with Record():
            y = _resized_crop_aa_batched(x, box, box, size, size, oh, ow, interpolation,
                                         antialias)
        assert y.shape == (n, c, oh, ow)
        assert any("bmm" in f for f, _ in shapes)
        big = [(f, s) for f, s in shapes
               if len(s) == 4 and s[1] == c and (s[2:] == (oh, h) or s[2:] == (w, ow))]
        assert not big, big
        assert not any("expand" in f and len(s) == 4 for f, s in shapes), shapes


def test_resized_crop_batched_ignores_reduced_float32_matmul_precision():
    """A user's TF32/bfloat16 float32 matmul setting does not reach the batched resized crop's
    products: each bmm runs with the backend's precision "ieee" (oneDNN's on CPU, cuBLAS's on
    CUDA), the output equals the one without the setting, and the setting is restored."""
    from unittest import mock

    from batchaug.functional._resize import _resized_crop_aa_batched

    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (4, 3, 64, 64), generator=g, dtype=torch.uint8)
    box = torch.tensor([0, 3, 5, 9])
    args = (box, box, 64 - box, 60 - box, 48, 40, "bilinear", True)
    ref = _resized_crop_aa_batched(x, *args)
    backend = torch.backends.mkldnn.matmul
    seen = []
    bmm = torch.bmm

    def recording_bmm(a, b):
        seen.append(backend.fp32_precision)
        return bmm(a, b)

    saved = backend.fp32_precision
    backend.fp32_precision = "bf16"
    try:
        with mock.patch.object(torch, "bmm", recording_bmm):
            y = _resized_crop_aa_batched(x, *args)
        assert backend.fp32_precision == "bf16"
    finally:
        backend.fp32_precision = saved
    assert seen == ["ieee", "ieee"]
    assert torch.equal(y, ref)


def _restore_matmul_precisions(saved):
    from batchaug.functional._resize import _matmul_precisions

    legacy, cuda, mkldnn = saved
    if legacy is not None:
        torch.set_float32_matmul_precision(legacy)
    torch.backends.cuda.matmul.fp32_precision = cuda
    torch.backends.mkldnn.matmul.fp32_precision = mkldnn
    assert _matmul_precisions() == saved


def _legacy_cublas_tf32():
    try:
        return torch.backends.cuda.matmul.allow_tf32
    except RuntimeError as e:  # "you have used mix of the legacy and new APIs"
        return f"raises: {e}"


@pytest.mark.parametrize("where", ["cuda", "cpu"])
def test_batched_resized_crop_under_high_matmul_precision_keeps_both_apis_in_step(where):
    """After torch.set_float32_matmul_precision("high") the batched resized crop's products run
    in full float32 (cuBLAS's "ieee" on (fake) CUDA, oneDNN's on CPU), the legacy API stays
    readable meanwhile (overriding only the new API's backend made every legacy read raise:
    dynamo reads it) and says the same, and the user's setting comes back exactly."""
    from unittest import mock

    from batchaug.functional._resize import _matmul_precisions, _resized_crop_aa_batched
    from tests.contract.fake_cuda import fake_cuda

    backend = torch.backends.cuda.matmul if where == "cuda" else torch.backends.mkldnn.matmul
    seen = []
    bmm = torch.bmm

    def recording_bmm(a, b):
        seen.append((backend.fp32_precision, _legacy_cublas_tf32(),
                     torch.get_float32_matmul_precision()))
        return bmm(a, b)

    saved = _matmul_precisions()
    x = torch.randint(0, 256, (4, 3, 64, 64), dtype=torch.uint8)
    box = torch.tensor([0, 3, 5, 9])
    torch.set_float32_matmul_precision("high")
    try:
        user = _matmul_precisions()
        assert user[0] == "high" and backend.fp32_precision == "tf32"
        with mock.patch.object(torch, "bmm", recording_bmm):
            if where == "cuda":
                with fake_cuda():
                    xc, bc = x.to("cuda"), box.to("cuda")
                    y = _resized_crop_aa_batched(xc, bc, bc, 64 - bc, 60 - bc, 48, 40)
                assert y.device.type == "cuda"
            else:
                _resized_crop_aa_batched(x, box, box, 64 - box, 60 - box, 48, 40)
        assert _matmul_precisions() == user and _legacy_cublas_tf32() is True
    finally:
        _restore_matmul_precisions(saved)
    assert seen == [("ieee", False, "highest")] * 2


def test_bmm_ieee_is_thread_safe():
    """Threads (a loader's reader thread beside the training thread) running full-precision
    products at once under a user's TF32 setting: every product launches with "ieee" and the
    setting is restored. Unlocked, one thread launched its product after another had
    restored TF32."""
    import threading
    import time
    from unittest import mock

    from batchaug.functional._resize import _bmm_ieee_eager, _matmul_precisions

    backend = torch.backends.mkldnn.matmul
    seen = []
    bmm = torch.bmm

    def slow_bmm(a, b):
        time.sleep(0.002)  # widen the window in which another thread may restore the setting
        seen.append(backend.fp32_precision)
        return bmm(a, b)

    a, b = torch.rand(2, 3, 4), torch.rand(2, 4, 5)
    errors = []

    def work(i):
        try:
            for k in range(10):
                _bmm_ieee_eager(a, b)
                time.sleep(0.001 * ((i + k) % 4))  # gaps: moments when no thread overrides
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    saved = _matmul_precisions()
    torch.set_float32_matmul_precision("high")
    try:
        user = _matmul_precisions()
        with mock.patch.object(torch, "bmm", slow_bmm):
            threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        assert _matmul_precisions() == user
    finally:
        _restore_matmul_precisions(saved)
    assert not errors, errors
    assert len(seen) == 40 and set(seen) == {"ieee"}, sorted(set(seen))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_bmm_ieee_fork_waits_for_the_override():
    """A fork (a DataLoader worker) while another thread overrides the precision waits for it
    to end: the child has the user's setting and a free lock (not a copy of a held lock)."""
    import threading
    import time
    from unittest import mock

    from batchaug.functional import _resize as R

    bmm = torch.bmm
    entered = threading.Event()

    def slow_bmm(a, b):
        entered.set()
        time.sleep(0.2)
        return bmm(a, b)

    saved = R._matmul_precisions()
    torch.set_float32_matmul_precision("high")
    try:
        with mock.patch.object(torch, "bmm", slow_bmm):
            t = threading.Thread(target=R._bmm_ieee_eager,
                                 args=(torch.rand(1, 2, 2), torch.rand(1, 2, 2)))
            t.start()
            assert entered.wait(5)
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: report, then leave without running pytest's teardown
                ok = R._PRECISION_LOCK.acquire(timeout=1)
                os.write(w, f"{ok} {torch.get_float32_matmul_precision()}".encode())
                os._exit(0)
            os.close(w)
            child = os.read(r, 100).decode()
            os.close(r)
            os.waitpid(pid, 0)
            t.join()
    finally:
        _restore_matmul_precisions(saved)
    assert child == "True high", child


def test_box_scale_is_the_float32_quotient_on_every_backend():
    """interpolate's scale length / out, as the resized crop computes it: the correctly rounded
    float32 quotient, and still that quotient when the division becomes a multiplication by
    the reciprocal (CUDA with a Python divisor, Inductor with a constant one), which in float32
    itself moves some quotients by an ulp: enough to move a nearest sample floor(j * scale)."""
    from batchaug.functional._resize import _box_scale

    length = torch.arange(1, 2049)
    moved = 0
    for out in list(range(1, 300)) + [320, 384, 448, 512, 999]:
        exact = length.float() / torch.full([1], float(out))
        assert torch.equal(_box_scale(length, out, torch.float32), exact), out
        # the float64 route survives a reciprocal multiplication ...
        assert torch.equal((length.double() * (1.0 / out)).float(), exact), out
        # ... which in float32 does not
        moved += int(((length.float() * torch.tensor(1.0 / out, dtype=torch.float32))
                      != exact).sum())
    assert moved > 0
    f64 = _box_scale(length, 7, torch.float64)
    assert f64.dtype == torch.float64 and torch.equal(f64, length.double() / 7.0)


def _cuda_scalar_division():
    """A dispatch mode that divides as CUDA does when the divisor is a CPU scalar (a Python
    number): a * (1 / b), the reciprocal rounded to the dividend's dtype first."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func is torch.ops.aten.div.Tensor and not kwargs:
                a, b = args
                if isinstance(b, (int, float)):  # a Python number arrives as it is
                    b = torch.tensor(float(b), dtype=torch.float64)
                if (isinstance(b, torch.Tensor) and b.dim() == 0 and b.device.type == "cpu"
                        and a.dim() > 0 and a.is_floating_point()):
                    inv = torch.ones((), dtype=a.dtype) / b.to(a.dtype)
                    return torch.ops.aten.mul.Tensor(a, inv)
            return func(*args, **kwargs)

    return Mode()


@pytest.mark.parametrize("out", [224, 160, 97])
def test_nearest_resized_crop_is_the_same_under_cuda_division(out):
    """Every box length from 1 to 256 resized to ``out`` with nearest: the same pixels when
    divisions by Python numbers become multiplications by reciprocals (CUDA's rule for a CPU
    scalar divisor), so a GPU samples the pixels the CPU (and torchvision) does."""
    n = 256
    x = torch.arange(256, dtype=torch.float32).view(1, 1, 1, 256).expand(n, 1, 2, 256)
    length = torch.arange(1, n + 1)
    zero = torch.zeros(n, dtype=torch.int64)
    two = torch.full((n,), 2)
    plain = BF.resized_crop(x, zero, zero, two, length, [1, out], "nearest")
    with _cuda_scalar_division():
        cuda_like = BF.resized_crop(x, zero, zero, two, length, [1, out], "nearest")
    assert torch.equal(cuda_like, plain)
    ref = torch.stack([TF.resized_crop(x[i], 0, 0, 2, int(length[i]), [1, out],
                                       TF.InterpolationMode.NEAREST) for i in range(n)])
    assert torch.equal(plain, ref)
