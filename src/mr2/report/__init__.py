"""The class-wise disparity report: metrics, tiers, bootstrap, comparison of runs, diagnostics.

Everything is derived from K x K confusion matrices (rows: true class), so it scales to K = 1000 and
to distributed evaluation. The vocabulary follows fairlearn's ``MetricFrame``: ``overall``,
``by_class``, ``group_min()``, ``group_max()``, ``difference()``, ``ratio()``, ``to_dict()``.

Modules (maths, then aggregation, then reading and rendering):
    accuracy: NaN-safe per-class accuracy (numpy and torch), shared with the engine.
    confusion: confusion matrix from predictions; distributed-safe :class:`ConfusionMatrix`.
    validation: checks of a confusion matrix given by a caller or a file.
    summary: every scalar disparity metric from per-class counts, batched.
    tiers: easy / medium / hard tiers ranked by a reference run.
    bootstrap: bootstrap confidence intervals over test samples.
    disparity: :class:`DisparityReport` of one run.
    statistics: mean ± std over seeds, paired t-test, sign test, Spearman (scipy.stats wrappers).
    comparison: the methods x seeds comparison (aggregation).
    diagnostics: per-class statistics (gamma_k, s_k, a_k, margins) against accuracy.
    degenerate: the flag of a run predicting one class for every sample or sitting at chance.
    frame: the per-class figures as a pandas DataFrame (``pip install 'mr2[pandas]'``).
    margins: logit margins per sample and per class.
    run_dir: reading and validating run directories.
    predictions: reading predictions files (.npz, .pt, .csv) of any classifier.
    tables: the report's tables, rendered as markdown and CSV.
    markdown, html: the report.md and report.html pages.
    plots: matplotlib figures (imported on demand: ``from mr2.report import plots``).
    settings, writer: the options of a report and the report directory written by ``mr2 report``.
    serialization: strict JSON (NaN as null).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mr2.lazy import lazy_exports

if TYPE_CHECKING:
    from mr2.report.accuracy import confusion_accuracy, per_class_accuracy
    from mr2.report.bootstrap import ConfidenceInterval, bootstrap_confusion, resample_class_counts
    from mr2.report.comparison import Comparison, MethodSummary, compare_runs
    from mr2.report.confusion import ConfusionMatrix, confusion_matrix
    from mr2.report.degenerate import RunFlag, flag_run
    from mr2.report.diagnostics import ClassDiagnostics, TrainingEvolution, training_evolution
    from mr2.report.disparity import DisparityReport
    from mr2.report.exceptions import (
        MissingClassWarning,
        PredictionsError,
        ReportError,
        RunDirectoryError,
    )
    from mr2.report.frame import per_class_frame
    from mr2.report.margins import logit_margins, per_class_margin_summary
    from mr2.report.predictions import load_predictions
    from mr2.report.run_dir import RunRecord, load_run, load_runs
    from mr2.report.settings import ReportSettings
    from mr2.report.statistics import (
        PairedTest,
        RankCorrelation,
        SignTest,
        mean_std,
        paired_t_test,
        sign_test,
        spearman,
    )
    from mr2.report.summary import class_summary
    from mr2.report.tiers import TierSplit, assign_tiers
    from mr2.report.writer import ReportOutput, write_report

#: public name -> the module that defines it (imported on first access, so that the command line's
#: fast paths import no torch or numpy)
EXPORTS: dict[str, str] = {
    "confusion_accuracy": "mr2.report.accuracy",
    "per_class_accuracy": "mr2.report.accuracy",
    "ConfidenceInterval": "mr2.report.bootstrap",
    "bootstrap_confusion": "mr2.report.bootstrap",
    "resample_class_counts": "mr2.report.bootstrap",
    "Comparison": "mr2.report.comparison",
    "MethodSummary": "mr2.report.comparison",
    "compare_runs": "mr2.report.comparison",
    "ConfusionMatrix": "mr2.report.confusion",
    "confusion_matrix": "mr2.report.confusion",
    "ClassDiagnostics": "mr2.report.diagnostics",
    "TrainingEvolution": "mr2.report.diagnostics",
    "training_evolution": "mr2.report.diagnostics",
    "RunFlag": "mr2.report.degenerate",
    "flag_run": "mr2.report.degenerate",
    "DisparityReport": "mr2.report.disparity",
    "per_class_frame": "mr2.report.frame",
    "MissingClassWarning": "mr2.report.exceptions",
    "PredictionsError": "mr2.report.exceptions",
    "ReportError": "mr2.report.exceptions",
    "RunDirectoryError": "mr2.report.exceptions",
    "logit_margins": "mr2.report.margins",
    "per_class_margin_summary": "mr2.report.margins",
    "load_predictions": "mr2.report.predictions",
    "RunRecord": "mr2.report.run_dir",
    "load_run": "mr2.report.run_dir",
    "load_runs": "mr2.report.run_dir",
    "ReportSettings": "mr2.report.settings",
    "PairedTest": "mr2.report.statistics",
    "RankCorrelation": "mr2.report.statistics",
    "SignTest": "mr2.report.statistics",
    "mean_std": "mr2.report.statistics",
    "paired_t_test": "mr2.report.statistics",
    "sign_test": "mr2.report.statistics",
    "spearman": "mr2.report.statistics",
    "class_summary": "mr2.report.summary",
    "TierSplit": "mr2.report.tiers",
    "assign_tiers": "mr2.report.tiers",
    "ReportOutput": "mr2.report.writer",
    "write_report": "mr2.report.writer",
}

__all__ = [
    "ClassDiagnostics",
    "Comparison",
    "ConfidenceInterval",
    "ConfusionMatrix",
    "DisparityReport",
    "MethodSummary",
    "MissingClassWarning",
    "PairedTest",
    "PredictionsError",
    "RankCorrelation",
    "ReportError",
    "ReportOutput",
    "ReportSettings",
    "RunDirectoryError",
    "RunFlag",
    "RunRecord",
    "SignTest",
    "TierSplit",
    "TrainingEvolution",
    "assign_tiers",
    "bootstrap_confusion",
    "class_summary",
    "compare_runs",
    "confusion_accuracy",
    "confusion_matrix",
    "flag_run",
    "load_predictions",
    "load_run",
    "load_runs",
    "logit_margins",
    "mean_std",
    "paired_t_test",
    "per_class_accuracy",
    "per_class_frame",
    "per_class_margin_summary",
    "resample_class_counts",
    "sign_test",
    "spearman",
    "training_evolution",
    "write_report",
]

if not TYPE_CHECKING:  # type checkers see the names imported above, and no catch-all
    __getattr__ = lazy_exports(__name__, EXPORTS)
