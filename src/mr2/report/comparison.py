"""Comparison of several runs (methods x seeds) in the paper's table shape: the aggregation.

This module computes; :mod:`mr2.report.tables` renders the result as markdown / CSV and
:mod:`mr2.report.statistics` holds the tests.

For every method the table gives overall accuracy, the tier accuracies (easy / medium / hard), the
worst class, the mean of the bottom 10 % of classes and the standard deviation of the per-class
accuracies, each as mean +- std over seeds (std with ddof = 1: the seeds are a sample). Next to it:

- the difference to the reference method (mean over seeds minus the reference's mean);
- a paired t-test over seeds (runs paired by seed; ``t = mean(d) / (sd(d) / sqrt(n))`` with
  ``n - 1`` degrees of freedom, two-sided), saying whether the difference stands out from seed noise;
- a per-class sign test: each class's accuracy (mean over seeds) is compared with the reference's;
  the counts of classes that improve and worsen (ties dropped) are tested against a fair coin
  (exact binomial test, two-sided).

The tiers are ranked once, on the reference method (its per-class accuracy averaged over its seeds)
and held fixed for every method. ``tier_source="test"`` is the paper's protocol; it slightly favours
the other methods on the hard tier (regression to the mean: the reference's hard classes are partly
hard by test noise). ``tier_source="validation"`` ranks on the reference's validation split instead,
which is free of that bias.

No correction for multiple comparisons is applied: with many methods and metrics a few p < 0.05 are
expected by chance.

A run that predicts one class for every sample or whose accuracy sits at chance
(:mod:`mr2.report.degenerate`) is kept in every figure and named in ``Comparison.flags``; the
tables mark every method whose mean includes one.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from mr2.report.accuracy import confusion_accuracy
from mr2.report.bootstrap import ConfidenceInterval, bootstrap_confusion
from mr2.report.degenerate import RunFlag, flag_run
from mr2.report.disparity import DisparityReport
from mr2.report.exceptions import MissingClassWarning, ReportError
from mr2.report.run_dir import RunRecord, check_comparable
from mr2.report.serialization import json_safe
from mr2.report.statistics import (
    PairedTest,
    SignTest,
    mean_std,
    nan_mean_rows,
    paired_t_test,
    sign_test,
)
from mr2.report.tiers import TierSplit, default_tier_names
from mr2.value_types import is_int

__all__ = ["Comparison", "MethodSummary", "compare_runs"]

REFERENCE_UNKNOWN = "reference method {name!r} is not among the runs' methods: {methods}"
_BAD_TIER_ASSIGNMENT = (
    "tier_assignment must hold one tier index per class ({num_classes}), 0 (easiest) to T-1 each used, "
    "-1 for an unranked class; got {value}"
)
_TIER_SOURCE_INVALID = "tier_source must be 'test' or 'validation', got {value!r}"
_VALIDATION_MISSING = (
    "tier_source='validation' needs the reference runs' validation results, but {run} has none (a run "
    "directory's final.json without a validation section, or a predictions file, which holds one split); "
    "use tier_source='test', or give run directories evaluated with a validation split"
)


def _table_metrics(tiers: TierSplit, bottom_fraction: float) -> list[tuple[str, str]]:
    """Columns of the comparison table, ``(summary key, header)``: the paper's, plus bottom-f."""
    percent = f"{100 * bottom_fraction:g}"
    return [
        ("overall", "overall"),
        *((f"tier:{name}", name) for name in tiers.names),
        ("group_min", "worst class"),
        ("bottom_mean", f"bottom {percent}%"),
        ("std", "std"),
    ]


