"""uint8 fast paths that read bytes as wider words, on views that do not start on a word:
an image of a ragged cache (a slice of one flat buffer), a slice of a batch, a decoded
grayscale JPEG whose size-1 channel dim has stride 1 (issue 35 item 7)."""
import pytest
import torch

import batchaug.transforms as T

TRANSFORMS = [
    lambda: T.RandomHorizontalFlip(0.5),
    lambda: T.RandomVerticalFlip(0.5),
    lambda: T.RandomInvert(0.5),
    lambda: T.RandomSolarize(128, 0.5),
    lambda: T.RandomGrayscale(0.5),
    lambda: T.RandomPosterize(3, 0.5),
    lambda: T.RandomAutocontrast(0.5),
    lambda: T.RandomEqualize(0.5),
    lambda: T.RandomAdjustSharpness(2.0, 0.5),
    lambda: T.RandomPerspective(0.5, 0.5),
    lambda: T.RandomCrop(8, padding=4),
    lambda: T.RandomCrop(8, padding=(4, 0)),
]


@pytest.mark.parametrize("make", TRANSFORMS)
@pytest.mark.parametrize("offset", [1, 3, 4, 6])
def test_uint8_view_at_any_offset_equals_its_copy(make, offset):
    torch.manual_seed(0)
    n, c, h, w = 6, 3, 8, 8
    flat = torch.randint(0, 256, (offset + n * c * h * w,), dtype=torch.uint8)
    view = flat[offset:].view(n, c, h, w)
    assert view.storage_offset() % 8 != 0 or offset % 8 == 0
    aug = make()
    torch.manual_seed(1)
    got = aug(view)
    torch.manual_seed(1)
    want = aug(view.clone())
    assert torch.equal(got, want)
    # one image of a ragged cache is an offset view with a batch of one
    torch.manual_seed(2)
    got1 = aug(view[3][None])
    torch.manual_seed(2)
    assert torch.equal(got1, aug(view[3][None].clone()))


@pytest.mark.parametrize("make", TRANSFORMS)
def test_uint8_size_one_channel_with_odd_stride(make):
    # torchvision's decode_jpeg of a grayscale file: (1, H, W) with strides (1, W, 1)
    torch.manual_seed(0)
    x = torch.randint(0, 256, (8, 8, 1), dtype=torch.uint8).permute(2, 0, 1)[None]
    assert x.stride(1) == 1 and x.is_contiguous()
    aug = make()
    torch.manual_seed(1)
    got = aug(x)
    torch.manual_seed(1)
    plain = x.reshape(-1).clone().view(1, 1, 8, 8)  # standard strides
    assert torch.equal(got, aug(plain))
