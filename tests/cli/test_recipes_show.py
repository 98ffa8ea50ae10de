"""batchaug.recipes presets, batchaug.show's PNG grid and the `batchaug show` command."""
from __future__ import annotations

import pytest
import torch
from PIL import Image

import batchaug
from batchaug import recipes
from batchaug.cli import main


@pytest.mark.parametrize("name", recipes.names())
def test_every_recipe_runs_scripts_and_has_a_docstring(name):
    size = 32 if name in ("cifar10", "color") else 24
    aug = recipes.get(name, size=size)
    assert recipes.RECIPES[name].__doc__
    x = torch.randint(0, 256, (5, 3, 40, 40), dtype=torch.uint8)
    if name in ("cifar10", "color"):
        x = x[:, :, :32, :32].contiguous()
    y = aug(x)
    assert y.shape[0] == 5 and y.shape[2:] == (size, size)
    assert torch.jit.script(aug)(x).shape == y.shape
    with pytest.raises(ValueError, match="recipe must be one of"):
        recipes.get("nope")


def test_show_writes_a_grid_with_the_originals_first(tmp_path):
    x = torch.randint(0, 256, (3, 3, 32, 32), dtype=torch.uint8)
    aug = recipes.cifar10()
    aug.eval()
    path = batchaug.show(aug, x, tmp_path / "grid.png", draws=2, seed=0, pad=2)
    assert not aug.training  # mode restored
    img = torch.from_numpy(__import__("numpy").array(Image.open(path)))
    assert img.shape == (3 * 34 + 2, 3 * 34 + 2, 3)
    # the first column is the original image, exactly
    assert torch.equal(img[2:34, 2:34], x[0].permute(1, 2, 0))
    # Normalize is undone: augmented cells hold image-like values, not a normalised mess
    cell = img[2:34, 36:68].float()
    assert cell.mean() > 60 and cell.std() > 40


def test_show_from_cache_on_the_command_line(tmp_path, capsys):
    from batchaug.data import DeviceCache

    x = torch.randint(0, 256, (10, 3, 24, 24), dtype=torch.uint8)
    DeviceCache(x, torch.zeros(10, dtype=torch.int64)).save(tmp_path / "cache")
    out = tmp_path / "g.png"
    assert main(["show", str(tmp_path / "cache"), "--out", str(out), "--recipe", "simclr",
                 "--n", "4", "--draws", "3", "--seed", "1"]) == 0
    w, h = Image.open(out).size  # 4 cells of 24 + 2 px, plus the label band and column
    assert w > 4 * 26 + 2 and h > 4 * 26 + 2
    assert "wrote" in capsys.readouterr().out
    assert main(["show", str(tmp_path / "missing"), "--out", str(out)]) == 2


@pytest.fixture
def labelled_cache(tmp_path):
    from batchaug.data import DeviceCache

    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (10, 3, 24, 24), dtype=torch.uint8, generator=g)
    labels = torch.tensor([2, 0, 1, 1, 0, 2, 2, 1, 0, 0])
    DeviceCache(x, labels, classes=["cat", "dog", "plane"]).save(tmp_path / "cache")
    return tmp_path / "cache"


def test_show_offers_every_recipe_of_the_registry_at_any_size(labelled_cache, tmp_path,
                                                               monkeypatch, capsys):
    import batchaug.pipeline as pipeline

    seen = []
    real = pipeline.replay

    def spy(*args, **kwargs):  # the size of what show draws in the augmented columns
        r = real(*args, **kwargs)
        seen.append(r.columns[0][0].shape[-2:])
        return r

    monkeypatch.setattr(pipeline, "replay", spy)
    for name in recipes.names():  # resnet50_v2 and deit included
        out = tmp_path / f"{name}.png"
        assert main(["show", str(labelled_cache), "--out", str(out), "--recipe", name,
                     "--size", "16", "--n", "2", "--draws", "1"]) == 0, name
        assert out.exists()
    expected = [torch.Size([16, 16]) if n != "color" else torch.Size([24, 24])
                for n in recipes.names()]  # color keeps the image size (no crop)
    assert seen == expected
    capsys.readouterr()
    assert main(["show", str(labelled_cache), "--out", str(tmp_path / "x.png"), "--recipe",
                 "cifar10", "--size", "64"]) == 2
    assert "--size must be at most the images' shorter side (24 px here)" in (
        capsys.readouterr().err)


