"""The rule that chooses ``mr2 tune``'s recommendation, on the VALIDATION split only.

Test numbers cannot reach the choice: :func:`choose` receives :class:`ValidationFigures`, which
hold nothing but a run's validation results (built from its validation predictions by
:meth:`ValidationFigures.from_predictions`). The rule in words is :func:`mr2.tune.text.rule_text`.

ERM (plain cross-entropy training) is the reference every candidate must beat.

The rule, for criterion ``hard_tier`` (the default), over the selection seeds:

1. every class's validation samples are split into two fixed halves A and B: the samples of class
   ``k`` are put in a fixed pseudo-random order (a permutation drawn with the fixed seed
   :data:`SPLIT_SEED`, the same for every run because every run has the same validation labels) and
   dealt alternately to A and B (A gets the odd one out), see :func:`split_halves`;
2. cross-fitted tiers: the classes are ranked into tiers (3, or one per class with fewer classes) by
   ERM's mean per-class accuracy over its seeds on half A; every run (ERM's included) is scored by its
   hard-tier accuracy on half B (the mean of the per-class accuracies of the hard tier's classes,
   each class weighing the same); then the same with the halves swapped; the run's score is the mean
   of the two directions::

       score(run) = 1/2 * [ mean_{k in H_A} acc_B(run, k) + mean_{k in H_B} acc_A(run, k) ]

   where ``H_A`` is the hard tier ranked on half A. No sample is used both to put a class in the hard
   tier and to score it, so ERM's own score is not pulled down by the sample noise that made its
   hard classes look hard (regression to the mean), which otherwise lets candidates beat ERM on
   noise. A class without a sample in a half is neither ranked nor scored on that half; a direction
   without a scorable hard class is left out of the mean;
3. a candidate's score is the mean over its seeds, with the seed standard error
   ``std(ddof=1) / sqrt(n)``;
4. a candidate is not eligible if it misses a selection seed (when the seeds are given), has fewer
   than 2 runs, or its mean validation overall accuracy (all validation samples) is below ERM's by
   more than the seed standard error of ERM's overall accuracy;
5. the eligible candidate with the highest score (ties: the earlier candidate) is recommended if
   its score beats ERM's by more than the seed standard error of ERM's score; otherwise the
   recommendation is ERM.

What remains: the same ERM models rank and are scored, so a seed-level weakness of ERM on a class
(the same on both halves) still favours the candidates slightly; the standard-error margin of step 5
scales with exactly that seed-to-seed spread. A simulation where every candidate has ERM's per-class
accuracies (``tests/tune/test_tune_selection.py``: 10 classes, ERM and 3 candidates, 3 seeds, 20
validation samples per class, 400 repetitions, seed 0) keeps ERM 40.8 % of the time when the hard
tier is ranked and scored on the same samples (the previous rule, written out in that test) and
54.0 % under the split-half rule. What the split does not address is multiplicity:
the best of several candidates equal to ERM beats ERM by more than one ERM seed standard error about
half the time (the margin is a difference of two means, whose standard error is about ``sqrt(2)``
times ERM's, maximised over the candidates). The fresh-seed confirmation's verdict
(:mod:`mr2.tune.verdict`) is the guard against that.

``worst_class`` scores a run by its lowest validation per-class accuracy and ``overall`` by its
validation overall accuracy, both on all validation samples: neither ranks classes by ERM, so there
are no tiers to split (steps 3-5 as above; under ``overall``, step 4's guard excludes nothing that
could win), and figures without per-sample counts (per-class accuracies only) can be compared; the
split-half hard tier needs the per-sample counts. The tiers recorded for the confirmation
(:attr:`Choice.tiers`) are ranked on ERM's mean per-class accuracy over ALL its validation samples:
independent of the test split they are used on.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from mr2.errors import MR2Error
from mr2.report.tiers import assign_tiers

__all__ = [
    "CRITERIA",
    "MIN_SAMPLES_PER_CLASS",
    "SPLIT_HALF",
    "SPLIT_SEED",
    "CandidateScore",
    "Choice",
    "TuneSelectionError",
    "ValidationFigures",
    "choose",
    "decide",
    "split_halves",
]

#: What a candidate can be chosen by.
CRITERIA = ("hard_tier", "worst_class", "overall")
#: How the hard tier is ranked (recorded as :attr:`Choice.tier_rule`): on half of the validation
#: samples, and scored on the other half (cross-fitted).
SPLIT_HALF = "split_half"
#: The seed of the fixed within-class permutation that splits the validation samples in halves.
SPLIT_SEED = 20_231_123
#: Below this many validation samples per class in a scoring half (median over classes), the text
#: warns that the scores are too noisy to move the choice away from ERM.
MIN_SAMPLES_PER_CLASS = 50

TOO_FEW_REFERENCE_SEEDS = (
    "the rule needs ERM's seed standard error, but only {count} ERM run(s) finished (at least 2 "
    "needed); see the failed runs above"
)
_CLASS_COUNT_MISMATCH = "run {run} has {actual} classes on validation, ERM's runs have {expected}"
UNKNOWN_CRITERION = "unknown criterion {value!r}; choose one of: {choices}"
LABELS_DIFFER = (
    "run {run}'s validation labels (y_true) differ from run {first}'s; every trial of a tune must "
    "predict the same validation samples in the same order"
)
NO_PER_SAMPLE_FIGURES = (
    "run {run} has per-class validation accuracies only; the split-half tiers of criterion hard_tier "
    "need its per-sample validation predictions (ValidationFigures.from_predictions)"
)
UNEXPECTED_SEED = "run {run} has seed {seed}, not one of the selection seeds {seeds}"
DUPLICATE_SEED = "candidate {label!r} has two runs with seed {seed} ({runs}); each seed once"
BAD_PREDICTIONS = "run {run}, validation split: {detail}"

# Why a candidate is not eligible (CandidateScore.reason).
_MISSING_SEEDS = "misses selection seed(s) {seeds}"
_TOO_FEW_RUNS = "fewer than 2 runs ({count}): no seed standard error"
_NO_SCORE = "no score"
_OVERALL_COST = "overall accuracy below ERM's by more than ERM's seed SE"


class TuneSelectionError(MR2Error, ValueError):
    """The choice cannot be made (e.g. too few finished ERM runs); the message says why."""


def split_halves(y_true: ArrayLike) -> NDArray[np.int8]:
    """The fixed half (0 = A, 1 = B) of each validation sample, balanced within each class.

    The samples of each class are ordered by a permutation drawn with :data:`SPLIT_SEED` and dealt
    alternately to A and B, so class ``k`` with ``n_k`` samples has ``ceil(n_k / 2)`` in A and
    ``floor(n_k / 2)`` in B. The split depends on ``y_true`` only: every run of a tune gets the same.

    Args:
        y_true: [N] class ids.

    Returns:
        int8 array [N] of 0 / 1.

    Example:
        >>> halves = split_halves([0, 0, 0, 1, 1, 2, 2, 2, 2])
        >>> [int(halves[[0, 1, 2]].sum()), int(halves[[3, 4]].sum()), int(halves[5:].sum())]
        [1, 1, 2]
        >>> bool(np.array_equal(halves, split_halves([0, 0, 0, 1, 1, 2, 2, 2, 2])))
        True
    """
    labels = np.asarray(y_true, dtype=np.int64).reshape(-1)
    keys = np.random.default_rng(SPLIT_SEED).random(labels.size)
    order = np.lexsort((keys, labels))  # by class, then by the fixed random key
    sorted_labels = labels[order]
    position = np.arange(labels.size) - np.searchsorted(sorted_labels, sorted_labels, side="left")
    halves = np.empty(labels.size, dtype=np.int8)
    halves[order] = (position % 2).astype(np.int8)
    return halves


def _accuracy(correct: NDArray[np.float64], count: NDArray[np.float64]) -> NDArray[np.float64]:
    return np.divide(correct, count, out=np.full(np.shape(correct), np.nan), where=count > 0)


@dataclass(frozen=True)
class ValidationFigures:
    """The validation results of one run: all the choice may see.

    Attributes:
        run: the run's name.
        seed: its seed.
        overall_accuracy: validation overall accuracy.
        per_class_accuracy: [K] validation per-class accuracies (NaN: class absent from validation).
        half_correct: ``(A, B)``: per-class numbers of correct predictions in each fixed half of
            :func:`split_halves` (None: built from per-class accuracies only).
        half_count: ``(A, B)``: per-class numbers of samples in each half (None as above).
        labels_digest: SHA-256 of the validation ``y_true`` (int64): runs of one tune must agree.
        collapsed: the run tripped the feature-collapse guard (:mod:`mr2.losses.collapse`); a
            candidate with such a run is not adopted (:mod:`mr2.tune.design`).
    """

    run: str
    seed: int
    overall_accuracy: float
    per_class_accuracy: tuple[float, ...]
    half_correct: tuple[tuple[int, ...], tuple[int, ...]] | None = None
    half_count: tuple[tuple[int, ...], tuple[int, ...]] | None = None
    labels_digest: str | None = None
    collapsed: bool = False

    @classmethod
    def from_predictions(
        cls, run: str, seed: int, y_true: ArrayLike, y_pred: ArrayLike, num_classes: int
    ) -> ValidationFigures:
        """The figures of one run from its per-sample validation predictions.

        Args:
            run: the run's (trial's) name.
            seed: its seed.
            y_true: [N] true class ids in ``[0, num_classes)``.
            y_pred: [N] predicted class ids in ``[0, num_classes)``.
            num_classes: K.

        Raises:
            TuneSelectionError: shapes, dtypes or class ids out of range.

        Example:
            >>> f = ValidationFigures.from_predictions("erm@0", 0, [0, 0, 1, 1], [0, 1, 1, 1], 2)
            >>> f.overall_accuracy, f.per_class_accuracy, f.half_count
            (0.75, (0.5, 1.0), ((1, 1), (1, 1)))
        """
        from mr2.report.predictions import predictions_problem  # the one checker of predictions

        true = np.asarray(y_true)
        pred = np.asarray(y_pred)
        problem = predictions_problem(true, pred, None, num_classes)
        if problem:
            raise TuneSelectionError(BAD_PREDICTIONS.format(run=run, detail=problem))
        labels = true.astype(np.int64)
        hit = (labels == pred.astype(np.int64)).astype(np.float64)
        index = split_halves(labels).astype(np.int64) * num_classes + labels
        count = np.bincount(index, minlength=2 * num_classes).reshape(2, num_classes)
        correct = np.bincount(index, weights=hit, minlength=2 * num_classes).reshape(2, num_classes)
        correct_int = np.rint(correct).astype(np.int64)
        per_class = _accuracy(correct_int.sum(0).astype(np.float64), count.sum(0).astype(np.float64))
        return cls(
            run=run,
            seed=int(seed),
            overall_accuracy=float(hit.mean()),
            per_class_accuracy=tuple(float(v) for v in per_class),
            half_correct=(tuple(int(v) for v in correct_int[0]), tuple(int(v) for v in correct_int[1])),
            half_count=(tuple(int(v) for v in count[0]), tuple(int(v) for v in count[1])),
            labels_digest=hashlib.sha256(np.ascontiguousarray(labels, dtype="<i8").tobytes()).hexdigest(),
        )

    @property
    def has_samples(self) -> bool:
        """Whether the per-half counts (per-sample predictions) are known."""
        return self.half_correct is not None and self.half_count is not None

    def half_accuracy(self) -> NDArray[np.float64]:
        """[2, K] per-class accuracy on half A (row 0) and half B (row 1); NaN: no sample there."""
        assert self.half_correct is not None and self.half_count is not None
        return _accuracy(np.asarray(self.half_correct, dtype=np.float64),
                         np.asarray(self.half_count, dtype=np.float64))


def _mean_se(values: Sequence[float]) -> tuple[float, float]:
    array = np.asarray(values, dtype=np.float64)
    if array.size == 0:
        return math.nan, math.nan
    if array.size == 1:
        return float(array[0]), math.nan
    return float(array.mean()), float(array.std(ddof=1) / math.sqrt(array.size))


def _clean(value: float) -> float | None:
    return None if math.isnan(value) else value


@dataclass
class CandidateScore:
    """A candidate's validation figures over its finished seeds (fractions in [0, 1]).

    Attributes:
        label: the candidate.
        runs: the runs it was scored on.
        scores: per-run criterion values, in run order.
        mean, se: their mean and seed standard error (NaN with fewer than 2 runs).
        overall: per-run validation overall accuracies.
        overall_mean, overall_se: their mean and seed standard error.
        eligible: may be recommended (always True for ERM).
        seeds: the runs' seeds, in run order.
        missing_seeds: selection seeds without a run (when :func:`choose` was given the seeds).
        reason: why it is not eligible ("" when it is).
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
    seeds: list[int] = field(default_factory=list)
    missing_seeds: list[int] = field(default_factory=list)
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "runs": self.runs,
            "seeds": self.seeds,
            "missing_seeds": self.missing_seeds,
            "scores": [_clean(v) for v in self.scores],
            "mean": _clean(self.mean),
            "se": _clean(self.se),
            "overall_accuracy": [_clean(v) for v in self.overall],
            "overall_mean": _clean(self.overall_mean),
            "overall_se": _clean(self.overall_se),
            "eligible": self.eligible,
            "not_eligible_because": self.reason or None,
        }


