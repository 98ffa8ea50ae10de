"""Export an ``AugmentedModel``: TorchScript and ``torch.export``, with the preprocessing baked in.

In ``eval()`` the random transforms are the identity and the deterministic ones (``CenterCrop``,
``Normalize``) still run, so the exported program takes the same raw uint8 batches the training
loop saw and needs neither batchaug nor torchvision to run. Both exports are saved, loaded back
and checked against the original model's output.

    python examples/export.py --out-dir exported/
    python examples/export.py --smoke
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import warnings

import torch
from torch import nn

from batchaug import (Augment, AugmentedModel, CenterCrop, Normalize, RandomCrop,
                      RandomHorizontalFlip)

# torch 2.14 marks torch.jit as deprecated; TorchScript is still what many deployments load.
warnings.filterwarnings("ignore", message=r".*torch\.jit\..*deprecated.*")


def build_model(size: int, num_classes: int = 10) -> AugmentedModel:
    augment = Augment(
        RandomCrop(size + 4, padding=4),  # training-time jitter on the stored (size + 4) images
        RandomHorizontalFlip(),
        CenterCrop(size),  # also what eval() keeps: the deterministic deployment crop
        Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
    )
    net = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, num_classes),
    )
    return AugmentedModel(augment, net)


def check(name: str, got: torch.Tensor, want: torch.Tensor) -> bool:
    ok = got.shape == want.shape and torch.allclose(got, want, atol=1e-5, rtol=1e-4)
    diff = (got - want).abs().max().item() if got.shape == want.shape else float("nan")
    print(f"{name}: output {tuple(got.shape)}, max |diff| vs eager {diff:.2e} -> "
          f"{'OK' if ok else 'MISMATCH'}")
    return ok


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out-dir", default=None, help="where to write model.pt / model.pt2 "
                        "(default: a temporary directory)")
    parser.add_argument("--size", type=int, default=32, help="model input size")
    parser.add_argument("--smoke", action="store_true", help="small and quick")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    stored = args.size + 4  # images are stored slightly larger than the model input
    model = build_model(args.size)

    # One training step, so BatchNorm statistics and weights are not at their initial values.
    x_train = torch.randint(0, 256, (16, 3, stored, stored), dtype=torch.uint8)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    torch.nn.functional.cross_entropy(model(x_train), torch.arange(16) % 10).backward()
    optimizer.step()

    model.eval()
    x = torch.randint(0, 256, (4 if args.smoke else 32, 3, stored, stored), dtype=torch.uint8)
    with torch.no_grad():
        want = model(x)

    if args.out_dir is None:
        with tempfile.TemporaryDirectory(prefix="batchaug-export-") as tmp:
            return export_and_check(model, x, want, tmp)
    os.makedirs(args.out_dir, exist_ok=True)
    return export_and_check(model, x, want, args.out_dir)


def export_and_check(model: AugmentedModel, x: torch.Tensor, want: torch.Tensor,
                     out_dir: str) -> int:
    ok = True

    # 1. TorchScript: one file, loadable from C++ or Python without batchaug installed.
    ts_path = os.path.join(out_dir, "model.pt")
    torch.jit.save(torch.jit.script(model), ts_path)
    with torch.no_grad():
        ok &= check(f"TorchScript {ts_path}", torch.jit.load(ts_path)(x), want)

    # 2. torch.export: a whole-graph ExportedProgram (uint8 in, logits out).
    ep_path = os.path.join(out_dir, "model.pt2")
    exported = torch.export.export(model, (x,))
    torch.export.save(exported, ep_path)
    reloaded = torch.export.load(ep_path)
    with torch.no_grad():
        ok &= check(f"torch.export {ep_path}", reloaded.module()(x), want)
    ops = sorted({str(n.target) for n in exported.graph.nodes if n.op == "call_function"})
    print(f"exported graph: {len(ops)} distinct ops, e.g. {', '.join(ops[:6])}")

    print("all exports match the eager model" if ok else "export check FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
