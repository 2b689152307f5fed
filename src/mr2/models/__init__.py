"""Models that return ``(logits, features)``, and the wrapper that makes any classifier do so."""

from mr2.models.feature_capture import ClassifierWithFeatures, find_classifier

__all__ = ["ClassifierWithFeatures", "find_classifier"]