@dataclass(frozen=True)
class Choice:
    """The outcome of the rule (frozen: a decision taken again is a new choice, :func:`decide`).

    Attributes:
        criterion: what was compared.
        recommended: the chosen candidate's label (``reference`` when nothing beat it).
        reference: ERM's label.
        scores: every candidate's :class:`CandidateScore`, ERM first.
        tiers: tier index of each class by ERM's mean per-class accuracy on all its validation
            samples (-1: no validation sample), under every criterion; the confirmation's test hard
            tier is the last tier (:attr:`hard_classes`).
        best: the best eligible non-reference candidate (None if there is none).
        margin: how much the best one's score beats ERM's (NaN without one).
        threshold: what it had to beat (ERM's seed standard error of the score).
        tier_rule: :data:`SPLIT_HALF` under ``hard_tier`` (the module docstring), "" under the other
            criteria.
        split_tiers: ``[tiers ranked on half A, tiers ranked on half B]`` (split-half rule only).
        samples_per_class: ``(min, median)`` over classes of the validation samples of a class in a
            scoring half (``floor(n_k / 2)``; all ``n_k`` under the other criteria); None when unknown
            (figures without per-sample counts).
        seeds: the selection seeds the candidates were checked against (None: not given).
    """

    criterion: str
    recommended: str
    reference: str
    scores: list[CandidateScore]
    tiers: list[int] = field(default_factory=list)
    best: str | None = None
    margin: float = math.nan
    threshold: float = math.nan
    tier_rule: str = ""
    split_tiers: list[list[int]] = field(default_factory=list)
    samples_per_class: tuple[int, float] | None = None
    seeds: list[int] | None = None

    @property
    def is_reference(self) -> bool:
        return self.recommended == self.reference

    @property
    def hard_classes(self) -> list[int]:
        """The classes of the hard tier ranked on all of ERM's validation samples ([] without tiers)."""
        ranked = [t for t in self.tiers if t >= 0]
        return [k for k, t in enumerate(self.tiers) if ranked and t == max(ranked)]

    @property
    def noisy(self) -> bool:
        """Fewer than :data:`MIN_SAMPLES_PER_CLASS` validation samples per class (median) are scored."""
        return self.samples_per_class is not None and self.samples_per_class[1] < MIN_SAMPLES_PER_CLASS

    def score(self, label: str) -> CandidateScore:
        return next(s for s in self.scores if s.label == label)

    def to_dict(self) -> dict[str, Any]:
        """Everything above as JSON-able values; ``seeds`` only when the seeds were given."""
        record = {
            "criterion": self.criterion,
            "recommended": self.recommended,
            "recommendation_is_reference": self.is_reference,
            "best_other": self.best,
            "margin": _clean(self.margin),
            "threshold": _clean(self.threshold),
            "tier_rule": self.tier_rule or None,
            "hard_tier_classes": self.hard_classes,
            "tiers": self.tiers,
            "split_tiers": self.split_tiers,
            "scoring_samples_per_class": None if self.samples_per_class is None else {
                "min": self.samples_per_class[0], "median": self.samples_per_class[1]},
            "missing_seeds": {s.label: s.missing_seeds for s in self.scores if s.missing_seeds},
            "candidates": [s.to_dict() for s in self.scores],
        }
        return record if self.seeds is None else {**record, "seeds": self.seeds}


