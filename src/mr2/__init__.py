"""mr2: measure and reduce class-wise accuracy disparity in classifiers (MR2, ICLR 2026)."""

from __future__ import annotations

from mr2 import functional
from mr2.checks import MR2InputError
from mr2.losses.mr2 import VARIANTS, MR2Loss, MR2LossParts
from mr2.models.feature_capture import ClassifierWithFeatures, find_classifier
from mr2.report import (
    ConfusionMatrix,
    DisparityReport,
    MissingClassWarning,
    TierSplit,
    compare_runs,
    confusion_matrix,
    load_runs,
    write_report,
)
from mr2.statistics.class_features import ClassFeatureStatistics

__version__ = "0.1.0"

__all__ = [
    "VARIANTS",
    "ClassFeatureStatistics",
    "ClassifierWithFeatures",
    "ConfusionMatrix",
    "DisparityReport",
    "MR2InputError",
    "MR2Loss",
    "MR2LossParts",
    "MissingClassWarning",
    "TierSplit",
    "__version__",
    "compare_runs",
    "confusion_matrix",
    "find_classifier",
    "functional",
    "load_runs",
    "write_report",
]
