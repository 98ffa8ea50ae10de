"""The deployed model (batchaug.DeployedModel): torchvision's evaluation pipeline, then the net,
on photos at their own sizes, eager, scripted and exported with a dynamic batch, height and
width; and from_torchvision / from_timm giving its prefix."""
import warnings

import pytest
import torch
from torch import nn
from torch.export import Dim, export
from torchvision.transforms import v2

import batchaug
from batchaug import CenterCrop, DeployedModel, Normalize, Resize

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
SIZES = [(333, 517), (600, 401), (250, 250)]  # landscape, portrait, square below 256


def _photo(h, w, seed):
    g = torch.Generator().manual_seed(seed)
    # smooth content plus noise: every rounding path of the resize is exercised
    base = torch.rand(1, 3, h // 8 + 1, w // 8 + 1, generator=g)
    smooth = torch.nn.functional.interpolate(base, size=(h, w), mode="bicubic")
    noise = torch.rand(1, 3, h, w, generator=g) * 0.3
    return ((smooth + noise).clamp(0, 1) * 255).round().to(torch.uint8)


def _torchvision_eval(resize=256, crop=224):
    return v2.Compose([v2.Resize(resize), v2.CenterCrop(crop),
                       v2.ToDtype(torch.float32, scale=True), v2.Normalize(MEAN, STD)])


def _net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 5, stride=4), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(4, 2)).eval()


def _levels(a, b):
    """Largest difference in uint8 levels before normalisation."""
    std = torch.tensor(STD).view(1, 3, 1, 1)
    return float(((a - b).abs() * std * 255).max())


def _same_pixels(a, b):
    """The same uint8 pixels (Normalize's float rounding aside)."""
    return _levels(a, b) < 1e-3


def _export(module, with_sizes=False):
    batch = Dim("batch")
    images = {0: batch, 2: Dim("height"), 3: Dim("width")}
    x = torch.zeros(2, 3, 300, 280, dtype=torch.uint8)
    if with_sizes:
        sizes = torch.tensor([[300, 280], [200, 100]])
        return export(module, (x, sizes), dynamic_shapes=(images, {0: batch})).module()
    return export(module, (x,), dynamic_shapes=(images,)).module()


@pytest.fixture(scope="module")
def deployed():
    prefix = [Resize(256), CenterCrop(224), Normalize(MEAN, STD)]
    pixels = DeployedModel(prefix, nn.Identity())
    logits = DeployedModel(prefix, _net())
    return {"pixels": pixels, "logits": logits,
            "scripted": torch.jit.script(pixels), "exported": _export(pixels),
            "scripted_logits": torch.jit.script(logits)}


@pytest.mark.parametrize("k", range(len(SIZES)))
def test_one_photo_equals_torchvision_eval(deployed, k):
    x = _photo(*SIZES[k], seed=k)
    ref = _torchvision_eval()(x)
    assert deployed["pixels"](x).shape == (1, 3, 224, 224)
    assert _same_pixels(deployed["pixels"](x), ref)  # eager CPU: torchvision's own resize
    for name in ("scripted", "exported"):  # one batched kernel: within a uint8 level
        assert _levels(deployed[name](x), ref) <= 1.0 + 1e-3, name
    net = _net()
    want = net(ref)
    for name in ("logits", "scripted_logits"):
        got = deployed[name](x)
        assert got.shape == (1, 2)
        torch.testing.assert_close(got, want, atol=2e-2, rtol=0)


def test_padded_batch_with_sizes(deployed):
    photos = [_photo(h, w, seed=10 + k) for k, (h, w) in enumerate(SIZES)]
    canvas = torch.zeros(3, 3, 600, 517, dtype=torch.uint8)
    for k, p in enumerate(photos):
        canvas[k, :, :p.shape[2], :p.shape[3]] = p
    canvas[:, :, 590:] = 255  # padding must never be read
    sizes = torch.tensor(SIZES)
    ref = torch.cat([_torchvision_eval()(p) for p in photos])
    assert _same_pixels(deployed["pixels"](canvas, sizes), ref)
    assert _levels(deployed["scripted"](canvas, sizes), ref) <= 1.0 + 1e-3
    exported = _export(deployed["pixels"], with_sizes=True)
    assert _levels(exported(canvas, sizes), ref) <= 1.0 + 1e-3


def test_exported_batch_and_saved_file(deployed, tmp_path):
    x = torch.cat([_photo(321, 123, seed=3), _photo(321, 123, seed=4)])
    ref = _torchvision_eval()(x)
    assert _levels(deployed["exported"](x), ref) <= 1.0 + 1e-3
    deployed["scripted_logits"].save(str(tmp_path / "model.pt"))
    loaded = torch.jit.load(str(tmp_path / "model.pt"))
    torch.testing.assert_close(loaded(x), _net()(ref), atol=2e-2, rtol=0)


def test_resize_pair_and_centre_crop_forms():
    x = _photo(300, 451, seed=7)
    fixed = DeployedModel([Resize((128, 96)), Normalize(MEAN, STD)], nn.Identity())
    want = v2.Compose([v2.Resize((128, 96)), v2.ToDtype(torch.float32, scale=True),
                       v2.Normalize(MEAN, STD)])(x)
    assert _same_pixels(fixed(x), want)
    assert _levels(torch.jit.script(fixed)(x), want) <= 1.0 + 1e-3
    crop = DeployedModel([CenterCrop(200), Normalize(MEAN, STD)], nn.Identity())
    want = v2.Compose([v2.CenterCrop(200), v2.ToDtype(torch.float32, scale=True),
                       v2.Normalize(MEAN, STD)])(x)
    assert _same_pixels(crop(x), want)
    assert _levels(torch.jit.script(crop)(x), want) <= 1.0 + 1e-3


