"""Pools of real trained runs for the real-run tune benchmark (issue 44 item 1): every candidate of
``mr2 tune``'s ``full`` set and ERM, trained on a list of seeds with a track-record cell's
configuration, through the engine exactly as ``mr2 tune --config`` trains its trials.

    mkdir -p runs/tune-pools/code && git archive HEAD src | tar -x -C runs/tune-pools/code \\
        && git rev-parse --short HEAD > runs/tune-pools/code/COMMIT
    PYTHONPATH=runs/tune-pools/code/src nohup nice -n 15 .venv/bin/python studies/tune_pools/pools.py \\
        train CELL --seeds 100-119 --clean --quiet [--glyphs runs/tune-pools/glyphs.npz] > log 2>&1 &

The runs train with the mr2 of a fixed commit exported outside the working tree (``PYTHONPATH``;
its commit, from ``COMMIT`` next to ``src/``, is recorded with every run): a working tree that
others edit while a pool trains must not change the code of half the runs.

CELL is a track-record cell (studies/tune_track/track.py: ``mlp-n100`` ... ``glyphs-mlp-n300``); its
regime-map ``base`` is the run configuration, unchanged. The runs are the confirmation trials of a
tune (:class:`mr2.tune.engine_source.EngineSource`, one worker, one thread per run) whose
confirmation pool is ``--seeds``, in ``<work>/<CELL>/confirmation/`` (not committed); seed by seed,
every candidate's run on that seed, then its figures are appended to
``docs/benchmarks/tune-pools/<CELL>/runs.csv``. Resumable: a (candidate, seed) already in the CSV is
not trained again, and a run that finished in ``<work>`` is read, not retrained.

What is stored per run is exactly what the engine way of tune derives from the run's predictions
(:meth:`mr2.tune.driver` ``feed``): the validation per-class numbers of correct predictions in each
fixed half of :func:`mr2.tune.selection.split_halves` (from which
:meth:`~mr2.tune.selection.ValidationFigures.from_predictions`' figures follow) and the test
per-class numbers of correct predictions (from which :func:`mr2.tune.verdict.seed_figures` follows
for any hard classes). The per-class sample counts and the validation labels' digest, the same for
every run of the cell, go to ``meta.json`` once (a run whose labels differ is refused). No
predictions or checkpoints are committed: ``--clean`` deletes each run directory once its figures
are stored.

    .venv/bin/python studies/tune_pools/pools.py status [CELL...]

prints how many runs each pool has per candidate and the CPU time they took.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[2]
POOLS = ROOT / "docs" / "benchmarks" / "tune-pools"
FIELDS = ["label", "seed", "val_half_correct", "test_correct", "wall_s", "cpu_s", "commit"]

sys.path.insert(0, str(ROOT / "studies" / "tune_track"))


def parse_seeds(text: str) -> list[int]:
    """``100-119`` or ``100,101,105`` (ranges allowed inside a list) -> sorted distinct seeds."""
    seeds: set[int] = set()
    for part in text.split(","):
        low, _, high = part.strip().partition("-")
        seeds.update(range(int(low), int(high or low) + 1))
    return sorted(seeds)


def cell_config(cell: str, work: Path, glyphs: Path | None) -> dict[str, Any]:
    """The cell's regime-map ``base`` as a run configuration (as studies/tune_track/track.py does)."""
    from track import cell_spec

    base = yaml.safe_load(cell_spec(cell).read_text())["base"]
    if cell.startswith("glyphs-"):
        if glyphs is None:
            raise SystemExit("pools.py: a glyph cell needs --glyphs FILE (studies/glyphs/make_glyphs.py)")
        base["data"]["root"] = str(glyphs.resolve())
    return {"name": cell, "output_dir": str(work), **base}


def git_commit() -> str:
    """The commit of the mr2 that trains: ``COMMIT`` next to its ``src/`` (an exported tree, see the
    module docstring), else the repository's HEAD."""
    import mr2

    marker = Path(mr2.__file__).resolve().parents[2] / "COMMIT"
    if marker.is_file():
        return marker.read_text().strip()
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def read_pool(cell: str, pools: Path = POOLS) -> list[dict[str, str]]:
    path = pools / cell / "runs.csv"
    if not path.is_file():
        return []
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


