"""`mr2 tune`'s track record (issue 25 item 3): run tune on a regime-map cell's configuration.

The protocol, the seeds and the rule that picks the default candidate set are fixed in
docs/benchmarks/tune-track-record.md (committed before the runs). This script only runs it:

    python studies/tune_track/track.py run CELL --candidates quick|full --out runs/tune-track \
        [--glyphs glyphs.npz]

CELL is a regime-map cell: ``cnn-n100`` ... ``mlp-n1000`` (Fashion-MNIST, studies/regimes/) or
``glyphs-cnn-n100`` ... ``glyphs-mlp-n300`` (the glyph benchmark, studies/glyphs/regimes/; give the
glyph file with --glyphs). The cell's sweep ``base`` becomes the tune's run configuration
(``<out>/configs/<CELL>.yaml``); the tune goes to ``<out>/<CELL>-<SET>/`` and its wall time (one entry per
invocation) to ``<out>/<CELL>-<SET>/wall_time.json``. A finished tune is resumed (nothing reruns), as with any
``mr2 tune``.

    python studies/tune_track/track.py extend CELL LABEL... --out runs/tune-track [--glyphs glyphs.npz]

trains chosen candidates that are not in the cell's regime-map row on the row's seeds 0-4 (with ERM,
for the pairing), as the protocol says; collect its report into the row's ``<cell>-track`` folder.

    python studies/tune_track/track.py summary --out runs/tune-track

prints, per finished tune: the choice, its fresh-seed change against ERM, the best configuration of
the cell's regime-map row in hindsight and the regret, then the rule's outcome (once all are in).

    python studies/tune_track/track.py compare --out docs/benchmarks/tune-track [--old full --new full-v2]

prints the ``full`` set's re-run with the design of issue 37 (``<cell>-full-v2``: advice, contenders,
fresh-seed change, trainings, wall time, regret), then the old tunes (their advice read under today's
gate) and the new ones side by side, with means over the cells that have both. ``run ... --v3`` re-runs
with the design of issue 44 (``<cell>-full-v3``); ``compare --old full-v2 --new full-v3`` sets it
beside issue 37's.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
REGIMES = ROOT / "docs" / "benchmarks" / "regimes"  # Fashion-MNIST cells' reports
REGIMES_K100 = ROOT / "docs" / "benchmarks" / "regimes-k100"  # the glyph cells' reports
#: tune's candidate label -> the regime map's method label for the same configuration (the others are
#: not in the regime-map rows: c_bar 0.5 / 2, additive margin m 0.25 / 1, JTT lambda_up 20, HBR AUM).
IN_ROW = {"mr2-paper-c1": "mr2", "mr2-logit_only-c1": "mr2_logit_only",
          "mr2-distance_1d-c1": "mr2_distance_1d", "mr2-additive_margin-m0.5": "mr2_additive_margin",
          "group_dro": "group_dro", "center_loss": "center_loss", "supcon": "supcon"}
CELLS = ("cnn-n100", "cnn-n300", "cnn-n1000", "mlp-n100", "mlp-n300", "mlp-n1000",
         "glyphs-cnn-n100", "glyphs-cnn-n300", "glyphs-mlp-n100", "glyphs-mlp-n300")
SELECTION_RUNS = {"quick": 4, "full": 18}  # candidates per selection seed
SELECTION_SEEDS = "5,6,7"
CONFIRMATION_SEEDS = "8,9,10"
#: The re-runs, by suffix: their confirmation seeds (the selection seeds stay 5-7). ``v2``: the design
#: of issue 37 (racing selection on seeds 5-7; a sequential confirmation needs up to 9 fresh seeds:
#: 8-16). ``v3``: the design of issue 44 (``DEFAULT_DESIGN`` since b310293: every candidate on seed 5,
#: ERM on 5 and 6; a screen of seed 5's test runs and 1 fresh seed, then the finalist on up to 16 more:
#: 17 fresh seeds, 8-24). Their tunes go to ``<cell>-<set>-<suffix>``.
RERUNS = {"v2": ",".join(str(s) for s in range(8, 17)), "v3": ",".join(str(s) for s in range(8, 25))}
SETS = ("quick", "full")


def cell_spec(cell: str) -> Path:
    """The regime-map sweep file of CELL."""
    if cell.startswith("glyphs-"):
        path = ROOT / "studies" / "glyphs" / "regimes" / f"{cell.removeprefix('glyphs-')}.yaml"
    else:
        path = ROOT / "studies" / "regimes" / f"{cell}.yaml"
    if not path.is_file():
        raise SystemExit(f"track.py: unknown cell {cell!r} (no {path.relative_to(ROOT)})")
    return path


def run_config(cell: str, out: Path, glyphs: Path | None) -> Path:
    """Write the cell's base configuration as a run configuration; return its path."""
    base = yaml.safe_load(cell_spec(cell).read_text())["base"]
    if cell.startswith("glyphs-"):
        if glyphs is None:
            raise SystemExit("track.py: a glyph cell needs --glyphs FILE (studies/glyphs/make_glyphs.py)")
        base["data"]["root"] = str(glyphs.resolve())
    config = {"name": cell, "output_dir": str(out), **base}
    path = out / "configs" / f"{cell}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def _mean_ci(values: list[float]) -> tuple[float, float]:
    """Mean and 95% t-interval half-width (nan with fewer than 2 values)."""
    from scipy import stats

    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, math.nan
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return mean, float(stats.t.ppf(0.975, n - 1)) * sd / math.sqrt(n)


