"""Gradient accumulation for MR2's class statistics, the part every training framework shares: at
the start of training turn deferral on (micro-batches add up) or off, at each optimiser step apply
what was added up, at the end apply the rest and turn deferral off. The Lightning and Hugging Face
callbacks (:mod:`mr2.integrations`) only decide when to call these; a plain loop calls them itself.

Example:
    >>> from mr2 import MR2Loss
    >>> stats = [MR2Loss(3).statistics]
    >>> begin_accumulation(stats, defer=True); stats[0].deferred
    True
    >>> end_accumulation(stats); stats[0].deferred
    False
"""

from __future__ import annotations

from collections.abc import Iterable

from mr2.statistics.class_features import ClassFeatureStatistics

__all__ = ["apply_accumulation", "begin_accumulation", "end_accumulation"]


def begin_accumulation(statistics: Iterable[ClassFeatureStatistics], *, defer: bool) -> None:
    """Deferral on (checked: :meth:`ClassFeatureStatistics.check_deferrable`) or off for each."""
    for stats in statistics:
        if defer:
            stats.check_deferrable()
        stats.deferred = defer


def apply_accumulation(statistics: Iterable[ClassFeatureStatistics]) -> None:
    """One moving-average step of what the micro-batches since the last step added up (a no-op
    without deferral or pending micro-batches)."""
    for stats in statistics:
        stats.apply_accumulated()


def end_accumulation(statistics: Iterable[ClassFeatureStatistics]) -> None:
    """Apply what is pending and turn deferral off."""
    for stats in statistics:
        stats.apply_accumulated()
        stats.deferred = False
