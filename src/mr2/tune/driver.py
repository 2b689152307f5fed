"""The one tune driver: the plan's rounds of trials, run by a trial source, then the confirmation
report, the advice and ``recommendation.json`` (:func:`run_tune`).

Every way in (``mr2 tune --config``, ``--command`` and :func:`mr2.tune.tune`) builds a
:class:`mr2.tune.request.TuneRequest` and a trial source (:mod:`mr2.tune.source`) and calls
:func:`run_tune`. The plan (:class:`mr2.tune.design.Plan`) decides which trials run and what to
advise; the driver runs them, feeds their VALIDATION figures to the plan during selection and their
TEST figures (on the hard tier the plan fixed at the end of selection) during the confirmation.

Failures have one rule (:mod:`mr2.tune.source`): a failed trial rules its candidate out
("not eligible: failed (reason, log)") and the tune goes on; ERM failing ends it
(:class:`mr2.tune.selection.TuneSelectionError`: nothing to compare with).

Layout of ``<output_dir>/<name>/``: the source's trials (``selection/`` and ``confirmation/`` sweeps
for the engine, ``trials/`` for your own code), ``confirmation/report/`` (the confirmation's disparity
report, on the verdict's tiers, with its plots), ``recommendation.json``
(:class:`mr2.tune.record.TuneRecord`) and beside it the tune's picture, ``tune.html`` with its PNGs
(:mod:`mr2.tune.picture`: the selection's race and the confirmation's looks).

What it prints: the rule and design, the trials, a time estimate after ERM's first trial
(:func:`mr2.tune.estimate.remaining_text`), the selection's table, the confirmation's table and looks,
and the advice last (:mod:`mr2.tune.text`), with class names where they are known.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import torch

import mr2
from mr2.io import atomic_write_json
from mr2.report.confusion import confusion_matrix
from mr2.report.exceptions import ReportError
from mr2.report.run_dir import RunRecord
from mr2.report.settings import ReportSettings
from mr2.report.tables import comparison_markdown
from mr2.report.writer import ReportOutput, write_report
from mr2.rundir.lock import RunLock, RunLockedError, lock_holder
from mr2.tune.candidates import CANDIDATE_SETS, REFERENCE_LABEL, Candidate, candidates
from mr2.tune.design import CONFIRMATION, SELECTION, Advice, Design
from mr2.tune.errors import TuneInputError
from mr2.tune.estimate import remaining_text
from mr2.tune.picture import picture_data, write_picture
from mr2.tune.record import RECOMMENDATION_FILE, TuneRecord, configuration
from mr2.tune.request import TuneRequest
from mr2.tune.selection import Choice, TuneSelectionError, ValidationFigures, split_halves
from mr2.tune.source import TrialResult, TrialSource, format_seconds
from mr2.tune.text import (
    ERM_AT_FIRST_USE,
    advice_text,
    choice_explanation,
    choice_text,
    design_text,
    early_size_warning,
    rule_text,
    what_happened,
)
from mr2.tune.trials import Trial
from mr2.tune.verdict import SeedFigures, Verdict, seed_figures

__all__ = ["TuneResult", "describe", "run_tune"]

_BAD_REPORT = "the confirmation report could not be written: {error}"
PREVIOUS_FILE = "recommendation.previous.json"
PREVIOUS_MOVED = "; the previous recommendation was moved to {path} (it is not this run's)"
TUNE_LOCKED = (
    "tune directory {path} is in use by process {pid} (another mr2 tune into it); wait for it to end or "
    "stop it, or give this tune another --name or --output-dir"
)
_HAS_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None
_NO_PICTURE = "no picture: {error}"
_TIERS_RANKED_BY = (
    "ERM's selection runs (mean per-class validation accuracy over all validation samples), fixed before "
    "the confirmation: the verdict's tiers"
)
_TIERS_RANKED_BY_SCREEN = (
    "ERM's runs of the confirmation's screen (mean per-class test accuracy over the screen's seeds), "
    "fixed before the finalist's seeds: the verdict's tiers"
)


@dataclass
class TuneResult:
    """What a tune produced.

    Attributes:
        request: the validated request.
        choice: the selection's outcome.
        advice: the plan's advice (adopt or not, and why).
        record: ``recommendation.json``'s content.
        recommendation_file: its path.
        report_dir: the confirmation report's directory (None if none could be written).
        failed: candidate label -> why its trial failed.
        picture: the tune's picture, ``tune.html`` beside ``recommendation.json`` (None: not drawn).
    """

    request: TuneRequest
    choice: Choice | None
    advice: Advice
    record: TuneRecord
    recommendation_file: Path
    report_dir: Path | None = None
    failed: dict[str, str] = field(default_factory=dict)
    picture: Path | None = None

    @property
    def adopt(self) -> bool:
        return self.advice.adopt

    @property
    def recommended(self) -> Candidate:
        """The candidate to USE: the adopted one, else ERM (``result.recommended.make_loss()``)."""
        return self.request.candidate(self.advice.use)

    @property
    def chosen(self) -> Candidate | None:
        """What selection sent to the confirmation (None: nothing)."""
        return None if self.advice.chosen is None else self.request.candidate(self.advice.chosen)

    @property
    def verdict(self) -> Verdict | None:
        return self.advice.verdict


def sent_on(design: Design, contenders: Sequence[str]) -> list[str] | None:
    """The contenders to name in the selection's text: None with the ``margin`` gate (its text names
    the recommendation)."""
    return None if design.gate == "margin" else list(contenders)


def describe(request: TuneRequest, source: TrialSource, *, commands: bool = False) -> str:
    """The rule, the design, the candidates and the trials the plan may run (``--dry-run`` and the
    start): expected and maximum trainings, and each selection trial's state."""
    plan = request.plan()
    lines = [
        f"mr2 tune {request.name!r} in {request.directory}: {len(request.candidates) - 1} candidates against "
        f"ERM ({request.candidate_set}; {source.who_trains}), criterion {request.criterion}",
        "",
        "Rule: " + textwrap.fill(_rule(request), 100, subsequent_indent="  "),
        "",
        "Design: " + textwrap.fill(design_text(request.design), 100, subsequent_indent="  "),
        "",
        f"trainings: {plan.expected_trainings():.1f} expected (by simulation), at most "
        f"{plan.max_trainings()}; selection seeds from {request.seeds}, confirmation seeds from "
        f"{request.confirm_seeds}",
    ]
    if not source.two_stage and request.candidate_set in CANDIDATE_SETS:
        engine_only = [c.label for c in candidates(request.candidate_set) if not c.is_loss]
        if engine_only:
            lines.append(f"not run by this source (two-stage procedures need mr2 tune --config: "
                         f"{', '.join(engine_only)})")
    first = plan.next_round()
    lines.append(f"first round ({len(first)} trials):")
    for item in first:
        trial = request.trial(item)
        state = "finished" if source.is_finished(trial) else "to run"
        lines.append(f"  {trial.name:<48} {state}")
        if commands:
            lines.append(f"    $ {source.describe(trial)}")
    return "\n".join(lines)