def regime_row(cell: str) -> dict[str, float]:
    """The cell's regime-map row: method -> mean hard-tier change against ERM (points, seeds 0-4).

    Reads every report of the cell (``<cell>``, ``<cell>-baselines``, and ``<cell>-track``: tune's
    configurations that are not in the row, run on seeds 0-4); the first report measuring a method
    counts, as in studies/regimes/regime_map.py. Empty (no row, no best in hindsight) until the
    cell's own report is collected."""
    sys.path.insert(0, str(ROOT / "studies" / "regimes"))
    from regime_map import cell_changes

    glyphs = cell.startswith("glyphs-")
    base, name = (REGIMES_K100, cell.removeprefix("glyphs-")) if glyphs else (REGIMES, cell)
    if not (base / name / "runs.csv").is_file():
        return {}
    row: dict[str, float] = {"erm": 0.0}
    for report in sorted(base.glob(f"{name}*/runs.csv")):
        if report.parent.name not in (name, f"{name}-baselines", f"{name}-track"):
            continue
        for method, tiers in cell_changes(report).items():
            if method not in row and len(tiers["hard"]) == 5:
                row[method] = sum(tiers["hard"]) / 5
    return row


def summary(out: Path) -> list[dict[str, Any]]:
    """One row per finished (cell, set) tune: the choice, its fresh-seed change, its regret."""
    rows = []
    for cell in CELLS:
        row = regime_row(cell)
        for candidate_set in SETS:
            record_file = out / f"{cell}-{candidate_set}" / "recommendation.json"
            if not record_file.is_file():
                continue
            record = json.loads(record_file.read_text())
            label = "erm" if record["recommendation_is_erm"] else record["label"]
            verdict = record.get("verdict") or {}
            hard = [100 * d for d in (verdict.get("hard_tier") or {}).get("differences") or []]
            overall = [100 * d for d in (verdict.get("overall") or {}).get("differences") or []]
            hard_mean, hard_ci = _mean_ci(hard) if hard else (0.0, math.nan)
            overall_mean, overall_ci = _mean_ci(overall) if overall else (0.0, math.nan)
            method = "erm" if label == "erm" else IN_ROW.get(label, label)
            chosen = row.get(method)
            best_method = max(row, key=lambda m: row[m]) if row else None
            walls = json.loads((out / f"{cell}-{candidate_set}" / "wall_time.json").read_text()) \
                if (out / f"{cell}-{candidate_set}" / "wall_time.json").is_file() else []
            rows.append({
                "cell": cell, "set": candidate_set, "choice": label,
                "outcome": verdict.get("outcome", "nothing to confirm"),
                "fresh_hard": hard_mean, "fresh_hard_ci95": hard_ci,
                "fresh_overall": overall_mean, "fresh_overall_ci95": overall_ci,
                "harm": label != "erm" and hard_ci == hard_ci and hard_mean + hard_ci < 0,
                "best_in_hindsight": best_method, "best_change": row.get(best_method),
                "chosen_change": chosen,
                "regret": None if chosen is None or best_method is None else row[best_method] - chosen,
                "wall_min": round(sum(w["wall_s"] for w in walls) / 60, 1),
                "commit": record.get("git_commit"),
            })
    return rows


