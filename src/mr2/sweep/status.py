"""``mr2 sweep status DIR`` and ``mr2 sweep report DIR``: a sweep directory read from its files alone
(``sweep.json``, ``submitit/jobs.json``, the run directories), without the cluster.

A run's state, first match wins:

- ``done``: its ``final.json`` exists;
- ``running``: a live process holds its run directory's lock (on this machine), or its job was
  last seen running;
- ``failed``: its job failed more than ``max_requeues`` times;
- ``requeued``: its job was resubmitted after a failure (or requeued after a time-out) and has
  not finished yet;
- ``pending``: anything else (queued, or not started).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from mr2.rundir import RunDirectory
from mr2.sweep.cluster import read_jobs
from mr2.sweep.spec import SweepSpec, SweepSpecError, spec_from_dict

__all__ = ["RunStatus", "load_sweep", "status_table", "sweep_status"]

_NOT_A_SWEEP = (
    "{path} is not a sweep directory (no sweep.json written by `mr2 sweep`); give <output_dir>/<name>"
)
STATES = ("done", "running", "requeued", "failed", "pending")


@dataclass
class RunStatus:
    """One run of a sweep as its files describe it."""

    name: str
    state: str
    job_id: str | None
    attempt: int
    epoch: int
    epochs: int | None
    log: Path
    note: str = ""


def _saved(sweep_dir: Path) -> dict[str, Any]:
    try:
        data = json.loads((sweep_dir / "sweep.json").read_text())
    except (OSError, ValueError):
        raise SweepSpecError(_NOT_A_SWEEP.format(path=sweep_dir)) from None
    if not isinstance(data, dict) or not isinstance(data.get("runs"), list):
        raise SweepSpecError(_NOT_A_SWEEP.format(path=sweep_dir))
    return data


def load_sweep(sweep_dir: str | Path) -> SweepSpec:
    """The sweep that wrote ``sweep_dir`` (rebuilt from ``sweep.json``; its directory is
    ``sweep_dir`` wherever it was run from)."""
    directory = Path(sweep_dir)
    data = dict(_saved(directory).get("spec") or {})
    if not data:
        raise SweepSpecError(_NOT_A_SWEEP.format(path=directory))
    data.update(output_dir=str(directory.parent), name=directory.name)
    return spec_from_dict(data)


def _epochs(config_file: Path) -> int | None:
    try:
        config = yaml.safe_load(config_file.read_text())
        return int(config["optim"]["epochs"])
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError):
        return None


def sweep_status(sweep_dir: str | Path) -> list[RunStatus]:
    """The state of every run of the sweep in ``sweep_dir`` (module docstring), in plan order."""
    directory = Path(sweep_dir)
    saved = _saved(directory)
    jobs = read_jobs(directory).get("runs", {})
    statuses = []
    for run in saved["runs"]:
        name = str(run["name"])
        rundir = RunDirectory(directory / name)
        record = jobs.get(name, {})
        state, note = "pending", ""
        holder = rundir.holder()
        if rundir.is_finished:
            state = "done"
        elif holder is not None:
            state, note = "running", f"pid {holder}"
        elif record.get("state") == "failed":
            state, note = "failed", str(record.get("error", ""))
        elif record.get("state") == "running":
            state = "running"
        elif record.get("state") == "requeued" or int(record.get("attempt", 1)) > 1:
            state, note = "requeued", str(record.get("error", ""))
        statuses.append(RunStatus(
            name=name,
            state=state,
            job_id=record.get("job_id"),
            attempt=int(record.get("attempt", 0)),
            epoch=len(rundir.read_metrics()),
            epochs=_epochs(Path(run.get("config", directory / "configs" / f"{name}.yaml"))),
            log=rundir.log,
            note=note,
        ))
    return statuses


def status_table(statuses: list[RunStatus]) -> str:
    """A plain-text table of :func:`sweep_status` plus a count per state.

    Example:
        >>> print(status_table([RunStatus("erm__seed=0", "done", "17_0", 1, 3, 3, Path("r/train.log"))]))
        run          state  job   attempt  epoch  log
        erm__seed=0  done   17_0  1        3/3    r/train.log
        <BLANKLINE>
        1 run(s): 1 done
    """
    rows = [("run", "state", "job", "attempt", "epoch", "log")]
    for s in statuses:
        epoch = f"{s.epoch}/{s.epochs}" if s.epochs is not None else str(s.epoch)
        log = str(s.log) + (f"  ({s.note})" if s.note else "")
        rows.append((s.name, s.state, s.job_id or "-", str(s.attempt or "-"), epoch, log))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = ["  ".join([*(cell.ljust(w) for cell, w in zip(row[:-1], widths, strict=True)), row[-1]])
             for row in rows]
    counts = [f"{sum(s.state == state for s in statuses)} {state}" for state in STATES
              if any(s.state == state for s in statuses)]
    return "\n".join(lines) + f"\n\n{len(statuses)} run(s): " + ", ".join(counts)
