"""Run a whole sweep: plan, execute the unfinished runs, select on validation, write the report."""

from __future__ import annotations

import dataclasses
import errno
import os
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from mr2.config import ConfigError
from mr2.io import atomic_write_json
from mr2.report.exceptions import ReportError
from mr2.sweep.cluster import submit_points
from mr2.sweep.launcher import check_launcher_available
from mr2.sweep.plan import RunPoint, plan_sweep
from mr2.sweep.processes import config_path, train_command, write_config
from mr2.sweep.report import SweepReport, selection_summary, write_sweep_report
from mr2.sweep.runner import FINISHED_ELSEWHERE, RunOutcome, run_points
from mr2.sweep.selection import SelectionError
from mr2.sweep.spec import SweepSpec, SweepSpecError

__all__ = ["SweepResult", "describe_plan", "prepare_sweep", "run_sweep"]

_SWEEP_DIR_UNUSABLE = (
    "cannot write the sweep directory {path}: {reason}; choose another output directory "
    "(--output-dir DIR or the file's output_dir)"
)


@dataclass
class SweepResult:
    """Everything a sweep produced.

    Attributes:
        spec: the sweep.
        points: its planned runs.
        outcomes: one per point (done, skipped: finished earlier or by another process while the
            sweep waited, running elsewhere: held by this process or left to Slurm, or failed).
        report: the report (None if it was not requested or could not be written).
        report_error: why the report could not be written ("" otherwise).
    """

    spec: SweepSpec
    points: list[RunPoint]
    outcomes: list[RunOutcome]
    report: SweepReport | None = None
    report_error: str = ""

    @property
    def failed(self) -> list[RunOutcome]:
        return [o for o in self.outcomes if o.status == "failed"]

    @property
    def elsewhere(self) -> list[RunOutcome]:
        """Runs left alone because another process owns their run directory."""
        return [o for o in self.outcomes if o.status == "running"]

    @property
    def ok(self) -> bool:
        """Every run finished (none failed, none still running elsewhere) and the report (if
        requested) was written."""
        return not self.failed and not self.elsewhere and not self.report_error


def _write_plan(spec: SweepSpec, points: list[RunPoint]) -> Path:
    path = spec.sweep_dir / "sweep.json"
    atomic_write_json(
        path,
        {
            "name": spec.name,
            "description": spec.description,
            "source": None if spec.source is None else str(spec.source),
            "reference": spec.reference,
            "select_by": spec.select_by,
            "seeds": spec.seeds,
            "base": spec.base,
            "launcher": dataclasses.asdict(spec.launcher),
            "spec": spec.data,
            "methods": {
                e.label: {"method": e.method, "fixed": e.fixed, "axes": e.axes} for e in spec.methods
            },
            "runs": [
                {
                    "name": p.name,
                    "label": p.label,
                    "method": p.method,
                    "seed": p.seed,
                    "setting": {k: v for k, v in p.setting},
                    "config": str(config_path(p)),
                }
                for p in points
            ],
        },
    )
    return path


def _unusable(path: Path, reason: str) -> SweepSpecError:
    return SweepSpecError(_SWEEP_DIR_UNUSABLE.format(path=path, reason=reason))


def _make_sweep_dir(sweep_dir: Path) -> None:
    """Create ``sweep_dir`` (and its parents), or raise a one-line :class:`SweepSpecError` saying
    which part of the path is in the way (a file, a dangling link, a read-only directory)."""
    for part in (sweep_dir, *sweep_dir.parents):
        if part.is_symlink() and not part.exists():
            reason = f"{part} is a symbolic link to {os.readlink(part)}, which does not exist"
            raise _unusable(sweep_dir, reason)
        if part.exists():
            if not part.is_dir():
                raise _unusable(sweep_dir, f"{part} is a file, not a directory")
            break
    try:
        sweep_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise _unusable(sweep_dir, error.strerror or str(error)) from None
    if not os.access(sweep_dir, os.W_OK | os.X_OK):
        raise _unusable(sweep_dir, os.strerror(errno.EACCES))


def prepare_sweep(spec: SweepSpec) -> list[RunPoint]:
    """Plan the sweep and write ``sweep.json`` and every run's ``configs/<name>.yaml`` (no training).

    Raises:
        SweepSpecError: before anything is written: an invalid point, a launcher that cannot start
            jobs here (Slurm's commands missing), or a sweep directory that cannot be created or
            written (a file or a dangling symbolic link in its path, a read-only directory).
    """
    points = plan_sweep(spec)
    try:
        check_launcher_available(spec.launcher)
    except ConfigError as error:
        raise SweepSpecError(str(error)) from None
    _make_sweep_dir(spec.sweep_dir)
    _write_plan(spec, points)
    for point in points:
        write_config(point)
    return points