def apply_rule(rows: list[dict[str, Any]]) -> str:
    """docs/benchmarks/tune-track-record.md's rule, once every (cell, set) tune and regret exists."""
    done = {(r["cell"], r["set"]) for r in rows if r["regret"] is not None}
    missing = [f"{c}/{s}" for c in CELLS for s in SETS if (c, s) not in done]
    if missing:
        return f"rule not applied: {len(missing)} of {len(CELLS) * len(SETS)} (cell, set) results missing"
    mean_regret = {s: sum(r["regret"] for r in rows if r["set"] == s) / len(CELLS) for s in SETS}
    harms = {s: sum(r["harm"] for r in rows if r["set"] == s) for s in SETS}
    qualifying = [s for s in SETS if harms[s] == 0]
    figures = ", ".join(f"{s}: mean regret {mean_regret[s]:.2f}, harm count {harms[s]}" for s in SETS)
    if not qualifying:
        return f"{figures}; no set qualifies: the default stays quick"
    lowest = min(mean_regret[s] for s in qualifying)
    chosen = min((s for s in qualifying if mean_regret[s] <= lowest + 0.25), key=SELECTION_RUNS.__getitem__)
    return f"{figures}; default: {chosen}"


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return "n/a" if value != value else f"{value:+.2f}"
    return "n/a" if value is None else str(value)


def print_summary(out: Path) -> None:
    rows = summary(out)
    print("| cell | set | choice | verdict | fresh hard (pts, 95% CI) | fresh overall | best in hindsight "
          "(hard, seeds 0-4) | chosen's change | regret | wall (min) |")
    print("|---|---|---|---|---:|---:|---|---:|---:|---:|")
    for r in rows:
        best = "no row yet" if r["best_in_hindsight"] is None else \
            f"{r['best_in_hindsight']} ({_fmt(r['best_change'])})"
        regret = format(r["regret"], ".2f") if r["regret"] is not None else \
            "no row yet" if r["best_in_hindsight"] is None else "not in the row yet"
        cells = [r["cell"], r["set"], r["choice"], r["outcome"],
                 f"{_fmt(r['fresh_hard'])} ± {_fmt(r['fresh_hard_ci95']).lstrip('+')}",
                 _fmt(r["fresh_overall"]), best,
                 _fmt(r["chosen_change"]), regret, str(r["wall_min"])]
        print("| " + " | ".join(cells) + " |")
    print()
    print(apply_rule(rows))


def _trainings(record: dict[str, Any], candidate_set: str) -> int:
    """Trainings of a tune: recorded since issue 37; before, every candidate on the 3 selection seeds
    plus the confirmation's runs (in its figures)."""
    if "trainings" in record:
        return int(record["trainings"])
    methods = ((record.get("confirmation") or {}).get("figures") or {}).get("methods") or {}
    return SELECTION_RUNS[candidate_set] * 3 + sum(len(m.get("seeds") or []) for m in methods.values())


def _used_change(row: dict[str, float], record: Any) -> float | None:
    """The seeds 0-4 hard-tier change of what the advice says to use (ERM: 0)."""
    label = record.use["label"] if record.adopt else "erm"
    return row.get("erm" if label == "erm" else IN_ROW.get(label, label))


