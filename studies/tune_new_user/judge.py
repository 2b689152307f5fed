"""Judge each ADOPT of a scenario's tunes against the per-class truth (python check.py classtruth
SCENARIO 12): the adopted candidate's true change (test, points, mean ± SE over the truth's seeds,
paired with ERM) on the hard classes of the tune that adopted it (read from its recommendation.json in
runs-SCENARIO/) and on the truth's hard classes (ERM's 3 worst on validation over the truth's seeds).

    python judge.py SCENARIO     # from the folder of check.py's results ($TUNE_CHECK_OUT)
"""
import json
import os
import sys
from pathlib import Path

import numpy as np

HERE = Path(os.environ.get("TUNE_CHECK_OUT", Path(__file__).resolve().parent))
scenario = sys.argv[1]
change = json.loads((HERE / f"truth-classes-{scenario}.json").read_text())["change"]
truth_hard = json.loads((HERE / f"truth-{scenario}.json").read_text())["hard_classes"]


def mean_se(label, classes):
    a = np.array(change[label])[:, classes].mean(1)
    return f"{a.mean():+.2f} ± {a.std(ddof=1) / np.sqrt(len(a)):.2f}"


for line in (HERE / f"results-{scenario}.jsonl").read_text().splitlines():
    row = json.loads(line)
    if not row["adopt"]:
        continue
    rec = json.loads((HERE / f"runs-{scenario}" / f"tune{row['tune']}" / "recommendation.json").read_text())
    hard = rec["verdict"]["hard_classes"]
    print(row["tune"], row["use"], "tune's hard classes", hard, mean_se(row["use"], hard),
          "| truth's", truth_hard, mean_se(row["use"], truth_hard))
