"""The options of one report, in one object: what ``mr2 report`` and ``mr2 sweep`` pass on."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["ReportSettings"]


@dataclass(frozen=True)
class ReportSettings:
    """How a report is computed and what it writes.

    Attributes:
        reference: the reference method (default: the first run's).
        num_tiers: number of tiers (default: 3, fewer with fewer classes).
        tier_source: ``"test"`` (the paper's protocol) or ``"validation"``: the split of the
            reference runs that ranks the classes.
        bottom_fraction: fraction of the worst classes averaged in the ``bottom`` column.
        alpha: significance level marked in the tables.
        bootstrap_resamples: bootstrap resamples per run (0: no intervals).
        confidence: coverage of the bootstrap intervals.
        seed: seed of the bootstrap.
        plots: draw the figures (needs matplotlib).
        html: write report.html next to report.md.
        tier_assignment: fixed tiers, one index per class (0 = easiest, -1 = unranked), used instead of
            ranking the reference runs (``num_tiers`` and ``tier_source`` then unused).
        tiers_ranked_by: what ``tier_assignment`` was ranked on (printed with the tiers).
        tier_ranking_accuracy: the per-class accuracy ``tier_assignment`` was ranked on (the
            per-class rows run hardest first by it).
    """

    reference: str | None = None
    num_tiers: int | None = None
    tier_source: str = "test"
    bottom_fraction: float = 0.1
    alpha: float = 0.05
    bootstrap_resamples: int = 1000
    confidence: float = 0.95
    seed: int = 0
    plots: bool = True
    html: bool = True
    tier_assignment: tuple[int, ...] | None = None
    tiers_ranked_by: str | None = None
    tier_ranking_accuracy: tuple[float, ...] | None = None

    def comparison_options(self) -> dict[str, Any]:
        """The keyword arguments of :func:`mr2.report.comparison.compare_runs`.

        >>> sorted(ReportSettings().comparison_options())[:3]
        ['alpha', 'bootstrap_resamples', 'bottom_fraction']
        """
        options = asdict(self)
        del options["plots"], options["html"]
        return options