class ChildCPU:
    """The CPU seconds of this process's descendants (the fork server's trainers), sampled every
    ``every`` seconds: per process, its last seen user + system time (up to ``every`` seconds of a
    trainer's end are missed)."""

    def __init__(self, every: float = 0.25) -> None:
        import psutil

        self._psutil = psutil
        self._seen: dict[tuple[int, float], float] = {}
        self._stop = threading.Event()
        self._every = every
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        me = self._psutil.Process()
        while not self._stop.wait(self._every):
            try:
                children = me.children(recursive=True)
            except self._psutil.Error:
                continue
            for child in children:
                try:
                    with child.oneshot():
                        times = child.cpu_times()
                        key = (child.pid, child.create_time())
                    self._seen[key] = times.user + times.system
                except self._psutil.Error:
                    continue

    def total(self) -> float:
        return float(sum(self._seen.values()))

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


def train(args: argparse.Namespace) -> None:
    from mr2.config import config_from_dict
    from mr2.tune.engine_source import EngineSource
    from mr2.tune.request import make_request
    from mr2.tune.trials import Trial
    from mr2.tune.selection import split_halves

    seeds = parse_seeds(args.seeds)
    if min(seeds) < 100:
        raise SystemExit("pools.py: use seeds >= 100 (disjoint from the track record's 0-16)")
    work = Path(args.work).resolve()
    config = config_from_dict(cell_config(args.cell, work, Path(args.glyphs) if args.glyphs else None))
    # The pool's seeds are a tune's confirmation pool; its selection seeds (0, 1) are never run.
    request = make_request(output_dir=work, name=args.cell, candidates="full", losses_only=False,
                           seeds=[0, 1], confirm_seeds=seeds)
    labels = [c.label for c in request.candidates]
    if args.labels:
        wanted = args.labels.split(",")
        unknown = sorted(set(wanted) - set(labels))
        if unknown:
            raise SystemExit(f"pools.py: unknown labels {unknown}; the full set: {labels}")
        labels = [label for label in labels if label in wanted]
    source = EngineSource(config, request, workers=1, threads_per_run=1)
    out_dir = Path(args.pools) / args.cell
    out_dir.mkdir(parents=True, exist_ok=True)
    runs_csv, meta_file = out_dir / "runs.csv", out_dir / "meta.json"
    done = {(r["label"], int(r["seed"])) for r in read_pool(args.cell, Path(args.pools))}
    if not runs_csv.is_file():
        with runs_csv.open("w", newline="") as handle:
            csv.writer(handle).writerow(FIELDS)
    meta = json.loads(meta_file.read_text()) if meta_file.is_file() else None
    commit = git_commit()
    cpu = ChildCPU()
    import mr2

    print(f"pools.py: {args.cell}, {len(labels)} candidates x {len(seeds)} seeds, mr2 of commit {commit} "
          f"from {Path(mr2.__file__).parent}, {len(done)} runs stored already", flush=True)
    try:
        for seed in (reversed(seeds) if args.descending else seeds):
            # built directly: the pool trains with the mr2 of a fixed commit (any version's Trial)
            trials = [Trial("confirmation", request.candidate(label), seed) for label in labels
                      if (label, seed) not in done]
            for trial in trials:
                # Another process filling the same pool (e.g. from the other end, --descending) may
                # have stored it meanwhile; two processes never train one run at once (the run's lock).
                done |= {(r["label"], int(r["seed"])) for r in read_pool(args.cell, Path(args.pools))}
                if (trial.candidate.label, seed) in done:
                    continue
                before_cpu, before = cpu.total(), time.perf_counter()
                (result,) = source.run([trial], io.StringIO() if args.quiet else sys.stdout)
                wall, used = time.perf_counter() - before, cpu.total() - before_cpu
                if not result.ok:
                    print(f"FAILED {trial.name}: {result.failure}", flush=True)
                    continue
                assert result.predictions is not None
                k = source.num_classes()
                assert k is not None
                y_val, p_val = result.predictions["val"]
                y_test, p_test = result.predictions["test"]
                halves = split_halves(y_val).astype(np.int64)
                index = halves * k + y_val
                hit_val = (y_val == p_val).astype(np.int64)
                half_count = np.bincount(index, minlength=2 * k).reshape(2, k)
                half_correct = np.bincount(index, weights=hit_val, minlength=2 * k).reshape(2, k)
                test_count = np.bincount(y_test, minlength=k)
                test_correct = np.bincount(y_test, weights=(y_test == p_test).astype(np.int64), minlength=k)
                digest = hashlib.sha256(np.ascontiguousarray(y_val, dtype="<i8").tobytes()).hexdigest()
                test_digest = hashlib.sha256(np.ascontiguousarray(y_test, dtype="<i8").tobytes()).hexdigest()
                given: Any = source.class_names
                names = given() if callable(given) else given
                cell_meta = {"cell": args.cell, "num_classes": k, "class_names": names,
                             "val_half_count": half_count.astype(int).tolist(),
                             "test_count": test_count.astype(int).tolist(),
                             "val_labels_digest": digest, "test_labels_digest": test_digest,
                             "config": cell_config(args.cell, Path("runs/tune-pools"),
                                                   Path("glyphs.npz") if args.glyphs else None),
                             "candidates": {c.label: c.entry() for c in request.candidates}}
                if meta is None:
                    meta = cell_meta
                    meta_file.write_text(json.dumps(meta) + "\n")
                elif (meta["val_labels_digest"], meta["test_labels_digest"]) != (digest, test_digest):
                    raise SystemExit(f"pools.py: {trial.name} has other validation/test labels than "
                                     f"the pool's ({meta_file})")
                row = [trial.candidate.label, seed,
                       json.dumps(np.rint(half_correct).astype(int).tolist(), separators=(",", ":")),
                       json.dumps(np.rint(test_correct).astype(int).tolist(), separators=(",", ":")),
                       f"{wall:.1f}", f"{used:.1f}", commit]
                with runs_csv.open("a", newline="") as handle:
                    csv.writer(handle).writerow(row)
                done.add((trial.candidate.label, seed))
                overall = float(test_correct.sum() / test_count.sum())
                print(f"{args.cell} {trial.candidate.label} seed {seed}: {wall:.1f} s wall, "
                      f"{used:.1f} s CPU, test {overall:.4f}", flush=True)
                if args.clean:
                    shutil.rmtree(source.point(trial).run_dir, ignore_errors=True)
    finally:
        cpu.close()


