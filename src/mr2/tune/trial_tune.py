"""``mr2 tune`` for training code of your own: :func:`tune` (Python) and the selection and confirmation
behind ``mr2 tune --command`` (:func:`tune_trials`).

Layout of ``<output_dir>/<name>/``::

    trials/selection/<label>/seed=<s>/     every candidate x the selection seeds (mr2.tune.trials)
    trials/confirmation/<label>/seed=<s>/  ERM and the chosen candidate x the fresh seeds
    confirmation/report/                   the confirmation's disparity report (mr2.report)
    recommendation.json

The selection is the rule of :mod:`mr2.tune.selection`, applied to the selection trials' VALIDATION
predictions only (:meth:`mr2.tune.trials.TrialStore.validation` reads nothing but ``val.npz``); the
confirmation trains ERM and the chosen candidate on fresh seeds, reports their TEST predictions with
mr2's report (tiers ranked on ERM's validation predictions) and gives the verdict of
:mod:`mr2.tune.verdict`.
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import torch

import mr2
from mr2.checks import is_int
from mr2.config.names import check_name
from mr2.io import atomic_write_json
from mr2.report.confusion import confusion_matrix
from mr2.report.exceptions import ReportError
from mr2.report.run_dir import RunRecord
from mr2.report.settings import ReportSettings
from mr2.report.tables import comparison_markdown
from mr2.report.writer import ReportOutput, write_report
from mr2.tune.candidates import (
    CANDIDATE_SETS,
    DEFAULT_CANDIDATE_SET,
    REFERENCE_LABEL,
    Candidate,
    candidates,
    check_candidate_set,
)
from mr2.tune.errors import TuneInputError
from mr2.tune.loss_spec import parse_loss_spec
from mr2.tune.run import (
    OVERLAPPING_SEEDS,
    RECOMMENDATION_FILE,
    UNKNOWN_CRITERION,
    _git_commit,
    _seeds,
)
from mr2.tune.selection import CRITERIA, Choice, ValidationFigures, choose, rule_text
from mr2.tune.text import choice_text, hard_tier_note, verdict_text
from mr2.tune.trials import Trial, TrialPredictions, TrialStore, run_trials
from mr2.tune.verdict import Verdict, VerdictError, judge

__all__ = [
    "MAX_CLASSES",
    "TrialTuneRequest",
    "TuneResult",
    "describe_trials",
    "make_trial_request",
    "tune",
    "tune_trials",
]

#: The largest number of classes accepted (the report's K x K confusion matrices).
MAX_CLASSES = 100_000
BAD_NUM_CLASSES = "num_classes must be an integer from 2 to {maximum}; got {value!r}"
BAD_CANDIDATES = (
    "candidates must be 'quick', 'full' or a list of mr2.tune.Candidate with ERM ('erm') among them; "
    "got {value!r}"
)
ENGINE_ONLY_CANDIDATE = (
    "candidate {label!r} ({method}) needs mr2's engine (a two-stage procedure); with training code of "
    "your own the candidates must be losses (see mr2.tune.loss_spec.LOSS_METHODS); use mr2 tune --config"
)
_BAD_CLASS_NAMES = "class_names must be {num_classes} distinct non-empty strings; got {problem}"
NOT_CALLABLE = "train_fn must be callable as train_fn(candidate, seed); got {kind}"
_NO_SUBMIT = (
    "executor must have submit(fn, *args) (a concurrent.futures.Executor or a submitit executor); got {kind}"
)
_SELECTION_FAILED = "no recommendation: {error}"
_BAD_REPORT = "the confirmation report could not be written: {error}"


@dataclass
class TrialTuneRequest:
    """A validated tune over trials of training code of your own.

    Attributes:
        num_classes: K.
        candidates: the candidates (losses), ERM first, each with ``num_classes`` set.
        candidate_set: ``quick``, ``full`` or ``custom``.
        seeds: selection seeds.
        confirm_seeds: confirmation seeds (disjoint from ``seeds``).
        criterion: one of :data:`mr2.tune.selection.CRITERIA`.
        output_dir: where the tune directory goes.
        name: the tune directory's name.
        class_names: K names for the report, or None.
        source: what trains the trials, as recorded (``{"kind": "python"}``, ``{"kind": "command", ...}``).
    """

    num_classes: int
    candidates: list[Candidate]
    candidate_set: str
    seeds: list[int]
    confirm_seeds: list[int]
    criterion: str
    output_dir: str
    name: str
    class_names: list[str] | None = None
    source: dict[str, Any] | None = None

    @property
    def directory(self) -> Path:
        return Path(self.output_dir) / self.name

    def selection_trials(self) -> list[Trial]:
        return [Trial("selection", c, s) for c in self.candidates for s in self.seeds]

    def confirmation_trials(self, chosen: Candidate) -> list[Trial]:
        entries = [c for c in self.candidates if c.is_reference or c.label == chosen.label]
        return [Trial("confirmation", c, s) for c in entries for s in self.confirm_seeds]


def _candidates(value: str | Sequence[Candidate], num_classes: int) -> tuple[list[Candidate], str]:
    if isinstance(value, str):
        chosen, name = candidates(check_candidate_set(value, losses_only=True), losses_only=True), value
    else:
        items = [c for c in value if isinstance(c, Candidate)] if isinstance(value, Sequence) else []
        labels = [c.label for c in items]
        if (not items or len(items) != len(value) or REFERENCE_LABEL not in labels
                or len(set(labels)) != len(labels)):
            raise TuneInputError(BAD_CANDIDATES.format(value=value))
        for candidate in items:
            check_name(candidate.label, "candidate label", TuneInputError)
            if not candidate.is_loss:
                raise TuneInputError(ENGINE_ONLY_CANDIDATE.format(label=candidate.label,
                                                                  method=candidate.method))
            parse_loss_spec(candidate.loss_spec())
        reference = next(c for c in items if c.is_reference)
        chosen, name = [reference, *(c for c in items if not c.is_reference)], "custom"
    return [replace(c, num_classes=num_classes) for c in chosen], name


def _class_names(value: Sequence[str] | None, num_classes: int) -> list[str] | None:
    if value is None:
        return None
    names = list(value) if not isinstance(value, str) else []
    problem = ""
    if len(names) != num_classes:
        problem = f"{len(names)} names"
    elif not all(isinstance(n, str) and n.strip() for n in names):
        problem = "an empty or non-string name"
    elif len(set(names)) != len(names):
        problem = "duplicates"
    if problem:
        raise TuneInputError(_BAD_CLASS_NAMES.format(num_classes=num_classes, problem=problem))
    return names


def make_trial_request(
    *,
    num_classes: int,
    candidates: str | Sequence[Candidate] = DEFAULT_CANDIDATE_SET,
    seeds: int | str | Sequence[int] = 3,
    confirm_seeds: int | str | Sequence[int] = 3,
    criterion: str = "hard_tier",
    output_dir: str | Path,
    name: str,
    class_names: Sequence[str] | None = None,
    source: dict[str, Any] | None = None,
) -> TrialTuneRequest:
    """Validate a tune's arguments (the rules of ``mr2 tune``: at least 2 and at most
    :data:`mr2.tune.run.MAX_SEEDS` seeds each, disjoint, counts give consecutive seeds).

    Raises:
        TuneInputError: the first problem found (before anything is written).
    """
    if not is_int(num_classes) or not 2 <= num_classes <= MAX_CLASSES:
        raise TuneInputError(BAD_NUM_CLASSES.format(maximum=MAX_CLASSES, value=num_classes))
    if criterion not in CRITERIA:
        raise TuneInputError(UNKNOWN_CRITERION.format(value=criterion, choices=", ".join(CRITERIA)))
    chosen, set_name = _candidates(candidates, num_classes)
    check_name(name, "name", TuneInputError)

    def as_text(value: int | str | Sequence[int]) -> str | int:
        if isinstance(value, (str, int)) and not isinstance(value, bool):
            return value
        if isinstance(value, Sequence) and all(is_int(v) for v in value):
            return ",".join(str(v) for v in value) if len(value) else "[]"
        raise TuneInputError(f"seeds must be a count, a list of ints or 'S,S,...'; got {value!r}")

    selection = _seeds(as_text(seeds), "seeds", 3)
    confirmation = _seeds(as_text(confirm_seeds), "confirm_seeds", 3, start=max(selection) + 1)
    common = sorted(set(selection) & set(confirmation))
    if common:
        raise TuneInputError(OVERLAPPING_SEEDS.format(selection=selection, confirmation=confirmation,
                                                      common=common))
    return TrialTuneRequest(num_classes, chosen, set_name, selection, confirmation, criterion,
                            str(output_dir), name, _class_names(class_names, num_classes),
                            source or {"kind": "python"})


def describe_trials(request: TrialTuneRequest, runs: str = "trials") -> str:
    """The rule, the candidates and the trials with their cost (``--dry-run`` and the start)."""
    store = TrialStore(request.directory, request.num_classes)
    selection = request.selection_trials()
    lines = [
        f"mr2 tune {request.name!r} in {request.directory}: {len(request.candidates)} candidates "
        f"({request.candidate_set}: the losses your training code can run), criterion {request.criterion}",
        "",
        "Rule: " + textwrap.fill(rule_text(request.criterion), 100, subsequent_indent="  "),
        "",
        f"cost: {len(selection)} selection {runs} ({len(request.candidates)} candidates x seeds "
        f"{request.seeds}) + up to {2 * len(request.confirm_seeds)} confirmation {runs} (the chosen "
        f"candidate and ERM x fresh seeds {request.confirm_seeds})",
    ]
    if request.candidate_set in CANDIDATE_SETS:
        engine_only = [c.label for c in candidates(request.candidate_set) if not c.is_loss]
        if engine_only:
            lines.append(f"not run by this source (two-stage procedures need mr2 tune --config: "
                         f"{', '.join(engine_only)})")
    for trial in selection:
        finished = (store.path(trial) / "trial.json").is_file()
        lines.append(f"  {trial.name:<48} {'finished' if finished else 'to run'}  loss "
                     f"{_spec_text(trial.candidate)}")
    return "\n".join(lines)


def _spec_text(candidate: Candidate) -> str:
    import json

    return json.dumps(candidate.loss_spec(), separators=(",", ":"))


@dataclass
class TuneResult:
    """What a tune over trials produced.

    Attributes:
        request: the validated request.
        choice: the selection rule's outcome.
        recommended: the chosen candidate (ERM when nothing beat it).
        verdict: the confirmation's verdict (None if it could not be given: ``verdict_error`` says why).
        report_dir: the confirmation report's directory (None if it could not be written).
        recommendation_file: ``recommendation.json``.
        record: its content.
    """

    request: TrialTuneRequest
    choice: Choice
    recommended: Candidate
    verdict: Verdict | None
    report_dir: Path | None
    recommendation_file: Path
    record: dict[str, Any]
    verdict_error: str = ""


def _records(request: TrialTuneRequest, store: TrialStore, trials: Sequence[Trial]) -> list[RunRecord]:
    records = []
    k = request.num_classes
    for trial in trials:
        data = store.read(trial)
        val_true, val_pred = data["val"]
        test_true, test_pred = data["test"]
        records.append(RunRecord(
            name=f"{trial.candidate.label}@{trial.seed}",
            method=trial.candidate.label,
            seed=trial.seed,
            confusion=confusion_matrix(torch.from_numpy(test_pred), torch.from_numpy(test_true), k).numpy(),
            class_names=request.class_names,
            validation_confusion=confusion_matrix(torch.from_numpy(val_pred), torch.from_numpy(val_true),
                                                  k).numpy(),
            path=store.path(trial) / "test.npz",
        ))
    return records


def tune_trials(
    request: TrialTuneRequest,
    call: Callable[[Trial], Any],
    *,
    executor: Any = None,
    log: Callable[[Trial], Path | None] | None = None,
    stream: TextIO | None = None,
) -> TuneResult:
    """Selection on validation, confirmation on fresh seeds, report, verdict and ``recommendation.json``
    for trials run by ``call`` (module docstring).

    Raises:
        TrialError: a trial failed or returned unusable predictions (names the trial and its log).
        TuneSelectionError: no choice could be made (e.g. fewer than 2 ERM trials).
    """
    out = stream if stream is not None else sys.stdout
    store = TrialStore(request.directory, request.num_classes)
    log_of = log or (lambda trial: None)
    print(describe_trials(request), file=out, flush=True)
    print("\n== selection (validation split only)", file=out, flush=True)
    selection = request.selection_trials()
    run_trials(selection, call, store, executor=executor, log=log_of, stream=out)
    runs: dict[str, list[ValidationFigures]] = {}
    for trial in selection:
        y_true, y_pred = store.validation(trial)
        runs.setdefault(trial.candidate.label, []).append(
            ValidationFigures.from_predictions(f"{trial.candidate.label}@{trial.seed}", trial.seed, y_true,
                                               y_pred, request.num_classes))
    choice = choose(runs, request.criterion, REFERENCE_LABEL, seeds=request.seeds)
    recommended = next(c for c in request.candidates if c.label == choice.recommended)
    print("\nRule: " + textwrap.fill(rule_text(request.criterion, tier_rule=choice.tier_rule), 100,
                                     subsequent_indent="  "), file=out)
    print("\n" + choice_text(choice), file=out, flush=True)

    print(f"\n== confirmation on fresh seeds {request.confirm_seeds} (test split)", file=out, flush=True)
    confirmation = request.confirmation_trials(recommended)
    run_trials(confirmation, call, store, executor=executor, log=log_of, stream=out)

    report_dir: Path | None = None
    report_error = ""
    figures: dict[str, Any] | None = None
    output: ReportOutput | None = None
    try:
        settings = ReportSettings(reference=REFERENCE_LABEL, tier_source="validation",
                                  bootstrap_resamples=1000, plots=False)
        target = request.directory / "confirmation" / "report"
        output = write_report(_records(request, store, confirmation), target, settings)
        full = output.comparison.to_dict()
        figures = {key: full.get(key) for key in ("reference", "tiers", "methods")}
        report_dir = target
    except ReportError as error:
        report_error = _BAD_REPORT.format(error=error)

    def test_predictions(label: str) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        return {t.seed: store.read(t, ("test",))["test"] for t in confirmation if t.candidate.label == label}

    verdict: Verdict | None = None
    verdict_error = ""
    try:
        verdict = judge(test_predictions(REFERENCE_LABEL),
                        None if recommended.is_reference else test_predictions(recommended.label),
                        choice.hard_classes or list(range(request.num_classes)), request.num_classes,
                        reference_label=REFERENCE_LABEL, chosen_label=recommended.label)
    except VerdictError as error:
        verdict_error = str(error)

    record = {
        "method": recommended.method,
        "options": recommended.options,
        "label": recommended.label,
        "loss_spec": recommended.loss_spec(),
        "recommendation_is_erm": recommended.is_reference,
        "criterion": request.criterion,
        "rule": rule_text(request.criterion, tier_rule=choice.tier_rule),
        "candidate_set": request.candidate_set,
        "source": request.source,
        "num_classes": request.num_classes,
        "selection": {"seeds": request.seeds, "split": "validation", **choice.to_dict()},
        "confirmation": {
            "seeds": request.confirm_seeds,
            "split": "test",
            "report": None if report_dir is None else str(report_dir / "report.json"),
            "figures": figures,
            "error": report_error or None,
        },
        "verdict": None if verdict is None else verdict.to_dict(),
        "verdict_error": verdict_error or None,
        "base_config": None,
        "mr2_version": mr2.__version__,
        "git_commit": _git_commit(),
    }
    recommendation_file = request.directory / RECOMMENDATION_FILE
    atomic_write_json(recommendation_file, record)
    paste = f"loss_spec: {_spec_text(recommended)}   # mr2.tune.loss_from_spec(spec, num_classes=K)"
    if verdict is not None:
        # The pasteable block comes with confirmed and (with its caveat) supported only.
        print("\n" + verdict_text(verdict, paste=paste), file=out)
    else:
        print(f"\nno verdict: {verdict_error}", file=out)
        print("\nChosen on validation (no verdict on fresh seeds: read the confirmation below):\n\n    "
              + paste, file=out)
    if output is not None:
        print("\nConfirmation on fresh seeds (test split; reported whatever it says):\n", file=out)
        print(comparison_markdown(output.comparison), file=out)
        note = hard_tier_note(verdict, output.comparison.tiers)
        if note:
            print(f"\n{note}", file=out)
        print(f"\nReport: {report_dir}/report.md", file=out)
    elif report_error:
        print(f"\n{report_error}", file=out)
    print(f"Recommendation: {recommendation_file}", file=out, flush=True)
    return TuneResult(request, choice, recommended, verdict, report_dir, recommendation_file, record,
                      verdict_error)


def _train(train_fn: Callable[[Candidate, int], Any], trial: Trial) -> Any:
    """Run one trial of :func:`tune` (module level, so that it pickles for process pools and submitit)."""
    return train_fn(trial.candidate, trial.seed)


def tune(
    train_fn: Callable[[Candidate, int], TrialPredictions],
    *,
    num_classes: int,
    candidates: str | Sequence[Candidate] = DEFAULT_CANDIDATE_SET,
    seeds: int | str | Sequence[int] = 3,
    confirm_seeds: int | str | Sequence[int] = 3,
    criterion: str = "hard_tier",
    output_dir: str | Path,
    name: str = "tune",
    class_names: Sequence[str] | None = None,
    executor: Any = None,
    stream: TextIO | None = None,
) -> TuneResult:
    """Choose among loss candidates on YOUR training code's validation predictions, confirm on fresh
    seeds, write ``recommendation.json`` and the confirmation report under ``output_dir/name``.

    ``train_fn(candidate, seed)`` trains one trial and returns :class:`mr2.tune.TrialPredictions`
    (validation and test: ``y_true`` plus ``y_pred`` or ``logits``). It should call
    ``candidate.seed_everything(seed)`` first, train with ``loss = candidate.make_loss()`` (an
    ``nn.Module`` called as ``loss(logits, features, target)``; ``features``, the penultimate layer, is
    needed when ``loss.needs_features``; ``loss.parameters()`` belong in the optimiser), and predict the
    same validation and test samples in the same order in every trial.

    Args:
        train_fn: the training function (picklable, i.e. defined at module level, when ``executor`` is
            a process pool or a submitit executor).
        num_classes: K.
        candidates: ``"full"`` (the default; its losses: two-stage procedures need ``mr2 tune
            --config``), ``"quick"`` or a list of :class:`mr2.tune.Candidate` including ``erm``.
        seeds: selection seeds (a count from 0, or a list); at least 2.
        confirm_seeds: fresh confirmation seeds (a count after the selection seeds, or a list).
        criterion: ``hard_tier``, ``worst_class`` or ``overall``.
        output_dir: where the tune directory goes.
        name: the tune directory's name.
        class_names: K class names for the report.
        executor: a :class:`concurrent.futures.Executor` (or a submitit executor: trials become Slurm
            jobs) to run trials in parallel; None runs them one after another in this process.
        stream: progress and results (default stdout).

    Returns:
        :class:`TuneResult` (``result.recommended.make_loss()`` is the recommended loss).

    Raises:
        TuneInputError: bad arguments (nothing written).
        TrialError: ``train_fn`` raised, or returned something other than valid
            :class:`TrialPredictions` (wrong type, wrong K, NaN logits, ``y_true`` differing between
            trials); finished trials are kept and reused by the next call.
        TuneSelectionError: no choice could be made.

    Running the same call again reuses every finished trial (resume).
    """
    if not callable(train_fn):
        raise TuneInputError(NOT_CALLABLE.format(kind=type(train_fn).__name__))
    if executor is not None and not callable(getattr(executor, "submit", None)):
        raise TuneInputError(_NO_SUBMIT.format(kind=type(executor).__name__))
    request = make_trial_request(num_classes=num_classes, candidates=candidates, seeds=seeds,
                                 confirm_seeds=confirm_seeds, criterion=criterion, output_dir=output_dir,
                                 name=name, class_names=class_names, source={"kind": "python"})
    return tune_trials(request, partial(_train, train_fn), executor=executor, stream=stream)

