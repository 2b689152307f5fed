"""``mr2 tune`` as a library call: select on validation with one sweep, confirm on fresh seeds with
another, write ``recommendation.json``.

Layout of ``<output_dir>/<name>/``::

    selection/       the selection sweep (every candidate x the selection seeds); no report
    confirmation/    the confirmation sweep (the recommendation and ERM x fresh seeds) and its report
    recommendation.json

Both phases are plain sweeps (:func:`mr2.sweep.run_sweep`): finished runs are reused, interrupted
ones resume, the trainers never outlive the command. The choice is made by
:func:`mr2.tune.selection.choose` from the selection runs' validation sections only.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import numpy as np
import yaml

import mr2
from mr2.config import RunConfig, config_to_dict
from mr2.config.names import check_name
from mr2.engine.final import PREDICTIONS_DIR
from mr2.io import atomic_write_json
from mr2.report.serialization import json_safe
from mr2.report.tables import comparison_markdown
from mr2.sweep import SweepResult, SweepSpec, plan_sweep, run_sweep, spec_from_dict
from mr2.sweep.launcher import launcher_from_dict
from mr2.sweep.plan import RunPoint
from mr2.sweep.processes import default_workers
from mr2.tune.candidates import (
    DEFAULT_CANDIDATE_SET,
    REFERENCE_LABEL,
    Candidate,
    candidates,
    check_candidate_set,
)
from mr2.tune.errors import TuneInputError
from mr2.tune.selection import (
    CRITERIA,
    Choice,
    TuneSelectionError,
    ValidationFigures,
    choose,
    read_validation,
    rule_text,
)
from mr2.tune.text import choice_text, hard_tier_note, verdict_text
from mr2.tune.verdict import Verdict, VerdictError, judge

__all__ = [
    "RECOMMENDATION_FILE",
    "TuneOutcome",
    "TuneRequest",
    "describe_tune",
    "make_request",
    "preflight",
    "run_tune",
]

RECOMMENDATION_FILE = "recommendation.json"
NO_VALIDATION_SPLIT = (
    "mr2 tune chooses on the validation split, but the configuration has data.val_fraction: 0; set "
    "it above 0 (e.g. --set data.val_fraction=0.1)"
)
UNKNOWN_CRITERION = "unknown criterion {value!r}; choose one of: {choices}"
BAD_SEEDS = (
    "{flag} must be a count >= {minimum} or a comma-separated list of distinct seeds >= 0; got {value!r}"
)
TOO_FEW_SEEDS = "{flag} needs at least 2 seeds (the rule uses the seed standard error); got {count}"
OVERLAPPING_SEEDS = (
    "selection seeds {selection} and confirmation seeds {confirmation} overlap in {common}; the "
    "confirmation must use fresh seeds"
)
_SELECTION_FAILED = "no recommendation: {error}"
OLD_RUNS = (
    "Some selection runs were finished by an older mr2 without per-sample validation predictions "
    "(predictions/val.npz): their tiers are ranked and scored on the same validation samples (the rule "
    "below); delete those runs to rerun them under the split-half rule."
)
_NO_VERDICT_BLOCK = (
    "Chosen on validation (no verdict on fresh seeds: read the confirmation below before you paste it "
    "into your run configuration):"
)
_NO_TEST_PREDICTIONS = (
    "{run} has no predictions/test.npz (finished by an older mr2); delete it and rerun the tune for a verdict"
)
_REFERENCE_INCOMPLETE = (
    "ERM lacks selection seed(s) {seeds} (not accepted by this invocation's sweep: see above), so the "
    "candidates cannot be compared with it seed for seed; re-run once those runs can train"
)
BAD_COUNT = "{flag} must be an integer >= 1; got {value}"
#: The most seeds ``--seeds`` or ``--confirm-seeds`` may ask for (checked before any list is built).
MAX_SEEDS = 1000
TOO_MANY_SEEDS = (
    "{flag} asks for {count} seeds; at most {maximum} are allowed (every seed trains every candidate once)"
)
NOT_ACCEPTED = (
    "{count} selection run(s) were not accepted by this invocation's sweep (failed, refused or running "
    "elsewhere: see above) and are not scored"
)
MISSING_SEEDS = (
    "{label} is not eligible: selection seed(s) {seeds} were not accepted by this invocation's sweep"
)


@dataclass
class TuneRequest:
    """A validated ``mr2 tune`` invocation.

    Attributes:
        config: the user's run configuration (the candidates' common base).
        name: the tune directory's name under ``output_dir``.
        output_dir: where the tune directory goes.
        seeds: selection seeds.
        confirm_seeds: confirmation seeds (disjoint from ``seeds``).
        candidate_set: ``quick``, ``full`` or a comma-separated list of candidate labels.
        criterion: one of :data:`mr2.tune.selection.CRITERIA`.
        workers: runs in parallel (:func:`make_request` resolves its default).
        threads_per_run: torch threads per run (None: cores // workers).
        devices: GPU ids shared out among the workers (None: the runs' own device; set by the default
            of one worker per GPU when there are several).
        launcher: the sweeps' ``launcher:`` mapping (None: the local pool; ``{"name": "slurm", ...}``:
            every run a submitit job, see docs/cluster.md); validated by :func:`make_request`.
    """

    config: RunConfig
    name: str
    output_dir: str
    seeds: list[int]
    confirm_seeds: list[int]
    candidate_set: str = DEFAULT_CANDIDATE_SET
    criterion: str = "hard_tier"
    workers: int = 1
    threads_per_run: int | None = None
    launcher: dict[str, Any] | None = None
    devices: list[int] | None = None

    @property
    def directory(self) -> Path:
        return Path(self.output_dir) / self.name

    @property
    def candidates(self) -> list[Candidate]:
        return candidates(self.candidate_set)


def _seeds(value: str | int | None, flag: str, default: int, start: int = 0) -> list[int]:
    if value is None:
        value = default
    text = str(value).strip()
    if text.isdigit() and "," not in text:
        if len(text) > len(str(MAX_SEEDS)):  # before int(): a count of thousands of digits
            shown = text.lstrip("0") or "0"
            if len(shown) > len(str(MAX_SEEDS)):
                shown = shown if len(shown) <= 12 else shown[:12] + "..."
                raise TuneInputError(TOO_MANY_SEEDS.format(flag=flag, count=shown, maximum=MAX_SEEDS))
        count = int(text)
        if count > MAX_SEEDS:
            raise TuneInputError(TOO_MANY_SEEDS.format(flag=flag, count=count, maximum=MAX_SEEDS))
        if count < 2:
            raise TuneInputError(TOO_FEW_SEEDS.format(flag=flag, count=count))
        return list(range(start, start + count))
    parts = [part for part in text.split(",") if part.strip()]
    if len(parts) > MAX_SEEDS:
        raise TuneInputError(TOO_MANY_SEEDS.format(flag=flag, count=len(parts), maximum=MAX_SEEDS))
    try:
        seeds = [int(part) for part in parts]
    except ValueError:
        raise TuneInputError(BAD_SEEDS.format(flag=flag, minimum=2, value=value)) from None
    if any(seed < 0 for seed in seeds) or len(set(seeds)) != len(seeds):
        raise TuneInputError(BAD_SEEDS.format(flag=flag, minimum=2, value=value))
    if len(seeds) < 2:
        raise TuneInputError(TOO_FEW_SEEDS.format(flag=flag, count=len(seeds)))
    return seeds


def make_request(
    config: RunConfig,
    *,
    name: str,
    output_dir: str | None = None,
    seeds: str | int | None = None,
    confirm_seeds: str | int | None = None,
    candidate_set: str = DEFAULT_CANDIDATE_SET,
    criterion: str = "hard_tier",
    workers: int | None = None,
    threads_per_run: int | None = None,
    launcher: dict[str, Any] | None = None,
) -> TuneRequest:
    """Validate the arguments of ``mr2 tune`` (counts give consecutive seeds; confirmation seeds
    start after the largest selection seed).

    ``workers=None`` is the sweep's rule (:func:`mr2.sweep.processes.default_workers`) over the
    selection's runs: one run per CPU core (one thread each), or one per GPU when the configuration
    trains on GPUs (several GPUs: each worker gets its own).

    Raises:
        TuneInputError: the first problem found.
        mr2.config.ConfigError: an invalid ``launcher`` mapping (naming the key).
    """
    if criterion not in CRITERIA:
        raise TuneInputError(UNKNOWN_CRITERION.format(value=criterion, choices=", ".join(CRITERIA)))
    check_candidate_set(candidate_set)
    if config.data.val_fraction <= 0:
        raise TuneInputError(NO_VALIDATION_SPLIT)
    check_name(name, "--name", TuneInputError)
    if workers is not None and workers < 1:
        raise TuneInputError(BAD_COUNT.format(flag="--workers", value=workers))
    if threads_per_run is not None and threads_per_run < 1:
        raise TuneInputError(BAD_COUNT.format(flag="--threads-per-run", value=threads_per_run))
    selection = _seeds(seeds, "--seeds", 3)
    confirmation = _seeds(confirm_seeds, "--confirm-seeds", 3, start=max(selection) + 1)
    common = sorted(set(selection) & set(confirmation))
    if common:
        raise TuneInputError(OVERLAPPING_SEEDS.format(selection=selection, confirmation=confirmation,
                                                      common=common))
    if launcher is not None:
        launcher_from_dict(launcher)  # the sweeps would refuse it later, after the selection ran
    devices = None
    if workers is None:
        gpus = _gpus(config.device)
        workers = default_workers(len(candidates(candidate_set)) * len(selection), gpus=gpus)
        devices = list(range(gpus)) if gpus > 1 else None
    return TuneRequest(config, name, output_dir or config.output_dir, selection, confirmation, candidate_set,
                       criterion, workers, threads_per_run, launcher, devices)


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
    for key in ("name", "seed", "output_dir"):
        base.pop(key)
    base["method"] = {"name": REFERENCE_LABEL, "options": {}}
    return base


def _spec(request: TuneRequest, phase: str, entries: list[Candidate], seeds: list[int]) -> SweepSpec:
    return spec_from_dict({
        "name": phase,
        "description": f"mr2 tune {request.name}: {phase}",
        "output_dir": str(request.directory),
        "base": _base(request.config),
        "methods": {c.label: c.entry() for c in entries},
        "seeds": seeds,
        "reference": REFERENCE_LABEL,
        "select_by": "val_accuracy",
        "workers": request.workers,
        "threads_per_run": request.threads_per_run,
        **({} if request.devices is None else {"devices": request.devices}),
        **({} if request.launcher is None else {"launcher": request.launcher}),
        # Tiers of the confirmation report from ERM's validation split, like the choice.
        "report": {"tier_source": "validation", "bootstrap": 1000, "plots": False},
    })


def selection_spec(request: TuneRequest) -> SweepSpec:
    """The selection sweep: every candidate x the selection seeds."""
    return _spec(request, "selection", request.candidates, request.seeds)


def confirmation_spec(request: TuneRequest, recommended: Candidate) -> SweepSpec:
    """The confirmation sweep: the recommendation and ERM x the fresh seeds (ERM alone if chosen)."""
    entries = [c for c in request.candidates if c.is_reference or c.label == recommended.label]
    return _spec(request, "confirmation", entries, request.confirm_seeds)


def preflight(request: TuneRequest) -> None:
    """Build what ``mr2 train`` builds before training (every candidate's configuration, the data,
    the model, each method), so bad input fails here, before anything is written.

    Raises:
        mr2.sweep.SweepSpecError, and any :class:`~mr2.errors.MR2Error` of the configuration, data,
        model or methods.
    """
    import torch

    from mr2.engine.builders import build_data, build_model_for
    from mr2.methods.registry import build_method

    plan_sweep(selection_spec(request))  # every candidate's run configuration validates
    config = request.config
    if config.regime == "linear_probe":
        return  # building its data means extracting features: left to the first run
    data = build_data(config, torch.device("cpu"))
    build_model_for(config, data)
    for candidate in request.candidates:
        build_method(candidate.method, data.num_classes, **candidate.options)


def _groups(points: list[RunPoint]) -> dict[str, list[Path]]:
    groups: dict[str, list[Path]] = {}
    for point in points:
        groups.setdefault(point.label, []).append(point.run_dir)
    return groups


def accepted_points(result: SweepResult) -> list[RunPoint]:
    """The runs the sweep accepted in this invocation: trained now or finished earlier with the planned
    configuration. Failed runs, runs refused (finished with another configuration) and runs owned by
    another process are left out, even if a finished ``final.json`` lies in their directory."""
    return [o.point for o in result.outcomes if o.status in ("done", "skipped")]


def missing_seeds(accepted: Sequence[RunPoint], request: TuneRequest) -> dict[str, list[int]]:
    """Candidate label -> the selection seeds it lacks among ``accepted`` (candidates lacking none
    are left out), in candidate order."""
    have: dict[str, set[int]] = {}
    for point in accepted:
        have.setdefault(point.label, set()).add(point.seed)
    missing = {c.label: [s for s in request.seeds if s not in have.get(c.label, set())]
               for c in request.candidates}
    return {label: seeds for label, seeds in missing.items() if seeds}


def choose_complete(runs: Mapping[str, Sequence[ValidationFigures]], missing: Mapping[str, Sequence[int]],
                    criterion: str, seeds: Sequence[int]) -> Choice:
    """:func:`choose` with the selection seeds: a candidate lacking one is listed with its figures on
    the seeds it has but is not eligible; ERM lacking one: no choice.

    Raises:
        TuneSelectionError: ERM lacks a selection seed, or :func:`choose` refuses.
    """
    if REFERENCE_LABEL in missing:
        raise TuneSelectionError(_REFERENCE_INCOMPLETE.format(seeds=list(missing[REFERENCE_LABEL])))
    return choose(runs, criterion, REFERENCE_LABEL, seeds=seeds)


def _engine_figures(point: RunPoint) -> ValidationFigures:
    """A selection run's validation figures: from its per-sample ``predictions/val.npz`` (the split-half
    rule), or, for a run finished by an older mr2 without it, the ``validation`` section of final.json."""
    file = point.run_dir / PREDICTIONS_DIR / "val.npz"
    if not file.is_file():
        return read_validation(point.run_dir)
    num_classes = point.directory.read_final().num_classes
    with np.load(file, allow_pickle=False) as data:
        y_true, y_pred = data["y_true"], data["y_pred"]
    return ValidationFigures.from_predictions(point.run_dir.name, point.seed, y_true, y_pred, num_classes)


def read_engine_runs(points: Sequence[RunPoint]) -> dict[str, list[ValidationFigures]]:
    """Label -> validation figures of the (accepted, finished) selection runs, in plan order."""
    runs: dict[str, list[ValidationFigures]] = {}
    for point in points:
        runs.setdefault(point.label, []).append(_engine_figures(point))
    return runs


def engine_verdict(choice: Choice, recommended: Candidate, points: Sequence[RunPoint]
                   ) -> tuple[Verdict | None, str]:
    """The verdict (:func:`mr2.tune.verdict.judge`) from the accepted confirmation runs'
    ``predictions/test.npz``; ``(None, why)`` when it cannot be given."""
    predictions: dict[str, dict[int, tuple[np.ndarray, np.ndarray]]] = {}
    num_classes = 0
    for point in points:
        file = point.run_dir / PREDICTIONS_DIR / "test.npz"
        if not file.is_file():
            return None, _NO_TEST_PREDICTIONS.format(run=point.run_dir)
        with np.load(file, allow_pickle=False) as data:
            predictions.setdefault(point.label, {})[point.seed] = (data["y_true"], data["y_pred"])
        num_classes = point.directory.read_final().num_classes
    try:
        verdict = judge(predictions.get(REFERENCE_LABEL, {}),
                        None if recommended.is_reference else predictions.get(recommended.label, {}),
                        choice.hard_classes or list(range(num_classes)), num_classes,
                        reference_label=REFERENCE_LABEL, chosen_label=recommended.label)
    except VerdictError as error:
        return None, str(error)
    return verdict, ""


def _percent(value: float) -> str:
    return "n/a" if value != value else f"{100 * value:.2f}"


def _git_commit() -> str | None:
    root = Path(mr2.__file__).resolve().parent.parent.parent
    if not (root / ".git").exists():
        return None
    try:
        result = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout.strip() or None


def method_yaml(candidate: Candidate) -> str:
    """The ready-to-paste ``method:`` block of a run configuration."""
    return yaml.safe_dump({"method": candidate.method_block()}, sort_keys=False)


@dataclass
class TuneOutcome:
    """What ``mr2 tune`` produced.

    Attributes:
        request: the invocation.
        selection: the selection sweep's result.
        choice: the rule's outcome (None if it could not be applied).
        confirmation: the confirmation sweep's result (None without a choice).
        recommendation_file: ``recommendation.json`` (None without a choice).
        error: why there is no recommendation ("" otherwise).
        verdict: the confirmation's verdict (None if it could not be given).
    """

    request: TuneRequest
    selection: SweepResult
    choice: Choice | None = None
    confirmation: SweepResult | None = None
    recommendation_file: Path | None = None
    error: str = ""
    verdict: Verdict | None = None

    @property
    def ok(self) -> bool:
        return (self.choice is not None and self.selection.ok and self.confirmation is not None
                and self.confirmation.ok)


def describe_tune(request: TuneRequest) -> str:
    """The rule, the candidates and the runs with their cost (for ``--dry-run`` and the start)."""
    points = plan_sweep(selection_spec(request))
    epochs = request.config.optim.epochs
    confirm_runs = 2 * len(request.confirm_seeds)
    lines = [
        f"mr2 tune {request.name!r} in {request.directory}: {len(request.candidates)} candidates "
        f"({request.candidate_set}; mr2's engine runs every candidate, two-stage procedures included), "
        f"criterion {request.criterion}",
        "",
        "Rule: " + textwrap.fill(rule_text(request.criterion), 100, subsequent_indent="  "),
        "",
        f"selection: {len(points)} runs ({len(request.candidates)} candidates x seeds {request.seeds}), "
        f"{epochs} epochs each = {len(points) * epochs} epochs",
        f"confirmation: up to {confirm_runs} runs (the recommendation and ERM x fresh seeds "
        f"{request.confirm_seeds}) = {confirm_runs * epochs} epochs",
    ]
    for point in points:
        state = "finished" if point.directory.is_finished else "to run"
        lines.append(f"  {point.name:<40} {state}")
    return "\n".join(lines)


def run_tune(request: TuneRequest, *, stream: TextIO | None = None) -> TuneOutcome:
    """Select on validation, confirm on fresh seeds, write ``recommendation.json``; progress and
    results go to ``stream`` (default stdout).

    Raises:
        mr2.sweep.SweepInterrupted: stopped by a signal (the trainers were stopped; re-run resumes).
    """
    out = stream if stream is not None else sys.stdout
    print(describe_tune(request), file=out, flush=True)
    print("\n== selection (validation split only)", file=out, flush=True)
    spec = selection_spec(request)
    selection = run_sweep(spec, stream=out, report=False)
    outcome = TuneOutcome(request, selection)
    accepted = accepted_points(selection)
    if len(accepted) < len(selection.points):
        print("\n" + NOT_ACCEPTED.format(count=len(selection.points) - len(accepted)), file=out)
    missing = missing_seeds(accepted, request)
    for label, seeds in missing.items():
        print(MISSING_SEEDS.format(label=label, seeds=seeds), file=out)
    try:
        choice = choose_complete(read_engine_runs(accepted), missing, request.criterion, request.seeds)
    except TuneSelectionError as error:
        outcome.error = _SELECTION_FAILED.format(error=error)
        print(f"\n{outcome.error}", file=out)
        return outcome
    outcome.choice = choice
    recommended = next(c for c in request.candidates if c.label == choice.recommended)
    if choice.tier_rule != "split_half" and request.criterion == "hard_tier":
        print("\n" + OLD_RUNS, file=out)
    rule = rule_text(request.criterion, tier_rule=choice.tier_rule)
    print("\nRule: " + textwrap.fill(rule, 100, subsequent_indent="  "), file=out)
    print("\n" + choice_text(choice), file=out, flush=True)

    print(f"\n== confirmation on fresh seeds {request.confirm_seeds} (test split)", file=out, flush=True)
    confirmation = run_sweep(confirmation_spec(request, recommended), stream=out, plots=False)
    outcome.confirmation = confirmation
    figures: dict[str, Any] | None = None
    report_file = None
    if confirmation.report is not None:
        report_file = confirmation.report.directory / "report.json"  # holds these figures too
        summary = json_safe(confirmation.report.output.comparison.to_dict())
        figures = {key: summary.get(key) for key in ("reference", "tiers", "methods")}
    verdict, verdict_error = engine_verdict(choice, recommended, accepted_points(confirmation))
    record = {
        "method": recommended.method,
        "options": recommended.options,
        "label": recommended.label,
        "recommendation_is_erm": recommended.is_reference,
        "criterion": request.criterion,
        "rule": rule,
        "candidate_set": request.candidate_set,
        "selection": {"seeds": request.seeds, "split": "validation", **choice.to_dict()},
        "confirmation": {
            "seeds": request.confirm_seeds,
            "split": "test",
            "report": None if report_file is None else str(report_file),
            "figures": figures,
            "error": confirmation.report_error or None,
        },
        "verdict": None if verdict is None else verdict.to_dict(),
        "verdict_error": verdict_error or None,
        "base_config": config_to_dict(request.config),
        "mr2_version": mr2.__version__,
        "git_commit": _git_commit(),
    }
    outcome.recommendation_file = request.directory / RECOMMENDATION_FILE
    atomic_write_json(outcome.recommendation_file, record)
    outcome.verdict = verdict
    if verdict is not None:
        # The pasteable block comes with confirmed and (with its caveat) supported only.
        print("\n" + verdict_text(verdict, paste=method_yaml(recommended)) + "\n", file=out)
    else:
        print(f"\nno verdict: {verdict_error}", file=out)
        print(f"\n{_NO_VERDICT_BLOCK}\n", file=out)
        print(textwrap.indent(method_yaml(recommended), "    "), file=out)
    if confirmation.report is not None:
        print("Confirmation on fresh seeds (test split; reported whatever it says):\n", file=out)
        comparison = confirmation.report.output.comparison
        print(comparison_markdown(comparison), file=out)
        note = hard_tier_note(verdict, comparison.tiers)
        if note:
            print(f"\n{note}", file=out)
        print(f"\nReport: {confirmation.report.markdown_path}", file=out)
    print(f"Recommendation: {outcome.recommendation_file}", file=out, flush=True)
    return outcome
