"""The rule that chooses ``mr2 tune``'s recommendation, on the VALIDATION split only.

Test numbers cannot reach the choice: :func:`choose` receives :class:`ValidationFigures`, which
hold nothing but a run's validation results, and :func:`read_validation` (the only reader of
``final.json`` on this path) copies nothing but the file's ``validation`` section into them.

The rule, for criterion ``hard_tier`` (the default), over the selection seeds:

1. rank the classes into tiers (3, or one per class with fewer classes) by ERM's mean validation
   per-class accuracy (:func:`mr2.report.tiers.assign_tiers`); the hard tier is the last;
2. score each run by its validation hard-tier accuracy (the mean of the per-class accuracies of the
   hard tier's classes); a candidate's score is the mean over its seeds, with the seed standard
   error ``std(ddof=1) / sqrt(n)``;
3. a candidate whose mean validation overall accuracy is below ERM's by more than the seed
   standard error of ERM's overall accuracy is not eligible;
4. the eligible candidate with the highest score (ties: the earlier candidate) is recommended if
   its score beats ERM's by more than the seed standard error of ERM's score; otherwise the
   recommendation is ERM.

``worst_class`` scores a run by its lowest validation per-class accuracy instead, ``overall`` by its
validation overall accuracy (step 3 then excludes nothing that could win).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mr2.report.tiers import assign_tiers

__all__ = [
    "CRITERIA",
    "CandidateScore",
    "Choice",
    "TuneSelectionError",
    "ValidationFigures",
    "choose",
    "read_validation",
    "rule_text",
]

#: What a candidate can be chosen by.
CRITERIA = ("hard_tier", "worst_class", "overall")
_SCORE_NAMES = {
    "hard_tier": "validation hard-tier accuracy",
    "worst_class": "validation worst-class accuracy",
    "overall": "validation overall accuracy",
}

NO_VALIDATION = (
    "{file} has no validation results, so the candidates cannot be compared on validation; train with "
    "data.val_fraction > 0"
)
TOO_FEW_REFERENCE_SEEDS = (
    "the rule needs ERM's seed standard error, but only {count} ERM run(s) finished (at least 2 "
    "needed); see the failed runs above"
)
CLASS_COUNT_MISMATCH = "run {run} has {actual} classes on validation, ERM's runs have {expected}"


class TuneSelectionError(ValueError):
    """The choice cannot be made (e.g. too few finished ERM runs); the message says why."""


@dataclass(frozen=True)
class ValidationFigures:
    """The validation results of one run: all the choice may see.

    Attributes:
        run: the run's name.
        seed: its seed.
        overall_accuracy: validation overall accuracy.
        per_class_accuracy: [K] validation per-class accuracies (NaN: class absent from validation).
    """

    run: str
    seed: int
    overall_accuracy: float
    per_class_accuracy: tuple[float, ...]


def read_validation(run_dir: str | os.PathLike[str]) -> ValidationFigures:
    """The validation section of ``<run_dir>/final.json`` (nothing else of the file is kept).

    Raises:
        TuneSelectionError: the run has no validation results.
    """
    from mr2.rundir import RunDirectory

    directory = RunDirectory(run_dir)
    final = json.loads(directory.final.read_text())
    validation = final.get("validation")
    if not isinstance(validation, dict) or "per_class_accuracy" not in validation:
        raise TuneSelectionError(NO_VALIDATION.format(file=directory.final))
    per_class = tuple(math.nan if v is None else float(v) for v in validation["per_class_accuracy"])
    overall = validation.get("overall_accuracy")
    return ValidationFigures(
        run=directory.path.name,
        seed=int(final.get("seed", -1)),
        overall_accuracy=math.nan if overall is None else float(overall),
        per_class_accuracy=per_class,
    )


def _mean_se(values: Sequence[float]) -> tuple[float, float]:
    array = np.asarray(values, dtype=np.float64)
    if array.size == 0:
        return math.nan, math.nan
    if array.size == 1:
        return float(array[0]), math.nan
    return float(array.mean()), float(array.std(ddof=1) / math.sqrt(array.size))


@dataclass
class CandidateScore:
    """A candidate's validation figures over its finished seeds (fractions in [0, 1]).

    Attributes:
        label: the candidate.
        runs: the runs it was scored on.
        scores: per-run criterion values, in run order.
        mean, se: their mean and seed standard error.
        overall: per-run validation overall accuracies.
        overall_mean, overall_se: their mean and seed standard error.
        eligible: passes the overall-accuracy guard (always True for ERM).
    """

    label: str
    runs: list[str]
    scores: list[float]
    mean: float
    se: float
    overall: list[float]
    overall_mean: float
    overall_se: float
    eligible: bool = True

    def to_dict(self) -> dict[str, Any]:
        def clean(value: float) -> float | None:
            return None if math.isnan(value) else value

        return {
            "label": self.label,
            "runs": self.runs,
            "scores": [clean(v) for v in self.scores],
            "mean": clean(self.mean),
            "se": clean(self.se),
            "overall_accuracy": [clean(v) for v in self.overall],
            "overall_mean": clean(self.overall_mean),
            "overall_se": clean(self.overall_se),
            "eligible": self.eligible,
        }


@dataclass
class Choice:
    """The outcome of the rule.

    Attributes:
        criterion: what was compared.
        recommended: the chosen candidate's label (``reference`` when nothing beat it).
        reference: ERM's label.
        scores: every candidate's :class:`CandidateScore`, ERM first.
        tiers: tier index of each class (by ERM's validation accuracy); [] unless ``hard_tier``.
        best: the best eligible non-reference candidate (None if there is none).
        margin: how much the best one's score beats ERM's (NaN without one).
        threshold: what it had to beat (ERM's seed standard error of the score).
        explanation: the outcome in one plain sentence.
    """

    criterion: str
    recommended: str
    reference: str
    scores: list[CandidateScore]
    tiers: list[int] = field(default_factory=list)
    best: str | None = None
    margin: float = math.nan
    threshold: float = math.nan
    explanation: str = ""

    @property
    def is_reference(self) -> bool:
        return self.recommended == self.reference

    def score(self, label: str) -> CandidateScore:
        return next(s for s in self.scores if s.label == label)

    def to_dict(self) -> dict[str, Any]:
        return {
            "criterion": self.criterion,
            "recommended": self.recommended,
            "recommendation_is_reference": self.is_reference,
            "best_other": self.best,
            "margin": None if math.isnan(self.margin) else self.margin,
            "threshold": None if math.isnan(self.threshold) else self.threshold,
            "explanation": self.explanation,
            "hard_tier_classes": [k for k, t in enumerate(self.tiers) if t == max(self.tiers)] if self.tiers
            else [],
            "tiers": self.tiers,
            "candidates": [s.to_dict() for s in self.scores],
        }


def rule_text(criterion: str, reference: str = "erm") -> str:
    """The rule in words, printed before anything runs and with the result."""
    name = _SCORE_NAMES[criterion]
    tiers = (
        f"Classes are ranked into tiers (easy/medium/hard) by {reference.upper()}'s mean validation "
        "per-class accuracy over the selection seeds. " if criterion == "hard_tier" else ""
    )
    return (
        f"{tiers}Each candidate is scored by its mean {name} over the selection seeds. A candidate "
        f"whose mean validation overall accuracy is below {reference.upper()}'s by more than "
        f"{reference.upper()}'s seed standard error is not eligible. The best eligible candidate is "
        f"recommended if its score beats {reference.upper()}'s by more than {reference.upper()}'s seed "
        f"standard error of that score; otherwise the recommendation is {reference.upper()}. Only the "
        "validation split is read; test results are reported after the choice, on fresh seeds."
    )


def _run_score(criterion: str, figures: ValidationFigures, hard: np.ndarray) -> float:
    per_class = np.asarray(figures.per_class_accuracy, dtype=np.float64)
    if criterion == "overall":
        return figures.overall_accuracy
    if criterion == "worst_class":
        finite = per_class[~np.isnan(per_class)]
        return float(finite.min()) if finite.size else math.nan
    values = per_class[hard]
    values = values[~np.isnan(values)]
    return float(values.mean()) if values.size else math.nan


def choose(
    runs: Mapping[str, Sequence[ValidationFigures]], criterion: str = "hard_tier", reference: str = "erm"
) -> Choice:
    """Apply the rule (module docstring) to every candidate's validation figures.

    Args:
        runs: candidate label -> its finished runs' validation figures (in candidate order; the
            reference among them).
        criterion: one of :data:`CRITERIA`.
        reference: the label of ERM.

    Raises:
        TuneSelectionError: fewer than 2 finished reference runs, or runs of different class counts.

    Example:
        >>> def run(name, seed, per_class):
        ...     return ValidationFigures(name, seed, sum(per_class) / 3, tuple(per_class))
        >>> runs = {"erm": [run("e0", 0, (0.9, 0.8, 0.5)), run("e1", 1, (0.9, 0.8, 0.52))],
        ...         "mr2": [run("m0", 0, (0.9, 0.79, 0.6)), run("m1", 1, (0.88, 0.8, 0.62))]}
        >>> choice = choose(runs)
        >>> choice.recommended, choice.tiers, round(choice.margin, 3), round(choice.threshold, 3)
        ('mr2', [0, 1, 2], 0.1, 0.01)
    """
    if criterion not in CRITERIA:
        raise ValueError(criterion)
    erm = list(runs.get(reference, []))
    if len(erm) < 2:
        raise TuneSelectionError(TOO_FEW_REFERENCE_SEEDS.format(count=len(erm)))
    num_classes = len(erm[0].per_class_accuracy)
    for figures in (f for group in runs.values() for f in group):
        if len(figures.per_class_accuracy) != num_classes:
            raise TuneSelectionError(CLASS_COUNT_MISMATCH.format(
                run=figures.run, actual=len(figures.per_class_accuracy), expected=num_classes))
    tiers: list[int] = []
    hard = np.zeros(num_classes, dtype=bool)
    if criterion == "hard_tier":
        with np.errstate(all="ignore"):
            reference_accuracy = np.nanmean(np.array([f.per_class_accuracy for f in erm], dtype=np.float64),
                                            axis=0)
        assigned = assign_tiers(reference_accuracy, min(3, int(np.sum(~np.isnan(reference_accuracy)))))
        tiers = [int(t) for t in assigned]
        hard = assigned == assigned.max()

    scores: list[CandidateScore] = []
    for label, group in runs.items():
        values = [_run_score(criterion, f, hard) for f in group]
        overall = [f.overall_accuracy for f in group]
        mean, se = _mean_se(values)
        overall_mean, overall_se = _mean_se(overall)
        scores.append(CandidateScore(label, [f.run for f in group], values, mean, se, overall, overall_mean,
                                     overall_se))
    erm_score = next(s for s in scores if s.label == reference)
    for score in scores:
        if score.label != reference:
            score.eligible = bool(score.runs) and not math.isnan(score.mean) and (
                score.overall_mean >= erm_score.overall_mean - erm_score.overall_se
            )
    eligible = [s for s in scores if s.label != reference and s.eligible]
    choice = Choice(criterion, reference, reference, scores, tiers, threshold=erm_score.se)
    name = _SCORE_NAMES[criterion]
    if not eligible:
        choice.explanation = (
            f"No candidate keeps its validation overall accuracy within one standard error of "
            f"{reference.upper()}'s: the recommendation is {reference.upper()}."
        )
        return choice
    best = max(eligible, key=lambda s: (s.mean, -scores.index(s)))
    choice.best = best.label
    choice.margin = best.mean - erm_score.mean
    points = f"{100 * choice.margin:+.2f} points vs a standard error of {100 * choice.threshold:.2f}"
    if choice.margin > choice.threshold:
        choice.recommended = best.label
        choice.explanation = (
            f"{best.label} has the best {name} ({100 * best.mean:.2f}% vs {reference.upper()}'s "
            f"{100 * erm_score.mean:.2f}%, {points}): it is recommended."
        )
    else:
        choice.explanation = (
            f"No candidate beats {reference.upper()}'s {name} by more than its seed standard error "
            f"(best: {best.label}, {points}): the recommendation is {reference.upper()}, plain "
            "cross-entropy."
        )
    return choice


def read_candidate_runs(groups: Mapping[str, Sequence[Path]]) -> dict[str, list[ValidationFigures]]:
    """Label -> validation figures of its finished runs (run directories without final.json skipped)."""
    from mr2.rundir import RunDirectory

    return {
        label: [read_validation(path) for path in paths if RunDirectory(path).is_finished]
        for label, paths in groups.items()
    }
