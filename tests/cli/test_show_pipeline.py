"""`batchaug show --pipeline` and `batchaug.show(pipeline, cache)`: any pipeline (a Migration, a
(crop, augment) pair, an Augment) on any cache (fixed, ragged, JPEG, with masks and boxes),
the draws replayed with the loader's keys: what the picture shows is what DeviceLoader(...,
crop=crop, return_keys=True) and augment.with_targets(x, y, keys) gave for those samples."""
from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
from PIL import Image

import batchaug
from batchaug import (Augment, ColorJitter, Normalize, RandomHorizontalFlip, RandomResizedCrop,
                      RandomRotation)
from batchaug.cli import main
from batchaug.data import DeviceCache, DeviceLoader
from batchaug.data.ragged import RaggedImages
from batchaug.picture import _displayable, _last_normalize, cell_labels
from tests.cli.pictures import cell_origin
from batchaug.pipeline import load_pipeline, replay, split_pipeline

SIZES = [(48, 70), (66, 41), (52, 52), (40, 64), (70, 45), (57, 60)]


def _photos(sizes=SIZES, seed=0):
    """Smooth images (JPEG keeps them) in [20, 200]: never the grid's white background."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for h, w in sizes:
        low = torch.rand(1, 3, 4, 4, generator=g)
        img = torch.nn.functional.interpolate(low, size=(h, w), mode="bilinear")
        out.append((20 + 180 * img[0]).round().to(torch.uint8))
    return out


def _masks(sizes=SIZES):
    out = []
    for k, (h, w) in enumerate(sizes):
        m = torch.zeros(1, h, w, dtype=torch.uint8)
        m[0, h // 4:h // 2 + k, w // 5:w // 2] = 1 + k % 3
        out.append(m)
    return out


def _boxes(sizes=SIZES):
    b = torch.stack([torch.tensor([[3.0, 4.0, w / 2, h / 2], [w / 3, h / 3, w - 2.0, h - 5.0],
                                   [0.0, 0.0, 0.0, 0.0]]) for h, w in sizes])
    valid = torch.ones(len(sizes), 3, dtype=torch.bool)
    valid[:, 2] = False
    return b, valid


def _ragged_cache(kind):
    """A ragged cache: "jpeg" (JPEG bytes), "masks" or "boxes" (raw, with those targets)."""
    storage = "jpeg" if kind == "jpeg" else "raw"
    images = RaggedImages.from_list(_photos(), storage=storage)
    targets = None
    if kind == "masks":
        targets = {"masks": RaggedImages.from_list(_masks())}
    elif kind == "boxes":
        boxes, valid = _boxes()
        targets = {"boxes": boxes, "box_valid": valid,
                   "box_labels": torch.arange(1, 4).expand(len(SIZES), 3).clone()}
    return DeviceCache(images, torch.arange(len(SIZES)) % 3, classes=["a", "b", "c"],
                       targets=targets)


def _fixed_cache():
    n = 6
    g = torch.Generator().manual_seed(1)
    x = torch.randint(20, 200, (n, 3, 64, 64), dtype=torch.uint8, generator=g)
    masks = torch.stack([m[0, :64, :64] for m in _masks([(64, 64)] * n)])
    boxes, valid = _boxes([(64, 64)] * n)
    return DeviceCache(x, torch.arange(n) % 3, targets={"masks": masks, "boxes": boxes,
                                                          "box_valid": valid})


def _loader_outputs(cache, crop, augment, epoch, seed):
    """Per cache row: (image, targets) as a keyed training loop got them at ``epoch``."""
    loader = DeviceLoader(cache, 4, seed=seed, return_keys=True, crop=crop, prefetch=0)
    loader.set_epoch(epoch)
    augment.train()
    out = {}
    order = loader.indices(epoch).tolist()
    rows = iter(order)
    with torch.no_grad():
        for x, y, k in loader:
            targets = {key: v for key, v in y.items() if key != "labels"} \
                if isinstance(y, dict) else {}
            if targets:
                x, targets = augment.with_targets(x, targets, k)
            else:
                x = augment(x, k)
            for j in range(x.shape[0]):
                out[next(rows)] = (x[j], {key: v[j] for key, v in targets.items()})
    return out


CROPS = {  # the ragged loader on main refuses a warp before the crop when boxes are stored
    "jpeg": lambda: Augment(RandomRotation(20), RandomResizedCrop(32)),
    "masks": lambda: Augment(RandomRotation(20), RandomResizedCrop(32)),
    "boxes": lambda: RandomResizedCrop(32, scale=(0.5, 1.0)),
}


@pytest.mark.parametrize("path", ["per_image", "batched"])
@pytest.mark.parametrize("kind", sorted(CROPS))
def test_replay_equals_what_the_loader_yields_on_a_ragged_cache(kind, path, monkeypatch):
    if path == "batched":  # the GPU / compiled kernels, whose canvas is the padded batch:
        # replay pads a few rows to their largest, the loader a batch to its own
        import batchaug.functional._sized

        monkeypatch.setattr(batchaug.functional._sized, "eager_cpu", lambda x: False)
    cache = _ragged_cache(kind)
    crop = CROPS[kind]()
    augment = Augment(RandomHorizontalFlip(), ColorJitter(0.4, 0.4), RandomRotation(10),
                      Normalize([0.5] * 3, [0.25] * 3))
    index = [4, 0, 3]
    r = replay((crop, augment), cache, index, epochs=[1, 3], seed=7)
    assert r.images.shape == (3, 3, 70, 70) and r.targets["sizes"].tolist() == [
        list(SIZES[i]) for i in index]
    for j, i in enumerate(index):  # the stored image, at its own size, padded with zeros
        h, w = SIZES[i]
        assert torch.equal(r.images[j, :, :h, :w], cache.image(i))
        assert not r.images[j, :, h:].any() and not r.images[j, :, :, w:].any()
    for column, epoch in enumerate([1, 3]):
        trained = _loader_outputs(cache, CROPS[kind](), augment, epoch, seed=7)
        out, moved = r.columns[column]
        assert out.shape == (3, 3, 32, 32) and "sizes" not in moved
        for j, i in enumerate(index):
            assert torch.equal(out[j], trained[i][0]), (kind, epoch, i)
            assert sorted(moved) == sorted(trained[i][1]), kind
            for key in moved:
                assert torch.equal(moved[key][j], trained[i][1][key]), (kind, key, epoch, i)
    # another epoch draws differently (the keys reach the crop and the augment)
    other = replay((crop, augment), cache, index, epochs=[2], seed=7).columns[0][0]
    assert not torch.equal(other, r.columns[0][0])


def test_replay_equals_the_loader_on_a_fixed_cache_with_masks_and_boxes():
    cache = _fixed_cache()
    crop = Augment(RandomResizedCrop(40), RandomHorizontalFlip())
    augment = Augment(RandomRotation(15), ColorJitter(0.3))
    r = replay((crop, augment), cache, [5, 1, 2], epochs=[0], seed=3)
    trained = _loader_outputs(cache, crop, augment, 0, seed=3)
    out, moved = r.columns[0]
    assert {"masks", "boxes", "box_valid"} <= set(moved) and "sizes" not in moved
    assert r.targets["sizes"].tolist() == [[64, 64]] * 3  # as the loader hands them to the crop
    for j, i in enumerate([5, 1, 2]):
        assert torch.equal(out[j], trained[i][0]), i
        for key in moved:
            assert torch.equal(moved[key][j], trained[i][1][key]), (key, i)


def test_a_migration_and_an_augment_alone_replay_like_their_parts():
    import torchvision.transforms.v2 as T

    with pytest.warns(UserWarning, match="eval"):  # its eval() box, not our subject here
        migration = batchaug.from_torchvision([T.RandomResizedCrop(32),
                                               T.RandomHorizontalFlip(), T.ColorJitter(0.4)])
    assert migration.crop is not None
    cache = _ragged_cache("jpeg")
    a = replay(migration, cache, [1, 2], epochs=[4])
    b = replay((migration.crop, migration.augment), cache, [1, 2], epochs=[4])
    assert torch.equal(a.columns[0][0], b.columns[0][0])
    # an Augment alone on a ragged cache: it takes the sizes itself (its RandomResizedCrop
    # fixes the size) ...
    imagenet = batchaug.recipes.imagenet(24)
    out = replay(imagenet, cache, [1, 2], epochs=[4]).columns[0][0]
    assert out.shape == (2, 3, 24, 24)
    # ... or, never fixing it, stays ragged: each output keeps its image's size
    out, moved = replay(Augment(RandomHorizontalFlip(1.0)), cache, [1, 2], epochs=[0]).columns[0]
    assert moved["sizes"].tolist() == [list(SIZES[1]), list(SIZES[2])]
    h, w = SIZES[1]
    assert torch.equal(out[0, :, :h, :w], cache.image(1).flip(-1))


def _png(path):
    return torch.from_numpy(np.asarray(Image.open(path)).copy()).permute(2, 0, 1)


def _as_png(x, norm=None):
    return (_displayable(x.unsqueeze(0), norm)[0] * 255).round().to(torch.uint8)


@pytest.fixture
def pipeline_file(tmp_path):
    path = tmp_path / "train_pipeline.py"
    path.write_text(
        "from batchaug import Augment, RandomHorizontalFlip, RandomResizedCrop, RandomRotation\n"
        "from batchaug import ColorJitter, Normalize\n"
        "crop = Augment(RandomRotation(20), RandomResizedCrop(32))\n"
        "augment = Augment(RandomHorizontalFlip(), ColorJitter(0.4, 0.4),\n"
        "                  Normalize([0.5] * 3, [0.25] * 3))\n"
        "pipeline = (crop, augment)\n"
        "ragged_ok = Augment(RandomHorizontalFlip(), Normalize([0.5] * 3, [0.25] * 3))\n"
        "def make():\n"
        "    return pipeline\n"
        "broken = 3\n")
    return path


@pytest.mark.parametrize("kind", ["jpeg", "masks"])
def test_the_command_draws_the_stored_photos_at_their_own_size_then_the_loaders_crops(
        tmp_path, capsys, pipeline_file, monkeypatch, kind):
    _ragged_cache(kind).save(tmp_path / "cache")
    out = tmp_path / "g.png"
    index = [4, 0, 3]
    monkeypatch.chdir(tmp_path)  # module:attr imports from the current directory
    for spec in ("train_pipeline:pipeline", f"{pipeline_file}:make"):
        assert main(["show", str(tmp_path / "cache"), "--pipeline", spec, "--out", str(out),
                     "--index", *map(str, index), "--epoch", "1", "3", "--seed", "7"]) == 0
        text = capsys.readouterr().out
        assert f"pipeline {spec}, at epochs [1, 3] of a run with seed 7" in text, text
        assert ("with its masks drawn" in text) == (kind == "masks")
    crop, augment = load_pipeline(f"{pipeline_file}:pipeline")
    cache = DeviceCache.load(tmp_path / "cache", device="cpu")
    r = replay((crop, augment), cache, index, epochs=[1, 3], seed=7)
    picture = _png(out)
    rows, cols = cell_labels(index, [i % 3 for i in index], ["a", "b", "c"], [1, 3], 0)
    scale = 32 / 70  # the largest stored side (70) fits the 32 px crops
    for row, i in enumerate(index):
        # the original: the stored photo, not squared, scaled by the same factor as the others
        h, w = round(SIZES[i][0] * scale), round(SIZES[i][1] * scale)
        top, left = cell_origin(row, 0, 32, 32, 3, rows, cols)
        cell = picture[:, top:top + 32, left:left + 32]
        drawn = (cell != 255).any(0)
        ys, xs = drawn.any(1).nonzero(), drawn.any(0).nonzero()
        assert (int(ys[-1] - ys[0]) + 1, int(xs[-1] - xs[0]) + 1) == (h, w), i
        if kind == "jpeg":  # no targets: the picture is the stored image, resized
            small = torch.nn.functional.interpolate(
                cache.image(i).unsqueeze(0).float() / 255, size=(h, w), mode="bilinear",
                antialias=True, align_corners=False)
            expected = (small[0].clamp(0, 1) * 255).round().to(torch.uint8)
            t, l = (32 - h) // 2, (32 - w) // 2
            assert torch.equal(cell[:, t:t + h, l:l + w], expected), i
        for col in (1, 2):  # the loader's crops, drawn as replay returned them
            top, left = cell_origin(row, col, 32, 32, 3, rows, cols)
            out_j = r.columns[col - 1][0][row]
            cell = picture[:, top:top + 32, left:left + 32]
            if kind == "jpeg":
                assert torch.equal(cell, _as_png(out_j, _last_normalize(augment))), (i, col)
            else:  # the mask overlay changes exactly the masks' labelled pixels
                plain = _as_png(out_j, _last_normalize(augment))
                mask = r.columns[col - 1][1]["masks"][row]
                assert torch.equal((cell != plain).any(0), mask != 0), (i, col)


def test_the_command_draws_a_ragged_caches_boxes_at_their_own_size(tmp_path, capsys):
    _ragged_cache("boxes").save(tmp_path / "cache")
    out, plain = tmp_path / "g.png", tmp_path / "p.png"
    for path, extra in ((out, []), (plain, ["--no-targets"])):
        assert main(["show", str(tmp_path / "cache"), "--recipe", "imagenet", "--crop", "70",
                     "--size", "64", "--out", str(path), "--index", "2", "--draws", "1",
                     *extra]) == 0
    assert "with its boxes drawn" in capsys.readouterr().out
    diff = (_png(out) != _png(plain)).any(0)
    rows, cols = ["#2 c"], ["original", "draw 1"]
    # cells are 64 px (the recipe's output; the 52x52 photo is not scaled up)
    top, left = cell_origin(0, 0, 64, 64, 2, rows, cols)
    h, w = SIZES[2]
    boxes, _ = _boxes()
    edge = torch.zeros(64, 64, dtype=torch.bool)  # the two valid boxes' 1 px outlines
    for x0, y0, x1, y1 in boxes[2, :2].tolist():
        a, b = int(np.floor(y0)) + (64 - h) // 2, int(np.ceil(y1)) - 1 + (64 - h) // 2
        c, d = int(np.floor(x0)) + (64 - w) // 2, int(np.ceil(x1)) - 1 + (64 - w) // 2
        outline = torch.zeros(64, 64, dtype=torch.bool)
        outline[a:b + 1, c:d + 1] = True
        outline[a + 1:b, c + 1:d] = False
        edge |= outline
    assert torch.equal(diff[top:top + 64, left:left + 64], edge)
    top, left = cell_origin(0, 1, 64, 64, 2, rows, cols)
    assert diff[top:top + 64, left:left + 64].any()  # moved with the crop and drawn there


def test_show_in_python_on_a_cache_directory(tmp_path):
    _ragged_cache("masks").save(tmp_path / "cache")
    path = batchaug.show((CROPS["masks"](), Augment(RandomHorizontalFlip())), tmp_path / "cache",
                         tmp_path / "g.png", index=[1, 5], epochs=[0, 2, 4])
    w, h = Image.open(path).size
    assert w > 4 * 32 and h > 2 * 32
    with pytest.raises(ValueError, match="give epochs"):
        batchaug.show(RandomHorizontalFlip(), tmp_path / "cache", tmp_path / "x.png",
                      keys=torch.zeros(2, dtype=torch.int64))
    with pytest.raises(TypeError, match="pipeline must be a Migration"):
        batchaug.show(42, tmp_path / "cache", tmp_path / "x.png")
    with pytest.raises(ValueError, match="index 9 is out of range"):
        batchaug.show(RandomHorizontalFlip(), tmp_path / "cache", tmp_path / "x.png", index=[9])
    with pytest.raises(ValueError, match=r"the cache's own masks and boxes \(None\) or nothing"):
        batchaug.show(RandomHorizontalFlip(), tmp_path / "cache", tmp_path / "x.png",
                      targets={"masks": torch.zeros(1, 4, 4)})
    with pytest.raises(ValueError, match="give keys=batchaug.sample_keys"):
        batchaug.show(RandomHorizontalFlip(), torch.zeros(2, 3, 8, 8), tmp_path / "x.png",
                      epochs=[1])
    # targets={}: the images only; the masks make the only difference
    plain = batchaug.show(RandomHorizontalFlip(), tmp_path / "cache", tmp_path / "p.png",
                          index=[1, 5], epochs=[0], targets={})
    drawn = batchaug.show(RandomHorizontalFlip(), tmp_path / "cache", tmp_path / "d.png",
                          index=[1, 5], epochs=[0])
    diff = (_png(plain) != _png(drawn)).any(0)
    assert 0 < int(diff.sum()) < diff.numel() // 4


def test_split_pipeline_names_the_argument_and_what_it_takes():
    flip = RandomHorizontalFlip()
    crop, augment = split_pipeline((RandomResizedCrop(8), flip))
    assert isinstance(crop, Augment) and augment is flip
    assert split_pipeline(flip) == (None, flip)
    assert split_pipeline([None, flip]) == (None, flip)
    model = batchaug.AugmentedModel(Augment(flip), torch.nn.Flatten())
    assert split_pipeline(model) == (None, model.augment)  # its first layer, not the model
    recipe = batchaug.recipes.resnet50_v2(num_classes=10)  # (augment, mix, eval_augment)
    assert split_pipeline(recipe) == (None, recipe.augment)
    with pytest.raises(TypeError, match=r"pipeline must be a Migration .*, a \(crop, augment\) "
                                        r"pair or an Augment, got a tuple of 3"):
        split_pipeline((flip, flip, flip))
    with pytest.raises(TypeError, match="the crop must be a transform module"):
        split_pipeline(("crop", flip))
    with pytest.raises(TypeError, match="the augment must be a module"):
        split_pipeline((flip, "augment"))


@pytest.mark.parametrize("spec, message", [
    ("train_pipeline", "--pipeline 'train_pipeline': expected MODULE:ATTRIBUTE"),
    ("train_pipeline:", "--pipeline 'train_pipeline:': expected MODULE:ATTRIBUTE"),
    (":pipeline", "--pipeline ':pipeline': expected MODULE:ATTRIBUTE"),
    ("no_such_module_xyz:pipeline", "--pipeline no_such_module_xyz:pipeline: no module named "
                                    "'no_such_module_xyz'"),
    ("train_pipeline:nope", "--pipeline train_pipeline:nope: train_pipeline has no attribute "
                            "'nope'"),
    ("train_pipeline:broken", "--pipeline train_pipeline:broken must be a Migration"),
    ("missing.py:pipeline", "--pipeline missing.py:pipeline: no file missing.py"),
    ("bad.py:x", "--pipeline bad.py:x: importing bad.py failed (SyntaxError"),
])
def test_bad_pipeline_strings_are_one_line_errors_naming_the_flag(
        tmp_path, capsys, pipeline_file, monkeypatch, spec, message):
    (tmp_path / "bad.py").write_text("x = (\n")
    _fixed_cache().save(tmp_path / "cache")
    monkeypatch.chdir(tmp_path)
    assert main(["show", str(tmp_path / "cache"), "--pipeline", spec]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"batchaug: error: {message}"), err


def test_pipeline_flags_that_do_not_go_together(tmp_path, capsys, pipeline_file, monkeypatch):
    _ragged_cache("jpeg").save(tmp_path / "cache")
    monkeypatch.chdir(tmp_path)
    cache = str(tmp_path / "cache")
    assert main(["show", cache, "--pipeline", "train_pipeline:pipeline", "--size", "8"]) == 2
    assert "--size applies to --recipe only" in capsys.readouterr().err
    assert main(["show", cache, "--pipeline", "train_pipeline:pipeline", "--recipe",
                 "imagenet"]) == 2
    assert "not allowed with argument" in capsys.readouterr().err
    # an augment that cannot run on photos of different sizes, without a crop: say so
    assert main(["show", cache, "--pipeline", "train_pipeline:ragged_ok"]) == 0  # ragged out
    capsys.readouterr()
    assert main(["show", cache, "--pipeline", "train_pipeline:augment"]) == 2  # ColorJitter
    err = capsys.readouterr().err
    assert "give it a crop that fixes the size" in err and err.count("\n") == 1, err


def test_the_docs_replay_example_runs():
    import re
    from pathlib import Path

    import torchvision.transforms.v2 as T

    page = (Path(__file__).resolve().parents[2] / "docs" / "augmentation.md").read_text()
    block = next(b for b in re.findall(r"```python\n(.*?)```", page, flags=re.S)
                 if "replay(" in b)
    with pytest.warns(UserWarning, match="eval"):
        migration = batchaug.from_torchvision([T.RandomResizedCrop(24),
                                               T.RandomHorizontalFlip()])
    cache = DeviceCache(RaggedImages.from_list(_photos(SIZES * 3)), torch.zeros(18).long())
    namespace = {"migration": migration, "cache": cache}
    exec(block, namespace)
    assert namespace["images"].shape == (2, 3, 24, 24) and namespace["targets"] == {}


def test_a_pipeline_file_may_import_its_neighbours(tmp_path, capsys):
    (tmp_path / "helpers_for_show.py").write_text(
        "from batchaug import RandomResizedCrop\nCROP = RandomResizedCrop(16)\n")
    sub = tmp_path / "project"
    sub.mkdir()
    (sub / "train_dc.py").write_text(
        "import sys, dataclasses\n"
        f"sys.path.insert(0, {str(tmp_path)!r})\n"
        "from helpers_for_show import CROP\n"
        "from batchaug import Augment, RandomHorizontalFlip\n"
        "@dataclasses.dataclass\n"
        "class Config:\n"
        "    p: float = 0.5\n"
        "pipeline = (CROP, Augment(RandomHorizontalFlip(Config().p)))\n")
    (sub / "sibling.py").write_text("from batchaug import RandomHorizontalFlip as F\n")
    (sub / "uses_sibling.py").write_text("from sibling import F\naugment = F()\n")
    _ragged_cache("jpeg").save(tmp_path / "cache")
    for spec in (f"{sub / 'train_dc.py'}:pipeline", f"{sub / 'uses_sibling.py'}:augment"):
        crop, augment = load_pipeline(spec)
        assert isinstance(augment, torch.nn.Module)
    assert main(["show", str(tmp_path / "cache"), "--pipeline", f"{sub / 'train_dc.py'}:pipeline",
                 "--out", str(tmp_path / "g.png"), "--n", "2", "--epoch", "0"]) == 0


def test_the_command_on_a_fixed_cache_draws_masks_and_boxes_where_the_loader_moved_them(
        tmp_path, capsys, monkeypatch):
    from batchaug.picture import draw_targets

    _fixed_cache().save(tmp_path / "cache")
    (tmp_path / "det.py").write_text(
        "from batchaug import Augment, RandomHorizontalFlip, RandomResizedCrop, RandomRotation\n"
        "pipeline = (Augment(RandomResizedCrop(64), RandomHorizontalFlip()),\n"
        "            Augment(RandomRotation(15)))\n")
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "g.png"
    assert main(["show", str(tmp_path / "cache"), "--pipeline", "det:pipeline", "--out", str(out),
                 "--index", "5", "1", "--epoch", "2", "--seed", "3"]) == 0
    assert "with its masks drawn, with its boxes drawn" in capsys.readouterr().out
    cache = DeviceCache.load(tmp_path / "cache", device="cpu")
    crop, augment = load_pipeline("det:pipeline")
    r = replay((crop, augment), cache, [5, 1], epochs=[2], seed=3)
    trained = _loader_outputs(cache, crop, augment, 2, seed=3)
    picture = _png(out)
    rows, cols = cell_labels([5, 1], [2, 1], None, [2], 0)
    for row, i in enumerate([5, 1]):  # 64 px crops of 64 px images: no scaling
        stored = {k: v[row:row + 1] for k, v in r.targets.items() if k != "sizes"}
        original = draw_targets(_displayable(r.images[row:row + 1], None), stored)[0]
        top, left = cell_origin(row, 0, 64, 64, 2, rows, cols)
        assert torch.equal(picture[:, top:top + 64, left:left + 64],
                           (original * 255).round().to(torch.uint8)), i
        image, moved = trained[i]  # what training got, drawn: the picture's cell
        cell = draw_targets(_displayable(image.unsqueeze(0), None),
                            {k: v.unsqueeze(0) for k, v in moved.items()}, thickness=1,
                            radius=1)[0]
        top, left = cell_origin(row, 1, 64, 64, 2, rows, cols)
        assert torch.equal(picture[:, top:top + 64, left:left + 64],
                           (cell * 255).round().to(torch.uint8)), i


def test_replay_restores_the_augments_mode_and_refuses_the_row_past_the_end():
    """Issue 35: the augment runs in train mode and is left as it was (eval stays eval, train
    stays train, also when the replay fails); index == len(cache) is a ValueError naming it."""
    cache = _ragged_cache("jpeg")
    crop = CROPS["jpeg"]()
    for mode in (False, True):
        augment = Augment(RandomHorizontalFlip(), ColorJitter(0.4)).train(mode)
        replay((crop, augment), cache, [0, 1], epochs=[0])
        assert augment.training is mode and all(m.training is mode for m in augment.modules())
        with pytest.raises(ValueError, match=f"index {len(cache)} is out of range: the cache "
                                             f"holds {len(cache)} images"):
            replay((crop, augment), cache, [0, len(cache)], epochs=[0])
        assert augment.training is mode
    with pytest.raises(ValueError, match="index -1 is out of range"):
        replay((crop, augment), cache, [-1], epochs=[0])


SEED_SCRIPT = '''import torch
import torchvision.transforms as T
import batchaug

train_transforms = T.Compose([T.RandomRotation(30), T.RandomResizedCrop(32),
                              T.RandomHorizontalFlip(), T.ToTensor(),
                              T.Normalize([0.5, 0.5, 0.5], [0.5, 0.5, 0.5])])
migration = batchaug.from_torchvision(train_transforms)
epochs = 30
{training}
'''
TRAINING = {
    "loop": "for e in range(epochs):\n    open(MARKER, 'w').write('trained')\n",
    "call": "def train():\n    open(MARKER, 'w').write('trained')\ntrain()\n",
    "if": "if epochs:\n    for e in range(epochs):\n        open(MARKER, 'w').write('x')\n",
}


@pytest.mark.parametrize("kind", sorted(TRAINING))
def test_show_refuses_a_training_script_without_a_main_guard(tmp_path, capsys, monkeypatch,
                                                               kind):
    marker = tmp_path / "trained.txt"
    script = SEED_SCRIPT.format(training=TRAINING[kind]).replace("MARKER", repr(str(marker)))
    (tmp_path / "train_seed.py").write_text(script)
    _fixed_cache().save(tmp_path / "cache")
    monkeypatch.chdir(tmp_path)
    for spec in ("train_seed:migration", f"{tmp_path / 'train_seed.py'}:migration"):
        assert main(["show", str(tmp_path / "cache"), "--pipeline", spec,
                     "--out", str(tmp_path / "g.png")]) == 2
        err = capsys.readouterr().err
        assert "when imported (training?), so it is not imported" in err, err
        assert 'put the training under `if __name__ == "__main__":`' in err, err
        assert not marker.exists()
    assert "train_seed" not in sys.modules


def test_show_imports_a_guarded_training_script_without_training(tmp_path, capsys,
                                                                 monkeypatch):
    marker = tmp_path / "trained.txt"
    guarded = "if __name__ == '__main__':\n" + "".join(
        "    " + line + "\n" for line in TRAINING["loop"].splitlines())
    script = SEED_SCRIPT.format(training=guarded).replace("MARKER", repr(str(marker)))
    script = '"""The seed user\'s script, guarded."""\n' + script
    (tmp_path / "train_guarded.py").write_text(script)
    _ragged_cache("raw").save(tmp_path / "cache")
    monkeypatch.chdir(tmp_path)
    assert main(["show", str(tmp_path / "cache"), "--pipeline", "train_guarded.py:migration",
                 "--out", str(tmp_path / "g.png")]) == 0
    assert not marker.exists() and (tmp_path / "g.png").exists()
    capsys.readouterr()


