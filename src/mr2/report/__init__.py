"""The class-wise disparity report: metrics, tiers, bootstrap, comparison of runs, diagnostics.

Everything is derived from K x K confusion matrices (rows: true class), so it scales to K = 1000 and
to distributed evaluation. The vocabulary follows fairlearn's ``MetricFrame``: ``overall``,
``by_class``, ``group_min()``, ``group_max()``, ``difference()``, ``ratio()``, ``to_dict()``.

Modules:
    confusion: confusion matrix from predictions; distributed-safe :class:`ConfusionMatrix`.
    disparity: :class:`DisparityReport` of one run.
    tiers: easy / medium / hard tiers ranked by a reference run.
    bootstrap: bootstrap confidence intervals over test samples.
    comparison: methods x seeds table, paired t-test, per-class sign test.
    diagnostics: per-class statistics (gamma_k, s_k, a_k, margins) against accuracy.
    margins: logit margins per sample and per class.
    run_dir: reading and validating run directories.
    writer: the report directory written by ``mr2 report``.
    plots: matplotlib figures (imported on demand: ``from mr2.report import plots``).
"""

from __future__ import annotations

from mr2.report.bootstrap import ConfidenceInterval, bootstrap_confusion, resample_class_counts
from mr2.report.comparison import (
    Comparison,
    MethodSummary,
    PairedTest,
    SignTest,
    compare_runs,
    mean_std,
    paired_t_test,
    sign_test,
)
from mr2.report.confusion import ConfusionMatrix, confusion_matrix
from mr2.report.diagnostics import (
    ClassDiagnostics,
    RankCorrelation,
    TrainingEvolution,
    spearman,
    training_evolution,
)
from mr2.report.disparity import DisparityReport, class_summary, per_class_accuracy
from mr2.report.exceptions import MissingClassWarning, ReportError, RunDirectoryError
from mr2.report.margins import logit_margins, per_class_margin_summary
from mr2.report.run_dir import RunRecord, load_run, load_runs
from mr2.report.tiers import TierSplit, assign_tiers
from mr2.report.writer import ReportOutput, write_report

__all__ = [
    "ClassDiagnostics",
    "Comparison",
    "ConfidenceInterval",
    "ConfusionMatrix",
    "DisparityReport",
    "MethodSummary",
    "MissingClassWarning",
    "PairedTest",
    "RankCorrelation",
    "ReportError",
    "ReportOutput",
    "RunDirectoryError",
    "RunRecord",
    "SignTest",
    "TierSplit",
    "TrainingEvolution",
    "assign_tiers",
    "bootstrap_confusion",
    "class_summary",
    "compare_runs",
    "confusion_matrix",
    "load_run",
    "load_runs",
    "logit_margins",
    "mean_std",
    "paired_t_test",
    "per_class_accuracy",
    "per_class_margin_summary",
    "resample_class_counts",
    "sign_test",
    "spearman",
    "training_evolution",
    "write_report",
]
