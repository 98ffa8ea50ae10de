"""``batchaug bench --train``: a short training run per input pipeline, with its data-wait fraction.

The same small CNN is trained for a few steps from each pipeline of
:mod:`batchaug.bench.contenders`. :class:`batchaug.StallMeter` splits every step into the time
spent waiting for the batch and the time spent computing (forward, backward, optimizer step). For
batchaug the loader only indexes the device cache and the augmentation runs inside the model
(``AugmentedModel``), so it is counted as compute: that is the point of moving it there.
"""
from __future__ import annotations

import argparse
import itertools
from typing import Callable, Dict, List, Optional

import torch
import torch.nn.functional as F
from torch import nn

from batchaug.bench import contenders as C
from batchaug.bench import report
from batchaug.stall import StallMeter

WARMUP_STEPS = 2


def small_cnn(channels: int, num_classes: int, height: int) -> nn.Module:
    """A small, CPU-friendly CNN; inputs larger than 48 px are average-pooled to 32 px first."""

    def block(cin: int, cout: int) -> List[nn.Module]:
        return [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout),
                nn.ReLU(inplace=True), nn.MaxPool2d(2)]

    layers: List[nn.Module] = [nn.AdaptiveAvgPool2d(32)] if height > 48 else []
    layers += block(channels, 16) + block(16, 32) + block(32, 64)
    layers += [nn.AdaptiveMaxPool2d(1), nn.Flatten(), nn.Linear(64, num_classes)]
    return nn.Sequential(*layers)


def train_one(contender: C.Contender, channels: int, num_classes: int, height: int, steps: int,
              device: torch.device) -> dict:
    """Train a fresh ``small_cnn`` for ``WARMUP_STEPS + steps`` steps from ``contender``."""
    from batchaug import AugmentedModel

    torch.manual_seed(0)
    net = small_cnn(channels, num_classes, height).to(device)
    model: nn.Module = net
    if contender.model_prefix is not None:
        model = AugmentedModel(contender.model_prefix, net)
    model.train()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9, nesterov=True)
    meter = StallMeter(device, skip_first=WARMUP_STEPS)
    batch_sizes: List[int] = []
    loss = torch.zeros((), device=device)
    stream = contender.open_stream()
    try:
        for images, labels in meter.wrap(itertools.islice(stream, WARMUP_STEPS + steps)):
            with meter.compute():
                loss = F.cross_entropy(model(images), labels)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
            batch_sizes.append(int(images.shape[0]))
    finally:
        stream.close()  # the workers stop before the next pipeline trains
    summary = meter.summary()
    per_step = meter.step_times()[WARMUP_STEPS:]
    measured_images = sum(batch_sizes[WARMUP_STEPS:])
    total_s = (summary.wait_ms_total + summary.compute_ms_total) / 1e3
    return {
        "key": contender.key, "label": contender.label, "per_sample": contender.per_sample,
        "note": contender.note, "augment_in_model": contender.model_prefix is not None,
        **summary.as_dict(),
        "images_per_s": measured_images / total_s if total_s > 0 else 0.0,
        "final_loss": float(loss.detach().cpu()),
        "step_ms": [[w, c] for w, c in per_step],
    }


def run_training(args: argparse.Namespace, device: torch.device, data,
                 log: Callable[[str], None], header: dict, recipe_names: List[str],
                 on_recipe: Optional[Callable[[dict], None]] = None) -> dict:
    """Train from every contender for each recipe of ``recipe_names``; ``header`` starts the
    results (machine, versions, data), as for the bench. ``on_recipe(results)`` runs after
    each recipe."""
    results = dict(header)
    threads = torch.get_num_threads()
    results.update({"mode": "train", "threads": threads, "warmup_steps": WARMUP_STEPS,
                    "recipes": []})
    channels, data_hw = data.channels_and_size()
    for name in recipe_names:
        recipe = C.make_recipe(name, channels, data_hw)
        steps = args.steps or recipe.default_train_steps
        # Enough images for every step without wrapping, but never more than --images.
        count = min(args.images or recipe.default_images, (steps + WARMUP_STEPS) * args.batch_size)
        images, labels = data.take(recipe, count)
        num_classes = int(labels.max()) + 1
        contenders, skipped = C.build_contenders(recipe, images, labels, args.batch_size, device,
                                                 augment_in_model=True, log=log)
        runs = []
        try:
            for c in contenders:
                log(f"{name}: training {WARMUP_STEPS}+{steps} steps from {c.label} ...")
                run = train_one(c, channels, num_classes, recipe.out_hw[0], steps, device)
                log(f"{name}: {c.label}: wait {run['wait_ms_mean']:.1f} ms/step, compute "
                    f"{run['compute_ms_mean']:.1f} ms/step, data-wait "
                    f"{100 * run['wait_fraction']:.1f}%")
                runs.append(run)
        finally:
            for c in contenders:
                c.close()
        results["recipes"].append({
            "name": name, "description": recipe.description,
            "image_shape": list(images.shape[1:]), "steps": steps, "runs": runs,
            "skipped": skipped,
        })
        if on_recipe is not None:
            on_recipe(results)
    return results


