"""Same-seed correlation of ERM's and a candidate's test hard tier (issue 44 item 2).

Trains ERM and a few candidates on the same seeds in small Fashion-MNIST cells (in this process,
through :func:`mr2.engine.train`) and writes one row per run; ``analyse`` pairs every candidate's run
with ERM's run of the same seed and reports, per cell, code version and candidate, the Pearson
correlation of the test hard-tier accuracy over seeds (95% interval by Fisher's z) and the SD of the
paired difference.

    # the code to measure is the mr2 on PYTHONPATH (e.g. a worktree of the old commit)
    PYTHONPATH=/work/crn-before/src nohup nice -n 5 .venv/bin/python studies/crn/crn.py run \\
        --version before --cells mlp-n100 --seeds 0-9 --out studies/crn/runs.csv > log 2>&1 &
    .venv/bin/python studies/crn/crn.py analyse studies/crn/runs.csv --out studies/crn/correlations.csv

Tiers: the hard tier is the third of classes (3 of 10, :func:`mr2.report.tiers.assign_tiers`) with
the lowest validation accuracy of ERM, pooled over the cell's seeds and the code version's runs (the
sweeps' ``tier_source: validation``), fixed for every method of that cell and version.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from mr2.report.tiers import assign_tiers

FMNIST = "/usr/share/datasets/fashion-mnist"

_OPTIM = {"name": "sgd", "lr": 0.05, "momentum": 0.9, "weight_decay": 5.0e-4, "warmup_epochs": 1,
          "scheduler": "cosine"}
_MLP = {"name": "mlp", "options": {"hidden_dims": [512, 256]}}
_MLP_DROPOUT = {"name": "mlp", "options": {"hidden_dims": [512, 256], "dropout": 0.2}}
_CNN = {"name": "small_cnn", "options": {"channels": [8, 16, 32], "hidden_dim": 64}}

#: Cell -> (training images per class, model, epochs, augment (RandomCrop 28, padding 2), dropout).
#: mlp-n100 and cnn-n100 are the regime map's cells (studies/regimes, fewer epochs for cnn-n100);
#: mlp-n100-aug and mlp-n300-aug add the randomness the engine's streams separate: augmentation and
#: dropout (30 epochs).
CELLS: dict[str, dict[str, Any]] = {
    "mlp-n100": {"per_class": 100, "model": _MLP, "epochs": 100, "augment": False},
    "cnn-n100": {"per_class": 100, "model": _CNN, "epochs": 40, "augment": False},
    "mlp-n100-aug": {"per_class": 100, "model": _MLP_DROPOUT, "epochs": 30, "augment": True},
    "mlp-n300-aug": {"per_class": 300, "model": _MLP_DROPOUT, "epochs": 30, "augment": True},
}

#: Method label -> config overrides. ``erm_nudged`` is ERM with the weight decay changed by 0.2%: the
#: correlation that two nearly identical trainings on the same seed keep (a ceiling for any candidate).
METHODS: dict[str, dict[str, Any]] = {
    "erm": {"method": {"name": "erm"}},
    "erm_nudged": {"method": {"name": "erm"}, "optim": {"weight_decay": 5.01e-4}},
    "mr2_logit_only": {"method": {"name": "mr2", "options": {"variant": "logit_only"}}},
    "center_loss": {"method": {"name": "center_loss"}},
    "ldam": {"method": {"name": "ldam"}},
}

FIELDS = ["version", "cell", "method", "seed", "seconds", "test_per_class", "val_per_class"]


def run_config(cell: str, method: str, seed: int, output_dir: str) -> dict[str, Any]:
    spec = CELLS[cell]
    data: dict[str, Any] = {"name": "fashion_mnist", "root": FMNIST, "val_fraction": 0.1, "split_seed": 0,
                            "batch_size": 128, "eval_batch_size": 1000,
                            "train_per_class": spec["per_class"], "augment": spec["augment"]}
    if spec["augment"]:
        data["options"] = {"mnist_crop": True}
    overrides = METHODS[method]
    return {
        "name": f"{cell}-{method}-s{seed}", "output_dir": output_dir, "seed": seed, "device": "cpu",
        "log_every": 1000, "data": data, "model": spec["model"],
        "method": overrides["method"],
        "optim": {**_OPTIM, "epochs": spec["epochs"], **overrides.get("optim", {})},
    }


def _seeds(text: str) -> list[int]:
    low, _, high = text.partition("-")
    return list(range(int(low), int(high or low) + 1))


def run(args: argparse.Namespace) -> None:
    import torch

    from mr2.config import config_from_dict
    from mr2.engine import train

    torch.set_num_threads(1)
    out = Path(args.out)
    done: set[tuple[str, str, str, str]] = set()
    if out.exists():
        with out.open(newline="") as handle:
            done = {(r["version"], r["cell"], r["method"], r["seed"]) for r in csv.DictReader(handle)}
    else:
        with out.open("w", newline="") as handle:
            csv.writer(handle).writerow(FIELDS)
    import mr2

    print(f"mr2 from {mr2.__file__}", flush=True)
    for seed in _seeds(args.seeds):
        for cell in args.cells.split(","):
            for method in args.methods.split(","):
                if (args.version, cell, method, str(seed)) in done:
                    continue
                with tempfile.TemporaryDirectory() as scratch:
                    config = config_from_dict(run_config(cell, method, seed, scratch))
                    start = time.process_time()
                    final = train(config, quiet=True)
                    seconds = time.process_time() - start
                    metrics = Path(scratch, config.name, "metrics.jsonl").read_text().splitlines()
                    val = json.loads(metrics[-1])["val_per_class_accuracy"]
                row = [args.version, cell, method, seed, f"{seconds:.1f}",
                       json.dumps(final["per_class_accuracy"]), json.dumps(val)]
                with out.open("a", newline="") as handle:
                    csv.writer(handle).writerow(row)
                print(f"{args.version} {cell} {method} seed {seed}: {seconds:.1f} s CPU, "
                      f"test {final['overall_accuracy']:.4f}", flush=True)


def fisher_interval(r: float, n: int) -> tuple[float, float]:
    """95% interval of a Pearson correlation from ``n`` pairs (Fisher's z, SE 1 / sqrt(n - 3))."""
    if n < 4 or not math.isfinite(r) or abs(r) >= 1:
        return math.nan, math.nan
    z, half = math.atanh(r), 1.959964 / math.sqrt(n - 3)
    return math.tanh(z - half), math.tanh(z + half)


def _hard_tiers(rows: list[dict[str, str]]) -> dict[str, np.ndarray]:
    """cell -> [K] bool: the hard tier from ERM's validation accuracy pooled over seeds and versions."""
    erm_val: dict[str, list[list[float]]] = defaultdict(list)
    for row in rows:
        if row["method"] == "erm":
            erm_val[row["cell"]].append(json.loads(row["val_per_class"]))
    return {cell: assign_tiers(np.mean(values, axis=0), 3) == 2 for cell, values in erm_val.items()}


def _pooled(entries: list[tuple[float, int]]) -> tuple[float, float, float, int]:
    """Fisher-z average of correlations weighted by n - 3, with its 95% interval."""
    usable = [(math.atanh(r), n - 3) for r, n in entries if n > 3 and math.isfinite(r) and abs(r) < 1]
    weight = sum(w for _, w in usable)
    if not weight:
        return math.nan, math.nan, math.nan, 0
    z = sum(zi * w for zi, w in usable) / weight
    half = 1.959964 / math.sqrt(weight)
    return math.tanh(z), math.tanh(z - half), math.tanh(z + half), sum(n for _, n in entries)


def analyse(args: argparse.Namespace) -> None:
    rows = []
    for path in args.runs:
        with open(path, newline="") as handle:
            rows += list(csv.DictReader(handle))
    hard_tiers = _hard_tiers(rows)
    groups: dict[tuple[str, str], list[dict[str, str]]] = defaultdict(list)
    for row in rows:
        groups[(row["cell"], row["version"])].append(row)
    results: list[dict[str, Any]] = []
    for (cell, version), runs in sorted(groups.items()):
        hard = hard_tiers[cell]
        by_method: dict[str, dict[int, float]] = defaultdict(dict)
        for r in runs:
            per_class = np.asarray(json.loads(r["test_per_class"]))
            by_method[r["method"]][int(r["seed"])] = 100 * float(np.mean(per_class[hard]))
        erm = by_method.pop("erm", {})
        for method, seeds in sorted(by_method.items()):
            common = sorted(set(seeds) & set(erm))
            if len(common) < args.min_seeds:
                continue
            a, b = np.array([erm[s] for s in common]), np.array([seeds[s] for s in common])
            r = float(np.corrcoef(a, b)[0, 1])
            low, high = fisher_interval(r, len(common))
            diff = b - a
            results.append({
                "cell": cell, "version": version, "method": method, "seeds": len(common),
                "hard_classes": " ".join(str(k) for k in np.flatnonzero(hard)),
                "r": round(r, 3), "r_low": round(low, 3), "r_high": round(high, 3),
                "erm_sd": round(float(a.std(ddof=1)), 3), "method_sd": round(float(b.std(ddof=1)), 3),
                "mean_diff": round(float(diff.mean()), 3), "diff_sd": round(float(diff.std(ddof=1)), 3),
                "identical_to_erm": int(np.array_equal(a, b)),
            })
    for version in sorted({r["version"] for r in results}):
        for method in sorted({r["method"] for r in results}):
            mine = [r for r in results if r["version"] == version and r["method"] == method]
            if len(mine) < 2:
                continue
            r, low, high, n = _pooled([(float(x["r"]), int(x["seeds"])) for x in mine])
            results.append({
                "cell": "pooled (Fisher z): " + " ".join(x["cell"] for x in mine), "version": version,
                "method": method, "seeds": n, "hard_classes": "", "r": round(r, 3), "r_low": round(low, 3),
                "r_high": round(high, 3), "erm_sd": "", "method_sd": "", "mean_diff": "",
                "diff_sd": "", "identical_to_erm": "",
            })
    _same_runs(rows)
    if args.out is None:
        _write(sys.stdout, results)
        return
    with open(args.out, "w", newline="") as handle:
        _write(handle, results)
    print(Path(args.out).read_text())


def _same_runs(rows: list[dict[str, str]]) -> None:
    """Print, per cell and method, how many seeds trained in both versions give identical results."""
    runs: dict[tuple[str, str, str], dict[str, str]] = defaultdict(dict)
    for row in rows:
        runs[(row["cell"], row["method"], row["seed"])][row["version"]] = row["test_per_class"]
    counts: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for (cell, method, _), versions in runs.items():
        if len(versions) > 1:
            counts[(cell, method)][0] += len(set(versions.values())) == 1
            counts[(cell, method)][1] += 1
    for (cell, method), (same, total) in sorted(counts.items()):
        print(f"# {cell} {method}: test per-class accuracy equal in all versions, {same} of {total} seeds")


def _write(handle: Any, results: list[dict[str, Any]]) -> None:
    writer = csv.DictWriter(handle, fieldnames=list(results[0]))
    writer.writeheader()
    writer.writerows(results)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("run")
    p.add_argument("--version", required=True, help="label of the code measured (before / after)")
    p.add_argument("--cells", default=",".join(CELLS))
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--seeds", default="0-9", help="e.g. 0-9")
    p.add_argument("--out", required=True)
    p.set_defaults(func=run)
    a = sub.add_parser("analyse")
    a.add_argument("runs", nargs="+")
    a.add_argument("--out")
    a.add_argument("--min-seeds", type=int, default=4, help="leave out pairs of fewer seeds")
    a.set_defaults(func=analyse)
    args = parser.parse_args()
    os.environ.setdefault("PYTHONHASHSEED", "0")
    args.func(args)


if __name__ == "__main__":
    main()
