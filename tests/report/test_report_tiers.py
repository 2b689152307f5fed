"""Tier assignment: hand-computed cases, ties, K not divisible by the number of tiers."""

from __future__ import annotations

import numpy as np
import pytest

from mr2.report import tiers as tiers_module
from mr2.report.exceptions import MissingClassWarning, ReportError
from mr2.report.tiers import TierSplit, assign_tiers, default_tier_names, tier_means


def loop_tiers(accuracy: list[float], num_tiers: int) -> list[int]:
    """Oracle: sort with a key, hand out np.array_split-sized chunks."""
    ranked = sorted(range(len(accuracy)), key=lambda k: (-accuracy[k], k))
    chunks = np.array_split(np.array(ranked), num_tiers)
    out = [0] * len(accuracy)
    for tier, chunk in enumerate(chunks):
        for k in chunk:
            out[int(k)] = tier
    return out


def test_hand_computed_nine_classes() -> None:
    accuracy = [0.9, 0.1, 0.5, 0.7, 0.3, 0.8, 0.2, 0.6, 0.4]
    # Ranking: 0 (.9), 5 (.8), 3 (.7) | 7 (.6), 2 (.5), 8 (.4) | 4 (.3), 6 (.2), 1 (.1)
    assert assign_tiers(accuracy, 3).tolist() == [0, 2, 1, 0, 2, 0, 2, 1, 1]


def test_ten_classes_first_tier_gets_the_extra_class() -> None:
    accuracy = np.linspace(1.0, 0.1, 10)
    assignment = assign_tiers(accuracy, 3)
    assert assignment.tolist() == [0, 0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert np.bincount(assignment).tolist() == [4, 3, 3]


def test_eleven_classes_sizes() -> None:
    assert np.bincount(assign_tiers(np.arange(11.0), 3)).tolist() == [4, 4, 3]


def test_ties_broken_by_class_id() -> None:
    # All equal: the lowest ids are the "easiest".
    assert assign_tiers([0.5] * 7, 3).tolist() == [0, 0, 0, 1, 1, 2, 2]
    # A tie across a tier boundary: classes 1 and 3 tie at 0.6; class 1 goes to the easier tier.
    assert assign_tiers([0.9, 0.6, 0.2, 0.6], 2).tolist() == [0, 0, 1, 1]


@pytest.mark.parametrize(
    ("num_classes", "num_tiers"),
    [(k, t) for k in (1, 2, 3, 4, 5, 10, 11, 100, 1000) for t in (1, 2, 3, 4) if t <= k],
)
def test_matches_loop_oracle_with_ties(num_classes: int, num_tiers: int) -> None:
    rng = np.random.default_rng(num_classes * 10 + num_tiers)
    accuracy = rng.integers(0, 5, num_classes) / 4.0  # many ties
    assert assign_tiers(accuracy, num_tiers).tolist() == loop_tiers(accuracy.tolist(), num_tiers)


def test_nan_classes_are_unranked() -> None:
    with pytest.warns(MissingClassWarning, match="1 of 5 classes have no reference accuracy"):
        split = TierSplit.from_accuracy([0.9, np.nan, 0.1, 0.5, 0.7], 2)
    assert split.assignment.tolist() == [0, -1, 1, 1, 0]
    assert split.sizes.tolist() == [2, 2]


def test_tier_accuracy_is_mean_of_per_class_accuracies() -> None:
    split = TierSplit.from_accuracy([0.9, 0.8, 0.3], 2)
    # easy {0, 1}, hard {2}; the evaluated run's accuracy is averaged per class (not per sample).
    np.testing.assert_allclose(split.accuracy([1.0, 0.5, 0.2]), [0.75, 0.2])
    np.testing.assert_allclose(
        tier_means([[1.0, np.nan, 0.2], [np.nan, np.nan, 0.4]], split.assignment, 2),
        [[1.0, 0.2], [np.nan, 0.4]],
    )


def test_names_and_members() -> None:
    split = TierSplit.from_accuracy([0.2, 0.9, 0.6], 3, ranked_by="reference erm (test)")
    assert split.names == ("easy", "medium", "hard")
    assert split.members("easy").tolist() == [1]
    assert split.members("hard").tolist() == [0]
    assert split.to_dict() == {
        "ranked_by": "reference erm (test)",
        "names": ["easy", "medium", "hard"],
        "sizes": [1, 1, 1],
        "members": {"easy": [1], "medium": [2], "hard": [0]},
    }
    assert default_tier_names(2) == ("easy", "hard")
    custom = TierSplit.from_accuracy([0.2, 0.9], 2, names=["top", "bottom"])
    assert custom.members("bottom").tolist() == [0]


def test_errors() -> None:
    with pytest.raises(ReportError) as info:
        assign_tiers([0.5, 0.4], 3)
    assert str(info.value) == tiers_module.NUM_TIERS_INVALID.format(num_ranked=2, num_tiers=3)
    with pytest.raises(ReportError, match="got 1 tier names for 2 tiers"):
        TierSplit.from_accuracy([0.5, 0.4], 2, names=["only"])
    with pytest.raises(ReportError, match="must be a 1-D array"):
        assign_tiers([[0.5]], 1)
    split = TierSplit.from_accuracy([0.5, 0.4], 2)
    with pytest.raises(ReportError, match="per-class accuracy has 3 classes"):
        split.accuracy([0.1, 0.2, 0.3])