def describe_plan(spec: SweepSpec, points: list[RunPoint]) -> str:
    """What a sweep would do: each run, whether it is finished, and the command that trains it."""
    settings = len({point.group for point in points})
    lines = [
        f"sweep {spec.name!r}: {len(points)} runs in {spec.sweep_dir} "
        f"({len(spec.methods)} method entries, {settings} settings x {len(spec.seeds)} seeds; reference "
        f"{spec.reference}; selection by {spec.select_by}; {spec.workers} worker(s))"
    ]
    for point in points:
        holder = point.directory.holder()
        if point.directory.is_finished:
            state = "finished"
        elif holder is not None:
            state = f"running (pid {holder})"
        elif point.directory.last_checkpoint.is_file():
            state = "resumes"
        else:
            state = "to run"
        command = " ".join(train_command(point, nproc_per_node=spec.nproc_per_node, python="python"))
        lines.append(f"  {point.name:<40} {state:<9} {command}")
    return "\n".join(lines)


def run_sweep(
    spec: SweepSpec,
    *,
    stream: TextIO | None = None,
    report: bool = True,
    plots: bool | None = None,
    status_every: float = 60.0,
    wait: bool = True,
) -> SweepResult:
    """Run every unfinished run of ``spec`` and write its report to ``<sweep_dir>/report``.

    Progress, failures (with the tail of their logs) and the report's location are printed to
    ``stream`` (default stdout). Interrupting it (Ctrl-C, SIGTERM, SIGHUP) stops the running runs,
    which resume from their checkpoints the next time; it raises
    :class:`mr2.sweep.processes.SweepInterrupted`. With ``launcher: {name: slurm}`` the runs are
    submitit jobs (:mod:`mr2.sweep.cluster`); ``wait=False`` then submits them and returns (no
    report: write it later with ``mr2 sweep report DIR``).
    """
    out = stream if stream is not None else sys.stdout
    points = prepare_sweep(spec)
    if spec.launcher.name == "slurm":
        outcomes = submit_points(points, spec.launcher, sweep_name=spec.name, wait=wait, stream=out,
                                 threads_per_run=spec.threads_per_run or spec.launcher.cpus_per_run)
        report = report and wait
    else:
        outcomes = run_points(
            points,
            workers=spec.workers,
            threads_per_run=spec.threads_per_run,
            nproc_per_node=spec.nproc_per_node,
            devices=spec.devices,
            stream=out,
            status_every=status_every,
        )
    result = SweepResult(spec, points, outcomes)
    if not wait and spec.launcher.name == "slurm":
        print(f"\nsubmitted; follow with `mr2 sweep status {spec.sweep_dir}`, then write the report with "
              f"`mr2 sweep report {spec.sweep_dir}`.", file=out, flush=True)
        return result
    for outcome in result.elsewhere:
        print(f"\nRUNNING ELSEWHERE {outcome.point.name}: {outcome.message}", file=out)
    for outcome in result.failed:
        print(f"\nFAILED {outcome.point.name}: {outcome.message}", file=out)
        print(f"  log: {outcome.log_path}", file=out)
        if outcome.log_tail:
            print(textwrap.indent(outcome.log_tail, "  | "), file=out)
    if report:
        try:
            result.report = write_sweep_report(spec, points, outcomes, plots=plots)
        except (ReportError, SelectionError) as error:
            result.report_error = str(error)
            print(f"\nno report: {error}", file=out)
        else:
            summary = selection_summary(result.report)
            if summary:
                print("\nselected on the validation split:\n" + textwrap.indent(summary, "  "), file=out)
    done = sum(o.status == "done" for o in outcomes)
    elsewhere = sum(o.status == "skipped" and o.message == FINISHED_ELSEWHERE for o in outcomes)
    skipped = sum(o.status == "skipped" for o in outcomes) - elsewhere
    print(
        f"\n{done} run(s) trained, {skipped} skipped (finished earlier)"
        + (f", {elsewhere} finished by another process" if elsewhere else "")
        + f", {len(result.failed)} failed"
        + (f", {len(result.elsewhere)} running in another process (not started again)" if result.elsewhere
           else "") + ".",
        file=out,
        flush=True,
    )
    return result