def test_show_labels_rows_with_index_and_class_and_columns_with_epochs(labelled_cache, tmp_path,
                                                                       capsys):
    out = tmp_path / "g.png"
    assert main(["show", str(labelled_cache), "--out", str(out), "--recipe", "cifar10",
                 "--index", "0", "3", "9", "--epoch", "0", "5"]) == 0
    text = capsys.readouterr().out
    assert "rows: #0 plane, #3 dog, #9 cat" in text, text
    rows, cols = batchaug.picture.cell_labels([0, 3], [2, 1], ["cat", "dog", "plane"], [0, 5], 4)
    assert rows == ["#0 plane", "#3 dog"] and cols == ["original", "epoch 0", "epoch 5"]
    assert batchaug.picture.cell_labels([4], [7], None, None, 2) == (
        ["#4 label 7"], ["original", "draw 1", "draw 2"])


def test_show_draws_the_labels_beside_and_above_the_cells(tmp_path):
    import numpy as np

    x = torch.full((2, 3, 32, 32), 255, dtype=torch.uint8)  # white cells: only text is dark
    aug = recipes.color()
    plain = np.array(Image.open(batchaug.show(aug, x, tmp_path / "a.png", draws=1, seed=0)))
    labelled = np.array(Image.open(batchaug.show(
        aug, x, tmp_path / "b.png", draws=1, seed=0, row_labels=["#0 cat", "#1 dog"],
        column_labels=["original", "epoch 0"])))
    assert labelled.shape[0] > plain.shape[0] and labelled.shape[1] > plain.shape[1]
    left = labelled.shape[1] - plain.shape[1]
    band_top = labelled.shape[0] - plain.shape[0]
    assert (labelled[band_top:, :left] < 128).any()  # row labels drawn in the left band
    assert (labelled[:band_top, left:] < 128).any()  # column labels drawn in the top band
    with pytest.raises(ValueError, match="row_labels must be a sequence of 2 strings"):
        batchaug.show(aug, x, tmp_path / "c.png", row_labels=["#0 cat"])


@pytest.mark.parametrize("where", ["directory", "/dev/full"])
def test_show_output_errors_are_one_line(labelled_cache, tmp_path, capsys, where):
    import os

    if where == "/dev/full" and not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full on this system")
    out = str(tmp_path) if where == "directory" else where
    assert main(["show", str(labelled_cache), "--out", out, "--n", "2"]) != 0
    err = capsys.readouterr().err
    reason = "Is a directory" if where == "directory" else "No space left on device"
    assert err.count("\n") == 1 and err.startswith(f"batchaug: error: --out {out}: cannot "
                                                    f"write the PNG there ({reason})"), err


def test_show_index_past_the_end_is_a_one_line_error(labelled_cache, tmp_path, capsys):
    """--index equal to the cache's length (issue 35): refused by name, not an IndexError."""
    from batchaug.data import DeviceCache

    n = len(DeviceCache.load(labelled_cache))
    for bad in (n, n + 3):
        assert main(["show", str(labelled_cache), "--out", str(tmp_path / "x.png"), "--recipe",
                     "cifar10", "--index", "0", str(bad)]) == 2
        assert f"--index {bad} is out of range: the cache holds {n} images" in (
            capsys.readouterr().err)
    assert main(["show", str(labelled_cache), "--out", str(tmp_path / "x.png"), "--recipe",
                 "cifar10", "--index", "0", str(n - 1)]) == 0