def git_commit() -> str | None:
    """The commit of the mr2 source tree this runs from (None outside a git checkout)."""
    root = Path(mr2.__file__).resolve().parent.parent.parent
    if not (root / ".git").exists():
        return None
    try:
        result = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout.strip() or None


def _rule(request: TuneRequest) -> str:
    """The selection's rule in words for the request's criterion and design (:func:`rule_text`)."""
    design = request.design
    return rule_text(request.criterion, gate=design.gate, min_runs=design.min_runs,
                     guard=design.selection_guard == "overall", reuse=design.screen_reuse)


class _Run:
    """One tune's state while it runs."""

    def __init__(self, request: TuneRequest, source: TrialSource, out: TextIO) -> None:
        self.request = request
        self.source = source
        self.out = out
        self.plan = request.plan()
        self.results: dict[str, TrialResult] = {}
        self.failed: dict[str, dict[str, Any]] = {}
        self.trainings = 0
        self.announced = False
        self.warned = False
        self.estimated = False
        #: label -> seed -> figures, as fed to the plan (for the picture and the report's ranking).
        self.validation: dict[str, dict[int, ValidationFigures]] = {}
        self.test: dict[str, dict[int, SeedFigures]] = {}
        self.test_per_class: dict[str, dict[int, np.ndarray]] = {}
        # screen_reuse: the selection trials' test figures the screen counted (label -> seed -> figures)
        self.reused: dict[str, dict[int, SeedFigures]] = {}

    @property
    def num_classes(self) -> int:
        k = self.request.num_classes or self.source.num_classes()
        assert k is not None, "the source knows K once a trial finished"
        return k

    @property
    def class_names(self) -> list[str] | None:
        names = self.request.class_names or self.source.class_names()
        return None if names is None else list(names)

    def say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def estimate(self, result: TrialResult) -> None:
        """The time left, once, after the first of ERM's trials trained in this call."""
        if self.estimated or result.reused or not result.seconds > 0:
            return
        self.estimated = True
        workers = self.source.workers or 1
        self.say(remaining_text(result.seconds, self.trainings, self.plan.expected_trainings(),
                                self.plan.max_trainings(), workers))

    def feed(self, result: TrialResult) -> None:
        trial = result.trial
        self.results[trial.name] = result
        self.trainings += 1
        label = trial.candidate.label
        if label in self.failed:  # ruled out already: its other trials of the round decide nothing
            return
        if not result.ok:
            self.failed[label] = {"phase": trial.phase, "seed": trial.seed, "reason": result.failure,
                                  "log": None if result.log is None else str(result.log)}
            # A command's failures name their log already ("... (log: PATH)"): say it once.
            named = result.log is None or f"(log: {result.log})" in result.failure
            where = "" if named else f" (log: {result.log})"
            if label != REFERENCE_LABEL:  # ERM failing ends the tune: the plan says so, once
                self.say(f"{label} is not eligible: failed ({result.failure}){where}")
            self.plan.record_failure(trial.phase, label, trial.seed, f"{result.failure}{where}")
            return
        assert result.predictions is not None
        if trial.phase == SELECTION:
            y_true, y_pred = result.predictions["val"]
            figures = ValidationFigures.from_predictions(f"{label}@{trial.seed}", trial.seed, y_true, y_pred,
                                                         self.num_classes)
            # A collapse guard warned while the trial trained: the plan does not adopt its candidate.
            figures = replace(figures, collapsed=result.collapsed)
            reused = None
            if self.plan.design.screen_reuse and trial.seed == self.plan.selection_seeds[0]:
                # the screen's first seed: this run's test figures
                y_test, y_test_pred = result.predictions["test"]
                reused = seed_figures(y_test, y_test_pred, list(range(self.num_classes)), self.num_classes)
                reused = replace(reused, collapsed=result.collapsed)
                self.reused.setdefault(label, {})[trial.seed] = reused
            self.plan.record_validation(label, trial.seed, figures, test=reused)
            self.validation.setdefault(label, {})[trial.seed] = figures
            if not self.warned and label == REFERENCE_LABEL:
                self.warned = True
                warning = early_size_warning(_samples_per_class(y_true, self.num_classes))
                if warning:
                    self.say(warning)
        else:
            y_true, y_pred = result.predictions["test"]
            test = replace(seed_figures(y_true, y_pred, self.plan.hard_classes, self.num_classes),
                           collapsed=result.collapsed)
            self.plan.record_test(label, trial.seed, test)
            self.test.setdefault(label, {})[trial.seed] = test
            per_class = _per_class(y_true, y_pred, self.num_classes)
            self.test_per_class.setdefault(label, {})[trial.seed] = per_class
        if label == REFERENCE_LABEL:
            self.estimate(result)

    def round(self, trials: list[Trial]) -> None:
        if not self.results and trials and trials[0].candidate.is_reference:
            # ERM's first trial alone first: a broken setup shows in one trial, and the validation size
            # is checked right after it.
            for result in self.source.run(trials[:1], self.out):
                self.feed(result)
            trials = trials[1:]
        if trials:
            for result in self.source.run(trials, self.out):
                self.feed(result)

    def announce_choice(self) -> None:
        choice = self.plan.choice
        if self.announced or choice is None:
            return
        self.announced = True
        rule = _rule(self.request)
        self.say("\nRule: " + textwrap.fill(rule, 100, subsequent_indent="  "))
        contenders = sent_on(self.request.design, self.plan.contenders)
        self.say("\n" + choice_text(choice, contenders, self.class_names))
        contenders = self.plan.contenders
        seeds = self.request.confirm_seeds
        if contenders:
            self.say(f"\n== confirmation on fresh seeds (test split; up to {seeds}): ERM against "
                     f"{', '.join(contenders)}")
        else:
            self.say("\n== confirmation: no candidate to confirm")


