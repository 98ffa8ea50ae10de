"""Turning bench results into a printed table, ``results.json``, ``results.md`` and a bar chart."""
from __future__ import annotations

import json
import math
import os
from typing import Callable, Dict, List, Optional, Sequence

BASELINE = "torchvision_w0"
OURS = "batchaug"


def _fmt_ratio(value: Optional[float]) -> str:
    if value is None:
        return "-"
    return f"{value:.1f}x" if value < 100 else f"{value:,.0f}x"


def _fmt_spread(ratio: Optional[dict]) -> str:
    """``MEDIANx (MIN-MAX)``: median and min-max of the same-round ratios."""
    if not ratio:
        return "-"
    return (f"{_fmt_ratio(ratio['median'])} ({_fmt_ratio(ratio['min'])[:-1]}-"
            f"{_fmt_ratio(ratio['max'])})")


def _ours_over(recipe: dict, key: str, threads: int) -> Optional[dict]:
    """batchaug's same-round ratios to ``key`` at ``threads`` (None if either is absent)."""
    for e in recipe["contenders"]:
        if e["key"] == OURS:
            fig = e["by_threads"].get(str(threads))
            return None if fig is None else fig["ratios"].get(key)
    return None


def recipe_table(recipe: dict, thread_counts: Sequence[int]) -> List[List[str]]:
    """Rows (header first) of one recipe's table: one column pair per thread count."""
    header = ["contender", "per-sample draw", "antialias"]
    for t in thread_counts:
        header += [f"img/s ({t} thr)", f"batchaug / it ({t} thr)"]
    rows = [header]
    for entry in recipe["contenders"]:
        per_sample = "yes" if entry["per_sample"] else "no: " + (entry["note"] or "")
        row = [entry["label"], per_sample, entry.get("antialias", "-")]
        for t in thread_counts:
            fig = entry["by_threads"].get(str(t))
            row += ["-", "-"] if fig is None else [
                f"{fig['images_per_s']:,.0f}",
                "" if entry["key"] == OURS else _fmt_spread(_ours_over(recipe, entry["key"], t))]
        rows.append(row)
    for skip in recipe.get("skipped", []):
        rows.append([skip["label"], "skipped: " + skip["reason"], "-"]
                    + ["-", "-"] * len(thread_counts))
    return rows


def format_text_table(rows: List[List[str]]) -> str:
    widths = [max(len(r[i]) for r in rows if i < len(r)) for i in range(len(rows[0]))]
    # The skipped-reason cell can be long; do not let it widen the whole column.
    widths[1] = min(widths[1], 36)
    lines = []
    for k, row in enumerate(rows):
        cells = []
        for i, cell in enumerate(row):
            cells.append(cell.ljust(widths[i]) if i < 3 else cell.rjust(widths[i]))
        lines.append("  ".join(cells).rstrip())
        if k == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def format_markdown_table(rows: List[List[str]]) -> str:
    out = ["| " + " | ".join(rows[0]) + " |",
           "|" + "|".join(["---", "---", "---"] + ["---:"] * (len(rows[0]) - 3)) + "|"]
    for row in rows[1:]:
        out.append("| " + " | ".join(c.replace("|", "\\|") for c in row) + " |")
    return "\n".join(out)


def recipe_heading(recipe: dict, results: dict) -> str:
    c, h, w = recipe["image_shape"]
    source = recipe.get("source") or f"{c}x{h}x{w} uint8"
    return (f"{recipe['name']}: {recipe['description']} | source {source} -> "
            f"normalised float32 on {results['device']} | batch {results['batch_size']}, "
            f"pool of {recipe['pool_images']} images, every contender timed "
            f"{recipe['window_s']:g} s per round, {results['rounds']} rounds; batchaug / it: "
            f"median (min-max) of same-round ratios")


