"""The regime map with the number of classes K as an axis: K = 10 (Fashion-MNIST) against K = 100 (the
glyph benchmark) at the training sizes per class measured at both.

Reads the two maps' ``regime_map.csv`` (studies/regimes/regime_map.py) and writes ``k_axis.png`` and
``k_axis.csv`` to the K = 100 folder: per model, training size, tier and method, the mean change
against ERM (points) and its 95% t-interval half-width at each K.

    python studies/regimes/k_axis.py docs/benchmarks/regimes docs/benchmarks/regimes-k100

Only cells measured at both K are drawn; the data sets differ (clothes photographs against rendered
characters of unseen typefaces), so K is not the only thing that changes between the two points.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

TIERS = ("hard", "easy")


def read_map(path: Path) -> dict[tuple[str, int, str, str], tuple[float, float]]:
    """(model, per_class, method, tier) -> (mean change, 95% half-width) of a regime_map.csv."""
    with path.open(newline="") as handle:
        return {(r["model"], int(r["per_class"]), r["method"], r["tier"]):
                (float(r["change"]), float(r["ci95"])) for r in csv.DictReader(handle)}


def k_axis_rows(k10: dict, k100: dict) -> list[dict]:
    """One row per (model, per_class, method, tier) measured at both K, with both readings."""
    rows = []
    for key in sorted(set(k10) & set(k100)):
        model, per_class, method, tier = key
        rows.append({"model": model, "per_class": per_class, "method": method, "tier": tier,
                     "change_k10": k10[key][0], "ci95_k10": k10[key][1],
                     "change_k100": k100[key][0], "ci95_k100": k100[key][1]})
    return rows


def main(k10_dir: Path, k100_dir: Path) -> None:
    rows = k_axis_rows(read_map(k10_dir / "regime_map.csv"), read_map(k100_dir / "regime_map.csv"))
    if not rows:
        raise SystemExit("k_axis.py: no cell is measured at both K (same model and images per class)")
    with (k100_dir / "k_axis.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    panels = sorted({(r["model"], r["per_class"]) for r in rows})
    methods = sorted({r["method"] for r in rows})
    figure, axes = plt.subplots(len(TIERS), len(panels), figsize=(4.8 * len(panels), 7), squeeze=False,
                                sharex=True)
    for col, (model, per_class) in enumerate(panels):
        for row, tier in enumerate(TIERS):
            axis = axes[row][col]
            for index, method in enumerate(methods):
                match = [r for r in rows if (r["model"], r["per_class"], r["method"], r["tier"])
                         == (model, per_class, method, tier)]
                if not match:
                    continue
                r = match[0]
                shift = 0.03 * (index - len(methods) / 2)
                axis.errorbar([0 + shift, 1 + shift], [r["change_k10"], r["change_k100"]],
                              yerr=[r["ci95_k10"], r["ci95_k100"]], marker="o", capsize=3, label=method)
            axis.axhline(0, color="black", linewidth=0.8)
            axis.set_xticks([0, 1], ["K = 10\nFashion-MNIST", "K = 100\nglyphs"])
            axis.set_xlim(-0.4, 1.4)
            axis.set_title(f"{model}, {per_class} per class: {tier} tier")
            if col == 0:
                axis.set_ylabel(f"{tier}-tier change vs ERM (points, 95% CI)")
    axes[0][-1].legend(fontsize=7, loc="best")
    figure.tight_layout()
    figure.savefig(k100_dir / "k_axis.png", dpi=110)
    print(f"{len(rows)} rows -> {k100_dir / 'k_axis.csv'}, {k100_dir / 'k_axis.png'}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: python studies/regimes/k_axis.py K10_REPORTS K100_REPORTS")
    main(Path(sys.argv[1]), Path(sys.argv[2]))
