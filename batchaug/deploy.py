"""The deployed model: the evaluation pipeline (``Resize`` + ``CenterCrop`` + ``Normalize``) in
front of the net, for photos at their own sizes: :class:`DeployedModel`.

A model trained with a loader crop stage has no resize in its augment, so its ``eval()`` would
take a 333x517 photo as it is; torchvision's evaluation steps go here instead, as one resized
window per image, so that one scripted or exported file takes raw photos of any size.
"""
from typing import List, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor, nn

from .compose import Augment, AugmentedModel
from .functional import _sized as S
from .transforms import CenterCrop, Resize

_FORMS = ("batchaug.Resize(int) then batchaug.CenterCrop (torchvision's eval transform, e.g. "
          "Resize(256), CenterCrop(224)), batchaug.Resize((h, w)) or batchaug.CenterCrop")


def _head(steps: Sequence[nn.Module]) -> Tuple[int, Optional[Resize], Optional[CenterCrop]]:
    """How many leading ``steps`` fix the output size (1 or 2) and which they are; a
    ``ValueError`` naming the accepted forms when they do not."""
    first = steps[0] if len(steps) > 0 else None
    nxt = steps[1] if len(steps) > 1 else None
    if isinstance(first, Resize):
        if len(first.size) == 2:
            return 1, first, None
        if isinstance(nxt, CenterCrop):
            return 2, first, nxt
        raise ValueError(
            f"DeployedModel: prefix starts with {first!r}, which keeps each photo's aspect "
            f"ratio, so photos of different sizes would still differ: follow it with "
            f"batchaug.CenterCrop (the evaluation prefix must start with {_FORMS})")
    if isinstance(first, CenterCrop):
        return 1, None, first
    name = "nothing" if first is None else type(first).__name__
    raise ValueError(f"DeployedModel: prefix starts with {name}; it must start with {_FORMS}, "
                     f"which gives every photo the size the net was trained on")