def _tiers(accuracy: NDArray[np.float64]) -> NDArray[np.int64]:
    """Tiers (3, or one per ranked class) of the classes with a finite accuracy; -1 for the others."""
    ranked = ~np.isnan(accuracy)
    tiers = np.full(accuracy.shape[0], -1, dtype=np.int64)
    if ranked.any():
        tiers[ranked] = assign_tiers(accuracy[ranked], min(3, int(ranked.sum())))
    return tiers


def _hard(tiers: NDArray[np.int64]) -> NDArray[np.bool_]:
    return (tiers == tiers.max()) & (tiers >= 0)


def _masked_mean(values: NDArray[np.float64], mask: NDArray[np.bool_]) -> NDArray[np.float64]:
    """Mean over the last axis of the finite ``values`` where ``mask``; NaN when there is none."""
    keep = mask & ~np.isnan(values)
    total = np.where(keep, values, 0.0).sum(-1)
    count = keep.sum(-1).astype(np.float64)
    return np.divide(total, count, out=np.full(np.shape(total), np.nan), where=count > 0)


def _check(runs: Mapping[str, Sequence[ValidationFigures]], reference: str) -> None:
    erm = list(runs.get(reference, []))
    if len(erm) < 2:
        raise TuneSelectionError(TOO_FEW_REFERENCE_SEEDS.format(count=len(erm)))
    num_classes = len(erm[0].per_class_accuracy)
    first: ValidationFigures | None = None
    for label, group in runs.items():
        seen: dict[int, str] = {}
        for figures in group:
            if len(figures.per_class_accuracy) != num_classes:
                raise TuneSelectionError(_CLASS_COUNT_MISMATCH.format(
                    run=figures.run, actual=len(figures.per_class_accuracy), expected=num_classes))
            if figures.seed in seen:
                raise TuneSelectionError(DUPLICATE_SEED.format(
                    label=label, seed=figures.seed, runs=f"{seen[figures.seed]}, {figures.run}"))
            seen[figures.seed] = figures.run
            if figures.labels_digest is not None:
                if first is None:
                    first = figures
                elif figures.labels_digest != first.labels_digest:
                    raise TuneSelectionError(LABELS_DIFFER.format(run=figures.run, first=first.run))


