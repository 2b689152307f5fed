"""Tried as a new user would: mr2.tune.tune on scikit-learn's digits (data mr2 never saw), many tunes
(issue 37: "adopt" when nothing helps must be rare while a real gain is still adopted most of the time).
Run from a folder outside the checkout (the results of docs/benchmarks/tune-new-user.md: /tmp/newuser),
with mr2 installed:

    python check.py tunes SCENARIO N      # N tunes, each on its own seeds
    python check.py truth SCENARIO SEEDS  # each candidate's true change, from many seeds
    python check.py classtruth SCENARIO SEEDS  # the same per class and seed (any tune's hard classes)
    python check.py summary               # the table, per scenario
SCENARIO: null (every candidate trains as ERM, on its own random stream), balanced (the data as it
is, the real candidates), longtailN (classes 5-9 keep N training images each, the real candidates).
Results append to results-SCENARIO.jsonl / truth-SCENARIO.json in $TUNE_CHECK_OUT (default: beside
this file; resumable); tune folders go to runs-SCENARIO/ there. Tune r uses selection seeds
1000 + 20 r, + 1 and confirmation seeds 1002 + 20 r .. + 15 (the pools of the default screen design,
issue 44: 2 + 14; its part 4 design: 2 + 17, to + 18; the racing design's results, -racing.jsonl, used 1000 + 20 r .. + 2 and
1003 + 20 r .. + 11, its 3 + 9); truth uses seeds 5000 and up, which no tune uses (r < 200). The
hard classes of the truth are ERM's 3 worst on validation, mean
over the truth's seeds."""
import io, json, os, sys, time
from pathlib import Path
import numpy as np
scenario = sys.argv[2] if len(sys.argv) > 2 else ""
if scenario.startswith("longtail") and scenario != "longtail":
    os.environ["DIGITS_TAIL"] = scenario.removeprefix("longtail")
os.environ["DIGITS_IGNORE_LOSS"] = "1" if scenario == "null" else "0"
os.environ["DIGITS_IMBALANCE"] = "1" if scenario.startswith("longtail") else "0"
import digits_user as d
import mr2.tune
import torch

HERE = Path(os.environ.get("TUNE_CHECK_OUT", Path(__file__).resolve().parent))
# The default design's confirmation pool (at least the 14 seeds of the study's first runs; tunes are 20
# seeds apart, so base + 2 .. base + 19 are free).
CONFIRM = max(14, mr2.tune.DEFAULT_DESIGN.confirmation_seeds)
assert CONFIRM <= 18, CONFIRM

def tunes(n):
    out = HERE / f"results-{scenario}.jsonl"
    done = {json.loads(l)["tune"] for l in out.read_text().splitlines()} if out.exists() else set()
    for r in range(n):
        if r in done:
            continue
        base = 1000 + 20 * r
        t = time.time()
        log = io.StringIO()
        res = mr2.tune.tune(d.train_fn, num_classes=10, seeds=[base, base + 1],
                            confirm_seeds=list(range(base + 2, base + 2 + CONFIRM)),
                            output_dir=HERE / f"runs-{scenario}", name=f"tune{r}", stream=log)
        rec = res.record.to_dict()
        row = {"tune": r, "adopt": res.adopt, "use": res.advice.use, "chosen": res.advice.chosen,
               "reason": res.advice.reason, "trainings": rec["trainings"], "wall_s": round(time.time() - t, 1),
               "last_line": log.getvalue().strip().splitlines()[-3:]}
        with out.open("a") as f:
            f.write(json.dumps(row) + "\n")
        print(r, row["adopt"], row["use"], row["chosen"], row["reason"], row["trainings"], row["wall_s"], flush=True)

