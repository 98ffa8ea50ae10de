"""CIFAR-10 with PyTorch Lightning: a DeviceLoader as the train loader, the augmentation inside
the LightningModule's model, exact mid-epoch resume from Lightning's own checkpoint.

The recipe:

- ``train_dataloader()`` returns a ``DeviceLoader`` (built there, so under ``strategy="ddp"``
  it reads the rank and world size of the process group Lightning has set up, and each rank
  draws its own disjoint share of every epoch);
- ``return_keys=True`` and ``self.model(x, keys)``: each sample's augmentation depends only on
  (seed, epoch, sample index), never on a global RNG that a restart would lose;
- Lightning stores ``DeviceLoader.state_dict()`` in its checkpoints (the loader has
  ``state_dict``/``load_state_dict``), so ``trainer.fit(..., ckpt_path=...)`` continues with
  exactly the batches the uninterrupted run would have seen. ``DeviceLoader`` moves to the next
  epoch's order by itself on each ``iter()`` (``set_epoch`` is called for you).

    python examples/lightning_cifar.py --data ~/data/cifar10      # cifar-10-batches-py/
    python examples/lightning_cifar.py --smoke                     # seconds, synthetic
    python examples/lightning_cifar.py --smoke --devices 2 --strategy ddp   # 2 CPU processes
    python examples/lightning_cifar.py --smoke --save-every 5 --max-steps 7   # stopped at 7
    python examples/lightning_cifar.py --smoke --resume checkpoints/step=5.ckpt  # the rest

``--record PATH`` writes, per rank, the (epoch, sample keys, batch checksum) of every training
step and the final weights (the tests compare runs with it). Nothing is downloaded.
"""
from __future__ import annotations

import argparse
import json
import os
import warnings

import torch
import torch.nn.functional as F
from torch import nn

from batchaug import (Augment, AugmentedModel, DeviceCache, DeviceLoader, Normalize, RandomCrop,
                      RandomHorizontalFlip)

warnings.filterwarnings("ignore", message=r".*does not have many workers.*")
warnings.filterwarnings("ignore", message=r".*torch\.jit\..*deprecated.*")

CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2470, 0.2435, 0.2616)


def load_cache(data: str | None, n: int, size: int) -> DeviceCache:
    """CIFAR-10's training set as a uint8 cache, or ``n`` synthetic images (no download)."""
    if data:
        from torchvision.datasets import CIFAR10

        ds = CIFAR10(data, train=True, download=False)
        images = torch.from_numpy(ds.data).permute(0, 3, 1, 2).contiguous()
        return DeviceCache.from_tensors(images, torch.tensor(ds.targets), device="cpu")
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (n, 3, size, size), dtype=torch.uint8, generator=g)
    return DeviceCache.from_tensors(images, torch.randint(0, 10, (n,), generator=g),
                                    device="cpu")


def make_model(size: int) -> AugmentedModel:
    augment = Augment([RandomCrop(size, padding=size // 8), RandomHorizontalFlip(),
                       Normalize(CIFAR_MEAN, CIFAR_STD)])
    net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4),
                        nn.Flatten(), nn.Linear(8 * 16, 10))
    return AugmentedModel(augment, net)


def build(args: argparse.Namespace):
    import pytorch_lightning as pl

    class LitCifar(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)  # the same initial weights in every run
            self.model = make_model(args.size)
            self.cache = load_cache(args.data, args.n, args.size)
            self.seen: list = []

        def train_dataloader(self) -> DeviceLoader:
            # built here: under DDP the process group exists, so the loader shards by rank
            return DeviceLoader(self.cache, batch_size=args.batch_size, drop_last=True,
                                seed=args.seed, return_keys=True)

        def training_step(self, batch, batch_idx):
            x, y, keys = batch
            # self.model(x, keys), in its two halves so that --record sees the augmented batch;
            # each sample's augmentation is a function of (seed, epoch, index)
            xa = self.model.augment(x, keys)
            if args.record:
                self.seen.append([self.current_epoch, keys.tolist(), float(xa.double().sum())])
            return F.cross_entropy(self.model.model(xa), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)

    callbacks = []
    if args.save_every:
        from pytorch_lightning.callbacks import ModelCheckpoint

        # mid-epoch checkpoints, with the loader's position in them
        callbacks.append(ModelCheckpoint(dirpath=args.ckpt_dir, filename="{step}",
                                         every_n_train_steps=args.save_every, save_top_k=-1))
    trainer = pl.Trainer(
        accelerator="cpu", devices=args.devices, strategy=args.strategy,
        max_epochs=args.epochs, max_steps=args.max_steps, logger=False, callbacks=callbacks,
        enable_checkpointing=bool(callbacks), enable_progress_bar=False,
        enable_model_summary=False, num_sanity_val_steps=0)
    return LitCifar(), trainer


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", default=None, help="folder with cifar-10-batches-py/")
    p.add_argument("--smoke", action="store_true", help="tiny synthetic run (seconds)")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--devices", type=int, default=1)
    p.add_argument("--strategy", default="auto")
    p.add_argument("--max-steps", type=int, default=-1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--save-every", type=int, default=0,
                   help="write a checkpoint every N training steps (mid-epoch too)")
    p.add_argument("--ckpt-dir", default="checkpoints")
    p.add_argument("--resume", default=None, help="checkpoint to resume from")
    p.add_argument("--record", default=None, help="JSON of the steps and weights, per rank")
    args = p.parse_args(argv)
    args.n, args.size = (50_000, 32) if not args.smoke else (48, 16)
    if args.smoke:
        args.epochs, args.batch_size = min(args.epochs, 2), 4
    torch.set_num_threads(1)
    lit, trainer = build(args)
    trainer.fit(lit, ckpt_path=args.resume)
    if args.record:
        rank = trainer.global_rank
        weights = {k: v.tolist() for k, v in lit.model.state_dict().items()}
        with open(f"{args.record}.rank{rank}", "w") as f:
            json.dump({"rank": rank, "world": trainer.world_size, "steps": lit.seen,
                       "weights": weights}, f)
    if trainer.global_rank == 0:
        print(f"done: {trainer.global_step} steps, epoch {trainer.current_epoch}, "
              f"pid {os.getpid()}")


if __name__ == "__main__":
    main()
