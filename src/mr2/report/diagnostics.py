"""Per-class diagnostics of the method: do hard classes really get the larger margins?

For each class k the report puts side by side the feature statistics of MR2 (``||mu_k||^2``, the
spread ``s_k``, the second moment ``a_k = ||mu_k||^2 + s_k``), the temperature ``gamma_k``, the logit
margin measured on the test set (mean and median of ``z_y - max_{j != y} z_j`` over the class's
samples) and the class's accuracy. It then gives the Spearman rank correlation of each statistic with
the class ERROR ``1 - acc_k``: a positive ``rho`` for ``gamma_k`` means the harder classes received
the larger temperatures (the paper's intent); a negative one means the allocation is inverted (as
happens when ``||mu_k||^2`` dominates ``s_k`` and easy classes have the larger feature norm).

:func:`training_evolution` follows the same quantities epoch by epoch from ``metrics.jsonl``.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from mr2.report.accuracy import confusion_accuracy
from mr2.report.csv_cells import csv_row
from mr2.report.exceptions import ReportError
from mr2.report.run_dir import RunRecord
from mr2.report.serialization import json_safe
from mr2.report.statistics import RankCorrelation, spearman
from mr2.report.tiers import TierSplit

__all__ = [
    "CLASS_STATISTICS",
    "ClassDiagnostics",
    "RankCorrelation",
    "TrainingEvolution",
    "ordered_statistics",
    "spearman",
    "training_evolution",
]

#: Per-class statistics of MR2 and the logit margins, in report order: (key, label). Any other
#: method's statistics (HBR's ``class_hardness``, center loss's ``center_sq_norm``, ...) follow them
#: under their own names.
CLASS_STATISTICS: tuple[tuple[str, str], ...] = (
    ("temperatures", "gamma_k"),
    ("spread", "s_k"),
    ("mean_sq_norm", "||mu_k||^2"),
    ("second_moment", "a_k"),
    ("margin_mean", "mean logit margin"),
    ("margin_median", "median logit margin"),
)

def ordered_statistics(keys: Iterable[str]) -> list[str]:
    """``keys`` (without repeats) in report order: those of :data:`CLASS_STATISTICS` first, in its
    order, then the others in the order given."""
    present = list(dict.fromkeys(keys))
    known = [key for key, _ in CLASS_STATISTICS]
    return [key for key in known if key in present] + [key for key in present if key not in known]


#: Per-class series a metrics.jsonl record may hold.
_EVOLVING = ("temperatures", "spread", "mean_sq_norm")

_STATISTIC_LENGTH = "statistic {name!r} has {actual} values for {expected} classes"


@dataclass
class ClassDiagnostics:
    """Per-class statistics of one run next to its per-class accuracy.

    Attributes:
        run_name: the run.
        accuracy: per-class test accuracy [K] (NaN: no test sample).
        support: test samples per class [K].
        statistics: available per-class statistics by key of :data:`CLASS_STATISTICS`, each [K].
        class_names: optional names.
    """

    run_name: str
    accuracy: NDArray[np.float64]
    support: NDArray[np.int64]
    statistics: dict[str, NDArray[np.float64]] = field(default_factory=dict)
    class_names: list[str] | None = None

    def __post_init__(self) -> None:
        for name, values in self.statistics.items():
            if values.shape != self.accuracy.shape:
                raise ReportError(
                    _STATISTIC_LENGTH.format(
                        name=name, actual=values.shape[0], expected=self.accuracy.shape[0]
                    )
                )

    @classmethod
    def from_run(cls, run: RunRecord) -> ClassDiagnostics:
        """Collect the class statistics and logit margins stored in a run's final.json."""
        statistics: dict[str, NDArray[np.float64]] = {}
        if run.class_statistics:
            statistics.update(run.class_statistics)
        if run.logit_margins:
            for key, values in run.logit_margins.items():
                statistics[f"margin_{key}"] = values
        support = run.support
        return cls(
            run_name=run.name,
            accuracy=confusion_accuracy(run.confusion),
            support=support,
            statistics=statistics,
            class_names=run.class_names,
        )

    @property
    def error(self) -> NDArray[np.float64]:
        """Per-class error ``1 - accuracy`` [K]."""
        return 1.0 - self.accuracy

    def available(self) -> list[str]:
        """Keys of the statistics this run has: in :data:`CLASS_STATISTICS` order, then the method's
        other statistics in the run's order."""
        return ordered_statistics(self.statistics)

    def correlations(self) -> dict[str, RankCorrelation]:
        """Spearman correlation of each available statistic with the class error."""
        return {key: spearman(self.statistics[key], self.error) for key in self.available()}

    def columns(self) -> dict[str, NDArray[Any]]:
        """The per-class table as named columns of length K."""
        table: dict[str, NDArray[Any]] = {
            "class_id": np.arange(self.accuracy.shape[0]),
            "class_name": np.array(self.class_names if self.class_names is not None else [""] * len(
                self.accuracy
            )),
            "support": self.support,
            "accuracy": self.accuracy,
        }
        for key in self.available():
            table[key] = self.statistics[key]
        return table

    def to_csv(self) -> str:
        """The per-class table as CSV text (empty cell for NaN)."""
        table = self.columns()
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(csv_row(table))
        cells = [
            [_csv_cell(v) for v in column.tolist()] for column in table.values()
        ]
        writer.writerows(csv_row(row) for row in zip(*cells, strict=True))
        return buffer.getvalue()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dictionary: the table and the correlations."""
        return dict(
            json_safe(
                {
                    "run_name": self.run_name,
                    "per_class": self.columns(),
                    "spearman_vs_error": {k: v.to_dict() for k, v in self.correlations().items()},
                }
            )
        )


def _csv_cell(value: Any) -> Any:
    if isinstance(value, float):
        return "" if math.isnan(value) else repr(value)
    return value


@dataclass
class TrainingEvolution:
    """How the per-class statistics evolve during training (from metrics.jsonl).

    Attributes:
        epochs: epoch numbers [E].
        series: per-class statistics per epoch, ``{key: [E, K]}`` (NaN where an epoch lacks it).
        spearman_vs_final_error: ``{key: [E]}``, rho between the epoch's statistic and the FINAL
            class error (does the allocation line up with the classes that end up hard?).
        tier_means: ``{key: [E, T]}``, mean of the statistic over each tier's classes.
        tier_names: the tiers' names.
        scalars: per-epoch scalar logs (``train_loss``, ``val_accuracy``, ...), ``{key: [E]}``.
    """

    epochs: NDArray[np.int64]
    series: dict[str, NDArray[np.float64]]
    spearman_vs_final_error: dict[str, NDArray[np.float64]]
    tier_means: dict[str, NDArray[np.float64]]
    tier_names: tuple[str, ...]
    scalars: dict[str, NDArray[np.float64]]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dictionary (without the full [E, K] series)."""
        return dict(
            json_safe(
                {
                    "epochs": self.epochs,
                    "spearman_vs_final_error": self.spearman_vs_final_error,
                    "tier_names": list(self.tier_names),
                    "tier_means": self.tier_means,
                    "scalars": self.scalars,
                }
            )
        )


