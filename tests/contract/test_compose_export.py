"""Augment / AugmentedModel around a small CNN: TorchScript, save/load without batchaug,
torch.compile(fullgraph=True), torch.export, and no host-device syncs on CUDA."""
import subprocess
import sys
import textwrap

import pytest
import torch
from torch import nn

import batchaug
from batchaug import Augment, AugmentedModel
from tests.contract import CASES

MEAN, STD = [0.4914, 0.4822, 0.4465], [0.2470, 0.2435, 0.2616]


def small_cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10),
    )


def cifar_augment() -> Augment:
    return Augment(
        batchaug.RandomCrop(32, padding=4, padding_mode="reflect"),
        batchaug.RandomHorizontalFlip(),
        batchaug.CenterCrop(28),
        batchaug.Normalize(MEAN, STD),
    )


def all_transforms_augment() -> Augment:
    """Every exported transform in one pipeline, ending in a float32 32x32 batch."""
    ts = [
        batchaug.RandomCrop(32, padding=4),
        batchaug.RandomHorizontalFlip(),
        batchaug.RandomVerticalFlip(0.2),
        batchaug.CenterCrop(30),
    ]
    # Warp transforms join when they exist (built in parallel by another module).
    if hasattr(batchaug, "RandomRotation"):
        ts.append(batchaug.RandomRotation(15))
    if hasattr(batchaug, "RandomResizedCrop"):
        ts.append(batchaug.RandomResizedCrop(28))
    if hasattr(batchaug, "Resize"):
        ts.append(batchaug.Resize(32))
    ts += [batchaug.ToDtype(torch.float32, scale=True), batchaug.Normalize([0.5], [0.25])]
    return Augment(*ts)


def uint8_batch(n=8, size=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n, 3, size, size), generator=g, dtype=torch.uint8)


def test_augment_repr_and_type_check():
    r = repr(cifar_augment())
    assert "RandomCrop(size=(32, 32)" in r and "RandomHorizontalFlip(p=0.5)" in r
    with pytest.raises(TypeError, match="argument 1"):
        Augment(batchaug.RandomHorizontalFlip(), lambda x: x)
    with pytest.raises(TypeError, match="model must be an nn.Module, got str"):
        AugmentedModel(cifar_augment(), "net")


def _tv():
    from torchvision.transforms import v2
    import torchvision.transforms as v1
    return v1, v2


@pytest.mark.parametrize("make,name,equivalent", [
    (lambda v1, v2: v2.RandomRotation(30), "RandomRotation", "batchaug.RandomRotation"),
    (lambda v1, v2: v1.RandomRotation(30), "RandomRotation", "batchaug.RandomRotation"),
    (lambda v1, v2: v2.RandomHorizontalFlip(), "RandomHorizontalFlip",
     "batchaug.RandomHorizontalFlip"),
    (lambda v1, v2: v1.RandomVerticalFlip(), "RandomVerticalFlip", "batchaug.RandomVerticalFlip"),
    (lambda v1, v2: v2.RandomCrop(8, padding=2), "RandomCrop", "batchaug.RandomCrop"),
    (lambda v1, v2: v2.RandomResizedCrop(8), "RandomResizedCrop", "batchaug.RandomResizedCrop"),
    (lambda v1, v2: v2.ColorJitter(0.4), "ColorJitter", "batchaug.ColorJitter"),
    (lambda v1, v2: v2.RandomAffine(10), "RandomAffine", "batchaug.RandomAffine"),
    (lambda v1, v2: v2.RandomPerspective(), "RandomPerspective", "batchaug.RandomPerspective"),
    (lambda v1, v2: v2.ElasticTransform(), "ElasticTransform", "no equivalent yet"),
    (lambda v1, v2: v2.GaussianBlur(3), "GaussianBlur", "batchaug.GaussianBlur"),
    (lambda v1, v2: v2.RandomApply([v2.RandomInvert()]), "RandomApply", "batchaug.RandomApply"),
    (lambda v1, v2: v2.TrivialAugmentWide(), "TrivialAugmentWide", "batchaug.TrivialAugmentWide"),
    # hidden inside a torchvision Compose
    (lambda v1, v2: v2.Compose([v2.ToDtype(torch.float32, scale=True),
                                v2.RandomHorizontalFlip()]),
     r"transforms\[1\] is torchvision.transforms.RandomHorizontalFlip",
     "batchaug.RandomHorizontalFlip"),
])
def test_augment_rejects_random_torchvision_transforms(make, name, equivalent):
    """issue 7 item 17: one draw per batch is the problem batchaug exists to remove."""
    v1, v2 = _tv()
    for args in ((make(v1, v2),), ([batchaug.Normalize([0.5], [0.25]), make(v1, v2)],)):
        with pytest.raises(TypeError, match=name) as info:
            Augment(*args)
        assert equivalent in str(info.value)
        assert "ONE set of random parameters" in str(info.value)