def test_refuses_what_would_not_match_training():
    aug = batchaug.AugmentedModel(batchaug.Augment(Normalize(MEAN, STD)), _net())
    with pytest.raises(TypeError, match="pass its .model"):
        DeployedModel([Resize(256), CenterCrop(224)], aug)
    with pytest.raises(ValueError, match="must start with batchaug.Resize"):
        DeployedModel([Normalize(MEAN, STD)], _net())
    with pytest.raises(ValueError, match="follow it with batchaug.CenterCrop"):
        DeployedModel([Resize(256), Normalize(MEAN, STD)], _net())
    with pytest.raises(ValueError, match="must start with batchaug.Resize"):
        DeployedModel([v2.Resize(256), v2.CenterCrop(224)], _net())  # torchvision's: not run


def test_a_photo_without_its_batch_dimension_is_named():
    deployed = DeployedModel([Resize(8), CenterCrop(8)], nn.Identity())
    for sizes in (None, torch.tensor([[20, 30]])):  # photo[None] is the fix either way
        with pytest.raises(ValueError, match=r"\(N, C, H, W\) batch \(one photo: photo\[None\]"):
            deployed(torch.zeros(3, 20, 30, dtype=torch.uint8), sizes)


def test_prefix_stays_deterministic_in_train_mode():
    d = DeployedModel([Resize(256), CenterCrop(224), Normalize(MEAN, STD)], nn.Identity())
    d.train()
    assert not d.tail.training and not d.head.training
    x = _photo(333, 517, seed=1)
    assert _same_pixels(d(x), _torchvision_eval()(x))


def _seed_transforms():
    import torchvision.transforms as T

    train = T.Compose([T.RandomRotation(30), T.RandomResizedCrop(224),
                       T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(MEAN, STD)])
    test = T.Compose([T.Resize(255), T.CenterCrop(224), T.ToTensor(), T.Normalize(MEAN, STD)])
    return train, test


def test_from_torchvision_converts_the_eval_transform():
    train, test = _seed_transforms()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        migration = batchaug.from_torchvision(train, test)
    assert [type(m).__name__ for m in migration.deploy] == ["Resize", "CenterCrop", "Normalize"]
    assert any("eval_transform" in str(w.message) for w in caught)  # PIL vs tensor kernels
    deployed = DeployedModel(migration.deploy, nn.Identity())
    x = _photo(333, 517, seed=5)
    assert _same_pixels(deployed(x), _torchvision_eval(255)(x))
    assert "deploy" in str(migration)
    assert batchaug.from_torchvision(train).deploy is None


def test_from_torchvision_refuses_a_random_eval_transform():
    import torchvision.transforms as T

    with pytest.raises(ValueError, match="eval_transform"):
        batchaug.from_torchvision([T.RandomResizedCrop(8)],
                                  [T.RandomHorizontalFlip(), T.Resize(8), T.CenterCrop(8)])


def test_from_timm_converts_the_eval_transform():
    timm_data = pytest.importorskip("timm.data")
    train = timm_data.create_transform(224, is_training=True)
    test = timm_data.create_transform(224, is_training=False, interpolation="bicubic")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        migration = batchaug.from_timm(train, test)
    steps = list(migration.deploy)
    assert [type(m).__name__ for m in steps] == ["Resize", "CenterCrop", "Normalize"]
    assert steps[0].size == [256] and steps[0].interpolation == "bicubic"
    x = _photo(333, 517, seed=6)
    ref = v2.Compose([v2.Resize(256, interpolation=v2.InterpolationMode.BICUBIC),
                      v2.CenterCrop(224), v2.ToDtype(torch.float32, scale=True),
                      v2.Normalize(MEAN, STD)])(x)
    deployed = DeployedModel(migration.deploy, nn.Identity())
    assert _levels(deployed(x), ref) <= 1.0 + 1e-3


def test_the_readme_deploy_example_runs(tmp_path):
    """The README's deploy block, with a small net and a photo file beside it."""
    import os
    import re
    import subprocess
    import sys
    from pathlib import Path

    from PIL import Image

    root = Path(__file__).resolve().parents[2]
    blocks = re.findall(r"```python\n(.*?)```", (root / "README.md").read_text(), flags=re.S)
    (block,) = [b for b in blocks if "DeployedModel(" in b]
    Image.fromarray(_photo(333, 517, seed=2)[0].permute(1, 2, 0).numpy()).save(
        tmp_path / "cat.jpg")
    prelude = ("import torch\n"
               "net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 5, stride=4), torch.nn.ReLU(),\n"
               "    torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(4, 2))\n")
    env = dict(os.environ, PYTHONPATH=str(root), OMP_NUM_THREADS="1")
    run = subprocess.run([sys.executable, "-W", "ignore", "-c", prelude + block], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip().endswith("torch.Size([1, 2])")
    assert (tmp_path / "cats_dogs.pt").exists()


@pytest.mark.parametrize("prefix", [
    [Resize(256), CenterCrop(224), Normalize(MEAN, STD)],
    [Resize((128, 96)), Normalize(MEAN, STD)],
    [CenterCrop(200), Normalize(MEAN, STD)],
])
def test_deployed_model_does_not_sync_with_the_device(prefix):
    """Off the CPU (the meta device: every device op runs, any host read fails): no host read
    and no Python data copied onto the device, dense or with sizes."""
    from tests.contract import NoHostSync

    d = DeployedModel(prefix, nn.Identity()).to("meta")
    x = torch.zeros(3, 3, 300, 451, dtype=torch.uint8, device="meta")
    sizes = torch.zeros(3, 2, dtype=torch.int64, device="meta")
    with NoHostSync("meta"):
        dense = d(x)
        padded = d(x, sizes)
    assert dense.shape[:2] == padded.shape[:2] == (3, 3)