def _per_class_series(
    records: Sequence[Mapping[str, Any]], key: str, num_classes: int
) -> NDArray[np.float64] | None:
    rows = np.full((len(records), num_classes), np.nan)
    found = False
    for index, record in enumerate(records):
        values = record.get(key)
        if isinstance(values, list) and len(values) == num_classes:
            rows[index] = [math.nan if v is None else v for v in values]
            found = True
    return rows if found else None


def training_evolution(
    records: Sequence[Mapping[str, Any]],
    final_accuracy: ArrayLike,
    tiers: TierSplit | None = None,
) -> TrainingEvolution | None:
    """Per-epoch class statistics and their rank correlation with the final class error.

    Args:
        records: the metrics.jsonl records of a run, one per epoch.
        final_accuracy: the run's final per-class test accuracy [K].
        tiers: a tier split for the per-tier means (default: none).

    Returns:
        The evolution, or None when the records carry no per-class statistics.
    """
    accuracy = np.asarray(final_accuracy, dtype=np.float64)
    num_classes = accuracy.shape[0]
    if not records:
        return None
    series = {
        key: values
        for key in _EVOLVING
        if (values := _per_class_series(records, key, num_classes)) is not None
    }
    if not series:
        return None
    epochs = np.array(
        [int(r.get("epoch", i)) for i, r in enumerate(records)], dtype=np.int64
    )
    error = 1.0 - accuracy
    correlation = {
        key: np.array([spearman(row, error).rho for row in values]) for key, values in series.items()
    }
    tier_means = (
        {key: tiers.accuracy(values) for key, values in series.items()} if tiers is not None else {}
    )
    scalar_keys = sorted(
        {k for r in records for k, v in r.items() if isinstance(v, (int, float)) and k != "epoch"}
    )
    scalars = {
        key: np.array(
            [float(r[key]) if isinstance(r.get(key), (int, float)) else math.nan for r in records]
        )
        for key in scalar_keys
    }
    return TrainingEvolution(
        epochs=epochs,
        series=series,
        spearman_vs_final_error=correlation,
        tier_means=tier_means,
        tier_names=tiers.names if tiers is not None else (),
        scalars=scalars,
    )
