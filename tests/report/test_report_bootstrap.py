"""Bootstrap confidence intervals: reproducibility, resampling schemes, coverage of known cases."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mr2.report.bootstrap import bootstrap_confusion, resample_class_counts
from mr2.report.disparity import DisparityReport
from mr2.report.exceptions import ReportError
from mr2.report.tiers import TierSplit

MATRIX = np.array([[45, 5, 0, 0], [10, 38, 2, 0], [5, 5, 30, 10], [0, 10, 15, 25]])


def test_reproducible_with_a_seed() -> None:
    first = bootstrap_confusion(MATRIX, num_resamples=300, seed=7)
    second = bootstrap_confusion(MATRIX, num_resamples=300, seed=7)
    other = bootstrap_confusion(MATRIX, num_resamples=300, seed=8)
    assert first == second
    assert first["group_min"] != other["group_min"]


def test_estimates_are_the_report_values() -> None:
    report = DisparityReport(MATRIX)
    intervals = report.bootstrap(num_resamples=200)
    for name, value in report.summary().items():
        assert intervals[name].estimate == pytest.approx(value), name
        if not math.isnan(value):
            assert intervals[name].low <= intervals[name].high


def test_stratified_keeps_class_counts() -> None:
    correct, total = resample_class_counts([45, 38, 30, 25], [50, 50, 50, 50], 500, seed=0)
    assert (total == 50).all()
    assert (correct <= total).all()
    # Binomial(50, p): the mean over resamples is close to the observed count.
    np.testing.assert_allclose(correct.mean(axis=0), [45, 38, 30, 25], atol=0.6)


def test_unstratified_resamples_the_whole_test_set() -> None:
    correct, total = resample_class_counts(
        [45, 38, 30, 25], [50, 50, 50, 50], 2000, stratified=False, seed=0
    )
    assert (total.sum(axis=1) == 200).all()
    assert total.std(axis=0).min() > 0  # class sizes vary across resamples
    np.testing.assert_allclose(correct.mean(axis=0), [45, 38, 30, 25], atol=0.6)


def test_overall_standard_error_matches_binomial() -> None:
    # Overall accuracy of n samples: the bootstrap s.e. is sqrt(p (1 - p) / n).
    matrix = np.array([[700, 300], [200, 800]])
    intervals = bootstrap_confusion(
        matrix, metrics=["overall"], num_resamples=4000, stratified=False, seed=0
    )
    expected = math.sqrt(0.75 * 0.25 / 2000)
    assert intervals["overall"].std == pytest.approx(expected, rel=0.05)
    assert intervals["overall"].low == pytest.approx(0.75 - 1.96 * expected, abs=0.003)


def test_tiers_and_custom_statistic() -> None:
    tiers = TierSplit.from_accuracy([0.9, 0.8, 0.6, 0.4], 2)
    intervals = bootstrap_confusion(
        MATRIX,
        metrics=["tier:easy", "tier:hard"],
        statistics={"correct_class0": lambda c, t: c[:, 0]},
        tiers=tiers,
        num_resamples=100,
    )
    assert set(intervals) == {"tier:easy", "tier:hard", "correct_class0"}
    assert intervals["tier:easy"].estimate == pytest.approx((0.9 + 0.76) / 2)
    assert intervals["correct_class0"].estimate == 45


def test_unstratified_tolerates_a_rare_class() -> None:
    matrix = np.array([[50, 0, 0], [0, 49, 1], [0, 0, 1]])
    intervals = bootstrap_confusion(matrix, num_resamples=500, stratified=False, seed=0)
    assert intervals["group_min"].num_resamples == 500
    assert 0.0 <= intervals["group_min"].low <= intervals["group_min"].high <= 1.0


def test_errors() -> None:
    with pytest.raises(ReportError, match="unknown metric 'nope'"):
        bootstrap_confusion(MATRIX, metrics=["nope"])
    with pytest.raises(ReportError, match=r"confidence must be in \(0, 1\)"):
        bootstrap_confusion(MATRIX, confidence=1.0)
    with pytest.raises(ReportError, match="num_resamples must be a positive integer"):
        bootstrap_confusion(MATRIX, num_resamples=0)
    with pytest.raises(ReportError, match="must return one value per resample"):
        bootstrap_confusion(MATRIX, statistics={"bad": lambda c, t: c})


def test_thousand_classes_is_vectorised() -> None:
    rng = np.random.default_rng(0)
    total = np.full(1000, 50)
    matrix = np.diag(rng.binomial(50, rng.uniform(0.2, 1.0, 1000)))
    matrix[np.arange(1000), (np.arange(1000) + 1) % 1000] = total - np.diagonal(matrix)
    tiers = TierSplit.from_accuracy(np.diagonal(matrix) / 50, 3)
    for stratified in (True, False):
        intervals = bootstrap_confusion(
            matrix, tiers=tiers, num_resamples=200, stratified=stratified, seed=0
        )
        assert intervals["tier:hard"].low < intervals["tier:hard"].estimate < intervals["tier:hard"].high
