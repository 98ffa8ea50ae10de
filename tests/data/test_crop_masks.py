"""The loader's crop (an ``Augment``'s ``with_targets`` with ``targets["sizes"]``) moves masks with
exactly each image's per-sample crop."""
import pytest
import torch

import batchaug.functional._sized as S
from batchaug import (Augment, CenterCrop, RandomAffine, RandomCrop, RandomHorizontalFlip,
                      RandomPerspective, RandomResizedCrop, RandomRotation, RandomVerticalFlip,
                      Resize)
from tests.data.loader_crop import LoaderCrop as Crop

SIZES = [(30, 41), (37, 26), (18, 18), (45, 23), (12, 33)]


def _crops(nearest):
    """Crops of every kind of step; ``nearest``: the same with nearest and no antialiasing (an
    image made from the mask goes through it exactly as the mask)."""
    ip = "nearest" if nearest else "bilinear"
    aa = {"antialias": False} if nearest else {}
    return [
        RandomResizedCrop(9, interpolation=ip, **aa),
        Augment(RandomHorizontalFlip(), RandomVerticalFlip(), RandomResizedCrop((8, 11),
                                                                            interpolation=ip,
                                                                            **aa)),
        Augment(RandomRotation(40, interpolation=ip), RandomResizedCrop(10, interpolation=ip,
                                                                          **aa)),
        Augment(RandomAffine(20, translate=(0.1, 0.2), scale=(0.8, 1.2), shear=10,
                             interpolation=ip), CenterCrop(14)),
        Augment(RandomPerspective(0.5, p=1.0, interpolation=ip), Resize((12, 9),
                                                                        interpolation=ip,
                                                                        **aa)),
        Augment(Resize(16, interpolation=ip, **aa), RandomCrop(15, pad_if_needed=True,
                                                              fill=0 if nearest else 7)),
        Augment(RandomRotation(25, interpolation=ip, fill=0 if nearest else 9),
                RandomCrop(35, pad_if_needed=True, padding_mode="reflect")),
        Augment(Resize(20, interpolation=ip, **aa), CenterCrop(24)),
        RandomCrop(28, pad_if_needed=True, padding=2),
    ]


def _batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    hm, wm = max(h for h, _ in SIZES), max(w for _, w in SIZES)
    masks = torch.randint(1, 7, (len(SIZES), 1, hm, wm), generator=g, dtype=torch.uint8)
    images = torch.randint(0, 256, (len(SIZES), 3, hm, wm), generator=g, dtype=torch.uint8)
    return images, masks, torch.tensor(SIZES)


@pytest.fixture(params=["per_image", "batched"])
def path(request, monkeypatch):
    if request.param == "batched":
        monkeypatch.setattr(S, "eager_cpu", lambda x: False)  # the transforms' predicate
    return request.param



@pytest.mark.parametrize("k", range(9))
@pytest.mark.parametrize("keyed", [True, False])
def test_masks_are_cropped_as_an_image_made_of_them(path, k, keyed):
    images, masks, sizes = _batch(k)
    keys = torch.arange(len(SIZES), dtype=torch.int64) * 7919 + 3 if keyed else None
    stage = Crop(_crops(False)[k])
    torch.manual_seed(5)
    x, m = stage.with_masks(images, masks, sizes, keys)
    after = torch.rand(1)
    torch.manual_seed(5)
    assert torch.equal(x, stage(images, sizes, keys))  # the images as without masks
    assert torch.equal(torch.rand(1), after)  # the random state as after the images alone
    # co-registration: the mask drawn as an image (3 equal channels), through the same crop
    # with nearest and fill 0, from the same keys / random state, equals the moved mask
    torch.manual_seed(5)
    twin = Crop(_crops(True)[k])
    ref = twin(masks.expand(-1, 3, -1, -1).contiguous(), sizes, keys)
    assert m.dtype == torch.uint8 and m.shape == (len(SIZES), 1) + tuple(x.shape[2:])
    assert torch.equal(m[:, 0], ref[:, 0])
    assert torch.equal(ref[:, 0], ref[:, 2])


def test_wide_mask_ids_and_padding_fill_zero():
    images, masks, sizes = _batch(1)
    wide = masks.to(torch.int32) * 1000 + 70000
    stage = Crop(RandomCrop(50, pad_if_needed=True))  # larger than every image
    keys = torch.arange(len(SIZES), dtype=torch.int64)
    _, m8 = stage.with_masks(images, masks, sizes, keys)
    _, m32 = stage.with_masks(images, wide, sizes, keys)
    assert m32.dtype == torch.int32
    assert torch.equal(m32, torch.where(m8 == 0, 0, m8.to(torch.int32) * 1000 + 70000))
    assert (m8 == 0).any() and set(m8.unique().tolist()) <= set(range(7))


def test_bad_masks_are_refused():
    images, masks, sizes = _batch()
    stage = Crop(CenterCrop(8))
    with pytest.raises(ValueError, match=r"masks'] must have the images' size 45x41"):
        stage.with_masks(images, masks[:, :, :5], sizes)
    with pytest.raises(ValueError, match="must be an integer or bool tensor"):
        stage.with_masks(images, masks.float(), sizes)
