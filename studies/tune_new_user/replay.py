"""Replay the new-user study's tunes (check.py's results and tune folders in $TUNE_CHECK_SRC, default
/tmp/newuser) with another design: each tune's folder is copied to OUT and mr2.tune.tune is run again
on the same seeds with the design; its stored trials are reused, and any trial it must train is
counted (new_trainings: 0 for a design that only changes the levels). Results, beside the old ones,
go to OUT/results-SCENARIO.jsonl (resumable); the truth files are copied there, so that judge.py runs
with TUNE_CHECK_OUT=OUT.

    python replay.py SCENARIO DESIGN_NAME OUT [LIMIT]   # DESIGN_NAME: default, or a name of
                                                        # benchmarks/tune_design_search.py --list or of
                                                        # tune_operating_characteristics.py's DESIGNS
A design that uses more than 14 confirmation seeds gets them (up to base + 19, below the next tune's).
"""
import importlib.util
import io
import json
import os
import shutil
import sys
import time
from pathlib import Path
scenario, name, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
limit = int(sys.argv[4]) if len(sys.argv) > 4 else 10**9
if scenario.startswith("longtail") and scenario != "longtail":
    os.environ["DIGITS_TAIL"] = scenario.removeprefix("longtail")
os.environ["DIGITS_IGNORE_LOSS"] = "1" if scenario == "null" else "0"
os.environ["DIGITS_IMBALANCE"] = "1" if scenario.startswith("longtail") else "0"
SRC = Path(os.environ.get("TUNE_CHECK_SRC", "/tmp/newuser"))
sys.path.insert(0, str(SRC))
import digits_user as d
import mr2.tune
spec = importlib.util.spec_from_file_location(
    "search", Path(__file__).resolve().parents[2] / "benchmarks" / "tune_design_search.py")
search = importlib.util.module_from_spec(spec); sys.modules["search"] = search; spec.loader.exec_module(search)
if name == "default":
    design = mr2.tune.design.DEFAULT_DESIGN
elif name in search.designs():
    design = search.designs()[name]
else:  # a name of benchmarks/tune_operating_characteristics.py's DESIGNS
    design = search.OC.DESIGNS[name][0]
# the design's confirmation pool (the study's tunes are 20 seeds apart: base + 2 .. base + 19 are free)
confirm = max(14, design.confirmation_seeds)
assert confirm <= 18, confirm
src = SRC
out.mkdir(parents=True, exist_ok=True)
for f in src.glob(f"truth*-{scenario}.json"):
    shutil.copy(f, out / f.name)
res_file = out / f"results-{scenario}.jsonl"
done = {json.loads(l)["tune"] for l in res_file.read_text().splitlines()} if res_file.exists() else set()
def count(p):
    return sum(1 for _ in (p / "trials").glob("*/*/seed=*"))
for line in (src / f"results-{scenario}.jsonl").read_text().splitlines():
    old = json.loads(line); r = old["tune"]
    if r >= limit:
        break
    if r in done:
        continue
    target = out / f"runs-{scenario}" / f"tune{r}"
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(src / f"runs-{scenario}" / f"tune{r}", target)
    before = count(target)
    base = 1000 + 20 * r
    t = time.time(); log = io.StringIO()
    res = mr2.tune.tune(d.train_fn, num_classes=10, seeds=[base, base + 1],
                        confirm_seeds=list(range(base + 2, base + 2 + confirm)), output_dir=out / f"runs-{scenario}",
                        name=f"tune{r}", stream=log, design=design)
    rec = res.record.to_dict()
    row = {"tune": r, "adopt": res.adopt, "use": res.advice.use, "chosen": res.advice.chosen,
           "reason": res.advice.reason, "trainings": rec["trainings"], "new_trainings": count(target) - before,
           "old_adopt": old["adopt"], "old_use": old["use"], "old_trainings": old["trainings"],
           "wall_s": round(time.time() - t, 1)}
    with res_file.open("a") as f:
        f.write(json.dumps(row) + "\n")
    print(json.dumps(row), flush=True)