def test_augment_rejects_random_kornia_transforms_and_keeps_deterministic_ones():
    K = pytest.importorskip("kornia.augmentation")
    with pytest.raises(TypeError, match="kornia.augmentation.RandomHorizontalFlip.*"
                                        "use batchaug.RandomHorizontalFlip"):
        Augment(K.RandomHorizontalFlip())
    with pytest.raises(TypeError, match=r"argument 0\[1\] is kornia.augmentation.RandomAffine"
                                        ".*use batchaug.RandomAffine"):
        Augment(K.AugmentationSequential(K.CenterCrop(4), K.RandomAffine(10)))
    with pytest.raises(TypeError, match=r"argument 0\[1\] is kornia.augmentation."
                                        "RandomElasticTransform.*no equivalent yet"):
        Augment(K.AugmentationSequential(K.CenterCrop(4), K.RandomElasticTransform()))
    Augment(K.CenterCrop(4), K.Normalize(torch.zeros(3), torch.ones(3)))


def test_augment_keeps_deterministic_torchvision_transforms():
    v1, v2 = _tv()
    aug = Augment(batchaug.RandomHorizontalFlip(), v2.ToDtype(torch.float32, scale=True),
                  v2.Normalize([0.5] * 3, [0.25] * 3), v2.Resize(16), v2.CenterCrop(12),
                  v2.GaussianBlur(3, sigma=(1.0, 1.0)), v1.ConvertImageDtype(torch.float32))
    assert aug(uint8_batch(2)).shape == (2, 3, 12, 12)
    with pytest.raises(TypeError, match="not modules"):  # v1 Compose is a plain object
        Augment(v1.Compose([v1.ConvertImageDtype(torch.float32)]))


def test_augment_takes_a_list_or_tuple_of_transforms():
    ts = [batchaug.RandomCrop(32, padding=4), batchaug.RandomHorizontalFlip(),
          batchaug.Normalize(MEAN, STD)]
    x = uint8_batch()
    outs = []
    for aug in (Augment(*ts), Augment(ts), Augment(tuple(ts))):
        assert len(aug) == 3
        torch.manual_seed(0)
        outs.append(aug(x))
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2])
    s = torch.jit.script(Augment(ts))
    torch.manual_seed(0)
    assert torch.equal(s(x), outs[0])
    with pytest.raises(TypeError, match="argument 1 is str"):
        Augment([batchaug.RandomHorizontalFlip(), "flip"])


def test_augmented_model_is_model_of_augment_and_saves_plain_weights():
    m = AugmentedModel(cifar_augment(), small_cnn())
    x = uint8_batch()
    torch.manual_seed(3)
    out = m(x)
    torch.manual_seed(3)
    assert torch.equal(out, m.model(m.augment(x)))
    assert set(m.model.state_dict()) == set(small_cnn().state_dict())
    m.eval()
    assert not m.augment.training and not m.model.training
    assert torch.equal(m(x), m.model(m.augment(x)))


