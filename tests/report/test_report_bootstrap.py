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


def loop_metrics(correct: list[int], total: list[int]) -> dict[str, float]:
    """float64 oracle of a few report metrics of one resample, one class at a time."""
    acc = [c / n for c, n in zip(correct, total) if n > 0]
    mean = sum(acc) / len(acc)
    worst = sorted(acc)
    return {
        "overall": sum(correct) / sum(total),
        "group_min": worst[0],
        "difference": worst[-1] - worst[0],
        "mean_class_accuracy": mean,
        "std": math.sqrt(sum((a - mean) ** 2 for a in acc) / len(acc)),
        "bottom_mean": worst[0],  # ceil(0.1 * 4) = 1 class
    }


@pytest.mark.parametrize("stratified", [True, False])
def test_intervals_match_a_loop_oracle(stratified: bool) -> None:
    """Same resampled counts (same seed), metrics recomputed resample by resample in float64."""
    names = ["overall", "group_min", "difference", "mean_class_accuracy", "std", "bottom_mean"]
    intervals = bootstrap_confusion(
        MATRIX, metrics=names, num_resamples=300, confidence=0.9, stratified=stratified, seed=3
    )
    correct, total = resample_class_counts(
        np.diagonal(MATRIX), MATRIX.sum(axis=1), 300, stratified=stratified, seed=np.random.default_rng(3)
    )
    draws = [loop_metrics(c.tolist(), t.tolist()) for c, t in zip(correct, total)]
    point = loop_metrics(np.diagonal(MATRIX).tolist(), MATRIX.sum(axis=1).tolist())
    for name in names:
        values = np.array([d[name] for d in draws])
        low, high = np.quantile(values, [0.05, 0.95])
        ci = intervals[name]
        assert ci.estimate == pytest.approx(point[name], abs=1e-12), name
        assert (ci.low, ci.high) == (pytest.approx(low, abs=1e-12), pytest.approx(high, abs=1e-12)), name
        assert ci.std == pytest.approx(values.std(ddof=1), rel=1e-9), name
        assert ci.num_resamples == 300


def test_estimates_are_the_report_values() -> None:
    report = DisparityReport(MATRIX)
    intervals = report.bootstrap(num_resamples=200)
    for name, value in report.summary().items():
        assert intervals[name].estimate == pytest.approx(value), name


def test_coverage_of_a_known_truth() -> None:
    """Test sets drawn from known per-class accuracies: the 90% intervals of the overall and the
    mean class accuracy contain the truth about 90% of the time (binomial noise over 300 draws)."""
    rng = np.random.default_rng(11)
    truth = np.array([0.9, 0.75, 0.6, 0.45])
    per_class = 150
    hits = {"overall": 0, "mean_class_accuracy": 0}
    draws = 300
    for _ in range(draws):
        correct = rng.binomial(per_class, truth)
        matrix = np.diag(correct)
        matrix[np.arange(4), (np.arange(4) + 1) % 4] = per_class - correct
        intervals = bootstrap_confusion(
            matrix, metrics=list(hits), num_resamples=400, confidence=0.9, seed=rng
        )
        for name in hits:
            hits[name] += intervals[name].low <= truth.mean() <= intervals[name].high
    for name, count in hits.items():
        # 90% of 300 is 270, with a binomial sd of about 5.2: [255, 285] is about +-3 sd.
        assert 255 <= count <= 285, (name, count)


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
