"""Item 6 of issue 12: the bench's contenders do the same job on identical inputs.

One batch from each contender (the whole pool: pool size == batch size) has the same dtype,
shape and value range, and per-channel mean/std within sampling error of batchaug's; per-sample
contenders give distinct outputs for a batch of identical images, and the one that claims a
single draw per batch gives identical ones. The images are smooth (bicubic upsampled 4x4 noise)
so that interpolation details (PIL vs torch, align_corners) barely move the statistics.
"""
import pytest
import torch
import torch.nn.functional as F

from batchaug.bench import contenders as C

CPU = torch.device("cpu")
pytest.importorskip("kornia")
try:  # installed by `make test` (--no-deps, after torch); without it: listed as skipped
    import torchaug  # noqa: F401
    HAS_TORCHAUG = True
except ImportError:
    HAS_TORCHAUG = False


def smooth_images(n, hw, seed=0):
    g = torch.Generator().manual_seed(seed)
    low = torch.rand(n, 3, 4, 4, generator=g)
    up = F.interpolate(low, size=hw, mode="bicubic", align_corners=False).clamp(0, 1)
    return (up * 255).round().to(torch.uint8)


def first_batches(name, images):
    n = images.shape[0]
    hw = tuple(images.shape[-2:])
    recipe = C.make_recipe(name, 3, None if name in ("imagenet", "simclr") else hw)
    contenders, skipped = C.build_contenders(recipe, images, torch.arange(n), n, CPU,
                                             log=lambda s: None)
    # torchaug runs the recipes it can draw per sample; the others name why not
    assert [s["contender"] for s in skipped] == (
        [] if HAS_TORCHAUG and name in ("rotation", "imagenet") else ["torchaug"]), skipped
    out = {}
    for c in contenders:
        stream = c.open_stream()
        try:
            out[c.key] = next(stream)[0], c
        finally:
            stream.close()
    return recipe, out


RECIPES = [("cifar", (32, 32), 128), ("rotation", (32, 32), 128), ("imagenet", (256, 256), 64),
           ("color", (32, 32), 64), ("simclr", (256, 256), 24)]


@pytest.mark.parametrize("name, hw, n", RECIPES)
def test_same_job_on_identical_inputs(name, hw, n):
    recipe, batches = first_batches(name, smooth_images(n, hw))
    assert set(batches) >= {"torchvision_w0", "torchvision_v2_per_sample",
                            "torchvision_v2_batch", "kornia", "batchaug"}
    assert ("torchaug" in batches) == (HAS_TORCHAUG and name in ("rotation", "imagenet"))
    mean = torch.tensor(recipe.mean).view(1, 3, 1, 1)
    std = torch.tensor(recipe.std).view(1, 3, 1, 1)
    low, high = (0 - mean) / std, (1 - mean) / std
    ref = batches["batchaug"][0]
    for key, (x, c) in batches.items():
        assert x.dtype == torch.float32, key
        assert x.shape == (n, 3, *recipe.out_hw), key
        assert bool(((x >= low - 1e-4) & (x <= high + 1e-4)).all()), key
        # The normalised range is used, not a [0, 1] or [0, 255] one.
        assert float(x.min()) < 0 < float(x.max()), key
        if not c.per_sample:
            continue  # one draw for the whole batch: its batch mean is not an average of draws
        for stat in (lambda t: t.mean((2, 3)), lambda t: t.std((2, 3))):
            a, b = stat(x), stat(ref)  # (n, 3): one value per image and channel
            se = (a.var(0) / n + b.var(0) / n).sqrt()
            z = (a.mean(0) - b.mean(0)).abs() / se
            assert bool((z < 5).all()), (key, z)


# (simclr: its crop is imagenet's and its colour the color recipe's; 224-pixel blur per sample
# in four pipelines would cost ~12 s here)
@pytest.mark.parametrize("name, hw, n", [(r, hw, 64) for r, hw, _ in RECIPES if r != "simclr"])
def test_per_sample_means_per_sample(name, hw, n):
    one = smooth_images(1, hw)
    recipe, batches = first_batches(name, one.expand(n, -1, -1, -1).contiguous())
    for key, (x, c) in batches.items():
        distinct = torch.unique(x.flatten(1), dim=0).shape[0]
        if c.per_sample:
            # cifar: 9 x 9 offsets x 2 flips, ~53 distinct of 64 expected; rotation and resized
            # crop draw continuously (a few angles may round to the same uint8 image). A
            # transform applied with p=0.5 (kornia's default) leaves ~half the batch identical.
            assert distinct > (0.65 * n if name == "cifar" else n - 8), (key, distinct)
        else:
            assert distinct == 1, (key, distinct)


@pytest.mark.parametrize("name, data_hw, preset", [
    ("cifar", None, "cifar10"), ("cifar", (32, 32), "cifar10"), ("imagenet", None, "imagenet"),
    ("imagenet", (300, 320), "imagenet"), ("color", None, "color"),
    ("color224", None, "color"), ("color", (64, 64), "color"), ("simclr", None, "simclr")])
def test_batchaug_contender_is_the_registry_preset(name, data_hw, preset):
    """The bench's batchaug contender is the preset of ``batchaug.recipes`` (the colour preset
    with the recipe's Normalize appended: every contender normalises), and the bench's own
    description of the recipe (what the other contenders are built from) builds the same."""
    import batchaug as B
    from batchaug import recipes

    recipe = C.make_recipe(name, 3, data_hw)
    want = recipes.get(preset, recipe.out_hw[0])
    if recipe.kind == "color":
        want = B.Augment(*want, B.Normalize(recipe.mean, recipe.std))
    assert repr(C.preset_augment(recipe)) == repr(want)
    assert repr(C.batchaug_augment(recipe)) == repr(want)
    assert repr(C._batchaug_explicit(recipe)) == repr(want)


@pytest.mark.parametrize("name, channels, data_hw", [
    ("rotation", 3, None), ("cifar", 3, (64, 64)), ("cifar", 1, (32, 32)),
    ("cifar", 3, (32, 40)), ("color", 3, (40, 48))])
def test_bench_recipes_without_a_preset_build_their_own(name, channels, data_hw):
    # no preset (rotation), or the preset would differ: padding 8 at 64 px (the bench pads 4),
    # non-RGB normalisation, non-square data
    recipe = C.make_recipe(name, channels, data_hw)
    assert C.preset_augment(recipe) is None
    assert repr(C.batchaug_augment(recipe)) == repr(C._batchaug_explicit(recipe))
    assert "padding=[4, 4, 4, 4]" in repr(C.batchaug_augment(recipe)) or name != "cifar"
