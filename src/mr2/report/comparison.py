"""Comparison of several runs (methods x seeds) in the paper's table shape.

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
"""

from __future__ import annotations

import csv
import io
import math
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from mr2.report.bootstrap import ConfidenceInterval, bootstrap_confusion
from mr2.report.disparity import DisparityReport, json_safe, per_class_accuracy
from mr2.report.exceptions import MissingClassWarning, ReportError
from mr2.report.run_dir import RunRecord, check_comparable
from mr2.report.tiers import TierSplit

__all__ = [
    "Comparison",
    "MethodSummary",
    "PairedTest",
    "SignTest",
    "compare_runs",
    "mean_std",
    "paired_t_test",
    "sign_test",
]

REFERENCE_UNKNOWN = "reference method {name!r} is not among the runs' methods: {methods}"
TIER_SOURCE_INVALID = "tier_source must be 'test' or 'validation', got {value!r}"
VALIDATION_MISSING = (
    "tier_source='validation' needs the reference runs' validation results, but {run} has none in "
    "final.json; use tier_source='test' or re-evaluate the reference with a validation split"
)
SAMPLES_MISMATCH = "paired samples must have the same shape [n], got {a} and {b}"

#: Differences of accuracies below this are rounding noise.
_ROUNDING = 1e-12


@dataclass(frozen=True)
class PairedTest:
    """Paired t-test of ``a - b`` over seeds.

    Attributes:
        difference: mean of the paired differences.
        statistic: t (``+-inf`` when every difference is the same non-zero value).
        pvalue: two-sided p-value (NaN with fewer than 2 pairs).
        num_pairs: n.
    """

    difference: float
    statistic: float
    pvalue: float
    num_pairs: int


@dataclass(frozen=True)
class SignTest:
    """Per-class sign test: classes that improve, worsen or tie, and the binomial p-value."""

    better: int
    worse: int
    ties: int
    pvalue: float


def mean_std(values: ArrayLike) -> tuple[float, float, int]:
    """Mean and sample standard deviation (ddof = 1) over seeds, ignoring NaN.

    Returns:
        ``(mean, std, n)``; std is NaN for n < 2, both NaN for n = 0.

    >>> mean_std([0.70, 0.72, np.nan])
    (0.71, 0.014142135623730963, 2)
    """
    array = np.asarray(values, dtype=np.float64)
    array = array[~np.isnan(array)]
    n = int(array.size)
    mean = float(array.mean()) if n else math.nan
    std = float(array.std(ddof=1)) if n > 1 else math.nan
    return mean, std, n