def status(args: argparse.Namespace) -> None:
    cells = args.cells or sorted(p.name for p in Path(args.pools).iterdir() if (p / "runs.csv").is_file())
    for cell in cells:
        rows = read_pool(cell, Path(args.pools))
        by_label: dict[str, list[int]] = {}
        for r in rows:
            by_label.setdefault(r["label"], []).append(int(r["seed"]))
        complete = set.intersection(*(set(s) for s in by_label.values())) if by_label else set()
        cpu = sum(float(r["cpu_s"]) for r in rows)
        wall = sum(float(r["wall_s"]) for r in rows)
        print(f"{cell}: {len(rows)} runs, {len(by_label)} labels, {len(complete)} complete seeds "
              f"{sorted(complete)}; CPU {cpu / 60:.1f} min, wall {wall / 60:.1f} min")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("train", help="train a cell's pool (resumable)")
    p.add_argument("cell")
    p.add_argument("--seeds", required=True, help="e.g. 100-119")
    p.add_argument("--labels", default="", help="only these candidate labels (comma-separated)")
    p.add_argument("--work", default="runs/tune-pools", help="where the run directories go")
    p.add_argument("--pools", default=str(POOLS), help="where the figures go")
    p.add_argument("--glyphs", default="", help="the glyph file (glyph cells)")
    p.add_argument("--clean", action="store_true", help="delete each run directory once stored")
    p.add_argument("--quiet", action="store_true", help="no sweep progress lines")
    p.add_argument("--descending", action="store_true", help="the seeds from the largest down")
    p.set_defaults(func=train)
    s = sub.add_parser("status", help="what each pool holds")
    s.add_argument("cells", nargs="*")
    s.add_argument("--pools", default=str(POOLS))
    s.set_defaults(func=status)
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    args.func(args)


if __name__ == "__main__":
    main()