def read_record(data: dict[str, Any]) -> Any:
    """A ``recommendation.json`` as a :class:`mr2.tune.record.TuneRecord`, also one written before
    ``adopt`` existed (the old ``<cell>-full`` tunes): then ``chosen`` is its ``label``, and it is
    adopted only if its verdict was ``confirmed`` (today's gate)."""
    from mr2.tune.candidates import Candidate
    from mr2.tune.record import TuneRecord, configuration

    if "adopt" in data:
        return TuneRecord.from_dict(data)
    verdict = data.get("verdict") or {}
    label = data.get("label", "erm")
    spec = data.get("loss_spec") or {"method": data.get("method"), "options": data.get("options") or {}}
    chosen = {"label": label, "method": data.get("method"), "options": data.get("options") or {},
              "loss_spec": spec}
    adopt = label != "erm" and verdict.get("outcome") == "confirmed"
    return TuneRecord(
        adopt=adopt,
        use=chosen if adopt else configuration(Candidate("erm", "erm")),
        chosen=None if label == "erm" else chosen,
        reason=("confirmed" if adopt else "erm_chosen" if label == "erm"
                else str(verdict.get("outcome", "no verdict"))),
        criterion=data.get("criterion", "hard_tier"),
        rule=data.get("rule", ""),
        design={},
        candidate_set=data.get("candidate_set", ""),
        source=data.get("source") or {"kind": "engine"},
        num_classes=data.get("num_classes"),
        selection=data.get("selection") or {},
        confirmation=data.get("confirmation") or {},
        verdict=data.get("verdict"),
        base_config=data.get("base_config"),
        mr2_version=data.get("mr2_version", ""),
        git_commit=data.get("git_commit"),
    )


def compare(out: Path, old_name: str = "full", new_name: str = "full-v2") -> str:
    """A re-run of the ``full`` set per cell (``<cell>-<new_name>``: by default that with the design
    of issue 37), then the older tunes (``<cell>-<old_name>``; the first ones' advice read under
    today's gate) and the new side by side. A screen's 16 contenders are counted, not listed."""
    new_rows, pairs = [], []
    for cell in CELLS:
        row = regime_row(cell)
        best = max(row, key=lambda m: row[m]) if row else None
        tunes = {}
        for name in (f"{cell}-{old_name}", f"{cell}-{new_name}"):
            path = out / name / "recommendation.json"
            if path.is_file():
                data = json.loads(path.read_text())
                walls = json.loads((out / name / "wall_time.json").read_text())
                record = read_record(data)
                change = _used_change(row, record)
                # What the old printout said to use: its record's label unless ERM (issue 37's finding).
                printed = "erm" if data.get("recommendation_is_erm", not record.adopt) else data.get("label")
                then = row.get("erm" if printed == "erm" else IN_ROW.get(printed, printed))
                tunes[name] = {"data": data, "record": record, "wall": sum(w["wall_s"] for w in walls) / 60,
                               "trainings": _trainings(data, "full"),
                               "regret": None if best is None or change is None else row[best] - change,
                               "then": None if best is None or then is None else row[best] - then}
        new = tunes.get(f"{cell}-{new_name}")
        if new is not None:
            record, data = new["record"], new["data"]
            looks = [look for look in data["advice"]["looks"]
                     if record.chosen is not None and look["contender"] == record.chosen["label"]]
            fresh = "-" if not looks else (
                f"{100 * looks[-1]['mean_difference']:+.2f} on seeds {looks[-1]['seeds'][0]}-"
                f"{looks[-1]['seeds'][-1]} (p {looks[-1]['p_greater']:.3f})")
            advice = f"ADOPT {record.use['label']}" if record.adopt else "KEEP ERM"
            contenders = data["advice"]["contenders"]
            new_rows.append([cell, advice, record.reason,
                             (", ".join(contenders) or "-") if len(contenders) <= 4
                             else f"{len(contenders)}, screened",
                             record.chosen["label"] if record.chosen else "-", fresh, str(new["trainings"]),
                             f"{new['wall']:.1f}", f"{best} ({row[best]:+.2f})" if best else "no row",
                             "n/a" if new["regret"] is None else f"{new['regret']:.2f}"])
        old = tunes.get(f"{cell}-{old_name}")
        if old is not None and new is not None:
            pairs.append((cell, old, new))
    lines = ["| cell | advice | reason | contenders | best contender | its fresh-seed change, last look "
             "(pts) | trainings | wall (min) | best in hindsight (hard, seeds 0-4) | regret |",
             "|---|---|---|---|---|---|---:|---:|---|---:|"]
    lines += ["| " + " | ".join(r) + " |" for r in new_rows]
    lines += ["", "| cell | old: chosen (verdict) | old regret, as printed then | old advice, today's gate | "
              "old trainings | old wall (min) | old regret, today's gate | new advice | new trainings | "
              "new wall (min) | new regret |",
              "|---|---|---:|---|---:|---:|---:|---|---:|---:|---:|"]
    for cell, old, new in pairs:
        rec = old["record"]
        chosen = rec.chosen["label"] if rec.chosen else "erm"
        verdict = (old["data"].get("verdict") or {}).get("outcome", "nothing to confirm")
        lines.append("| " + " | ".join([
            cell, f"{chosen} ({verdict})", _regret(old["then"]),
            f"ADOPT {rec.use['label']}" if rec.adopt else "keep ERM",
            str(old["trainings"]), f"{old['wall']:.1f}", _regret(old["regret"]),
            f"ADOPT {new['record'].use['label']}" if new["record"].adopt else "keep ERM",
            str(new["trainings"]), f"{new['wall']:.1f}", _regret(new["regret"])]) + " |")
    if pairs:
        n = len(pairs)

        def mean(key: str, side: int) -> str:
            values = [p[side][key] for p in pairs if p[side][key] is not None]
            return f"{sum(values) / len(values):.2f}" if values else "n/a"
        lines.append(f"| mean over {n} | | {mean('then', 1)} | "
                     f"{sum(p[1]['record'].adopt for p in pairs)} adopted | "
                     f"{mean('trainings', 1)} | {mean('wall', 1)} | {mean('regret', 1)} | "
                     f"{sum(p[2]['record'].adopt for p in pairs)} adopted | {mean('trainings', 2)} | "
                     f"{mean('wall', 2)} | {mean('regret', 2)} |")
    return "\n".join(lines)