def test_augmented_model_with_targets_augments_then_runs_the_model():
    """with_targets: (model(augmented images), targets moved with them), the images those of
    forward (same keys), targets those of augment.with_targets; scripted equals eager; an
    augment that moves pixels without with_targets is refused, one that moves none runs."""
    net = torch.nn.Conv2d(3, 5, 1)  # a segmentation head: per-pixel logits
    aug = Augment(batchaug.RandomRotation(30, mask_fill=255), batchaug.RandomResizedCrop(24),
                  batchaug.RandomHorizontalFlip(), batchaug.Normalize([0.5], [0.25]))
    m = AugmentedModel(aug, net)
    x = uint8_batch(6)
    g = torch.Generator().manual_seed(0)
    t = {"masks": torch.randint(0, 5, (6, 32, 32), generator=g),
         "boxes": torch.tensor([[4.0, 6.0, 20.0, 28.0]]).repeat(6, 1, 1)}
    keys = batchaug.sample_keys(1, 0, torch.arange(6))
    out, moved = m.with_targets(x, t, keys)
    want_images, want = aug.with_targets(x, t, keys)
    assert torch.equal(out, net(want_images)) and out.shape == (6, 5, 24, 24)
    assert torch.equal(out, m(x, keys))
    assert set(moved) == set(want) and all(torch.equal(moved[k], want[k]) for k in want)
    assert moved["masks"].shape == (6, 24, 24) and not torch.equal(moved["masks"][:, :24, :24],
                                                                   t["masks"][:, :24, :24])
    s = torch.jit.script(m)
    out_s, moved_s = s.with_targets(x, t, keys)
    assert torch.equal(out_s, out) and all(torch.equal(moved_s[k], moved[k]) for k in moved)
    # a bare transform (no keys) and eval: the deterministic preprocessing, targets as given
    flip = AugmentedModel(batchaug.RandomHorizontalFlip(1.0), torch.nn.Identity())
    y, f = flip.with_targets(x, {"masks": t["masks"]})
    assert torch.equal(y, x.flip(-1)) and torch.equal(f["masks"], t["masks"].flip(-1))
    m.eval()
    out_e, moved_e = m.with_targets(x, t)
    assert torch.equal(moved_e["masks"], aug.with_targets(x, t)[1]["masks"])
    assert torch.equal(out_e, m(x))
    with pytest.raises(TypeError, match=r"augment \(Sequential\) has no with_targets, so the "
                       r"targets could not follow the images"):
        AugmentedModel(torch.nn.Sequential(torch.nn.Conv2d(3, 3, 1)), net).with_targets(x, t)
    y, same = AugmentedModel(torch.nn.Identity(), net).with_targets(x.float(), t)
    assert torch.equal(y, net(x.float())) and torch.equal(same["masks"], t["masks"])
    with pytest.raises(TypeError, match="targets must be a dict"):
        AugmentedModel(aug, net).with_targets(x, [t["masks"]])


@pytest.mark.parametrize("case", [c for c in CASES], ids=lambda c: c.id)
def test_every_transform_scripts(case):
    torch.jit.script(case.factory())  # the contract compares outputs; here: it compiles


def test_scripted_augment_and_model_match_eager():
    m = AugmentedModel(cifar_augment(), small_cnn())
    s = torch.jit.script(m)
    x = uint8_batch(16)
    for seed in (0, 1):
        torch.manual_seed(seed)
        a = m(x)
        torch.manual_seed(seed)
        b = s(x)
        torch.testing.assert_close(a, b, rtol=0, atol=0)  # the same ops in the same order
    aug = all_transforms_augment()
    saug = torch.jit.script(aug)
    torch.manual_seed(5)
    a = aug(x)
    torch.manual_seed(5)
    assert torch.equal(a, saug(x))
    m.eval()
    s.eval()
    assert torch.equal(m(x), s(x))