@dataclass
class MethodSummary:
    """One method's runs and their statistics over seeds.

    Attributes:
        method: the method's name.
        runs: its runs, sorted by seed.
        reports: one :class:`DisparityReport` per run (tiers fixed by the reference).
        values: per metric, the value of each run [S].
        mean: per metric, mean over seeds.
        std: per metric, std over seeds (ddof = 1).
        difference: per metric, ``mean - reference mean`` (0 for the reference).
        paired: per metric, paired t-test against the reference over common seeds (empty for the
            reference itself).
        sign: per-class sign test against the reference (None for the reference).
        per_class_mean: per-class accuracy, mean over seeds [K].
    """

    method: str
    runs: list[RunRecord]
    reports: list[DisparityReport]
    values: dict[str, NDArray[np.float64]]
    mean: dict[str, float]
    std: dict[str, float]
    difference: dict[str, float] = field(default_factory=dict)
    paired: dict[str, PairedTest] = field(default_factory=dict)
    sign: SignTest | None = None
    per_class_mean: NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))

    @property
    def seeds(self) -> list[int | None]:
        """Seeds of the runs, in order."""
        return [run.seed for run in self.runs]


@dataclass
class Comparison:
    """The comparison of several methods over seeds; see the module docstring.

    Attributes:
        reference: the reference method.
        tiers: the tier split (ranked on the reference) used for every method.
        methods: one summary per method, the reference first.
        metrics: the table's columns, ``(summary key, header)``.
        alpha: significance level used to mark differences in the markdown table.
        bootstrap: per run name, bootstrap intervals of each table metric (empty if not requested).
        tier_source: the split of the reference runs that ranked the tiers (``"test"`` or
            ``"validation"``), or ``"fixed"``: tiers given to the report (``tiers.ranked_by`` says how).
        flags: per run name, why the run is degenerate (one class predicted for every sample, or
            accuracy at chance: :mod:`mr2.report.degenerate`); runs not flagged are absent.
    """

    reference: str
    tiers: TierSplit
    methods: list[MethodSummary]
    metrics: list[tuple[str, str]]
    alpha: float = 0.05
    bootstrap: dict[str, dict[str, ConfidenceInterval]] = field(default_factory=dict)
    tier_source: str = "test"
    flags: dict[str, RunFlag] = field(default_factory=dict)

    def flagged_runs(self, method: str) -> list[str]:
        """The names of ``method``'s degenerate runs (those its mean over seeds includes)."""
        return [run.name for run in self.method(method).runs if run.name in self.flags]

    def per_class_frame(self, *, runs: bool = False) -> Any:
        """The per-class figures as a pandas DataFrame, one row per class (needs pandas:
        ``pip install 'mr2[pandas]'``); see :func:`mr2.report.frame.per_class_frame`."""
        from mr2.report.frame import per_class_frame

        return per_class_frame(self, runs=runs)

    def method(self, name: str) -> MethodSummary:
        """The summary of one method."""
        for summary in self.methods:
            if summary.method == name:
                return summary
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        """Everything as a JSON-ready dictionary (fractions; NaN as null)."""
        methods = {}
        for summary in self.methods:
            methods[summary.method] = {
                "seeds": summary.seeds,
                "runs": [run.name for run in summary.runs],
                "values": summary.values,
                "mean": summary.mean,
                "std": summary.std,
                "difference": summary.difference,
                "paired_t_test": {k: asdict(v) for k, v in summary.paired.items()},
                "sign_test": asdict(summary.sign) if summary.sign is not None else None,
                "per_class_mean": summary.per_class_mean,
                "flagged_runs": [run.name for run in summary.runs if run.name in self.flags],
            }
        runs = {}
        for summary in self.methods:
            for run, report in zip(summary.runs, summary.reports, strict=True):
                runs[run.name] = {
                    "method": run.method,
                    "seed": run.seed,
                    "path": None if run.path is None else str(run.path),
                    "report": report.to_dict(),
                    "bootstrap": {
                        k: v.to_dict() for k, v in self.bootstrap.get(run.name, {}).items()
                    },
                    "flag": self.flags[run.name].to_dict() if run.name in self.flags else None,
                }
        return dict(
            json_safe(
                {
                    "reference": self.reference,
                    "alpha": self.alpha,
                    "metrics": [{"key": k, "label": label} for k, label in self.metrics],
                    "tiers": self.tiers.to_dict(),
                    "methods": methods,
                    "runs": runs,
                }
            )
        )


