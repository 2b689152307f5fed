"""DisparityReport and class_summary against sklearn and slow loop oracles (float64)."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
import torch
from sklearn.metrics import accuracy_score, balanced_accuracy_score, recall_score

from mr2.report import disparity as disparity_module
from mr2.report import validation
from mr2.report.confusion import confusion_matrix
from mr2.report.disparity import DisparityReport
from mr2.report.exceptions import MissingClassWarning, ReportError
from mr2.report.summary import class_summary
from mr2.report.tiers import TierSplit


def oracle(matrix: np.ndarray, bottom_fraction: float = 0.1) -> dict[str, float]:
    """Every summary metric with plain Python loops over the classes."""
    k_all = matrix.shape[0]
    acc = []
    for k in range(k_all):
        n = sum(int(v) for v in matrix[k])
        if n:
            acc.append(float(matrix[k][k]) / n)
    overall = sum(float(matrix[k][k]) for k in range(k_all)) / float(matrix.sum())
    mean = sum(acc) / len(acc)
    std = math.sqrt(sum((a - mean) ** 2 for a in acc) / len(acc))
    count = max(1, math.ceil(round(bottom_fraction * len(acc), 9)))
    worst = sorted(acc)[:count]
    ratios = []
    for a in acc:
        ratios.append(0.0 if a == 0 else min(a / overall, overall / a))
    return {
        "overall": overall,
        "group_min": min(acc),
        "group_max": max(acc),
        "difference": max(acc) - min(acc),
        "difference_to_overall": max(abs(a - overall) for a in acc),
        "ratio": min(acc) / max(acc) if max(acc) > 0 else math.nan,
        "ratio_to_overall": min(ratios),
        "mean_class_accuracy": mean,
        "std": std,
        "cv": std / mean,
        "bottom_mean": sum(worst) / len(worst),
    }


def random_predictions(seed: int, num_classes: int, num_samples: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    target = torch.randint(0, num_classes, (num_samples,), generator=generator)
    # Class-dependent accuracy: class k is right with probability ~ (k + 1) / (K + 1).
    keep = torch.rand(num_samples, generator=generator) < (target + 1).double() / (num_classes + 1)
    noise = torch.randint(0, num_classes, (num_samples,), generator=generator)
    return torch.where(keep, target, noise), target


@pytest.mark.parametrize(("num_classes", "seed"), [(3, 0), (10, 1), (37, 2), (100, 3)])
def test_per_class_accuracy_matches_sklearn(num_classes: int, seed: int) -> None:
    preds, target = random_predictions(seed, num_classes, 50 * num_classes)
    report = DisparityReport.from_predictions(preds, target, num_classes)
    recall = recall_score(target, preds, average=None, labels=list(range(num_classes)))
    np.testing.assert_allclose(report.by_class, recall, rtol=0, atol=1e-12)
    assert report.overall == pytest.approx(accuracy_score(target, preds), abs=1e-12)
    assert report.mean_class_accuracy() == pytest.approx(
        balanced_accuracy_score(target, preds), abs=1e-12
    )


@pytest.mark.parametrize(("num_classes", "seed"), [(2, 0), (10, 1), (30, 2), (101, 3)])
def test_summaries_match_loop_oracle(num_classes: int, seed: int) -> None:
    preds, target = random_predictions(seed, num_classes, 40 * num_classes)
    report = DisparityReport.from_predictions(preds, target, num_classes)
    expected = oracle(confusion_matrix(preds, target, num_classes).numpy())
    summary = report.summary()
    for name, value in expected.items():
        assert summary[name] == pytest.approx(value, abs=1e-12), name
    assert report.group_min() == expected["group_min"]
    assert report.group_max() == expected["group_max"]
    assert report.difference() == pytest.approx(expected["difference"], abs=1e-12)
    assert report.difference("to_overall") == pytest.approx(expected["difference_to_overall"], abs=1e-12)
    assert report.ratio() == pytest.approx(expected["ratio"], abs=1e-12)
    assert report.ratio("to_overall") == pytest.approx(expected["ratio_to_overall"], abs=1e-12)
    assert report.std() == pytest.approx(expected["std"], abs=1e-12)
    assert report.cv() == pytest.approx(expected["cv"], abs=1e-12)
    assert report.bottom_mean() == pytest.approx(expected["bottom_mean"], abs=1e-12)
    assert report.bottom_mean(0.5) == pytest.approx(oracle(
        confusion_matrix(preds, target, num_classes).numpy(), 0.5
    )["bottom_mean"], abs=1e-12)


def test_bottom_fraction_counts_classes_exactly() -> None:
    # 30 classes at 10 %: exactly 3 classes (0.1 * 30 is 3.0000000000000004 in floating point).
    accuracy = np.arange(30) / 30.0
    summary = class_summary(accuracy * 30, np.full(30, 30.0))
    assert summary["bottom_mean"] == pytest.approx((0 + 1 + 2) / 30 / 3)


def test_hand_computed_small_case() -> None:
    report = DisparityReport([[8, 2, 0, 0], [1, 9, 0, 0], [0, 5, 5, 0], [2, 2, 2, 4]])
    np.testing.assert_allclose(report.by_class, [0.8, 0.9, 0.5, 0.4])
    assert report.overall == pytest.approx(26 / 40)
    assert report.worst_class() == 3 and report.best_class() == 1
    assert report.difference() == pytest.approx(0.5)
    assert report.ratio() == pytest.approx(0.4 / 0.9)
    # Own-accuracy tiers of 4 classes: sizes 2, 1, 1 -> easy {1, 0}, medium {2}, hard {3}.
    assert report.tiers.ranked_by == "own accuracy"
    assert report.tier_accuracy() == pytest.approx({"easy": 0.85, "medium": 0.5, "hard": 0.4})


def test_tiers_fixed_by_reference() -> None:
    reference = TierSplit.from_accuracy([0.1, 0.9, 0.5], 3, ranked_by="reference erm")
    report = DisparityReport([[10, 0, 0], [5, 5, 0], [0, 0, 10]], tiers=reference)
    # Tiers follow the reference (class 1 easy, 2 medium, 0 hard), not this run's accuracy.
    assert report.tier_accuracy() == pytest.approx({"easy": 0.5, "medium": 1.0, "hard": 1.0})
    assert report.to_dict()["tiers"]["ranked_by"] == "reference erm"


def test_missing_class_is_nan_with_warning() -> None:
    matrix = [[5, 5, 0], [0, 0, 0], [0, 2, 8]]
    with pytest.warns(MissingClassWarning, match="1 of 3 classes have no sample in the evaluated split"):
        report = DisparityReport(matrix)
    assert math.isnan(report.by_class[1])
    assert report.missing_classes.tolist() == [1]
    # Never counted as 0 or 1: the summaries use the two classes with samples only.
    assert report.group_min() == 0.5 and report.group_max() == 0.8
    assert report.mean_class_accuracy() == pytest.approx(0.65)
    assert report.worst_class() == 0
    data = report.to_dict()
    assert data["by_class"][1] is None
    json.dumps(data, allow_nan=False)


def test_zero_accuracy_class_is_zero_not_missing() -> None:
    report = DisparityReport([[0, 4], [0, 4]])
    assert report.by_class.tolist() == [0.0, 1.0]
    assert report.ratio() == 0.0 and report.ratio("to_overall") == 0.0


def test_single_class() -> None:
    report = DisparityReport([[3]])
    assert report.overall == 1.0 and report.difference() == 0.0 and report.std() == 0.0
    assert report.tier_accuracy() == {"all": 1.0}


def test_permuting_classes_permutes_by_class() -> None:
    preds, target = random_predictions(4, 12, 2000)
    permutation = torch.randperm(12, generator=torch.Generator().manual_seed(0))
    base = DisparityReport.from_predictions(preds, target, 12)
    permuted = DisparityReport.from_predictions(permutation[preds], permutation[target], 12)
    np.testing.assert_allclose(permuted.by_class[permutation.numpy()], base.by_class)
    for name, value in base.summary().items():
        if not name.startswith("tier:"):
            assert permuted.summary()[name] == pytest.approx(value, abs=1e-12), name


def test_thousand_classes() -> None:
    preds, target = random_predictions(5, 1000, 50_000)
    report = DisparityReport.from_predictions(preds, target, 1000)
    assert report.num_classes == 1000
    assert report.tiers.sizes.tolist() == [334, 333, 333]
    assert 0 <= report.group_min() <= report.overall <= report.group_max() <= 1


def test_batched_summary_equals_rowwise() -> None:
    rng = np.random.default_rng(0)
    total = rng.integers(0, 20, size=(5, 8))
    correct = rng.binomial(total, 0.6)
    batched = class_summary(correct, total)
    for row in range(5):
        single = class_summary(correct[row], total[row])
        for name in batched:
            np.testing.assert_allclose(batched[name][row], single[name], equal_nan=True)


@pytest.mark.parametrize(
    ("matrix", "constant"),
    [
        ([[1, 2, 3]], "CONFUSION_NOT_SQUARE"),
        ([[1, -1], [0, 2]], "CONFUSION_NOT_COUNTS"),
        ([[1.5, 0], [0, 2]], "CONFUSION_NOT_COUNTS"),
        ([[0, 0], [0, 0]], "CONFUSION_EMPTY"),
    ],
)
def test_bad_confusion_is_explained(matrix: list[list[float]], constant: str) -> None:
    template = getattr(disparity_module if constant == "CONFUSION_EMPTY" else validation, constant)
    with pytest.raises(ReportError, match=re.escape(template.split("{")[0])):
        DisparityReport(matrix)


def test_bad_arguments_are_explained() -> None:
    with pytest.raises(ReportError, match="method must be 'between_groups' or 'to_overall'"):
        DisparityReport([[1, 0], [0, 1]]).difference("max")
    with pytest.raises(ReportError, match="method must be 'between_groups' or 'to_overall', got 'max'"):
        DisparityReport([[1, 0], [0, 1]]).ratio("max")
    with pytest.raises(ReportError, match="got 1 class names for 2 classes"):
        DisparityReport([[1, 0], [0, 1]], class_names=["a"])
    with pytest.raises(ReportError, match=r"bottom_fraction must be in \(0, 1\]"):
        DisparityReport([[1, 0], [0, 1]], bottom_fraction=0.0)


def test_to_dict_is_strict_json() -> None:
    report = DisparityReport([[9, 1], [3, 7]], class_names=["cat", "dog"])
    data = json.loads(json.dumps(report.to_dict(), allow_nan=False))
    assert data["overall"] == pytest.approx(0.8)
    assert data["by_class"] == [0.9, 0.7]
    assert data["class_names"] == ["cat", "dog"]
    assert data["summary"]["group_min"] == pytest.approx(0.7)