def _per_class(y_true: np.ndarray, y_pred: np.ndarray, num_classes: int) -> np.ndarray:
    """Per-class accuracy [K] (NaN: no sample of the class)."""
    true = np.asarray(y_true, dtype=np.int64)
    count = np.bincount(true, minlength=num_classes).astype(np.float64)
    hit = (true == np.asarray(y_pred)).astype(np.float64)
    correct = np.bincount(true, weights=hit, minlength=num_classes)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, correct / np.maximum(count, 1), np.nan)


def _ranking_accuracy(run: _Run) -> tuple[float, ...] | None:
    """ERM's mean per-class validation accuracy over its selection runs: what ranked the verdict's
    tiers (NaN: a class without a validation sample)."""
    runs = run.validation.get(REFERENCE_LABEL, {})
    if not runs:
        return None
    values = np.array([figures.per_class_accuracy for figures in runs.values()], dtype=np.float64)
    present = ~np.isnan(values)
    mean = np.where(present, values, 0.0).sum(0) / np.maximum(present.sum(0), 1)
    return tuple(float(v) for v in np.where(present.any(0), mean, np.nan))


def _samples_per_class(y_true: np.ndarray, num_classes: int) -> tuple[int, float]:
    """(min, median) over the classes of the validation samples in the smaller scoring half."""
    halves = split_halves(y_true)
    counts = np.stack([np.bincount(y_true[halves == h], minlength=num_classes) for h in (0, 1)]).min(0)
    return int(counts.min()), float(np.median(counts))