def _seed_key(run: RunRecord) -> tuple[int, int]:
    return (1, 0) if run.seed is None else (0, run.seed)


def _ranked_tiers(reference_runs: Sequence[RunRecord], reference: str, tier_source: str,
                  num_tiers: int | None) -> TierSplit:
    """Tiers ranked on the reference runs' mean per-class accuracy on ``tier_source``."""
    if tier_source == "test":
        ranking_rows = [
            confusion_accuracy(r.confusion) for r in reference_runs
        ]
    else:
        ranking_rows = []
        for run in reference_runs:
            accuracy = run.validation_accuracy()
            if accuracy is None:
                raise ReportError(_VALIDATION_MISSING.format(run=run.label))
            ranking_rows.append(accuracy)
    ranking = nan_mean_rows(np.stack(ranking_rows))
    if num_tiers is None:
        num_tiers = max(1, min(3, int((~np.isnan(ranking)).sum())))
    tiers = TierSplit.from_accuracy(
        ranking,
        num_tiers,
        ranked_by=(
            f"reference method {reference} ({tier_source} split, per-class accuracy averaged over "
            f"{len(reference_runs)} run{'s' if len(reference_runs) > 1 else ''})"
        ),
    )
    return tiers


def fixed_tiers(assignment: Sequence[int], num_classes: int, ranked_by: str,
                accuracy: Sequence[float] | None = None) -> TierSplit:
    """A :class:`TierSplit` from a given tier index per class (0 = easiest, -1 = unranked), with the
    per-class accuracy that ranked them when given (the per-class rows then run hardest first).

    Raises:
        ReportError: not one integer per class, or tier indices that are not 0..T-1 (each used).

    >>> fixed_tiers([2, 0, 1, 1], 4, "given").members(2)
    array([0])
    """
    items = list(assignment)
    values = [int(v) for v in items] if all(is_int(v) for v in items) else []
    used = sorted({v for v in values if v >= 0})
    if (len(values) != num_classes or not used or used != list(range(len(used)))
            or min(values) < -1):
        raise ReportError(_BAD_TIER_ASSIGNMENT.format(num_classes=num_classes, value=items[:20]))
    ranking = np.full(num_classes, np.nan) if accuracy is None else np.asarray(accuracy, dtype=np.float64)
    if ranking.shape != (num_classes,):
        raise ReportError(f"tier_ranking_accuracy must hold one accuracy per class ({num_classes}); got "
                          f"{ranking.size}")
    return TierSplit(np.asarray(values, dtype=np.int64), default_tier_names(len(used)), ranked_by, ranking)


