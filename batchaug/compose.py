"""The prefix: ``Augment`` (a container of transforms) and ``AugmentedModel`` (augment, then model).

Putting the augmentation inside the model means it runs where the model runs (GPU), on the whole
batch, and is exported with it: a scripted or exported ``AugmentedModel`` takes raw uint8 batches.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Dict, List, Optional, Tuple

import torch
from torch import Tensor, nn

from . import _fusion, _random
from ._validation import _moves_no_pixels, check_target_children, check_transform
from ._validation import check_batch, check_keys
from .functional._sized import sizes_of
from .functional._targets import check_targets

class Augment(nn.Sequential):
    """Apply transforms in order to an (N, C, H, W) batch. Scriptable, compilable, exportable.

    Random transforms inside are the identity in ``eval()``, except ``RandomResizedCrop``, which
    still outputs its ``size`` (nothing to do when the input already has it, else a centre crop
    + resize); deterministic ones (``Normalize``, ``CenterCrop``, ``ToDtype``, ``Resize``) always
    run, so an eval-mode ``Augment`` is the deployment preprocessing for images of the size the
    model trained on (for photos of any size, :class:`~batchaug.DeployedModel`).

    The transforms are given as arguments or as one list; ``augment.transforms`` lists them
    (also ``augment[i]``, ``len(augment)``, iteration, as ``nn.Sequential``). Random torchvision or kornia
    transforms are refused with a ``TypeError`` naming the batchaug equivalent: torchvision's
    draw one set of parameters for the whole batch; kornia's still augment in ``eval()`` and do
    not script. Deterministic ones (``v2.Normalize``, ``v2.Resize``...) are accepted.

    Example:
        >>> import torch
        >>> from batchaug import Augment, RandomCrop, RandomHorizontalFlip, Normalize
        >>> aug = Augment(
        ...     RandomCrop(32, padding=4),
        ...     RandomHorizontalFlip(),
        ...     Normalize([0.4914, 0.4822, 0.4465], [0.2470, 0.2435, 0.2616]),
        ... )
        >>> aug(torch.zeros(8, 3, 32, 32, dtype=torch.uint8)).shape
        torch.Size([8, 3, 32, 32])

    ``with_targets(images, targets, keys)`` moves masks, boxes and keypoints with the images
    through every transform (see :meth:`with_targets`).

    On an eager CPU batch, ``Normalize`` then ``RandomErasing`` run as one (the boxes erased in
    place in Normalize's fresh output), with the same draws and bytes. Which pairs fuse is
    planned once, and again only after a transform is added, replaced or removed or switches
    between ``train()`` and ``eval()``.
    """

    # forward(x, keys=None): containers pass keys (__constants__: TorchScript sees the
    # class attribute, in subclasses too)
    __constants__ = ["takes_keys"]
    takes_keys: bool = True
    __jit_unused_properties__ = ["transforms"]

    @property
    def transforms(self) -> List[nn.Module]:
        """The steps in order, as a list (as ``RandomApply.transforms``); an ``Augment`` is
        also an ``nn.Sequential``: ``augment[i]``, ``len(augment)``, ``for t in augment``.

        Example:
            >>> from batchaug import Augment, RandomHorizontalFlip, Normalize
            >>> aug = Augment(RandomHorizontalFlip(), Normalize([0.5], [0.5]))
            >>> [type(t).__name__ for t in aug.transforms]
            ['RandomHorizontalFlip', 'Normalize']
        """
        return list(self)

    def __init__(self, *transforms: nn.Module) -> None:
        # Augment([t1, t2]) and Augment(OrderedDict(name=t, ...)) as well as Augment(t1, t2)
        if len(transforms) == 1 and isinstance(transforms[0], OrderedDict):
            for key, t in transforms[0].items():
                check_transform(t, f"transform {key!r}")
            super().__init__(transforms[0])
            return
        if len(transforms) == 1 and isinstance(transforms[0], (list, tuple)):
            transforms = tuple(transforms[0])
        for i, t in enumerate(transforms):
            check_transform(t, f"argument {i}")
        super().__init__(*transforms)

    def forward(self, x: Tensor, keys: Optional[Tensor] = None) -> Tensor:
        """Augment ``x``; with ``keys`` (int64 ``(N,)``, one per sample, e.g. from
        ``DeviceLoader(return_keys=True)``) every random transform draws from its sample's key
        instead of torch's generator: the result of a sample is then a pure function of its key,
        whatever the batch size, its position, the world size or the device. Transform ``i``
        gets ``batchaug.substream(keys, i)``; modules whose ``takes_keys`` class attribute is
        not true are called as ``t(x)``."""
        check_keys(keys, x, "Augment")
        if not torch.jit.is_scripting():
            if _fusion.fusable(self, x):
                # eager CPU: the pair table's fused pairs, with the same draws and bytes
                # as _run (batchaug/_fusion.py)
                return _fusion.run(self, x, keys)
        return self._run(x, None, keys)[0]

    def _run(self, x: Tensor, targets: Optional[Dict[str, Tensor]], keys: Optional[Tensor]
             ) -> Tuple[Tensor, Optional[Dict[str, Tensor]]]:
        """``forward`` (``targets`` None) and ``with_targets`` in one loop: transform ``i``
        gets ``substream(keys, i)``; with targets, its ``with_targets``, or for one that moves
        no pixel (checked in eager mode by ``check_target_children``) the images only.

        The keys probe, ``getattr(t, "takes_keys", False)`` on a class constant, is resolved
        by TorchScript when it compiles (a child without keys never sees a call with them)."""
        paired = -1  # a step already run with the one before it
        for i, t in enumerate(self):
            moved = i == paired
            if hasattr(t, "with_targets"):
                if targets is not None:
                    if not torch.jit.is_scripting():
                        if "sizes" in targets and i + 1 < len(self):
                            # a pair that runs as one on a ragged batch (the pair table)
                            nxt = self[i + 1]
                            rule = _fusion.sized_pair(t, nxt, x, targets)
                            if rule is not None:
                                x, targets = rule.run(t, nxt, x, targets,
                                                      _random.substream(keys, i),
                                                      _random.substream(keys, i + 1))
                                paired = i + 1
                                moved = True
                    if not moved:
                        x, targets = t.with_targets(x, targets, _random.substream(keys, i))
                        moved = True
            if not moved:
                if targets is not None:
                    if "sizes" in targets:
                        raise ValueError("Augment.with_sizes: a transform without with_targets "
                                         "cannot run on a ragged batch (it would read the "
                                         "padding)")
                if getattr(t, "takes_keys", False):
                    x = t(x, _random.substream(keys, i))
                else:
                    x = t(x)
        return x, targets

    @torch.jit.export
    def with_sizes(self, images: Tensor, sizes: Tensor, keys: Optional[Tensor] = None
                   ) -> Tuple[Tensor, Tensor]:
        """``(images, sizes)`` through every transform in order, for a padded batch of images
        of different sizes: image ``i`` is ``images[i, :, :sizes[i, 0], :sizes[i, 1]]``
        (``sizes``: ``(N, 2)`` int64 on the images' device), each geometric transform acting
        on each image's own extent (see :meth:`batchaug.RandomResizedCrop.with_sizes`); a
        size-fixing step (``RandomResizedCrop``, ``CenterCrop``, ``Resize((h, w))``,
        ``RandomCrop(pad_if_needed=True)``, or ``Resize(int)`` directly followed by
        ``CenterCrop`` / ``RandomCrop``: one window of each resized image, the crop drawing
        from each resized size) makes the batch dense, and the steps after it see every size
        equal to the batch's. Such pairs of steps run as one call (``batchaug._fusion``'s
        pair table; not in TorchScript). The same draws as :meth:`forward`; it is
        ``with_targets(images, {"sizes": sizes}, keys)``, and masks, boxes and keypoints move
        along when ``with_targets`` is given them beside ``"sizes"`` (its targets keep
        ``"sizes"`` while the batch is ragged; after a size-fixing step they have none).

        Example:
            >>> from batchaug import Augment, RandomRotation, RandomResizedCrop
            >>> aug = Augment(RandomRotation(30), RandomResizedCrop(16))
            >>> x = torch.zeros(2, 3, 40, 50, dtype=torch.uint8)
            >>> y, s = aug.with_sizes(x, torch.tensor([[40, 50], [30, 20]]))
            >>> y.shape
            torch.Size([2, 3, 16, 16])
        """
        out, targets = self.with_targets(images, {"sizes": sizes}, keys)
        return out, sizes_of(out, targets)

    @torch.jit.export
    def with_targets(self, images: Tensor, targets: Dict[str, Tensor],
                     keys: Optional[Tensor] = None) -> Tuple[Tensor, Dict[str, Tensor]]:
        """``(images, targets)`` through every transform in order, each moving the targets
        with its images (``t.with_targets``; transform ``i`` gets ``substream(keys, i)`` as in
        :meth:`forward`, so the images equal ``forward``'s).

        ``targets`` holds any of ``"masks"`` ((N, H, W) or (N, K, H, W) integer or bool),
        ``"boxes"`` ((N, M, 4) float XYXY pixels) with ``"box_valid"`` ((N, M) bool,
        optional), ``"keypoints"`` ((N, K, 2) float x, y) with ``"keypoint_valid"`` ((N, K)
        bool, optional), and ``"labels"`` / ``"box_labels"``, passed through. A transform
        without ``with_targets`` runs on the images only, which is allowed only when it cannot
        move a pixel (a deterministic photometric torchvision v2 transform such as
        ``v2.Normalize``, or a class attribute ``moves_targets = False``); any other is a
        ``TypeError`` before anything runs. A scripted Augment cannot check this: there such a
        transform runs on the images only.

        Example:
            >>> from batchaug import Augment, RandomHorizontalFlip
            >>> aug = Augment(RandomHorizontalFlip(1.0))
            >>> t = {"boxes": torch.tensor([[[1.0, 2.0, 5.0, 6.0]]])}
            >>> aug.with_targets(torch.zeros(1, 3, 8, 10), t)[1]["boxes"]
            tensor([[[5., 2., 9., 6.]]])
        """
        check_batch(images, "Augment")
        check_keys(keys, images, "Augment")
        if not torch.jit.is_scripting():
            check_target_children(self, "Augment", "transforms")
        out, moved = self._run(images, check_targets(targets, list(images.shape), True), keys)
        assert moved is not None  # targets in, targets out
        return out, moved


class AugmentedModel(nn.Module):
    """``model(augment(x))``: the augmentation as the first layer of the model.

    ``.augment`` and ``.model`` are the two parts; save and load the plain model's weights with
    ``m.model.state_dict()`` as usual (the transforms hold no learned state). ``train()`` /
    ``eval()`` switch both: random augmentation in training, only the deterministic
    preprocessing at evaluation.

    Example:
        >>> import torch
        >>> from batchaug import Augment, AugmentedModel, RandomHorizontalFlip, Normalize
        >>> net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.Flatten(),
        ...                           torch.nn.LazyLinear(10))
        >>> m = AugmentedModel(Augment(RandomHorizontalFlip(), Normalize([0.5], [0.25])), net)
        >>> m(torch.zeros(4, 3, 32, 32, dtype=torch.uint8)).shape
        torch.Size([4, 10])
        >>> scripted = torch.jit.script(m.eval())  # raw uint8 in, logits out
    """

    def __init__(self, augment: nn.Module, model: nn.Module) -> None:
        super().__init__()
        if not isinstance(augment, nn.Module):
            raise TypeError(f"augment must be an nn.Module, got {type(augment).__name__}")
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
        self.augment = augment
        self.model = model

    def forward(self, x: Tensor, keys: Optional[Tensor] = None) -> Tensor:
        """``model(augment(x, keys))``; ``keys`` as in :meth:`Augment.forward` (an augment
        module whose ``takes_keys`` is not true is called as ``augment(x)``)."""
        check_keys(keys, x, "AugmentedModel")
        if getattr(self.augment, "takes_keys", False):
            return self.model(self.augment(x, keys))
        return self.model(self.augment(x))

    @torch.jit.export
    def with_targets(self, images: Tensor, targets: Dict[str, Tensor],
                     keys: Optional[Tensor] = None) -> Tuple[Tensor, Dict[str, Tensor]]:
        """``(model(augmented images), augmented targets)``: ``augment.with_targets(images,
        targets, keys)`` moves masks, boxes and keypoints with the images (see
        :meth:`Augment.with_targets`), then the model runs on the images only; for
        segmentation or detection with the augmentation inside the model. ``keys`` as in
        :meth:`forward`, so the outputs equal ``forward``'s. An ``augment`` without
        ``with_targets`` is allowed only when it moves no pixel (as inside ``Augment``);
        otherwise a ``TypeError`` (eager) before anything runs.

        Example:
            >>> from batchaug import Augment, AugmentedModel, RandomRotation
            >>> seg = AugmentedModel(Augment(RandomRotation(15, mask_fill=255)),
            ...                      torch.nn.Conv2d(3, 21, 1))
            >>> x = torch.rand(2, 3, 32, 32)
            >>> masks = torch.zeros(2, 32, 32, dtype=torch.uint8)
            >>> logits, t = seg.with_targets(x, {"masks": masks})
            >>> logits.shape, t["masks"].shape
            (torch.Size([2, 21, 32, 32]), torch.Size([2, 32, 32]))
        """
        check_keys(keys, images, "AugmentedModel")
        if not torch.jit.is_scripting():
            if not hasattr(self.augment, "with_targets") and not _moves_no_pixels(self.augment):
                raise TypeError(
                    f"AugmentedModel.with_targets: augment ({type(self.augment).__name__}) has "
                    f"no with_targets, so the targets could not follow the images; use a "
                    f"batchaug.Augment of batchaug transforms")
        if hasattr(self.augment, "with_targets"):
            if getattr(self.augment, "takes_keys", False):
                images, targets = self.augment.with_targets(images, targets, keys)
            else:
                images, targets = self.augment.with_targets(images, targets)
        else:
            # moves no pixel (checked above in eager mode): the images only, as forward
            targets = check_targets(targets, list(images.shape))
            images = self.augment(images)
        return self.model(images), targets