def _report(run: _Run) -> tuple[ReportOutput | None, Path | None, str]:
    """The confirmation's disparity report over ERM and every confirmed contender, on the verdict's
    tiers (:attr:`mr2.tune.design.Plan.confirmation_tiers`: ranked on ERM's selection runs, or on its
    screen runs after a screen; fixed before the seeds the verdict tests)."""
    request = run.request
    k = run.num_classes
    names = run.class_names
    records = []
    for result in run.results.values():
        trial = result.trial
        if trial.phase != CONFIRMATION or not result.ok:
            continue
        assert result.predictions is not None
        val_true, val_pred = result.predictions["val"]
        test_true, test_pred = result.predictions["test"]
        records.append(RunRecord(
            name=f"{trial.candidate.label}@{trial.seed}", method=trial.candidate.label, seed=trial.seed,
            confusion=confusion_matrix(torch.from_numpy(test_pred), torch.from_numpy(test_true), k).numpy(),
            class_names=names,
            validation_confusion=confusion_matrix(torch.from_numpy(val_pred), torch.from_numpy(val_true),
                                                  k).numpy(),
            path=result.log))
    if not any(r.method == REFERENCE_LABEL for r in records):
        return None, None, ""
    planned = run.plan.confirmation_tiers
    tiers = None if planned is None else tuple(planned)
    screen_accuracy = run.plan.screen_accuracy
    ranked_by, accuracy = ((_TIERS_RANKED_BY_SCREEN, tuple(screen_accuracy)) if screen_accuracy is not None
                           else (_TIERS_RANKED_BY, _ranking_accuracy(run)))
    settings = ReportSettings(reference=REFERENCE_LABEL, tier_source="validation", bootstrap_resamples=1000,
                              plots=_HAS_MATPLOTLIB, tier_assignment=tiers,
                              tiers_ranked_by=None if tiers is None else ranked_by,
                              tier_ranking_accuracy=None if tiers is None else accuracy)
    target = request.directory / CONFIRMATION / "report"
    try:
        return write_report(records, target, settings), target, ""
    except ReportError as error:
        return None, None, _BAD_REPORT.format(error=error)