def test_scripted_model_loads_and_runs_without_batchaug(tmp_path):
    m = AugmentedModel(cifar_augment(), small_cnn()).eval()
    x = uint8_batch(4)
    torch.jit.save(torch.jit.script(m), str(tmp_path / "model.pt"))
    torch.save({"x": x, "y": m(x).detach()}, str(tmp_path / "io.pt"))
    script = tmp_path / "load.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        sys.modules["batchaug"] = None  # any attempt to import batchaug now fails
        try:
            import batchaug
        except ImportError:
            pass
        else:
            raise SystemExit("batchaug was importable")
        import torch
        m = torch.jit.load({str(tmp_path / "model.pt")!r})
        io = torch.load({str(tmp_path / "io.pt")!r}, weights_only=True)
        # three calls: the profiling executor's profiling run, its specialised run and the
        # cached plan, with torch's default fusion strategy (conftest turns it off in-process)
        for _ in range(3):
            y = m(io["x"])
            torch.testing.assert_close(y, io["y"], rtol=0, atol=0)
        assert "batchaug" not in [k for k, v in sys.modules.items() if v is not None]
        print("LOADED-OK", tuple(y.shape))
    """))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "LOADED-OK (4, 10)" in r.stdout


def _torch_version():
    return tuple(int(v) for v in torch.__version__.split("+")[0].split(".")[:2])


def test_compile_fullgraph_train_mode():
    import torch._inductor.config as inductor_config

    aug = all_transforms_augment().train()
    x = uint8_batch(8)
    # fallback_random: compiled code draws with eager's RNG, so outputs can be compared.
    with inductor_config.patch(fallback_random=True):
        compiled = torch.compile(aug, fullgraph=True)  # fullgraph: no graph breaks, no .item()
        torch.manual_seed(0)
        out = compiled(x)
    torch.manual_seed(0)
    ref = aug(x)
    assert out.shape == ref.shape and out.dtype == torch.float32
    if _torch_version() < (2, 14):
        # measured on torch 2.11: the compiled RandomResizedCrop.make_params alone draws other
        # boxes than eager for the same seed under fallback_random (a plain torch.rand pair
        # matches), so the values cannot be compared draw for draw there
        pytest.skip("compiled draws differ from eager's under fallback_random before torch 2.14")
    # Identical draws: the integer geometry is exact; interpolating warps (if present) may
    # round a uint8 value differently once inductor fuses them (1/255 step, then normalized).
    has_warp = any(hasattr(batchaug, n) for n in ("RandomRotation", "RandomResizedCrop", "Resize"))
    torch.testing.assert_close(out, ref, rtol=0, atol=(1 / 255) / 0.25 + 1e-4 if has_warp else 1e-4)


def test_export_eval_augmented_model_uint8():
    m = AugmentedModel(cifar_augment(), small_cnn()).eval()
    x = uint8_batch(4)
    ep = torch.export.export(m, (x,))
    torch.testing.assert_close(ep.module()(x), m(x), rtol=0, atol=0)  # README: exactly
    y = uint8_batch(4, seed=1)
    torch.testing.assert_close(ep.module()(y), m(y), rtol=0, atol=0)


def _pipelines():
    """Augment with every exported transform, the CIFAR recipe in an AugmentedModel, and a
    pipeline of containers and policies (grouped by branch on the CPU, static elsewhere)."""
    return [
        ("all transforms", all_transforms_augment()),
        ("AugmentedModel", AugmentedModel(cifar_augment(), small_cnn())),
        ("containers and policies", Augment(
            batchaug.RandomApply([batchaug.ColorJitter(0.4, 0.4, 0.4, 0.1)], p=0.8),
            batchaug.RandomChoice([batchaug.RandomInvert(1.0), batchaug.RandomGrayscale(1.0)]),
            batchaug.TrivialAugmentWide(), batchaug.RandomErasing(value=[0.1, 0.2, 0.3]))),
    ]


@pytest.mark.parametrize("device", ["meta"] + (["cuda"] if torch.cuda.is_available() else []))
def test_train_forward_never_syncs(device):
    """Augment and AugmentedModel, moved with .to(device), train forward with and without keys
    without a host read or Python data copied to the device (contract.NoHostSync: a dispatch
    mode on meta, sync debug mode "error" on CUDA), then the same for every contract case at
    batch 64, uint8 and float32."""
    from tests.contract import NoHostSync

    runs = []
    for name, m in _pipelines():
        runs.append((name, m.to(device).train(), uint8_batch(64).to(device)))
    for c in CASES:
        h, w = c.in_size
        x = torch.randint(0, 256, (64, c.channels, h, w), dtype=torch.uint8)
        m = c.factory().to(device).train()
        runs.append((c.id, m, x.to(device)))
        runs.append((c.id + " float32", m, (x.float() / 255).to(device)))
    keys = batchaug._random.sample_keys(0, 0, torch.arange(64)).to(device)
    calls = [(name, m, x, k) for name, m, x in runs
             for k in ((None, keys) if getattr(m, "takes_keys", False) else (None,))]
    if device != "meta":
        for _, m, x, k in calls:  # warm-up outside the checked region (lazy init may sync)
            m(x) if k is None else m(x, k)
        torch.cuda.synchronize()
    for name, m, x, k in calls:
        with NoHostSync(device):
            y = m(x) if k is None else m(x, k)
        assert y.device.type == device, name
