"""torch.export with a dynamic batch of the documented pipelines and of AugmentedModel (issue 7
item 4): the exported program takes any batch size (1, 7, 64) and matches eager (exactly in
eval; shapes and dtypes in train, where the draws differ). Per-transform export is in the
contract (tests/contract/, check_export_dynamic_batch)."""
import pytest
import torch
from torch import nn
from torch.export import Dim, export

import batchaug as B

MEAN, STD = [0.4914, 0.4822, 0.4465], [0.2470, 0.2435, 0.2616]


def cifar():  # README: RandomCrop(32, padding=4) + flip + Normalize
    return B.Augment(B.RandomCrop(32, padding=4), B.RandomHorizontalFlip(), B.Normalize(MEAN, STD))


def resize_center_crop():  # deployment preprocessing: resize + centre crop + normalize
    return B.Augment(B.Resize(36), B.CenterCrop(32), B.Normalize(MEAN, STD))


def rrc_flip():  # README imagenet recipe, small: RandomResizedCrop + flip + Normalize
    return B.Augment(B.RandomResizedCrop(24), B.RandomHorizontalFlip(), B.Normalize(MEAN, STD))


def normalize_only():
    return B.Augment(B.Normalize([0.5], [0.5]))


PIPELINES = [cifar, resize_center_crop, rrc_flip, normalize_only]


def batch(n, seed=0, size=32):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n, 3, size, size), generator=g, dtype=torch.uint8)


def _check(module, train):
    ep = export(module, (batch(8),), dynamic_shapes=({0: Dim("batch")},))
    run = ep.module()
    for n in (1, 7, 64):
        x = batch(n, seed=n)
        y = run(x)
        ref = module(x)
        if train:
            assert y.shape == ref.shape and y.dtype == ref.dtype, n
        else:
            assert torch.equal(y, ref), n


@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
@pytest.mark.parametrize("pipeline", PIPELINES, ids=lambda p: p.__name__)
def test_pipeline_exports_with_dynamic_batch(pipeline, train):
    torch.manual_seed(0)
    _check(pipeline().train(train), train)


@pytest.mark.parametrize("train", [False, True], ids=["eval", "train"])
@pytest.mark.parametrize("pipeline", [cifar, rrc_flip], ids=lambda p: p.__name__)
def test_augmented_model_exports_with_dynamic_batch(pipeline, train):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten())
    _check(B.AugmentedModel(pipeline(), net).train(train), train)


def test_issue_repro_normalize_conv_min_max():
    """The issue's exact call: Dim with min=2, max=1024 no longer specialises the batch."""
    m = B.AugmentedModel(B.Augment(B.Normalize([0.5], [0.5])), nn.Conv2d(3, 8, 3)).eval()
    ep = export(m, (batch(8),), dynamic_shapes=({0: Dim("batch", min=2, max=1024)},))
    for n in (2, 5, 33):
        x = batch(n, seed=n)
        assert torch.equal(ep.module()(x), m(x))