def run_tune(request: TuneRequest, source: TrialSource, *, stream: TextIO | None = None) -> TuneResult:
    """Run the tune's plan with ``source``; write the confirmation report and ``recommendation.json``;
    print progress, the choice, the advice (last) to ``stream`` (default stdout).

    Raises:
        mr2.tune.selection.TuneSelectionError: ERM failed (nothing to compare with), or no choice could
            be made.
        mr2.tune.errors.TrialError: invalid input from a trial (wrong shapes or K, labels differing
            between trials); the finished trials are kept and reused by the next call.
    """
    out = stream if stream is not None else sys.stdout
    lock = _lock(request)
    try:
        return _run_tune(request, source, out)
    finally:
        lock.release()


def _lock(request: TuneRequest) -> RunLock:
    """One owner for a tune directory, whatever the way in (``--config``, ``--command``, your
    function): a second tune into it is refused, naming the first one's process (two tunes would
    both write ``recommendation.json``, the last one winning). The engine's runs have a lock each
    besides (mr2's run directories).

    Raises:
        TuneInputError: another process holds the directory.
        mr2.io.WriteError: the directory or its lock file cannot be written (read-only, not a
            directory, a ``.lock`` that is a symbolic link); one line.
    """
    lock = RunLock(request.directory)  # creates the directory; never writes through a .lock link
    try:
        return lock.acquire()
    except RunLockedError:
        holder = lock_holder(request.directory)
        raise TuneInputError(TUNE_LOCKED.format(path=request.directory,
                                                pid="?" if holder is None else holder)) from None


def _set_aside(request: TuneRequest) -> str:
    """Move a previous ``recommendation.json`` aside (a tune that ends without advice must not leave
    an earlier one looking current); the sentence saying so, or ""."""
    previous = request.directory / RECOMMENDATION_FILE
    if not previous.is_file():
        return ""
    target = previous.with_name(PREVIOUS_FILE)
    previous.replace(target)
    return PREVIOUS_MOVED.format(path=target)


def _run_tune(request: TuneRequest, source: TrialSource, out: TextIO) -> TuneResult:
    run = _Run(request, source, out)
    print(describe(request, source), file=out, flush=True)
    print("\n== selection (validation split only)", file=out, flush=True)
    try:
        _rounds(run)
    except TuneSelectionError as error:
        moved = _set_aside(request)
        raise TuneSelectionError(f"{error}{moved}") from None
    return _finish(run)


def _rounds(run: _Run) -> None:
    while True:
        batch = run.plan.next_round()
        if not batch:
            break
        if batch[0].phase == CONFIRMATION:
            run.announce_choice()
        run.round([run.request.trial(item) for item in batch])