def headline(recipe: dict, threads: int) -> Optional[str]:
    """batchaug against the strongest usual per-sample pipeline at one thread count, with the
    spread, then against torchvision num_workers=0 and kornia."""
    strongest = recipe.get("strongest_usual", {}).get(str(threads))
    labels = {e["key"]: e["label"] for e in recipe["contenders"]}
    best = _ours_over(recipe, strongest, threads) if strongest else None
    if best is None:
        return None
    parts = [f"batchaug = {_fmt_spread(best)} the strongest usual per-sample pipeline, "
             f"{labels[strongest]}"]
    others = [] if strongest == BASELINE else [(BASELINE, "torchvision per-sample num_workers=0")]
    if threads > 1 and strongest != f"torchvision_w{threads}":
        others.append((f"torchvision_w{threads}", f"torchvision DataLoader(num_workers={threads})"))
    others += [("kornia", "kornia"), ("dali_roi", "DALI's CPU ROI-decode pipeline"),
               ("dali_full", "DALI's CPU full-decode pipeline"),
               ("decode_ceiling",
                "the decode-only ceiling (the same windows decoded, nothing else)")]
    for key, name in others:
        ratio = _ours_over(recipe, key, threads)
        if ratio:
            parts.append(f"{_fmt_spread(ratio)} {name}")
    for e in recipe["contenders"]:
        scaling = e["key"] == OURS and e["by_threads"].get(str(threads), {}).get("scaling")
        if scaling:
            parts.append(f"batchaug at {threads} threads = {_fmt_spread(scaling)} its own "
                         f"{scaling['threads']}-thread rate")
    return f"{recipe['name']} ({threads} thread{'s' if threads > 1 else ''}): " + "; ".join(parts)


def print_report(results: dict) -> None:
    threads = results["thread_counts"]
    print(results["data_note"])
    for recipe in results["recipes"]:
        print()
        print(recipe_heading(recipe, results))
        print(format_text_table(recipe_table(recipe, threads)))
    print()
    for recipe in results["recipes"]:
        for line in _headlines(recipe, threads):
            print(line)


def _headlines(recipe: dict, threads: Sequence[int]) -> List[str]:
    return [line for line in (headline(recipe, t) for t in threads) if line]


def partial_lines(results: dict) -> List[str]:
    """A note for results written before the run finished (``results["complete"]`` false)."""
    if results.get("complete", True):
        return []
    planned = results.get("recipes_planned") or []
    done = [r["name"] for r in results["recipes"]]
    left = [name for name in planned if name not in done]
    return [f"**Partial**: {len(done)} of {len(planned)} recipes measured so far "
            f"({', '.join(done)}); not yet: {', '.join(left)}.", ""]


def markdown_report(results: dict) -> str:
    threads = results["thread_counts"]
    lines = ["# batchaug bench", "",
             f"- device: {results['device_name']} ({results['device']}), "
             f"torch {results['versions']['torch']}, "
             f"torchvision {results['versions']['torchvision']}, "
             f"kornia {results['versions'].get('kornia') or 'not installed'}, "
             f"torchaug {results['versions'].get('torchaug') or 'not installed'}",
             f"- CPU cores: {results['cpu_count']}; torch threads measured: "
             f"{', '.join(str(t) for t in threads)} (default {results['default_threads']})",
             f"- data: {results['data_note']}",
             f"- command: `{results['command']}`", ""]
    lines += partial_lines(results)
    for recipe in results["recipes"]:
        lines += [f"## {recipe['name']}", "", recipe_heading(recipe, results), "",
                  format_markdown_table(recipe_table(recipe, threads)), ""]
        lines += [f"- {line}" for line in _headlines(recipe, threads)] + [""]
    lines.append("batchaug / it: the median, and in brackets the min-max, of the same-round "
                 "ratios (batchaug's images/s over that contender's, at the same thread count). "
                 "Every contender is timed over the same window per round, its start-up (worker "
                 "start, first batch per worker) untimed. (b) draws one random crop/flip/angle "
                 "for the whole batch, so it is not the same augmentation; 'antialias' says "
                 "which resizes antialias (PIL always does).")
    return "\n".join(lines) + "\n"


def plot(results: dict, path: str) -> None:
    """Grouped bar chart (log scale): images/s per contender, one panel per recipe."""
    import matplotlib.pyplot as plt

    fig = figure(results)
    fig.savefig(path, dpi=110)
    plt.close(fig)


# inches per contender on the x axis: its label is three lines of up to ~14 characters at 7 pt
_INCHES_PER_CONTENDER = 1.0