class DeployedModel(nn.Module):
    """``model(prefix(photo))`` for photos at their own sizes: the evaluation pipeline, then
    the net, as one module to script or export.

    ``prefix`` is the evaluation pipeline as batchaug modules, as torchvision's eval transform:
    ``Resize(256), CenterCrop(224), Normalize(mean, std)`` (or ``Resize((h, w))`` or
    ``CenterCrop`` first), e.g. ``from_torchvision(train, eval_transform).deploy``. The steps
    that fix the size run as one resized window per photo (torchvision's sizes, offsets and
    resampling weights: uint8 within 1 level of ``v2.Resize`` + ``v2.CenterCrop``, exact on an
    eager CPU batch); the rest (``Normalize``) runs on the dense batch. ``model`` is the net
    alone: an :class:`AugmentedModel` is refused (its augment would normalise twice), pass its
    ``.model``.

    :meth:`forward` takes photos of any ``H x W`` (a single photo as ``photo[None]``),
    :meth:`preprocess` returns what the net receives. The module is in ``eval()`` (the prefix
    stays there), scripts with TorchScript and exports with ``torch.export`` with a dynamic
    batch, height and width.

    Example:
        >>> import torch
        >>> from batchaug import CenterCrop, DeployedModel, Normalize, Resize
        >>> net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 8 * 8, 2))
        >>> deployed = DeployedModel([Resize(9), CenterCrop(8), Normalize([0.5], [0.5])], net)
        >>> deployed(torch.zeros(1, 3, 30, 41, dtype=torch.uint8)).shape
        torch.Size([1, 2])
        >>> scripted = torch.jit.script(deployed)  # scripted.save("model.pt")
    """

    __jit_unused_properties__ = ["prefix"]
    resize_size: Optional[int]
    max_size: Optional[int]
    resize_to: List[int]
    crop_size: List[int]
    interpolation: str
    antialias: bool

    def __init__(self, prefix: Union[Augment, Sequence[nn.Module]], model: nn.Module) -> None:
        super().__init__()
        if isinstance(model, AugmentedModel):
            raise TypeError("DeployedModel: model is an AugmentedModel, whose augment would run "
                            "after the prefix (Normalize twice): pass its .model, the net")
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
        if isinstance(prefix, (list, tuple)):
            prefix = Augment(list(prefix))
        if not isinstance(prefix, nn.Module):
            raise TypeError(f"prefix must be a batchaug Augment or a list of batchaug transforms, "
                            f"got {type(prefix).__name__}")
        steps = list(prefix) if isinstance(prefix, nn.Sequential) else [prefix]
        k, resize, crop = _head(steps)
        size = [] if resize is None else list(resize.size)
        self.resize_to = size if len(size) == 2 else []
        self.resize_size = size[0] if len(size) == 1 else None
        self.max_size = None if resize is None else resize.max_size
        self.interpolation = "bilinear" if resize is None else resize.interpolation
        self.antialias = True if resize is None else resize.antialias
        self.crop_size = list(self.resize_to) if crop is None else [crop.height, crop.width]
        self.head = Augment(steps[:k])  # what show() and print() read; forward runs the kernel
        self.tail = Augment(steps[k:])
        self.model = model
        self.eval()

    @property
    def prefix(self) -> Augment:
        """The evaluation steps in order, as an ``Augment`` (what ``batchaug show`` draws)."""
        return Augment(list(self.head) + list(self.tail))

    def train(self, mode: bool = True) -> "DeployedModel":
        """``mode`` for the net; the prefix stays in ``eval()`` (deterministic)."""
        super().train(mode)
        self.head.eval()
        self.tail.eval()
        return self

    def forward(self, images: Tensor, sizes: Optional[Tensor] = None) -> Tensor:
        """The net's output for a uint8 ``(N, C, H, W)`` batch of photos of one size, or with
        ``sizes`` a padded batch: photo ``i`` is ``images[i, :, :sizes[i, 0], :sizes[i, 1]]``
        (``sizes``: ``(N, 2)`` int64 on the images' device, as a ragged cache's batch).

        Example:
            >>> import torch
            >>> from batchaug import CenterCrop, DeployedModel, Resize
            >>> d = DeployedModel([Resize(8), CenterCrop(8)], torch.nn.Identity())
            >>> x = torch.zeros(2, 3, 20, 30, dtype=torch.uint8)
            >>> d(x, torch.tensor([[20, 30], [12, 9]])).shape
            torch.Size([2, 3, 8, 8])
        """
        return self.model(self.preprocess(images, sizes))

    @torch.jit.export
    def preprocess(self, images: Tensor, sizes: Optional[Tensor] = None) -> Tensor:
        """What the net receives: the prefix alone (``sizes`` None: every photo the batch's
        size)."""
        if images.dim() != 4:
            raise ValueError("DeployedModel: images must be an (N, C, H, W) batch (one photo: "
                             "photo[None]), got {} dimensions".format(images.dim()))
        if sizes is None:
            n = images.shape[0]
            sizes = torch.stack((torch.full((n,), images.shape[2], dtype=torch.int64,
                                            device=images.device),
                                 torch.full((n,), images.shape[3], dtype=torch.int64,
                                            device=images.device)), dim=1)
        else:
            S.check_sizes(sizes, images, "DeployedModel.preprocess")
        if len(self.resize_to) == 2:  # fills, not a host-to-device copy of a list
            resized = torch.stack((torch.full_like(sizes[:, 0], self.resize_to[0]),
                                   torch.full_like(sizes[:, 1], self.resize_to[1])), dim=1)
        elif self.resize_size is not None or self.max_size is not None:
            resized = S.resized_sizes(sizes, self.resize_size, self.max_size)
        else:
            resized = sizes
        height, width = self.crop_size[0], self.crop_size[1]
        top = S.center_offset(resized[:, 0], height)
        left = S.center_offset(resized[:, 1], width)
        out = S.resized_window(images, sizes, resized, top, left, height, width,
                               self.interpolation, self.antialias, [0.0])
        return self.tail(out)


__all__ = ["DeployedModel"]
