"""The prefix: ``Augment`` (a container of transforms) and ``AugmentedModel`` (augment, then model).

Putting the augmentation inside the model means it runs where the model runs (GPU), on the whole
batch, and is exported with it: a scripted or exported ``AugmentedModel`` takes raw uint8 batches.
"""
from __future__ import annotations

from torch import Tensor, nn


class Augment(nn.Sequential):
    """Apply transforms in order to an (N, C, H, W) batch. Scriptable, compilable, exportable.

    Random transforms inside are the identity in ``eval()``, except ``RandomResizedCrop``, which
    still outputs its ``size`` (nothing to do when the input already has it, else a centre crop
    + resize); deterministic ones (``Normalize``, ``CenterCrop``, ``ToDtype``, ``Resize``) always
    run, so an eval-mode ``Augment`` is the deployment preprocessing.

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
    """

    def __init__(self, *transforms: nn.Module) -> None:
        for i, t in enumerate(transforms):
            if not isinstance(t, nn.Module):
                raise TypeError(
                    f"Augment takes nn.Module transforms, argument {i} is {type(t).__name__}"
                )
        super().__init__(*transforms)

    def forward(self, x: Tensor) -> Tensor:
        for t in self:
            x = t(x)
        return x


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

    def forward(self, x: Tensor) -> Tensor:
        return self.model(self.augment(x))