def _regret(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def track_spec(cell: str, labels: list[str], out: Path, glyphs: Path | None) -> dict[str, Any]:
    """The sweep that trains tune's candidates LABELS (outside CELL's regime-map row) on the row's
    seeds 0-4 with ERM, for the pairing: the cell's base configuration unchanged, named
    ``<cell>-track``, written under ``<out>/extend``."""
    from mr2.tune.candidates import candidates

    pool = {c.label: c for c in candidates("full") if not c.is_reference}
    unknown = [label for label in labels if label not in pool]
    if unknown or not labels:
        raise SystemExit(f"track.py: {', '.join(unknown) or 'no label'}: give labels of full's non-ERM "
                         f"candidates: {', '.join(pool)}")
    spec = yaml.safe_load(cell_spec(cell).read_text())
    base = yaml.safe_load(run_config(cell, out, glyphs).read_text())  # the base; checks --glyphs
    base = {key: value for key, value in base.items() if key not in ("name", "output_dir")}
    description = f"tune's track record: {', '.join(labels)} on {cell}'s row seeds"
    return {"name": f"{cell}-track", "description": description,
            "output_dir": str(out / "extend"), "base": base,
            "methods": {"erm": {}, **{label: pool[label].entry() for label in labels}},
            "seeds": [0, 1, 2, 3, 4], "reference": "erm", "select_by": spec.get("select_by", "val_accuracy"),
            "report": spec.get("report", {})}


def extend(cell: str, labels: list[str], out: Path, glyphs: Path | None, workers: int) -> int:
    """Run :func:`track_spec`'s sweep (the protocol's "joins the row"); its report then goes to the
    row's ``<cell>-track`` folder with studies/glyphs/collect_cell.py (printed at the end)."""
    spec = track_spec(cell, labels, out, glyphs)
    path = out / "configs" / f"{spec['name']}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    command = [sys.executable, "-m", "mr2", "sweep", str(path), "--workers", str(workers),
               "--threads-per-run", "1", "--no-plots"]
    print(" ".join(command), flush=True)
    start = time.monotonic()
    code = subprocess.call(command, env=os.environ.copy())
    rows = REGIMES_K100 if cell.startswith("glyphs-") else REGIMES
    target = rows / f"{cell.removeprefix('glyphs-')}-track"
    print(f"{spec['name']}: exit {code}, {(time.monotonic() - start) / 60:.1f} min; then: python "
          f"studies/glyphs/collect_cell.py {out / 'extend' / spec['name']} {target.relative_to(ROOT)}",
          flush=True)
    return code


