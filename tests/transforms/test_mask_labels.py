"""The masks-as-image rule (``functional._targets.masks_as_image`` / ``image_as_masks``):
every geometric transform, dense and ragged (``targets["sizes"]``), on both implementations of
the ragged kernels (per image on an eager CPU batch, batched elsewhere), carries every label of
every integer dtype exactly, and any ``mask_fill`` the dtype holds. Reference: the same
transform (same keys, so the same draws) on small uint8 labels, mapped to the wide ids after."""
from unittest import mock

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import batchaug.functional._sized as S
from batchaug import (Augment, CenterCrop, Pad, RandomAffine, RandomCrop, RandomHorizontalFlip,
                      RandomPerspective, RandomResizedCrop, RandomRotation, RandomVerticalFlip,
                      Resize)
from batchaug.functional._targets import _index_image, image_as_masks, masks_as_image

SIZES = [[70, 90], [40, 64], [66, 33], [20, 20], [70, 12], [64, 80]]
N = len(SIZES)
KEYS = torch.arange(N) * 7919 + 5
LABELS = 6  # small labels 0..5; the fill is one of them

# each transform with mask_fill f (those without one fill with 0)
TRANSFORMS = {
    "hflip": lambda f: RandomHorizontalFlip(0.7),
    "vflip": lambda f: RandomVerticalFlip(0.7),
    "crop": lambda f: RandomCrop(50, padding=4, pad_if_needed=True, mask_fill=f),
    "crop_reflect": lambda f: RandomCrop(50, padding=(2, 5), pad_if_needed=True,
                                         padding_mode="reflect", mask_fill=f),
    "pad": lambda f: Pad([3, 1, 2, 4], mask_fill=f),
    "pad_edge": lambda f: Pad(2, padding_mode="edge", mask_fill=f),
    "center": lambda f: CenterCrop((60, 50)),
    "rrc": lambda f: RandomResizedCrop((32, 24)),
    "resize": lambda f: Resize((33, 41)),
    "rotation": lambda f: RandomRotation(30, mask_fill=f),
    "affine": lambda f: RandomAffine(20, translate=(0.1, 0.2), scale=(0.8, 1.2), shear=5,
                                     mask_fill=f),
    "perspective": lambda f: RandomPerspective(0.5, p=0.8, mask_fill=f),
    "resize_int_center": lambda f: Augment(Resize(30), CenterCrop(28)),
    "resize_int_crop": lambda f: Augment(Resize(30), RandomCrop(28, pad_if_needed=True,
                                                                mask_fill=f)),
    "rotation_rrc": lambda f: Augment(RandomRotation(30, mask_fill=f), RandomResizedCrop(32)),
}


def _table(dtype, g):
    """``LABELS`` distinct labels of ``dtype`` (label 0 is 0: the fill of transforms without a
    mask_fill), as wide as the dtype goes."""
    if dtype == torch.bool:
        return torch.tensor([False, True] + [True] * (LABELS - 2))
    if dtype == torch.uint8:
        rest = torch.randperm(255, generator=g)[:LABELS - 1] + 1
        return torch.cat((torch.zeros(1, dtype=torch.int64), rest)).to(torch.uint8)
    if dtype == torch.int32:
        return torch.tensor([0, 2 ** 31 - 1, -2 ** 31, 2 ** 24 + 1, -(2 ** 24) - 3, 16777217],
                            dtype=torch.int32)
    # int64: ids near 2**62 and the extremes, none of them a float64
    near = 2 ** 62 + torch.randint(0, 2 ** 20, (LABELS - 3,), generator=g) * 2 + 1
    return torch.cat((torch.tensor([0, 2 ** 63 - 1, -2 ** 63 + 1]), near))


@pytest.mark.parametrize("path", ["per_image", "batched"])
@settings(deadline=None)
@given(name=st.sampled_from(sorted(TRANSFORMS)),
       dtype=st.sampled_from([torch.int64, torch.uint8, torch.bool, torch.int32]),
       ragged=st.booleans(), channels=st.sampled_from([None, 2]),
       fill=st.integers(0, LABELS - 1), seed=st.integers(0, 2 ** 16))