def truth(nseeds):
    req = mr2.tune.make_request(num_classes=10, output_dir=HERE / "tmp", name="truth")
    seeds = range(5000, 5000 + nseeds)
    acc = {}
    for c in req.candidates:
        rows = []
        for s in seeds:
            p = d.train_fn(c, s)
            per = []
            for split in (p.val, p.test):
                y, pred = split["y_true"], split["logits"].argmax(1)
                per.append([(pred[y == k] == k).float().mean().item() for k in range(10)])
            rows.append(per)
        acc[c.label] = np.array(rows)  # seeds x (val,test) x K
        print(c.label, flush=True)
    erm = acc["erm"]
    hard = np.argsort(erm[:, 0].mean(0))[:3]  # the 3 classes ERM does worst on validation
    res = {"hard_classes": hard.tolist(), "seeds": nseeds}
    for lab, a in acc.items():
        dh = (a[:, 1, hard].mean(1) - erm[:, 1, hard].mean(1)) * 100
        do = (a[:, 1].mean(1) - erm[:, 1].mean(1)) * 100
        res[lab] = {"hard": round(dh.mean(), 2), "hard_se": round(dh.std(ddof=1) / np.sqrt(nseeds), 2),
                    "overall": round(do.mean(), 2), "overall_se": round(do.std(ddof=1) / np.sqrt(nseeds), 2)}
        print(lab, res[lab], flush=True)
    (HERE / f"truth-{scenario}.json").write_text(json.dumps(res, indent=1))

def class_truth(nseeds):
    """Each candidate's per-seed change of every class's test accuracy against ERM (points, paired by
    seed, the truth's seeds 5000 and up): truth-classes-SCENARIO.json, to judge an adoption on the
    hard classes of the tune that made it (they differ from tune to tune)."""
    req = mr2.tune.make_request(num_classes=10, output_dir=HERE / "tmp", name="truth")
    acc = {}
    for c in req.candidates:
        rows = []
        for s in range(5000, 5000 + nseeds):
            p = d.train_fn(c, s)
            y, pred = p.test["y_true"], p.test["logits"].argmax(1)
            rows.append([(pred[y == k] == k).float().mean().item() for k in range(10)])
        acc[c.label] = np.array(rows)  # seeds x K
    res = {lab: np.round((a - acc["erm"]) * 100, 4).tolist() for lab, a in acc.items()}
    (HERE / f"truth-classes-{scenario}.json").write_text(json.dumps({"seeds": nseeds, "change": res}))


def summary():
    from scipy.stats import binomtest
    print("| scenario | tunes | ADOPT (95% CI) | adopted: configuration (true hard-tier change, pts ± SE) | "
          "trainings mean (max) | s per tune |")
    print("|---|---:|---|---|---:|---:|")
    for path in sorted(HERE.glob("results-*.jsonl")):
        name = path.stem.removeprefix("results-")
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        # -racing: the old design (before 94ce0ed); -old: before commit 88b80ce
        truth_file = HERE / f"truth-{name.split('-')[0]}.json"
        truth = json.loads(truth_file.read_text()) if truth_file.exists() else {}
        adopted = [r["use"] for r in rows if r["adopt"]]
        ci = binomtest(len(adopted), len(rows)).proportion_ci(0.95, method="exact")
        counts = {label: adopted.count(label) for label in dict.fromkeys(adopted)}
        what = ", ".join(f"{label} x{n}" + (f" ({truth[label]['hard']:+.2f} ± {truth[label]['hard_se']:.2f})"
                                          if label in truth else " (null: 0 by construction)" if name.startswith("null") else "")
                         for label, n in counts.items()) or "-"
        t = [r["trainings"] for r in rows]
        w = [r["wall_s"] for r in rows]
        print(f"| {name} | {len(rows)} | {len(adopted)} = {100 * len(adopted) / len(rows):.1f}% "
              f"({100 * ci.low:.1f}-{100 * ci.high:.1f}%) | {what} | {np.mean(t):.1f} ({max(t)}) | {np.mean(w):.0f} |")


if __name__ == "__main__":
    if sys.argv[1] == "summary":
        summary()
    else:
        {"tunes": tunes, "truth": truth, "classtruth": class_truth}[sys.argv[1]](int(sys.argv[3]))
