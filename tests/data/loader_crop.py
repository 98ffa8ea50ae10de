"""The loader's calls of its crop (``DeviceLoader(crop=...)``) on a ragged batch, for tests:
the module checked by ``check_crop`` (an ``Augment``), run with the images' sizes through the
transform protocol, as ``batchaug/data/loader.py`` runs it."""
from batchaug.data.crop import check_crop


class LoaderCrop:
    """``crop`` as the loader holds it: ``(images, sizes, keys)`` -> images; ``with_masks``
    ((B, 1, H, W) masks, a cache's mask column) and ``with_boxes`` as the loader moves a
    cache's targets; ``output_size`` from the check; ``train()`` / ``eval()`` set the
    module's mode."""

    def __init__(self, crop):
        self.aug, self.output_size = check_crop(crop)

    def train(self, mode=True):
        self.aug.train(mode)
        return self

    def eval(self):
        return self.train(False)

    def to(self, *args, **kwargs):
        self.aug.to(*args, **kwargs)
        return self

    def __call__(self, x, sizes, keys=None):
        return self.aug.with_sizes(x, sizes, keys)[0]

    def with_masks(self, x, masks, sizes, keys=None):
        out, t = self.aug.with_targets(x, {"masks": masks[:, 0], "sizes": sizes}, keys)
        assert set(t) == {"masks"}  # dense: no "sizes" left
        return out, t["masks"].unsqueeze(1)

    def with_boxes(self, x, boxes, valid, sizes, keys=None, masks=None):
        t = {"boxes": boxes, "box_valid": valid, "sizes": sizes}
        if masks is not None:
            t["masks"] = masks[:, 0]
        out, t = self.aug.with_targets(x, t, keys)
        m = t["masks"].unsqueeze(1) if masks is not None else None
        return out, t["boxes"], t["box_valid"], m
