"""Copy a finished K = 100 regime cell's report into the repository (no checkpoints, no run directories).

    python studies/glyphs/collect_cell.py runs/glyphs-mlp-n100 docs/benchmarks/regimes-k100/mlp-n100

Copies the sweep report's tables (``report.md``, ``runs.csv``, ``comparison.csv``, ``settings.csv``,
``per_class.csv``) and writes ``training.csv``: per run, the last epoch's training accuracy (running
mean over the epoch, as the engine logs it), the number of epochs, and the summed epoch seconds, from
the run's ``metrics.jsonl``; it prints the lowest final training accuracy of each method (the cells
must be at a training-accuracy plateau).
"""

from __future__ import annotations

import csv
import json
import shutil
import sys
from collections import defaultdict
from pathlib import Path

TABLES = ("report.md", "runs.csv", "comparison.csv", "settings.csv", "per_class.csv")


def main(sweep: Path, out: Path) -> None:
    report = sweep / "report"
    missing = [name for name in TABLES if not (report / name).is_file()]
    if missing:
        raise SystemExit(f"collect_cell.py: {report} lacks {', '.join(missing)}: is the sweep finished?")
    out.mkdir(parents=True, exist_ok=True)
    for name in TABLES:
        shutil.copyfile(report / name, out / name)
    rows = []
    for metrics in sorted(sweep.glob("*__seed=*/metrics.jsonl")):
        epochs = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
        run = metrics.parent.name
        rows.append({"run": run, "method": run.split("__")[0], "epochs": epochs[-1]["epoch"],
                     "final_train_accuracy": epochs[-1]["train_accuracy"],
                     "train_seconds": round(sum(e["epoch_seconds"] for e in epochs), 1)})
    with (out / "training.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    lowest: dict[str, float] = defaultdict(lambda: 1.0)
    for row in rows:
        lowest[row["method"]] = min(lowest[row["method"]], row["final_train_accuracy"])
    print(f"{len(rows)} runs -> {out}; lowest final training accuracy per method:")
    for method, value in sorted(lowest.items()):
        print(f"  {method}: {100 * value:.2f}%")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    main(Path(sys.argv[1]), Path(sys.argv[2]))