def paired_t_test(a: ArrayLike, b: ArrayLike) -> PairedTest:
    """Two-sided paired t-test of ``a - b`` (matches ``scipy.stats.ttest_rel``).

    Pairs with a NaN are dropped. A zero spread of the differences gives ``t = +-inf, p = 0`` (or
    ``t = 0, p = 1`` when every difference is 0) instead of scipy's NaN and warning.

    >>> test = paired_t_test([0.72, 0.73, 0.71], [0.70, 0.72, 0.70])
    >>> round(test.difference, 4), test.num_pairs
    (0.0133, 3)
    """
    from scipy import stats

    x = np.asarray(a, dtype=np.float64)
    y = np.asarray(b, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise ReportError(SAMPLES_MISMATCH.format(a=x.shape, b=y.shape))
    keep = ~np.isnan(x) & ~np.isnan(y)
    d = x[keep] - y[keep]
    n = int(d.size)
    if n < 2:
        return PairedTest(float(d.mean()) if n else math.nan, math.nan, math.nan, n)
    mean = float(d.mean())
    sd = float(d.std(ddof=1))
    # Accuracies are ratios of counts: differences equal on paper differ by rounding (0.8 - 0.7
    # vs 0.7 - 0.6), which would give a huge finite t; treat such spreads as exactly zero.
    if sd <= _ROUNDING:
        if abs(mean) <= _ROUNDING:
            return PairedTest(0.0, 0.0, 1.0, n)
        return PairedTest(mean, math.copysign(math.inf, mean), 0.0, n)
    t = mean / (sd / math.sqrt(n))
    return PairedTest(mean, t, float(2.0 * stats.t.sf(abs(t), n - 1)), n)


def sign_test(values: ArrayLike, reference: ArrayLike, *, atol: float = 1e-12) -> SignTest:
    """Exact two-sided sign test of ``values[k] > reference[k]`` over classes (ties and NaN dropped).

    >>> sign_test([0.9, 0.8, 0.7, 0.6], [0.8, 0.7, 0.7, 0.5])
    SignTest(better=3, worse=0, ties=1, pvalue=0.25)
    """
    from scipy import stats

    x = np.asarray(values, dtype=np.float64)
    y = np.asarray(reference, dtype=np.float64)
    keep = ~np.isnan(x) & ~np.isnan(y)
    diff = x[keep] - y[keep]
    tied = np.abs(diff) <= atol
    better = int(((diff > 0) & ~tied).sum())
    worse = int(((diff < 0) & ~tied).sum())
    trials = better + worse
    pvalue = float(stats.binomtest(better, trials, 0.5).pvalue) if trials else math.nan
    return SignTest(better, worse, int(tied.sum()), pvalue)


def _nan_mean_rows(rows: NDArray[np.float64]) -> NDArray[np.float64]:
    """Mean over axis 0 ignoring NaN (NaN where a column is all NaN), without warnings."""
    present = ~np.isnan(rows)
    counts = present.sum(axis=0).astype(np.float64)
    sums = np.where(present, rows, 0.0).sum(axis=0)
    return np.divide(sums, counts, out=np.full(sums.shape, np.nan), where=counts > 0)


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


def _format_percent(value: float, *, signed: bool = False) -> str:
    if math.isnan(value):
        return "n/a"
    return f"{100 * value:+.2f}" if signed else f"{100 * value:.2f}"


def _format_p(value: float) -> str:
    if math.isnan(value):
        return "n/a"
    return "<0.001" if value < 0.001 else f"{value:.3f}"


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
    """

    reference: str
    tiers: TierSplit
    methods: list[MethodSummary]
    metrics: list[tuple[str, str]]
    alpha: float = 0.05
    bootstrap: dict[str, dict[str, ConfidenceInterval]] = field(default_factory=dict)

    def method(self, name: str) -> MethodSummary:
        """The summary of one method."""
        for summary in self.methods:
            if summary.method == name:
                return summary
        raise KeyError(name)

    def to_markdown(self) -> str:
        """The comparison tables (percent / percentage points) as markdown."""
        headers = [header for _, header in self.metrics]
        sizes = ", ".join(
            f"{name} {size}" for name, size in zip(self.tiers.names, self.tiers.sizes, strict=True)
        )
        lines = [
            f"Reference method: **{self.reference}**. Tiers ranked by {self.tiers.ranked_by}; "
            f"classes per tier: {sizes}. Accuracies in %, mean ± std over seeds.",
            "",
            "| method | seeds | " + " | ".join(headers) + " |",
            "|---|---:|" + "---:|" * len(headers),
        ]
        for summary in self.methods:
            cells = []
            for key, _ in self.metrics:
                mean, std = summary.mean[key], summary.std[key]
                cell = _format_percent(mean)
                if not math.isnan(std):
                    cell += f" ± {100 * std:.2f}"
                cells.append(cell)
            lines.append(f"| {summary.method} | {len(summary.runs)} | " + " | ".join(cells) + " |")
        others = [s for s in self.methods if s.method != self.reference]
        if others:
            lines += [
                "",
                f"Difference to {self.reference} in percentage points (paired t-test over seeds; "
                f"`*` marks p < {self.alpha:g}, no multiple-comparison correction):",
                "",
                "| method | pairs | " + " | ".join(headers) + " |",
                "|---|---:|" + "---:|" * len(headers),
            ]
            for summary in others:
                cells = []
                pairs = 0
                for key, _ in self.metrics:
                    test = summary.paired[key]
                    pairs = max(pairs, test.num_pairs)
                    mark = "*" if test.pvalue < self.alpha else ""
                    cells.append(
                        f"{_format_percent(summary.difference[key], signed=True)}{mark} "
                        f"(p={_format_p(test.pvalue)})"
                    )
                lines.append(f"| {summary.method} | {pairs} | " + " | ".join(cells) + " |")
            lines += [
                "",
                f"Per-class sign test against {self.reference} (per-class accuracy averaged over "
                "seeds; exact binomial test, ties dropped):",
                "",
                "| method | classes better | classes worse | ties | p |",
                "|---|---:|---:|---:|---:|",
            ]
            for summary in others:
                sign = summary.sign
                assert sign is not None
                lines.append(
                    f"| {summary.method} | {sign.better} | {sign.worse} | {sign.ties} | "
                    f"{_format_p(sign.pvalue)} |"
                )
        return "\n".join(lines) + "\n"

    def to_csv(self) -> str:
        """One row per (method, metric): mean, std, difference, t-test (fractions, not percent)."""
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(
            ["method", "metric", "num_seeds", "mean", "std", "difference", "t", "pvalue", "pairs"]
        )
        for summary in self.methods:
            for key, _ in self.metrics:
                test = summary.paired.get(key)
                writer.writerow(
                    [
                        summary.method,
                        key,
                        int((~np.isnan(summary.values[key])).sum()),
                        _cell(summary.mean[key]),
                        _cell(summary.std[key]),
                        _cell(summary.difference[key]),
                        _cell(test.statistic) if test else "",
                        _cell(test.pvalue) if test else "",
                        test.num_pairs if test else "",
                    ]
                )
        return buffer.getvalue()

    def runs_csv(self) -> str:
        """One row per run: every table metric, with bootstrap bounds when computed."""
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        header = ["run", "method", "seed"]
        for key, _ in self.metrics:
            header.append(key)
            if self.bootstrap:
                header += [f"{key}_low", f"{key}_high"]
        writer.writerow(header)
        for summary in self.methods:
            for run, report in zip(summary.runs, summary.reports, strict=True):
                values = report.summary()
                row: list[Any] = [run.name, run.method, "" if run.seed is None else run.seed]
                for key, _ in self.metrics:
                    row.append(_cell(values[key]))
                    if self.bootstrap:
                        interval = self.bootstrap[run.name][key]
                        row += [_cell(interval.low), _cell(interval.high)]
                writer.writerow(row)
        return buffer.getvalue()

    def per_class_csv(self) -> str:
        """One row per class: tier, ranking accuracy and each method's mean accuracy over seeds."""
        first = self.methods[0].runs[0]
        num_classes = first.num_classes
        names = first.class_names if first.class_names is not None else [""] * num_classes
        tier_name = np.array([*self.tiers.names, ""])[self.tiers.assignment]
        columns: list[list[Any]] = [
            list(range(num_classes)),
            list(names),
            first.support.tolist(),
            tier_name.tolist(),
            [_cell(v) for v in self.tiers.reference_accuracy.tolist()],
        ]
        header = ["class_id", "class_name", "support", "tier", "ranking_accuracy"]
        for summary in self.methods:
            header.append(f"accuracy_{summary.method}")
            columns.append([_cell(v) for v in summary.per_class_mean.tolist()])
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(header)
        writer.writerows(zip(*columns, strict=True))
        return buffer.getvalue()

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


def _cell(value: float) -> str:
    return "" if math.isnan(value) else repr(float(value))


def _seed_key(run: RunRecord) -> tuple[int, int]:
    return (1, 0) if run.seed is None else (0, run.seed)


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

    Returns:
        The :class:`Comparison`.
    """
    check_comparable(runs)
    if tier_source not in ("test", "validation"):
        raise ReportError(TIER_SOURCE_INVALID.format(value=tier_source))
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
    if tier_source == "test":
        ranking_rows = [
            per_class_accuracy(np.diagonal(r.confusion), r.support) for r in reference_runs
        ]
    else:
        ranking_rows = []
        for run in reference_runs:
            accuracy = run.validation_accuracy()
            if accuracy is None:
                raise ReportError(VALIDATION_MISSING.format(run=run.label))
            ranking_rows.append(accuracy)
    ranking = _nan_mean_rows(np.stack(ranking_rows))
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
                per_class_mean=_nan_mean_rows(np.stack([r.by_class for r in reports])),
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
    )