def test_every_label_of_every_dtype_is_carried_exactly(path, name, dtype, ragged, channels,
                                                       fill, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (N, 3, 70, 90), generator=g, dtype=torch.uint8)
    shape = (N, 70, 90) if channels is None else (N, channels, 70, 90)
    table = _table(dtype, g)
    small = torch.randint(0, LABELS if dtype != torch.bool else 2, shape, generator=g,
                          dtype=torch.uint8)
    if dtype == torch.bool:
        fill = fill % 2
    wide = table[small.long()]
    extra = {"sizes": torch.tensor(SIZES)} if ragged else {}
    eager = S.eager_cpu if path == "per_image" else (lambda t: False)
    with mock.patch.object(S, "eager_cpu", eager):
        _, want = TRANSFORMS[name](fill).with_targets(x, dict(extra, masks=small), KEYS)
        _, got = TRANSFORMS[name](int(table[fill])).with_targets(x, dict(extra, masks=wide),
                                                                  KEYS)
    assert got["masks"].dtype == dtype and got["masks"].shape == want["masks"].shape
    # every pixel of each output image (a ragged output's padding is never read)
    sizes = S.sizes_of(want["masks"], want).tolist() if "sizes" in want else None
    for i in range(N):
        h, w = sizes[i] if sizes is not None else want["masks"].shape[-2:]
        expect = table[want["masks"][i, ..., :h, :w].long()]
        assert torch.equal(got["masks"][i, ..., :h, :w], expect), (name, i)


@pytest.mark.parametrize("name", ["crop", "pad", "rotation", "perspective", "resize"])
def test_scripted_ragged_int64_masks_are_exact(name):
    """The rule under TorchScript: the scripted ragged path gives the eager labels."""
    g = torch.Generator().manual_seed(1)
    x = torch.randint(0, 256, (N, 3, 70, 90), generator=g, dtype=torch.uint8)
    table = _table(torch.int64, g)
    masks = table[torch.randint(0, LABELS, (N, 70, 90), generator=g)]
    fill = int(table[2])
    module = TRANSFORMS[name](fill)
    targets = {"masks": masks, "sizes": torch.tensor(SIZES)}
    with mock.patch.object(S, "eager_cpu", lambda t: False):
        want = module.with_targets(x, targets, KEYS)[1]["masks"]
    got = torch.jit.script(module).with_targets(x, targets, KEYS)[1]["masks"]
    assert torch.equal(got, want)
    assert set(got.unique().tolist()) <= set(table.tolist())


def test_mask_fill_past_float64_is_taken_and_carried():
    """mask_fill was limited to 2**53 for pads and crops (their fill went through float64)."""
    fill = 2 ** 62 + 1
    masks = torch.full((2, 8, 8), 2 ** 62 + 3)
    for module in (Pad(2, mask_fill=fill), RandomCrop(8, padding=2, mask_fill=fill)):
        out = module.with_targets(torch.zeros(2, 3, 8, 8), {"masks": masks})[1]["masks"]
        assert set(out.unique().tolist()) == {fill, 2 ** 62 + 3}


@pytest.mark.parametrize("fill", [0, 7, -7])
def test_row_column_indices_pick_the_same_labels(fill):
    """From 2**24 pixels float32 cannot number them exactly: the rule's (row, column) pairs
    (forced here on small masks) give the labels the flat index gives."""
    g = torch.Generator().manual_seed(3)
    masks = torch.randint(-2 ** 62, 2 ** 62, (3, 2, 9, 11), generator=g)
    flat = masks_as_image(masks, fill)
    pairs = _index_image(masks, fill, torch.float32, 0)
    assert flat.shape[1] == 1 and pairs.shape[1] == 2

    def move(img):
        return torch.nn.functional.pad(img.flip(-1), [2, 1, 0, 3], value=float(fill))

    out = image_as_masks(move(flat), masks, fill)
    assert torch.equal(image_as_masks(move(pairs), masks, fill), out)
    assert torch.equal(out[:, :, :9, 2:13], masks.flip(-1)) and (out[:, :, 9:] == fill).all()


@pytest.mark.parametrize("name", ["crop", "rotation", "hflip", "rrc"])
def test_compiled_ragged_int64_masks_are_exact(name):
    """The rule under ``torch.compile(fullgraph=True)``: the batched ragged path's labels."""
    g = torch.Generator().manual_seed(2)
    x = torch.randint(0, 256, (N, 3, 70, 90), generator=g, dtype=torch.uint8)
    table = _table(torch.int64, g)
    masks = table[torch.randint(0, LABELS, (N, 70, 90), generator=g)]
    module = TRANSFORMS[name](int(table[1]))
    targets = {"masks": masks, "sizes": torch.tensor(SIZES)}
    with mock.patch.object(S, "eager_cpu", lambda t: False):
        want = module.with_targets(x, targets, KEYS)[1]["masks"]
        compiled = torch.compile(module.with_targets, fullgraph=True, backend="eager")
        got = compiled(x, targets, KEYS)[1]["masks"]
    assert torch.equal(got, want)
