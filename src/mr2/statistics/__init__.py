"""Moving per-class feature statistics."""

from mr2.statistics.class_features import ClassFeatureStatistics

__all__ = ["ClassFeatureStatistics"]