def tune_command(cell: str, candidate_set: str, rerun: str | None, config: Path, out: Path,
                 workers: int) -> tuple[str, list[str]]:
    """The tune's name (``<cell>-<set>[-<rerun>]``) and its ``mr2 tune`` command line: selection seeds
    5-7, confirmation seeds 8-10 (the first runs) or those of :data:`RERUNS` for a re-run."""
    name = f"{cell}-{candidate_set}" + (f"-{rerun}" if rerun else "")
    confirm = RERUNS[rerun] if rerun else CONFIRMATION_SEEDS
    return name, [sys.executable, "-m", "mr2", "tune", "--config", str(config), "--candidates", candidate_set,
                  "--seeds", SELECTION_SEEDS, "--confirm-seeds", confirm, "--criterion", "hard_tier",
                  "--workers", str(workers), "--threads-per-run", "1", "--output-dir", str(out),
                  "--name", name]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run mr2 tune on one cell with one candidate set")
    run.add_argument("cell")
    run.add_argument("--candidates", choices=SETS, required=True)
    run.add_argument("--out", type=Path, required=True)
    run.add_argument("--glyphs", type=Path)
    run.add_argument("--workers", type=int, default=2)
    run.add_argument("--v2", action="store_const", const="v2", dest="rerun",
                     help="the design of issue 37 (confirmation seeds 8-16), into <cell>-<set>-v2")
    run.add_argument("--v3", action="store_const", const="v3", dest="rerun",
                     help="the design of issue 44 (confirmation seeds 8-24), into <cell>-<set>-v3")
    ext = sub.add_parser("extend", help="train chosen candidates outside a cell's row on its seeds 0-4")
    ext.add_argument("cell")
    ext.add_argument("labels", nargs="+", help="tune's candidate labels, e.g. mr2-distance_1d-c2")
    ext.add_argument("--out", type=Path, required=True)
    ext.add_argument("--glyphs", type=Path)
    ext.add_argument("--workers", type=int, default=2)
    report = sub.add_parser("summary", help="the track-record table and the rule's outcome so far")
    report.add_argument("--out", type=Path, required=True)
    both = sub.add_parser("compare", help="a re-run of the full set (default: with the design of issue 37), "
                                          "and the older and newer tunes side by side")
    both.add_argument("--out", type=Path, required=True)
    both.add_argument("--old", default="full", help="the older tunes' suffix (default full: <cell>-full)")
    both.add_argument("--new", default="full-v2", help="the re-run's suffix (default full-v2; full-v3)")
    args = parser.parse_args(argv)
    if args.command == "summary":
        print_summary(args.out)
        return 0
    if args.command == "compare":
        print(compare(args.out, args.old, args.new))
        return 0

    if args.command == "extend":
        return extend(args.cell, args.labels, args.out, args.glyphs, args.workers)

    config = run_config(args.cell, args.out, args.glyphs)
    name, command = tune_command(args.cell, args.candidates, args.rerun, config, args.out, args.workers)
    print(" ".join(command), flush=True)
    start = time.monotonic()
    code = subprocess.call(command, env=os.environ.copy())
    wall = time.monotonic() - start
    record = args.out / name / "wall_time.json"
    if record.parent.is_dir():  # one entry per invocation (a resumed tune has several)
        entries = json.loads(record.read_text()) if record.is_file() else []
        entries.append({"wall_s": round(wall, 1), "exit_code": code, "command": command[1:],
                        "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
        record.write_text(json.dumps(entries, indent=2) + "\n")
    print(f"{name}: exit {code}, {wall / 60:.1f} min", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