def test_show_draws_the_deployed_evaluation_pipeline(tmp_path, capsys, monkeypatch):
    """`--pipeline train:migration.deploy` (or a DeployedModel): each stored photo, then the
    evaluation pipeline's output (Resize + CenterCrop of each photo at its own size)."""
    (tmp_path / "train_eval.py").write_text(
        "import torch\n"
        "import torchvision.transforms as T\n"
        "import batchaug\n"
        "train = T.Compose([T.RandomResizedCrop(32), T.ToTensor(), T.Normalize([0.5] * 3, "
        "[0.5] * 3)])\n"
        "test = T.Compose([T.Resize(36), T.CenterCrop(32), T.ToTensor(), "
        "T.Normalize([0.5] * 3, [0.5] * 3)])\n"
        "migration = batchaug.from_torchvision(train, test)\n"
        "deployed = batchaug.DeployedModel(migration.deploy, torch.nn.Identity())\n")
    _ragged_cache("raw").save(tmp_path / "cache")
    monkeypatch.chdir(tmp_path)
    for attr in ("migration.deploy", "deployed"):
        crop, augment = load_pipeline(f"train_eval:{attr}")
        assert crop is None
        assert [type(m).__name__ for m in augment] == ["Resize", "CenterCrop", "Normalize"]
        assert main(["show", str(tmp_path / "cache"), "--pipeline", f"train_eval:{attr}",
                     "--out", str(tmp_path / "g.png"), "--n", "3", "--draws", "1"]) == 0
    capsys.readouterr()