def figure(results: dict):
    """:func:`plot`'s matplotlib figure (each panel wide enough for its contenders' labels)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    recipes = results["recipes"]
    threads = results["thread_counts"]
    most = max([len(r["contenders"]) for r in recipes] + [1])
    panel = max(6.4, _INCHES_PER_CONTENDER * most + 1.2)  # + the y axis and its label
    fig, axes = plt.subplots(1, len(recipes), figsize=(panel * len(recipes), 4.8),
                             squeeze=False)
    colours = ["#9aa5b1", "#3e7cb1", "#f0a202", "#c0392b"]
    for ax, recipe in zip(axes[0], recipes):
        entries = recipe["contenders"]
        width = 0.8 / len(threads)
        top = 0.0
        for j, t in enumerate(threads):
            xs, ys, hatches = [], [], []
            for i, e in enumerate(entries):
                fig_t = e["by_threads"].get(str(t))
                if fig_t:
                    xs.append(i + (j - (len(threads) - 1) / 2) * width)
                    ys.append(fig_t["images_per_s"])
                    # Hatched: not the same augmentation (one random draw per batch).
                    hatches.append("" if e["per_sample"] else "//")
            bars = ax.bar(xs, ys, width=width * 0.95, color=colours[j % len(colours)],
                          label=f"{t} thread{'s' if t > 1 else ''}")
            top = max([top] + ys)
            for bar, y, hatch in zip(bars, ys, hatches):
                bar.set_hatch(hatch)
                ax.annotate(f"{y:,.0f}", (bar.get_x() + bar.get_width() / 2, y),
                            ha="center", va="bottom", fontsize=6, rotation=90,
                            xytext=(0, 2), textcoords="offset points")
        ax.set_yscale("log")
        if top > 0:
            ax.set_ylim(top=top * 4)  # room for the value labels above the bars
        ax.set_xticks(range(len(entries)))
        ax.set_xticklabels([_short_label(e) for e in entries], fontsize=7)
        ax.set_title(f"{recipe['name']} ({results['device']})", fontsize=10)
        ax.set_ylabel("images/s (log scale)")
        ax.grid(axis="y", which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("batchaug bench: stored uint8 images -> normalised float batch, end to end\n"
                 f"batch {results['batch_size']}, median of {results['rounds']} rounds of equal "
                 f"windows",
                 fontsize=9)
    fig.tight_layout()
    return fig


def _short_label(entry: dict) -> str:
    key = entry["key"]
    if key.startswith("torchvision_w"):
        return f"(a) torchvision\nper-sample\nworkers={key[len('torchvision_w'):]}"
    return {"torchvision_v2_batch": "(b) tv v2 batch\n(one draw/batch)",
            "torchvision_v2_per_sample": "(a2) tv v2\nper-sample\nuint8 tensors",
            "kornia": "(c) kornia", "batchaug": "(d) batchaug"}.get(key, key)


def check_out_dir(out_dir: str, stem: str = "results") -> None:
    """Fail now, before anything is measured, if ``write_outputs`` could not write there.

    ``--out`` names a directory (made if missing); ``{stem}.json/.md/.png`` inside it are
    replaced, as a re-run of ``make bench`` expects. An existing file at ``--out``, a parent
    that is a file, or a directory that is not writable would otherwise fail only after the
    whole benchmark had run, losing its results.
    """
    from batchaug.errors import CLIError

    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise CLIError(f"--out {out_dir} exists and is not a directory: --out names the "
                       f"directory that will hold {stem}.json, {stem}.md and {stem}.png; pick "
                       f"another path")
    for kind in ("json", "md", "png"):
        path = os.path.join(out_dir, f"{stem}.{kind}")
        if os.path.isdir(path):
            raise CLIError(f"--out {out_dir}: {path} is a directory; pick another --out")
        if os.path.exists(path) and not os.access(path, os.W_OK):
            raise CLIError(f"--out {out_dir}: {path} exists and is not writable")
    parent = os.path.abspath(out_dir)
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise CLIError(f"--out {out_dir}: cannot create it, {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise CLIError(f"--out {out_dir}: {parent} is not writable")


def write_outputs(
    results: dict,
    out_dir: str,
    stem: str = "results",
    to_markdown: Optional[Callable[[dict], str]] = None,
    to_png: Optional[Callable[[dict, str], None]] = None,
) -> Dict[str, str]:
    """Write ``{stem}.json``, ``{stem}.md`` and ``{stem}.png`` into ``out_dir``; the markdown and
    plot makers default to the bench's (``--train`` passes its own)."""
    os.makedirs(out_dir, exist_ok=True)
    paths = {kind: os.path.join(out_dir, f"{stem}.{kind}") for kind in ("json", "md", "png")}
    _check_finite(results)
    with open(paths["json"], "w") as f:
        json.dump(results, f, indent=2)
        f.write("\n")
    with open(paths["md"], "w") as f:
        f.write((to_markdown or markdown_report)(results))
    (to_png or plot)(results, paths["png"])
    return paths


def _check_finite(obj: object, where: str = "results") -> None:
    """JSON cannot hold inf/nan; a timing that produced one is a bug worth a clear message."""
    if isinstance(obj, float) and not math.isfinite(obj):
        raise ValueError(f"{where} is {obj}: a measurement took no measurable time")
    if isinstance(obj, dict):
        for k, v in obj.items():
            _check_finite(v, f"{where}.{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            _check_finite(v, f"{where}[{i}]")