def train_table(recipe: dict) -> List[List[str]]:
    rows = [["pipeline", "per-sample", "wait ms/step", "compute ms/step", "data-wait",
             "train img/s"]]
    for r in recipe["runs"]:
        label = r["label"] + (" (augment inside model)" if r["augment_in_model"] else "")
        rows.append([label, "yes" if r["per_sample"] else "no: " + r["note"],
                     f"{r['wait_ms_mean']:.1f}", f"{r['compute_ms_mean']:.1f}",
                     f"{100 * r['wait_fraction']:.1f}%", f"{r['images_per_s']:,.0f}"])
    for skip in recipe.get("skipped", []):
        rows.append([skip["label"], "skipped: " + skip["reason"], "-", "-", "-", "-"])
    return rows


def _heading(recipe: dict, results: dict) -> str:
    c, h, w = recipe["image_shape"]
    return (f"{recipe['name']} --train: {recipe['description']} | {c}x{h}x{w} uint8 source | "
            f"small CNN on {results['device']}, batch {results['batch_size']}, "
            f"{recipe['steps']} measured steps after {results['warmup_steps']} warm-up, "
            f"{results['threads']} torch threads")


NOTE = ("wait = time from asking for the next batch until it was ready; compute = forward + "
        "backward + optimizer step. batchaug's augmentation runs inside the model, so it is "
        "part of compute.")


def print_train_report(results: dict) -> None:
    print(results["data_note"])
    for recipe in results["recipes"]:
        print()
        print(_heading(recipe, results))
        print(report.format_text_table(train_table(recipe)))
    print()
    print(NOTE)


def _markdown(results: dict) -> str:
    lines = ["# batchaug bench --train", "", f"- device: {results['device_name']} "
             f"({results['device']}), torch {results['versions']['torch']}",
             f"- data: {results['data_note']}", f"- command: `{results['command']}`", ""]
    lines += report.partial_lines(results)
    for recipe in results["recipes"]:
        lines += [f"## {recipe['name']}", "", _heading(recipe, results), "",
                  report.format_markdown_table(train_table(recipe)), ""]
    lines.append(NOTE)
    return "\n".join(lines) + "\n"


def _plot(results: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    recipes = results["recipes"]
    fig, axes = plt.subplots(1, len(recipes), figsize=(6 * len(recipes), 3.8), squeeze=False)
    for ax, recipe in zip(axes[0], recipes):
        runs = recipe["runs"]
        names = [report._short_label(r).replace("\n", " ") for r in runs]
        waits = [r["wait_ms_mean"] for r in runs]
        comps = [r["compute_ms_mean"] for r in runs]
        ax.barh(names, waits, color="#c0392b", label="waiting for the batch")
        ax.barh(names, comps, left=waits, color="#3e7cb1", label="compute")
        for i, r in enumerate(runs):
            ax.annotate(f"{100 * r['wait_fraction']:.0f}% wait", (waits[i] + comps[i], i),
                        va="center", fontsize=7, xytext=(3, 0), textcoords="offset points")
        ax.invert_yaxis()
        ax.set_xlabel("ms per training step (mean)")
        ax.set_title(f"{recipe['name']} --train ({results['device']})", fontsize=10)
        ax.set_xlim(0, 1.18 * max(w + c for w, c in zip(waits, comps)) if runs else 1)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2)
        ax.tick_params(axis="y", labelsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_train_outputs(results: dict, out_dir: str) -> Dict[str, str]:
    return report.write_outputs(results, out_dir, "train-results", _markdown, _plot)
