"""The regime map's figure and table from the cells' reports.

Reads ``<reports>/<model>-n<N>/runs.csv`` and ``<reports>/<model>-n<N>-<part>/runs.csv`` (the sweep
reports' per-run tables: tier accuracies with tiers fixed by ERM's validation per-class accuracy; a
``-<part>`` directory is a later sweep of the same cell with other methods, e.g. ``-baselines``, which
carries its own ERM runs; ``-track`` directories, tune's choices outside the defaults run for its
track record by studies/tune_track/track.py, are not part of the map), pairs every method's run
with ERM's run of the same seed in the same report, and writes, per model, cell and method, the
mean change against ERM and its 95% t-interval over seeds, for the hard and the easy tier:

    python studies/regimes/regime_map.py docs/benchmarks/regimes
    python studies/regimes/regime_map.py docs/benchmarks/regimes-k100 "glyph benchmark, K = 100"

-> ``regime_map.csv`` and ``regime_map.png`` in that directory (the optional second argument names
the data on the figure's axis; default Fashion-MNIST).
"""

from __future__ import annotations

import csv
import math
import re
import sys
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from scipy import stats

TIERS = ("hard", "easy")
CELL = re.compile(r"(?P<model>[a-z]+)-n(?P<n>\d+)(?:-(?P<part>[a-z]+))?$")


def cell_changes(runs_csv: Path) -> dict[str, dict[str, list[float]]]:
    """method -> tier -> paired changes against ERM (points), one per seed present in both."""
    with runs_csv.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    by_seed: dict[str, dict[str, dict[str, float]]] = defaultdict(dict)
    for row in rows:
        by_seed[row["method"]][row["seed"]] = {t: float(row[f"tier:{t}"]) for t in TIERS}
    erm = by_seed.pop("erm")
    changes: dict[str, dict[str, list[float]]] = {}
    for method, seeds in by_seed.items():
        common = sorted(set(seeds) & set(erm))
        changes[method] = {t: [100 * (seeds[s][t] - erm[s][t]) for s in common] for t in TIERS}
    return changes


def interval(values: list[float]) -> tuple[float, float, float]:
    """Mean and 95% t-interval half-width over seeds."""
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, math.nan, n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return mean, float(stats.t.ppf(0.975, n - 1)) * sd / math.sqrt(n), n


def main(reports: Path, data: str = "Fashion-MNIST") -> None:
    table = []
    for runs_csv in sorted(reports.glob("*/runs.csv")):
        match = CELL.match(runs_csv.parent.name)
        if match is None or match["part"] == "track":
            continue
        for method, tiers in cell_changes(runs_csv).items():
            cell = (match["model"], int(match["n"]), method)
            if any((r["model"], r["per_class"], r["method"]) == cell for r in table):
                continue  # a method measured in two reports of one cell: the first (sorted) counts
            for tier, values in tiers.items():
                mean, half, n = interval(values)
                table.append({"model": match["model"], "per_class": int(match["n"]), "method": method,
                              "tier": tier, "change": mean, "ci95": half, "seeds": n})
    table.sort(key=lambda r: (r["model"], r["tier"], r["method"], r["per_class"]))
    with (reports / "regime_map.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(table[0]))
        writer.writeheader()
        writer.writerows(table)
    models = sorted({r["model"] for r in table})
    methods = sorted({r["method"] for r in table})
    figure, axes = plt.subplots(len(TIERS), len(models), figsize=(5.5 * len(models), 7), squeeze=False,
                                sharex=True)
    for col, model in enumerate(models):
        for row, tier in enumerate(TIERS):
            axis = axes[row][col]
            for index, method in enumerate(methods):
                points = [r for r in table
                          if r["model"] == model and r["tier"] == tier and r["method"] == method]
                if not points:
                    continue
                xs = [p["per_class"] * (1 + 0.03 * (index - len(methods) / 2)) for p in points]
                axis.errorbar(xs, [p["change"] for p in points], yerr=[p["ci95"] for p in points],
                              marker="o", capsize=3, label=method)
            axis.axhline(0, color="black", linewidth=0.8)
            axis.set_xscale("log")
            sizes = sorted({r["per_class"] for r in table})
            axis.set_xticks(sizes, [str(n) for n in sizes])
            axis.minorticks_off()
            axis.set_title(f"{model}: {tier} tier")
            axis.set_ylabel(f"{tier}-tier change vs ERM (points, 95% CI)")
            if row == len(TIERS) - 1:
                axis.set_xlabel(f"training images per class ({data})")
    axes[0][-1].legend(fontsize=8, loc="best")
    figure.tight_layout()
    figure.savefig(reports / "regime_map.png", dpi=120)
    print(f"{len(table)} rows -> {reports / 'regime_map.csv'}, {reports / 'regime_map.png'}")
    print(markdown_tables(table))


ORDER = ("mr2", "mr2_logit_only", "mr2_distance_1d", "mr2_additive_margin", "jtt", "group_dro")


def _method_order(method: str) -> tuple[int, str]:
    return (ORDER.index(method) if method in ORDER else len(ORDER), method)


def markdown_tables(table: list[dict]) -> str:
    """One markdown table per model and tier: methods x cells, mean change ± 95% half-width
    (``*``: the interval excludes 0), as BENCHMARKS.md section 7 shows them."""
    blocks = []
    for model in sorted({r["model"] for r in table}):
        sizes = sorted({r["per_class"] for r in table if r["model"] == model})
        for tier in TIERS:
            rows = [r for r in table if r["model"] == model and r["tier"] == tier]
            lines = [f"{model}, {tier} tier: change against ERM in points, mean ± 95% t-interval half-width "
                     "over the seeds (paired by seed)", "",
                     "| method | " + " | ".join(f"{n}/class" for n in sizes) + " |",
                     "|---|" + "---:|" * len(sizes)]
            for method in sorted({r["method"] for r in rows}, key=_method_order):
                cells = []
                for n in sizes:
                    match = [r for r in rows if r["method"] == method and r["per_class"] == n]
                    if not match:
                        cells.append("n/a")
                        continue
                    r = match[0]
                    star = "*" if abs(r["change"]) > r["ci95"] else ""
                    cells.append(f"{r['change']:+.2f} ± {r['ci95']:.2f}{star}")
                lines.append(f"| {method} | " + " | ".join(cells) + " |")
            blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/benchmarks/regimes"), *sys.argv[2:3])
