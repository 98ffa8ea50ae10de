"""Each example runs end to end with --smoke (synthetic data, seconds) in a fresh process."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run_example(name, *args, cwd):
    # One thread: this 2-core VM has bursts where 2-thread OpenMP work is 10-70x slower, and
    # the smoke runs check behaviour, not speed.
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    proc = subprocess.run([sys.executable, str(EXAMPLES / name), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{name} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def test_train_cifar10_smoke(tmp_path):
    out = run_example("train_cifar10.py", "--smoke", "--out", "model.pt", cwd=tmp_path)
    assert "SYNTHETIC" in out  # says clearly that it is not real CIFAR-10
    epochs = re.findall(r"epoch (\d)/2: .* test acc ([\d.]+)%, data-wait ([\d.]+)%", out)
    assert [e[0] for e in epochs] == ["1", "2"]
    assert all(0 <= float(acc) <= 100 and 0 <= float(wait) < 100 for _, acc, wait in epochs)
    assert "reloaded output matches" in out
    # The saved TorchScript model loads without the example's code and takes raw uint8.
    model = torch.jit.load(str(tmp_path / "model.pt"))
    logits = model(torch.randint(0, 256, (3, 3, 32, 32), dtype=torch.uint8))
    assert logits.shape == (3, 10) and torch.isfinite(logits).all()


def test_train_cifar10_smoke_with_policy_and_mixing_writes_nothing_here(tmp_path):
    out = run_example("train_cifar10.py", "--smoke", "--aug", "trivialaugment", "--mix", "both",
                      cwd=tmp_path)
    assert "--aug trivialaugment --mix both" in out
    losses = [float(v) for v in re.findall(r"epoch \d/2: .* train loss ([\d.]+)", out)]
    assert len(losses) == 2 and all(0 < v < 10 for v in losses)
    # The mixer is not part of the saved model (checked on the reloaded copy), and without
    # --out a smoke run leaves the current directory as it found it.
    assert "reloaded output matches" in out and "a temporary file, removed at exit" in out
    assert os.listdir(tmp_path) == []


def _example_module(name):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_train_cifar10_every_aug_and_mix_choice_steps():
    """Each --aug and --mix value builds and gives a finite, differentiable loss (in process,
    a tiny net: the subprocess smoke run above covers one combination end to end)."""
    ex = _example_module("train_cifar10")
    images = torch.randint(0, 256, (8, 3, 32, 32), dtype=torch.uint8)
    labels = torch.arange(8) % 10
    for aug in ex.AUGS:
        for mix in ex.MIXES:
            net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.AdaptiveAvgPool2d(1),
                                      torch.nn.Flatten(), torch.nn.Linear(4, 10))
            model = ex.AugmentedModel(ex.build_augment(aug), net)
            loss = ex.train_loss(model, ex.build_mix(mix), images, labels)
            loss.backward()
            assert torch.isfinite(loss) and net[0].weight.grad is not None, (aug, mix)
    logits = torch.randn(5, 10)
    targets = torch.softmax(torch.randn(5, 10), 1)
    torch.testing.assert_close(ex.soft_cross_entropy(logits, targets),
                               torch.nn.functional.cross_entropy(logits, targets))


def test_train_cifar10_missing_data_dir(tmp_path):
    proc = subprocess.run([sys.executable, str(EXAMPLES / "train_cifar10.py"), "--data",
                           str(tmp_path / "nope")], capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "is not a directory" in proc.stderr


def test_finetune_imagefolder_smoke_with_local_weights(tmp_path):
    import torchvision

    # A local checkpoint, as a user would pass one (nothing is downloaded).
    torch.manual_seed(1)
    start = torchvision.models.resnet18(weights=None).state_dict()
    torch.save(start, tmp_path / "r18.pth")
    out = run_example("finetune_imagefolder.py", "--smoke", "--weights", "r18.pth",
                      "--out", "ft.pt", cwd=tmp_path)
    # The torchvision pipeline, split by from_torchvision: rotation runs in the augment.
    # (three columns, wrapped: the loader's crop column is empty for this fixed-size pipeline)
    rows = [line.split("|") for line in out.splitlines() if line.count("|") == 2]
    pre, crop, aug = (" ".join(row[k].strip() for row in rows) for k in range(3))
    assert "CenterCrop(size=(55, 55))" in pre and "(none: stored size)" in crop, out
    aug = "".join(aug.split())  # the wrapping's spaces out
    assert "RandomHorizontalFlip(p=0.5)" in aug and "RandomRotation(degrees=(-15.0,15.0)" in aug
    # train/ and test/ are used as given (the train cache built once, then loaded again),
    # and the truncated JPEG of the smoke data is skipped (--skip-bad), by name.
    assert out.count("built cache") == 2 and out.count("loaded DeviceCache") == 3
    assert "skipped 1 unreadable: dataset[12] (" in out and "truncated.jpg" in out
    assert "24 train / 12 test images" in out
    assert "loaded r18.pth" in out and "missing" not in out
    assert re.search(r"epoch 2/2: .* test acc [\d.]+%, data-wait [\d.]+%", out)
    state = torch.load(tmp_path / "ft.pt", weights_only=True)
    net = torchvision.models.resnet18(weights=None, num_classes=2)
    net.load_state_dict(state)  # the plain model's weights, new 2-class head
    # Fine-tuning started from the given checkpoint and changed it.
    assert not torch.equal(state["conv1.weight"], start["conv1.weight"])


def test_export_smoke(tmp_path):
    out = run_example("export.py", "--smoke", "--out-dir", "exp", cwd=tmp_path)
    assert out.count("-> OK") == 2 and "all exports match" in out
    assert (tmp_path / "exp" / "model.pt").stat().st_size > 0
    program = torch.export.load(str(tmp_path / "exp" / "model.pt2"))
    x = torch.randint(0, 256, (4, 3, 36, 36), dtype=torch.uint8)
    scripted = torch.jit.load(str(tmp_path / "exp" / "model.pt"))
    with torch.no_grad():
        torch.testing.assert_close(program.module()(x), scripted(x), atol=1e-5, rtol=1e-4)


def _finetune_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("finetune_imagefolder",
                                                  EXAMPLES / "finetune_imagefolder.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("arch, size, head_type", [
    ("resnet18", 64, torch.nn.Linear),             # fc
    ("googlenet", 64, torch.nn.Linear),            # fc, auxiliary heads off
    ("densenet121", 64, torch.nn.Linear),          # classifier: a Linear
    ("mobilenet_v3_small", 64, torch.nn.Linear),   # classifier: Sequential, last Linear
    ("efficientnet_b0", 64, torch.nn.Linear),
    ("convnext_tiny", 64, torch.nn.Linear),
    ("squeezenet1_0", 64, torch.nn.Conv2d),        # classifier: a 1x1 convolution
    ("swin_t", 64, torch.nn.Linear),               # head
])
def test_finetune_replaces_the_head_of_any_torchvision_model(arch, size, head_type):
    import torchvision

    ft = _finetune_module()
    net, head = ft.build_net(arch, 3, None)
    assert isinstance(head, head_type)
    # Same parameter names and shapes as the model built for 3 classes: its checkpoints load.
    reference = getattr(torchvision.models, arch)(
        weights=None, num_classes=3,
        **({"aux_logits": False, "init_weights": True} if arch == "googlenet" else {}))
    net.load_state_dict(reference.state_dict())
    ids = {id(p) for p in head.parameters()}
    assert ids and ids <= {id(p) for p in net.parameters()}
    with torch.no_grad():
        assert net.eval()(torch.rand(2, 3, size, size)).shape == (2, 3)
        assert net.train()(torch.rand(2, 3, size, size)).shape == (2, 3)  # a tensor, not a tuple


def test_finetune_replaces_vit_heads():
    import torchvision

    ft = _finetune_module()
    # torchvision's VisionTransformer (vit_b_16 is this with 12 layers of 768), small enough
    # to build in milliseconds; with representation_size, heads = pre_logits, tanh, head.
    net = torchvision.models.VisionTransformer(image_size=32, patch_size=16, num_layers=1,
                                               num_heads=2, hidden_dim=16, mlp_dim=32,
                                               representation_size=8)
    head = ft.replace_classifier(net, 5)
    assert head is net.heads.head and head.in_features == 8
    assert net.heads.pre_logits.out_features == 8  # untouched
    assert net(torch.rand(2, 3, 32, 32)).shape == (2, 5)
    with pytest.raises(ValueError, match="no classification layer"):
        ft.replace_classifier(torch.nn.Sequential(torch.nn.ReLU()), 2)


def test_finetune_imagefolder_smoke_with_a_classifier_head(tmp_path):
    out = run_example("finetune_imagefolder.py", "--smoke", "--arch", "squeezenet1_0",
                      "--out", "ft.pt", cwd=tmp_path)
    assert re.search(r"epoch 2/2: .* test acc [\d.]+%", out)
    import torchvision

    net = torchvision.models.squeezenet1_0(weights=None, num_classes=2)
    net.load_state_dict(torch.load(tmp_path / "ft.pt", weights_only=True))


def test_finetune_stops_on_a_truncated_jpeg_in_one_line_naming_skip_bad(tmp_path, capsys):
    ft = _finetune_module()
    ft.make_synthetic_imagefolder(str(tmp_path / "data"), per_class=3, splits=False)
    with pytest.raises(SystemExit) as info:
        ft.main(["--data", str(tmp_path / "data"), "--cache", str(tmp_path / "cache"),
                 "--size", "32", "--epochs", "1", "--device", "cpu"])
    message = str(info.value.code)
    assert message.startswith("finetune_imagefolder.py: error: dataset[") and "\n" not in message
    assert "truncated.jpg" in message and "add --skip-bad to skip unreadable images" in message
    assert not (tmp_path / "cache").exists()


def test_finetune_finds_a_test_or_val_folder(tmp_path):
    ft = _finetune_module()
    for name in ("val", "validation", "test"):
        (tmp_path / name).mkdir()
    assert ft.find_splits(str(tmp_path)) == (str(tmp_path), None)  # no train/: one folder
    (tmp_path / "train").mkdir()
    assert ft.find_splits(str(tmp_path)) == (str(tmp_path / "train"), str(tmp_path / "test"))
    (tmp_path / "test").rmdir()
    assert ft.find_splits(str(tmp_path))[1] == str(tmp_path / "val")


def test_progressive_resizing_smoke(tmp_path):
    """Photos of different sizes in a ragged cache; the loader's crop grows 32 -> 48 -> 64
    between epochs (set_crop), nothing rebuilt; evaluation crops each photo on its own extent."""
    out = run_example("progressive_resizing.py", "--smoke", cwd=tmp_path)
    assert "photos at their own sizes" in out
    epochs = re.findall(r"epoch (\d)/3: res (\d+), batches \((\d+), 3, (\d+), (\d+)\)", out)
    assert [(e[1], e[3], e[4]) for e in epochs] == [("32",) * 3, ("48",) * 3, ("64",) * 3]
    assert re.search(r"val accuracy at 64: [\d.]+%", out)


def test_train_segmentation_smoke(tmp_path):
    """Synthetic (image, mask) items in a DeviceCache, batches (images, targets, keys) from a
    DeviceLoader, masks moved with the images by Augment.with_targets; the grid of augmented
    masks is written."""
    out = run_example("train_segmentation.py", "--smoke", "--show", "grid.png", cwd=tmp_path)
    assert "SYNTHETIC shapes" in out and "64 train / 32 val images of 32x32 with masks" in out
    epochs = re.findall(r"epoch (\d)/2: .* train loss ([\d.]+), val pixel acc ([\d.]+)%, "
                        r"mIoU ([\d.]+)%", out)
    assert [e[0] for e in epochs] == ["1", "2"], out
    assert all(0 < float(loss) < 10 and 0 <= float(acc) <= 100 and 0 <= float(iou) <= 100
               for _, loss, acc, iou in epochs)
    assert (tmp_path / "grid.png").stat().st_size > 0


def test_train_segmentation_shapes_masks_label_their_shapes():
    ex = _example_module("train_segmentation")
    data = ex.Shapes(6, 32, seed=0)
    image, mask = data[3]
    assert image.dtype == torch.uint8 and image.shape == (3, 32, 32)
    assert mask.dtype == torch.int64 and mask.shape == (32, 32)
    assert torch.equal(data[3][0], image)  # an item is the same every time
    for i in range(len(data)):
        image, mask = data[i]
        assert 0 < int((mask != 0).sum()) < 32 * 32 and int(mask.max()) < len(ex.CLASSES)
        # each of the 1-3 shapes is one flat colour, the background noise: the labelled pixels
        # hold at most 3 colours, the background many
        shapes = image[:, mask != 0].T.unique(dim=0)
        background = image[:, mask == 0].T.unique(dim=0)
        assert len(shapes) <= 3 and len(background) > 20