def compare_runs(
    runs: Sequence[RunRecord],
    *,
    reference: str | None = None,
    num_tiers: int | None = None,
    tier_source: str = "test",
    bottom_fraction: float = 0.1,
    alpha: float = 0.05,
    bootstrap_resamples: int = 0,
    confidence: float = 0.95,
    seed: int = 0,
    tier_assignment: Sequence[int] | None = None,
    tiers_ranked_by: str | None = None,
    tier_ranking_accuracy: Sequence[float] | None = None,
) -> Comparison:
    """Compare runs of several methods (and seeds) against a reference method.

    Args:
        runs: evaluated runs of one data set (checked with
            :func:`mr2.report.run_dir.check_comparable`).
        reference: the reference method (default: the method of the first run).
        num_tiers: number of tiers (default: 3, or one per class when there are fewer classes).
        tier_source: ``"test"`` (paper's protocol) or ``"validation"``: which split of the reference
            runs ranks the classes into tiers.
        bottom_fraction: fraction of the worst classes averaged in the ``bottom_mean`` column.
        alpha: significance level for marking differences.
        bootstrap_resamples: if > 0, per-run bootstrap intervals of every table metric.
        confidence: coverage of the bootstrap intervals.
        seed: seed of the bootstrap.
        tier_assignment: fixed tiers, one index per class (0 = easiest, -1 = unranked), instead of
            ranking the reference runs: e.g. ``mr2 tune``'s tiers, ranked on the selection's ERM runs
            before the confirmation ran (``tier_source`` and ``num_tiers`` are then not used).
        tiers_ranked_by: what ``tier_assignment`` was ranked on, printed with the tiers.
        tier_ranking_accuracy: the per-class accuracy ``tier_assignment`` was ranked on (NaN: a class
            without one), shown as the ranking accuracy; None: unknown.

    Returns:
        The :class:`Comparison`.
    """
    check_comparable(runs)
    if tier_source not in ("test", "validation"):
        raise ReportError(_TIER_SOURCE_INVALID.format(value=tier_source))
    by_method: dict[str, list[RunRecord]] = {}
    for run in runs:
        by_method.setdefault(run.method, []).append(run)
    reference = runs[0].method if reference is None else reference
    if reference not in by_method:
        raise ReportError(REFERENCE_UNKNOWN.format(name=reference, methods=", ".join(by_method)))
    order = [reference, *(m for m in by_method if m != reference)]
    for name in order:
        by_method[name].sort(key=_seed_key)

    reference_runs = by_method[reference]
    if tier_assignment is not None:
        tiers = fixed_tiers(tier_assignment, reference_runs[0].confusion.shape[0],
                            tiers_ranked_by or "fixed tiers given to the report", tier_ranking_accuracy)
    else:
        tiers = _ranked_tiers(reference_runs, reference, tier_source, num_tiers)
    metrics = _table_metrics(tiers, bottom_fraction)

    summaries: list[MethodSummary] = []
    warned = False
    for name in order:
        reports = []
        for run in by_method[name]:
            with warnings.catch_warnings():
                if warned:
                    # Every run shares the test set (checked above): warn about empty classes once.
                    warnings.simplefilter("ignore", MissingClassWarning)
                reports.append(
                    DisparityReport(
                        run.confusion,
                        class_names=run.class_names,
                        tiers=tiers,
                        bottom_fraction=bottom_fraction,
                    )
                )
            warned = True
        values = {
            key: np.array([report.summary()[key] for report in reports]) for key, _ in metrics
        }
        stats = {key: mean_std(v) for key, v in values.items()}
        summaries.append(
            MethodSummary(
                method=name,
                runs=by_method[name],
                reports=reports,
                values=values,
                mean={k: s[0] for k, s in stats.items()},
                std={k: s[1] for k, s in stats.items()},
                per_class_mean=nan_mean_rows(np.stack([r.by_class for r in reports])),
            )
        )

    base = summaries[0]
    for summary in summaries:
        summary.difference = {key: summary.mean[key] - base.mean[key] for key, _ in metrics}
        if summary is base:
            continue
        summary.sign = sign_test(summary.per_class_mean, base.per_class_mean)
        common = sorted(
            {r.seed for r in summary.runs if r.seed is not None}
            & {r.seed for r in base.runs if r.seed is not None}
        )
        for key, _ in metrics:
            mine = dict(zip(summary.seeds, summary.values[key], strict=True))
            theirs = dict(zip(base.seeds, base.values[key], strict=True))
            summary.paired[key] = paired_t_test(
                np.array([mine[s] for s in common], dtype=np.float64),
                np.array([theirs[s] for s in common], dtype=np.float64),
            )

    flags = {}
    for summary in summaries:
        for run in summary.runs:
            flag = flag_run(run.confusion, run.class_names)
            if flag is not None:
                flags[run.name] = flag

    intervals: dict[str, dict[str, ConfidenceInterval]] = {}
    if bootstrap_resamples > 0:
        keys = [key for key, _ in metrics]
        for summary in summaries:
            for run in summary.runs:
                intervals[run.name] = bootstrap_confusion(
                    run.confusion,
                    metrics=keys,
                    tiers=tiers,
                    bottom_fraction=bottom_fraction,
                    num_resamples=bootstrap_resamples,
                    confidence=confidence,
                    seed=seed,
                )
    return Comparison(
        reference=reference,
        tiers=tiers,
        methods=summaries,
        metrics=metrics,
        alpha=alpha,
        bootstrap=intervals,
        tier_source="fixed" if tier_assignment is not None else tier_source,
        flags=flags,
    )
