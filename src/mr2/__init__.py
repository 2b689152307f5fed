"""mr2: measure and reduce class-wise accuracy disparity in classifiers (MR2, ICLR 2026).

The public names are imported on first use (PEP 562, :mod:`mr2.lazy`): ``import mr2`` is cheap and
the command line's fast paths (``mr2 --help``, ``--version``, ``presets``, ``sweep status``) import no
torch, while ``mr2.MR2Loss`` and ``from mr2 import MR2Loss`` work as usual.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mr2.lazy import lazy_exports

if TYPE_CHECKING:
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

#: public name -> the module that defines it (imported on first access)
EXPORTS: dict[str, str] = {
    "functional": "mr2.functional",
    "MR2InputError": "mr2.checks",
    "VARIANTS": "mr2.losses.mr2",
    "MR2Loss": "mr2.losses.mr2",
    "MR2LossParts": "mr2.losses.mr2",
    "ClassifierWithFeatures": "mr2.models.feature_capture",
    "find_classifier": "mr2.models.feature_capture",
    "ConfusionMatrix": "mr2.report",
    "DisparityReport": "mr2.report",
    "MissingClassWarning": "mr2.report",
    "TierSplit": "mr2.report",
    "compare_runs": "mr2.report",
    "confusion_matrix": "mr2.report",
    "load_runs": "mr2.report",
    "write_report": "mr2.report",
    "ClassFeatureStatistics": "mr2.statistics.class_features",
}

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

if not TYPE_CHECKING:  # type checkers see the names imported above, and no catch-all
    __getattr__ = lazy_exports(__name__, EXPORTS)