def _finish(run: _Run) -> TuneResult:
    request, source, out = run.request, run.source, run.out
    run.announce_choice()
    advice = run.plan.advice()
    choice = run.plan.choice
    output, report_dir, report_error = _report(run)
    use = request.candidate(advice.use)
    chosen = None if advice.chosen is None else request.candidate(advice.chosen)
    figures = None
    if output is not None:
        full = output.comparison.to_dict()
        figures = {key: full.get(key) for key in ("reference", "tiers", "methods")}
    confirmation_seeds = sorted({r.trial.seed for r in run.results.values()
                                 if r.trial.phase == CONFIRMATION})
    happened, explanation = what_happened(advice)
    source_record = run.source.record()
    record = TuneRecord(
        adopt=advice.adopt,
        use=configuration(use),
        chosen=None if chosen is None else configuration(chosen),
        reason=advice.reason,
        criterion=request.criterion,
        rule=_rule(request),
        design=request.design.to_dict(),
        candidate_set=request.candidate_set,
        source={k: v for k, v in source_record.items() if k != "base_config"},
        num_classes=run.num_classes,
        selection=_selection_record(request, choice, advice),
        failed=run.failed,
        confirmation={"seeds": confirmation_seeds, "split": "test",
                      "report": None if report_dir is None else str(report_dir / "report.json"),
                      "figures": figures, "error": report_error or None,
                      "what_happened": happened, "explanation": explanation or None},
        verdict=None if advice.verdict is None else advice.verdict.to_dict(),
        advice=advice.to_dict(),
        trainings=run.trainings,
        base_config=source_record.get("base_config"),
        mr2_version=mr2.__version__,
        git_commit=git_commit(),
    )
    recommendation_file = request.directory / RECOMMENDATION_FILE
    atomic_write_json(recommendation_file, record.to_dict())
    if output is not None:
        print("\nConfirmation on fresh seeds (test split; reported whatever it says; tiers: "
              f"{_TIERS_RANKED_BY}):\n", file=out)
        print(comparison_markdown(output.comparison), file=out)
        print(f"\nReport: {report_dir}/report.md", file=out)
    elif report_error:
        print(f"\n{report_error}", file=out)
    seconds = sum(r.seconds for r in run.results.values())
    print(f"\n{run.trainings} trainings ({format_seconds(seconds)} of training); "
          f"recommendation: {recommendation_file}", file=out)
    picture, picture_error = _picture(run, advice, use, happened, explanation, report_dir)
    print(f"Picture: {picture}" if picture is not None else f"\n{picture_error}", file=out)
    print("\n" + advice_text(advice, use, source.paste, run.class_names), file=out, flush=True)
    return TuneResult(request, choice, advice, record, recommendation_file, report_dir,
                      {label: item["reason"] for label, item in run.failed.items()}, picture)


def _selection_record(request: TuneRequest, choice: Choice | None, advice: Advice) -> dict[str, Any]:
    """``recommendation.json``'s ``selection``: the choice's figures, the candidates it sent on and
    its explanation. The old margin rule's ``recommended`` is not recorded: with the ``best`` gate it
    decides nothing, and beside a KEEP ERM advice it read as a recommendation."""
    record: dict[str, Any] = {"seeds": request.seeds, "split": "validation",
                              "candidates_against_erm": len(request.candidates) - 1}
    if choice is None:
        return record
    figures = choice.to_dict()
    for key in ("recommended", "recommendation_is_reference"):
        figures.pop(key, None)
    return {**record, **figures, "sent_to_confirmation": list(advice.contenders),
            "explanation": choice_explanation(choice, sent_on(request.design, advice.contenders))}


def _picture(run: _Run, advice: Advice, use: Candidate, happened: str, explanation: str,
             report_dir: Path | None) -> tuple[Path | None, str]:
    """Write the tune's picture beside ``recommendation.json``: ``(page, "")`` or ``(None, why not)``."""
    request = run.request
    choice = run.plan.choice
    if advice.adopt:
        line = f"ADOPT {use.label} (confirmed on fresh seeds at the stated error rate)."
    else:
        line = f"KEEP {ERM_AT_FIRST_USE}. {explanation}".rstrip()
    attempted = {(r.trial.candidate.label, r.trial.seed) for r in run.results.values()
                 if r.trial.phase == SELECTION}
    report = None if report_dir is None else str(report_dir.relative_to(request.directory) / "report.html")
    try:
        data = picture_data(
            title=f"mr2 tune {request.name}: {len(request.candidates) - 1} candidates against ERM",
            advice_line=line, advice=advice, reference=REFERENCE_LABEL, criterion=request.criterion,
            selection_seeds=request.seeds, selection_looks=request.design.selection_looks,
            validation=run.validation, attempted=attempted,
            test={label: {**run.reused.get(label, {}), **figures} for label, figures in run.test.items()},
            per_class=run.test_per_class,
            num_classes=run.num_classes, class_names=run.class_names,
            hard_classes=[] if choice is None else choice.hard_classes, report=report)
        return write_picture(request.directory, data), ""
    except ImportError as error:
        return None, _NO_PICTURE.format(error=f"{error} (pip install 'mr2[report]')")
