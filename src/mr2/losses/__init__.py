"""Training objectives called as ``loss(logits, features, target)``."""

from mr2.losses.collapse import CollapseGuard, FeatureCollapseWarning
from mr2.losses.mr2 import DEFAULT_VARIANT, PROFILER_LABELS, VARIANTS, MR2Loss, MR2LossParts
from mr2.losses.released import ReleasedMR2Loss

__all__ = [
    "DEFAULT_VARIANT",
    "PROFILER_LABELS",
    "VARIANTS",
    "CollapseGuard",
    "FeatureCollapseWarning",
    "MR2Loss",
    "MR2LossParts",
    "ReleasedMR2Loss",
]
