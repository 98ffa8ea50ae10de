"""CIFAR-10 with Hugging Face Accelerate: a DeviceLoader (not passed to ``prepare``: it already
draws its rank's share on the device), the augmentation inside the model, exact mid-epoch resume
with ``accelerator.save_state`` / ``load_state``.

The recipe: ``accelerator.register_for_checkpointing(loader)`` puts ``DeviceLoader.state_dict()``
into every ``save_state``; after ``load_state`` the loop runs ``while loader epoch < epochs``
and the loader continues with the next batch of the interrupted epoch. ``return_keys=True`` and
``model(x, keys)`` make each sample's augmentation a function of (seed, epoch, index).

    python examples/accelerate_cifar.py --smoke                     # seconds, synthetic
    python examples/accelerate_cifar.py --smoke --save-every 5 --max-steps 7
    python examples/accelerate_cifar.py --smoke --resume checkpoints/step_5
    torchrun --nproc_per_node 2 examples/accelerate_cifar.py --smoke   # 2 CPU processes (gloo)

``--record PATH`` writes the (epoch, keys, batch checksum) of every step and the final weights
(per process, ``PATH.rank<r>``). Nothing is downloaded.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F

from batchaug import DeviceLoader

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lightning_cifar import load_cache, make_model  # noqa: E402  (same data and model)


def main(argv=None) -> None:
    from accelerate import Accelerator

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", default=None, help="folder with cifar-10-batches-py/")
    p.add_argument("--smoke", action="store_true", help="tiny synthetic run (seconds)")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--max-steps", type=int, default=-1)
    p.add_argument("--save-every", type=int, default=0)
    p.add_argument("--ckpt-dir", default="checkpoints")
    p.add_argument("--resume", default=None, help="a save_state folder to continue from")
    p.add_argument("--record", default=None)
    args = p.parse_args(argv)
    n, size = (50_000, 32) if not args.smoke else (48, 16)
    if args.smoke:
        args.epochs, args.batch_size = min(args.epochs, 2), 4
    torch.set_num_threads(1)

    accelerator = Accelerator(cpu=True)
    torch.manual_seed(0)
    model = make_model(size)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    model, optimizer = accelerator.prepare(model, optimizer)
    # after prepare: under `accelerate launch` the process group exists and the loader shards
    loader = DeviceLoader(load_cache(args.data, n, size), batch_size=args.batch_size,
                          drop_last=True, seed=0, return_keys=True)
    accelerator.register_for_checkpointing(loader)
    step = 0
    if args.resume:
        accelerator.load_state(args.resume)
        step = int(args.resume.rstrip("/").rsplit("_", 1)[1])
    seen = []
    while loader.state_dict()["epoch"] < args.epochs and step != args.max_steps:
        epoch = loader.state_dict()["epoch"]
        for x, y, keys in loader:
            loss = F.cross_entropy(model(x, keys), y)
            optimizer.zero_grad()
            accelerator.backward(loss)
            optimizer.step()
            step += 1
            if args.record:  # the augmented batch: the same keys give the same images
                with torch.no_grad():
                    xa = accelerator.unwrap_model(model).augment(x, keys)
                seen.append([epoch, keys.tolist(), float(xa.double().sum())])
            if args.save_every and step % args.save_every == 0:
                accelerator.save_state(os.path.join(args.ckpt_dir, f"step_{step}"))
            if step == args.max_steps:
                break
    if args.record:
        weights = {k: v.tolist() for k, v in accelerator.unwrap_model(model).state_dict().items()}
        with open(f"{args.record}.rank{accelerator.process_index}", "w") as f:
            json.dump({"steps": seen, "weights": weights,
                       "world": accelerator.num_processes}, f)
    accelerator.print(f"done: {step} steps")
    # under torchrun: tear the process group down before exit, not in the interpreter's
    # shutdown (a gloo rank once aborted there, "terminate called without an active exception")
    accelerator.end_training()


if __name__ == "__main__":
    main()