def choose(
    runs: Mapping[str, Sequence[ValidationFigures]],
    criterion: str = "hard_tier",
    reference: str = "erm",
    *,
    seeds: Sequence[int] | None = None,
    min_runs: int = 2,
) -> Choice:
    """Apply the rule (module docstring) to every candidate's validation figures.

    Args:
        runs: candidate label -> its finished runs' validation figures (in candidate order; the
            reference among them).
        criterion: one of :data:`CRITERIA`.
        reference: the label of ERM.
        seeds: the selection seeds; a candidate without a run for each is not eligible, a run of
            another seed is an error.
        min_runs: the runs a candidate needs to be eligible (2: its own seed standard error; 1 for
            a design whose selection ranks on one seed per candidate and leaves the evidence to the
            confirmation; the reference always needs 2).

    Raises:
        TuneSelectionError: fewer than 2 finished reference runs, runs of different class counts or
            validation labels, a seed twice in one candidate or not among ``seeds``, an unknown
            criterion, or criterion ``hard_tier`` on figures without per-sample counts.

    Example:
        >>> def run(name, seed, per_class):
        ...     return ValidationFigures(name, seed, sum(per_class) / 3, tuple(per_class))
        >>> runs = {"erm": [run("e0", 0, (0.9, 0.8, 0.5)), run("e1", 1, (0.9, 0.8, 0.52))],
        ...         "mr2": [run("m0", 0, (0.9, 0.79, 0.6)), run("m1", 1, (0.88, 0.8, 0.62))]}
        >>> choice = choose(runs, "worst_class")
        >>> choice.recommended, choice.tier_rule, choice.tiers, round(choice.margin, 3)
        ('mr2', '', [0, 1, 2], 0.1)
        >>> choose(runs, "worst_class", seeds=[0, 1, 2]).score("mr2").missing_seeds
        [2]
    """
    if criterion not in CRITERIA:
        raise TuneSelectionError(UNKNOWN_CRITERION.format(value=criterion, choices=", ".join(CRITERIA)))
    _check(runs, reference)
    if seeds is not None:
        stray = next((f for group in runs.values() for f in group if f.seed not in set(seeds)), None)
        if stray is not None:
            raise TuneSelectionError(UNEXPECTED_SEED.format(run=stray.run, seed=stray.seed,
                                                            seeds=list(seeds)))
    everything = [f for group in runs.values() for f in group]
    without = next((f for f in everything if not f.has_samples), None)
    split = criterion == "hard_tier"
    if split and without is not None:
        raise TuneSelectionError(NO_PER_SAMPLE_FIGURES.format(run=without.run))
    erm = list(runs[reference])

    samples: tuple[int, float] | None = None
    if without is None:
        count = np.asarray(erm[0].half_count, dtype=np.int64)  # [2, K], the same for every run
        per_class = count.min(0) if split else count.sum(0)
        samples = (int(per_class.min()), float(np.median(per_class)))

    given = None if seeds is None else [int(s) for s in seeds]
    # The tiers on all of ERM's validation samples: the hard tier of the confirmation's test figures
    # under every criterion.
    per_class_erm = np.array([f.per_class_accuracy for f in erm], dtype=np.float64).T  # [K, R]
    full_tiers = _tiers(_masked_mean(per_class_erm, np.ones(per_class_erm.shape, dtype=bool)))
    split_tiers: list[list[int]] = []
    if split:
        # erm_half[h, k]: ERM's mean accuracy of class k on half h; the NaN pattern is the same for
        # every run (same labels), so the mean needs no NaN handling.
        erm_half = np.mean(np.stack([f.half_accuracy() for f in erm]), axis=0)
        half_tiers = np.stack([_tiers(erm_half[0]), _tiers(erm_half[1])])  # [2, K]
        hard_by_half = np.stack([_hard(half_tiers[0]), _hard(half_tiers[1])])  # ranked on A, on B
        split_tiers = [[int(t) for t in row] for row in half_tiers]

    def run_scores(group: Sequence[ValidationFigures]) -> list[float]:
        if not group:
            return []
        if criterion == "overall":
            return [f.overall_accuracy for f in group]
        if criterion == "worst_class":
            per_class = np.array([f.per_class_accuracy for f in group], dtype=np.float64)
            with np.errstate(all="ignore"):
                worst = np.where(np.isnan(per_class), np.inf, per_class).min(-1)
            return [math.nan if math.isinf(v) else float(v) for v in worst]
        half = np.stack([f.half_accuracy() for f in group])  # [R, 2, K]
        # Ranked on A, scored on B; ranked on B, scored on A.
        directions = np.stack([_masked_mean(half[:, 1], hard_by_half[0][None, :]),
                               _masked_mean(half[:, 0], hard_by_half[1][None, :])], axis=-1)  # [R, 2]
        return [float(v) for v in _masked_mean(directions, np.ones(2, dtype=bool)[None, :])]

    scores: list[CandidateScore] = []
    for label, group in runs.items():
        values = run_scores(group)
        overall = [f.overall_accuracy for f in group]
        mean, se = _mean_se(values)
        overall_mean, overall_se = _mean_se(overall)
        run_seeds = [f.seed for f in group]
        missing = [] if seeds is None else [int(s) for s in seeds if s not in set(run_seeds)]
        scores.append(CandidateScore(label, [f.run for f in group], values, mean, se, overall,
                                     overall_mean, overall_se, seeds=run_seeds, missing_seeds=missing))
    erm_score = next(score for score in scores if score.label == reference)
    for score in scores:
        if score.label == reference:
            continue
        if score.missing_seeds:
            score.reason = _MISSING_SEEDS.format(seeds=score.missing_seeds)
        elif len(score.runs) < min_runs:
            score.reason = _TOO_FEW_RUNS.format(count=len(score.runs))
        elif math.isnan(score.mean):
            score.reason = _NO_SCORE
        elif not score.overall_mean >= erm_score.overall_mean - erm_score.overall_se:
            score.reason = _OVERALL_COST
        score.eligible = not score.reason
    choice = Choice(criterion, reference, reference, scores, tiers=[int(t) for t in full_tiers],
                    threshold=erm_score.se, tier_rule=SPLIT_HALF if split else "",
                    split_tiers=split_tiers, samples_per_class=samples, seeds=given)
    return decide(choice, erm_score)


def decide(choice: Choice, erm_score: CandidateScore) -> Choice:
    """Step 5 of the rule on a choice whose eligibility is set: the choice with the best eligible
    candidate, its margin over ERM, and the recommendation (the wording is
    :func:`mr2.tune.text.choice_explanation`'s); none of them are taken from ``choice``."""
    eligible = [s for s in choice.scores if s.label != choice.reference and s.eligible]
    if not eligible:
        return dataclasses.replace(choice, best=None, margin=math.nan, recommended=choice.reference)
    best = max(eligible, key=lambda s: (s.mean, -choice.scores.index(s)))
    margin = best.mean - erm_score.mean
    return dataclasses.replace(choice, best=best.label, margin=margin,
                               recommended=best.label if margin > choice.threshold else choice.reference)
