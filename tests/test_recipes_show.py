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
    assert Image.open(out).size == (4 * 26 + 2, 4 * 26 + 2)
    assert "wrote" in capsys.readouterr().out
    assert main(["show", str(tmp_path / "missing"), "--out", str(out)]) == 2
