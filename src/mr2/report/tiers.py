"""Easy / medium / hard tiers of classes, fixed by a reference run.

The paper's protocol: rank the classes by a REFERENCE run's per-class accuracy (usually ERM), split
the ranking into equal thirds, and keep that split fixed when evaluating every method, so "hard"
means the same classes for every row of the comparison table.

Definition used here:

1. Classes are sorted by reference accuracy, descending; ties are broken by class id, ascending
   (``np.lexsort((class_id, -accuracy))``), so the split is deterministic.
2. The ranking is cut into ``num_tiers`` contiguous groups as equal as possible, with
   ``np.array_split`` semantics: with K = q * T + r, the first r tiers get q + 1 classes and the
   others q (K = 10, T = 3 gives sizes 4, 3, 3).
3. Tier accuracy is the MEAN OF THE PER-CLASS ACCURACIES of the tier's classes (each class weighs the
   same, as in the paper's table), not the pooled accuracy over the tier's samples; on a balanced test
   set the two coincide.

Classes whose reference accuracy is NaN (no reference test sample) cannot be ranked: they get tier
``-1`` and belong to no tier (with a :class:`MissingClassWarning`).

Caveat: ranking and evaluating on the same test set favours the non-reference methods on the hard
tier (regression to the mean: the reference's hard classes are partly hard by test-sample noise).
Ranking on the reference's validation split avoids this; see :mod:`mr2.report.comparison`.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from mr2.report.exceptions import MissingClassWarning, ReportError

__all__ = ["TierSplit", "assign_tiers", "default_tier_names", "ranking_order", "tier_means"]

NUM_TIERS_INVALID = (
    "num_tiers must be an integer between 1 and the number of ranked classes ({num_ranked}), "
    "got {num_tiers}"
)
_TIER_NAMES_MISMATCH = "got {num_names} tier names for {num_tiers} tiers; pass one name per tier"
_ACCURACY_NOT_1D = "accuracy must be a 1-D array of per-class accuracies, got shape {shape}"
ASSIGNMENT_MISMATCH = (
    "per-class accuracy has {actual} classes but the tier split was made for {expected}; rank the "
    "tiers on a run of the same data set"
)
_UNRANKED_CLASSES_WARNING = (
    "{count} of {total} classes have no reference accuracy (no test sample) and belong to no tier: "
    "class ids {ids}"
)


def default_tier_names(num_tiers: int) -> tuple[str, ...]:
    """Tier names, easiest first: ("easy", "medium", "hard") for 3, ("easy", "hard") for 2,
    ("all",) for 1, else ("tier 1", ..., "tier T").

    >>> default_tier_names(3)
    ('easy', 'medium', 'hard')
    >>> default_tier_names(4)
    ('tier 1', 'tier 2', 'tier 3', 'tier 4')
    """
    named = {1: ("all",), 2: ("easy", "hard"), 3: ("easy", "medium", "hard")}
    return named.get(num_tiers, tuple(f"tier {t + 1}" for t in range(num_tiers)))


def _format_ids(ids: NDArray[np.int64], limit: int = 20) -> str:
    shown = ", ".join(str(int(i)) for i in ids[:limit])
    return shown + (f", ... ({len(ids) - limit} more)" if len(ids) > limit else "")


def ranking_order(accuracy: ArrayLike) -> NDArray[np.int64]:
    """The class ids that have an accuracy, from the easiest to the hardest: the order the tiers are
    cut from (accuracy descending, ties by class id ascending; NaN classes left out).

    Example:
        >>> ranking_order([0.5, 0.9, 0.5, np.nan, 0.7]).tolist()
        [1, 4, 0, 2]
    """
    acc = np.asarray(accuracy, dtype=np.float64)
    # NaN sorts last under -acc with lexsort, so the ranked classes come first.
    order = np.lexsort((np.arange(acc.shape[0]), -acc))
    return order[: int((~np.isnan(acc)).sum())].astype(np.int64)


def assign_tiers(accuracy: ArrayLike, num_tiers: int = 3) -> NDArray[np.int64]:
    """Tier index of each class (0 = easiest), ranking by ``accuracy`` descending.

    Ties are broken by class id (lower id ranks as easier); sizes follow ``np.array_split`` (earlier
    tiers get the extra classes). NaN accuracies get tier -1.

    Args:
        accuracy: per-class accuracy of the ranking run, shape [K] (NaN: class without samples).
        num_tiers: T, 1 <= T <= number of non-NaN classes.

    Returns:
        int64 array of shape [K] with values in {-1, 0, ..., T-1}.

    Example:
        >>> assign_tiers([0.5, 0.9, 0.5, 0.1, 0.7], 3)
        array([1, 0, 1, 2, 0])
    """
    acc = np.asarray(accuracy, dtype=np.float64)
    if acc.ndim != 1:
        raise ReportError(_ACCURACY_NOT_1D.format(shape=acc.shape))
    ranked = ~np.isnan(acc)
    num_ranked = int(ranked.sum())
    if (
        isinstance(num_tiers, bool)
        or not isinstance(num_tiers, (int, np.integer))
        or not 1 <= num_tiers <= num_ranked
    ):
        raise ReportError(NUM_TIERS_INVALID.format(num_ranked=num_ranked, num_tiers=num_tiers))
    order = ranking_order(acc)
    base, extra = divmod(num_ranked, int(num_tiers))
    sizes = np.full(int(num_tiers), base, dtype=np.int64)
    sizes[:extra] += 1
    assignment = np.full(acc.shape[0], -1, dtype=np.int64)
    assignment[order] = np.repeat(np.arange(int(num_tiers)), sizes)
    return assignment


def tier_means(values: ArrayLike, assignment: ArrayLike, num_tiers: int) -> NDArray[np.float64]:
    """Mean of ``values`` over each tier's classes, ignoring NaN values, batched over leading axes.

    ``out[..., t] = sum_{k in tier t, values[..., k] not NaN} values[..., k] / #{those k}``;
    NaN where a tier has no non-NaN class.

    Args:
        values: shape [..., K].
        assignment: tier index per class, shape [K] (-1: in no tier).
        num_tiers: T.

    Returns:
        float64 array of shape [..., T].

    Example:
        >>> tier_means([[1.0, 0.5, np.nan, 0.0]], [0, 0, 1, 1], 2)
        array([[0.75, 0.  ]])
    """
    vals = np.asarray(values, dtype=np.float64)
    tiers = np.asarray(assignment, dtype=np.int64)
    membership = (tiers[:, None] == np.arange(num_tiers)[None, :]).astype(np.float64)  # [K, T]
    present = ~np.isnan(vals)
    sums = np.where(present, vals, 0.0) @ membership
    counts = present.astype(np.float64) @ membership
    return np.divide(sums, counts, out=np.full_like(sums, np.nan), where=counts > 0)


@dataclass(frozen=True, eq=False)
class TierSplit:
    """A fixed partition of the classes into tiers, easiest first.

    Attributes:
        assignment: tier index per class, shape [K] (-1: unranked, no reference accuracy).
        names: one name per tier, easiest first.
        ranked_by: what the ranking came from, e.g. ``"reference run erm (test)"`` or
            ``"own accuracy"``; reports print it so a reader knows which protocol was used.
        reference_accuracy: the per-class accuracy that was ranked, shape [K].
    """

    assignment: NDArray[np.int64]
    names: tuple[str, ...]
    ranked_by: str
    reference_accuracy: NDArray[np.float64]

    @classmethod
    def from_accuracy(
        cls,
        accuracy: ArrayLike,
        num_tiers: int = 3,
        *,
        names: Sequence[str] | None = None,
        ranked_by: str = "reference",
    ) -> TierSplit:
        """Rank ``accuracy`` (per-class, shape [K]) into ``num_tiers`` tiers (see :func:`assign_tiers`).

        >>> split = TierSplit.from_accuracy([0.2, 0.9, 0.6, 0.4], 2, ranked_by="own accuracy")
        >>> split.members(0), split.members(1)
        (array([1, 2]), array([0, 3]))
        """
        acc = np.asarray(accuracy, dtype=np.float64)
        assignment = assign_tiers(acc, num_tiers)
        tier_names = tuple(names) if names is not None else default_tier_names(int(num_tiers))
        if len(tier_names) != num_tiers:
            raise ReportError(
                _TIER_NAMES_MISMATCH.format(num_names=len(tier_names), num_tiers=num_tiers)
            )
        unranked = np.flatnonzero(assignment < 0)
        if unranked.size:
            warnings.warn(
                _UNRANKED_CLASSES_WARNING.format(
                    count=unranked.size, total=acc.size, ids=_format_ids(unranked)
                ),
                MissingClassWarning,
                stacklevel=2,
            )
        return cls(assignment, tier_names, ranked_by, acc.copy())

    @property
    def num_tiers(self) -> int:
        """T."""
        return len(self.names)

    @property
    def num_classes(self) -> int:
        """K."""
        return int(self.assignment.shape[0])

    @property
    def sizes(self) -> NDArray[np.int64]:
        """Number of classes per tier, shape [T]."""
        ranked = self.assignment[self.assignment >= 0]
        return np.bincount(ranked, minlength=self.num_tiers).astype(np.int64)

    def members(self, tier: int | str) -> NDArray[np.int64]:
        """Class ids of a tier (by index or name), in ascending id order."""
        index = self.names.index(tier) if isinstance(tier, str) else int(tier)
        return np.flatnonzero(self.assignment == index)

    def accuracy(self, per_class_accuracy: ArrayLike) -> NDArray[np.float64]:
        """Tier accuracies ``[..., T]`` of per-class accuracies ``[..., K]`` (see :func:`tier_means`)."""
        acc = np.asarray(per_class_accuracy, dtype=np.float64)
        if acc.shape[-1] != self.num_classes:
            raise ReportError(
                ASSIGNMENT_MISMATCH.format(actual=acc.shape[-1], expected=self.num_classes)
            )
        return tier_means(acc, self.assignment, self.num_tiers)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready description: names, ranking source, sizes and members of each tier."""
        return {
            "ranked_by": self.ranked_by,
            "names": list(self.names),
            "sizes": [int(s) for s in self.sizes],
            "members": {name: self.members(t).tolist() for t, name in enumerate(self.names)},
        }
