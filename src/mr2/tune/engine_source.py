"""Trials trained by mr2's engine (``mr2 tune --config RUN.yaml``): a trial source whose trials are
the runs of two sweeps, so they keep the sweep machinery (finished runs reused, interrupted ones
resumed from their checkpoints, one-owner locks, trainers that never outlive the command, Slurm).

Layout of ``<output_dir>/<name>/``::

    selection/       the selection sweep: every candidate x the selection seeds (those the plan asks for run)
    confirmation/    the confirmation sweep: every candidate x the confirmation seeds (likewise)

A batch of trials becomes :func:`mr2.sweep.runner.run_points` (or
:func:`mr2.sweep.cluster.submit_points` with ``launcher: slurm``) over their run points; a run that
finished (now or earlier) gives the trial's predictions from ``predictions/val.npz`` and
``predictions/test.npz`` (read as every trial's are: :func:`mr2.tune.trials.read_trial_file`,
bounded and checked); a run that failed, was refused (finished with another configuration) or
is owned by another process gives a failed trial naming its log.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from mr2.config import RunConfig, config_to_dict
from mr2.engine.final import PREDICTIONS_DIR
from mr2.losses.collapse import collapse_recorded
from mr2.sweep import SweepSpec, plan_sweep, spec_from_dict
from mr2.sweep.cluster import submit_points
from mr2.sweep.launcher import launcher_from_dict
from mr2.sweep.plan import RunPoint
from mr2.sweep.processes import default_workers
from mr2.sweep.run import prepare_sweep
from mr2.sweep.runner import run_points
from mr2.sweep.spec import RESERVED_KEYS
from mr2.tune.candidates import REFERENCE_LABEL, Candidate
from mr2.tune.design import PHASES, SELECTION
from mr2.tune.errors import TrialError, TuneInputError
from mr2.tune.request import TuneRequest
from mr2.tune.source import TrialResult
from mr2.tune.text import config_paste
from mr2.tune.trials import SPLITS, Trial, class_ids, read_trial_file

__all__ = [
    "BAD_COUNT",
    "NO_VALIDATION_SPLIT",
    "EngineSource",
    "engine_source",
    "phase_spec",
]

NO_VALIDATION_SPLIT = (
    "mr2 tune chooses on the validation split, but the configuration has data.val_fraction: 0; set "
    "it above 0 (e.g. --set data.val_fraction=0.1)"
)
BAD_COUNT = "{flag} must be an integer >= 1; got {value}"
NO_PREDICTIONS = (
    "{run} has no {file} (finished by an older mr2 without per-sample predictions); delete that run "
    "directory and run the tune again"
)
#: Why a run that was not accepted failed its trial, by the sweep's status (a ``failed`` run's
#: message says it all; the driver prints "failed (...)" around it).
_NOT_ACCEPTED = {"failed": "{message}", "running": "running elsewhere: {message}"}


def _gpus(device: str) -> int:
    """How many GPUs runs on ``device`` may share out: all visible ones for ``auto`` or ``cuda``, one
    for a numbered ``cuda:N``, none on the CPU."""
    if device not in ("auto", "cuda") and not device.startswith("cuda:"):
        return 0
    import torch

    if not torch.cuda.is_available():
        return 0
    return 1 if ":" in device else torch.cuda.device_count()


def _base(config: RunConfig) -> dict[str, Any]:
    base = config_to_dict(config)
    for key in RESERVED_KEYS:  # the sweep sets them per run
        base.pop(key)
    base["method"] = {"name": REFERENCE_LABEL, "options": {}}
    return base


@dataclass
class EngineSource:
    """mr2's engine as a trial source (module docstring).

    Attributes:
        config: the user's run configuration (the candidates' common base).
        request: the tune (its candidates and seed pools plan the sweeps).
        workers: runs in parallel.
        threads_per_run: torch threads per run (None: cores // workers).
        devices: GPU ids shared out among the workers (None: the runs' own device).
        launcher: the sweeps' ``launcher:`` mapping (None: the local pool; ``{"name": "slurm", ...}``).
    """

    config: RunConfig
    request: TuneRequest
    workers: int = 1
    threads_per_run: int | None = None
    devices: list[int] | None = None
    launcher: dict[str, Any] | None = None
    who_trains: str = "mr2's engine runs every candidate, two-stage procedures included"
    two_stage: bool = True
    #: None: the sweep forwards its own stop signals to the trainers and raises SweepInterrupted.
    stop_signals: tuple[signal.Signals, ...] = ()
    stopped_text: str = "its trainers were stopped"
    #: The data's class names (known once :meth:`preflight` built the data), for the report.
    _class_names: list[str] | None = None
    _classes: int | None = None
    _points: dict[str, dict[tuple[str, int], RunPoint]] = field(default_factory=dict)
    _prepared: set[str] = field(default_factory=set)

    def spec(self, phase: str) -> SweepSpec:
        """The phase's sweep: every candidate x the phase's seed pool."""
        return phase_spec(self.request, self.config, phase, workers=self.workers,
                          threads_per_run=self.threads_per_run, devices=self.devices, launcher=self.launcher)

    def points(self, phase: str) -> dict[tuple[str, int], RunPoint]:
        if phase not in self._points:
            self._points[phase] = {(p.label, p.seed): p for p in plan_sweep(self.spec(phase))}
        return self._points[phase]

    def point(self, trial: Trial) -> RunPoint:
        return self.points(trial.phase)[(trial.candidate.label, trial.seed)]

    def record(self) -> dict[str, Any]:
        return {"kind": "engine", "base_config": config_to_dict(self.config)}

    def num_classes(self) -> int | None:
        return self._classes

    def class_names(self) -> list[str] | None:
        """The data's class names, known once :meth:`preflight` built the data."""
        return self._class_names

    def paste(self, use: Candidate) -> tuple[str, str]:
        return config_paste(use)

    def stop(self) -> None:
        """Nothing to stop here: the sweep stops its trainers itself (:class:`mr2.sweep.SweepInterrupted`)."""

    def is_finished(self, trial: Trial) -> bool:
        return self.point(trial).directory.is_finished

    def describe(self, trial: Trial) -> str:
        return f"{self.config.optim.epochs} epochs ({self.point(trial).run_dir})"

    def preflight(self) -> None:
        """Build what ``mr2 train`` builds before training (every candidate's configuration, the data,
        the model, each method), so bad input fails before anything is written; K becomes known.

        Raises:
            mr2.sweep.SweepSpecError, and any :class:`~mr2.errors.MR2Error` of the configuration, data,
            model or methods.
        """
        import torch

        from mr2.engine.builders import build_data, build_model_for
        from mr2.methods.registry import build_method

        for phase in PHASES:
            self.points(phase)  # every candidate's run configuration validates
        if self.config.regime == "linear_probe":
            return  # building its data means extracting features: left to the first run
        data = build_data(self.config, torch.device("cpu"))
        build_model_for(self.config, data)
        for candidate in self.request.candidates:
            build_method(candidate.method, data.num_classes, **candidate.options)
        self._classes = data.num_classes
        self._class_names = list(data.class_names)

    def run(self, trials: Sequence[Trial], stream: TextIO) -> list[TrialResult]:
        results: dict[tuple[str, str, int], TrialResult] = {}
        for phase in dict.fromkeys(t.phase for t in trials):
            batch = [t for t in trials if t.phase == phase]
            spec = self.spec(phase)
            if phase not in self._prepared:
                prepare_sweep(spec)
                self._prepared.add(phase)
            points = [self.point(t) for t in batch]
            if spec.launcher.name == "slurm":
                threads = spec.threads_per_run or spec.launcher.cpus_per_run
                outcomes = submit_points(points, spec.launcher, sweep_name=spec.name, wait=True,
                                         stream=stream, threads_per_run=threads)
            else:
                outcomes = run_points(points, workers=spec.workers, threads_per_run=spec.threads_per_run,
                                      nproc_per_node=spec.nproc_per_node, devices=spec.devices, stream=stream)
            by_name = {o.point.name: o for o in outcomes}
            for trial in batch:
                point = self.point(trial)
                outcome = by_name[point.name]
                key = (trial.phase, trial.candidate.label, trial.seed)
                log = outcome.log_path
                if outcome.status not in ("done", "skipped"):
                    message = outcome.message or "see its log"
                    failure = _NOT_ACCEPTED.get(outcome.status, "{status}: {message}").format(
                        status=outcome.status, message=message)
                    results[key] = TrialResult(trial, None, failure=failure, log=log, seconds=outcome.seconds)
                    continue
                results[key] = self._read(trial, point, log, outcome.seconds, outcome.status == "skipped")
        return [results[(t.phase, t.candidate.label, t.seed)] for t in trials]

    def _read(self, trial: Trial, point: RunPoint, log: Path, seconds: float, reused: bool) -> TrialResult:
        predictions = {}
        for split in SPLITS:
            file = point.run_dir / PREDICTIONS_DIR / f"{split}.npz"
            if not os.path.lexists(file):
                failure = NO_PREDICTIONS.format(run=point.run_dir, file=f"{PREDICTIONS_DIR}/{split}.npz")
                return TrialResult(trial, None, failure=failure, log=log, seconds=seconds)
            if self._classes is None:
                self._classes = point.directory.read_final().num_classes
            try:  # the bounded, checked reader of every trial's predictions (a damaged file: failed)
                predictions[split] = class_ids(read_trial_file(trial, split, file, self._classes, log))
            except TrialError as error:
                return TrialResult(trial, None, failure=str(error), log=log, seconds=seconds)
        # The engine wrote collapse.json beside them: a collapse guard warned while the run trained.
        return TrialResult(trial, predictions, log=log, seconds=seconds, reused=reused,
                           collapsed=collapse_recorded(point.run_dir / PREDICTIONS_DIR))


def phase_spec(request: TuneRequest, config: RunConfig, phase: str, *, workers: int = 1,
               threads_per_run: int | None = None, devices: list[int] | None = None,
               launcher: dict[str, Any] | None = None) -> SweepSpec:
    """The sweep of one phase: every candidate x the phase's seed pool (no report: tune writes its own
    with the verdict's tiers).

    Built as the mapping a sweep file holds and validated by the sweep's own constructor
    (:func:`mr2.sweep.spec_from_dict`), not assembled as a :class:`~mr2.sweep.SweepSpec` directly: that
    mapping is what the spec keeps (``SweepSpec.data``, written to ``sweep.json``) and what
    ``mr2 sweep status|report`` rebuilds the sweep from, so it must pass the same checks.
    """
    seeds = request.seeds if phase == SELECTION else request.confirm_seeds
    return spec_from_dict({
        "name": phase,
        "description": f"mr2 tune {request.name}: {phase}",
        "output_dir": str(request.directory),
        "base": _base(config),
        "methods": {c.label: c.entry() for c in request.candidates},
        "seeds": seeds,
        "reference": REFERENCE_LABEL,
        "select_by": "val_accuracy",
        "workers": workers,
        "threads_per_run": threads_per_run,
        **({} if devices is None else {"devices": devices}),
        **({} if launcher is None else {"launcher": launcher}),
        "report": {"tier_source": "validation", "bootstrap": 1000, "plots": False},
    })


def engine_source(config: RunConfig, request: TuneRequest, *, workers: int | None = None,
                  threads_per_run: int | None = None, launcher: dict[str, Any] | None = None) -> EngineSource:
    """The engine source of a tune, its arguments checked.

    ``workers=None`` is the sweep's rule (:func:`mr2.sweep.processes.default_workers`) over the
    selection's runs: one run per CPU core (one thread each), or one per GPU when the configuration
    trains on GPUs (several GPUs: each worker gets its own).

    Raises:
        TuneInputError: no validation split, a worker or thread count below 1.
        mr2.config.ConfigError: an invalid ``launcher`` mapping (naming the key).
    """
    if config.data.val_fraction <= 0:
        raise TuneInputError(NO_VALIDATION_SPLIT)
    if workers is not None and workers < 1:
        raise TuneInputError(BAD_COUNT.format(flag="--workers", value=workers))
    if threads_per_run is not None and threads_per_run < 1:
        raise TuneInputError(BAD_COUNT.format(flag="--threads-per-run", value=threads_per_run))
    if launcher is not None:
        launcher_from_dict(launcher)  # the sweeps would refuse it later, after the selection ran
    devices = None
    if workers is None:
        gpus = _gpus(config.device)
        workers = default_workers(len(request.candidates) * len(request.seeds), gpus=gpus)
        devices = list(range(gpus)) if gpus > 1 else None
    return EngineSource(config, request, workers, threads_per_run, devices, launcher)
