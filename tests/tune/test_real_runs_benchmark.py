"""benchmarks/tune_real_runs.py: tunes resampled from pools of runs through the shipped Plan.

Small synthetic pools (K = 10, 10 validation and 1,000 test images per class, binomial counts around
per-class accuracies with a run-level class noise): figures equal those the engine way of tune builds
from predictions; candidates equal to ERM are adopted about as often as the 5 % allows (a design
with a broken level is not); a candidate that dominates on every seed is adopted; no tune sees a
truth seed; the injected lift has the stated size.
"""

from __future__ import annotations

import csv
import json
import math
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from helpers import load_script
from mr2.tune.design import DEFAULT_DESIGN
from mr2.tune.selection import ValidationFigures, split_halves
from mr2.tune.verdict import seed_figures

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "tune_real_runs.py"
K = 10
BASE = np.linspace(0.95, 0.55, K)  # ERM's per-class accuracy; the hard third: classes 7-9


@pytest.fixture(scope="module")
def bench():
    name = "tune_real_runs_under_test"
    try:
        yield load_script(SCRIPT, name)
    finally:
        sys.modules.pop(name, None)


def synthetic_pool(bench, rng: np.random.Generator, lifts: dict[str, float], seeds: int = 23,
                   val_per_half: int = 5, test_per_class: int = 1000, tau: float = 0.03):
    """ERM and the labels of ``lifts``; a run's class accuracy is ``BASE + lift on the hard third +
    N(0, tau)``, its correct counts binomial on the validation halves and the test set."""
    labels = ["erm", *lifts]
    hard = np.zeros(K)
    hard[7:] = 1.0
    val_count = np.full((2, K), val_per_half, dtype=np.int64)
    test_count = np.full(K, test_per_class, dtype=np.int64)
    val = np.zeros((len(labels), seeds, 2, K), dtype=np.int64)
    test = np.zeros((len(labels), seeds, K), dtype=np.int64)
    for i, label in enumerate(labels):
        lift = 0.0 if label == "erm" else lifts[label]
        for s in range(seeds):
            p = np.clip(BASE + lift * hard + tau * rng.standard_normal(K), 0.01, 0.99)
            val[i, s] = rng.binomial(val_count, p[None, :])
            test[i, s] = rng.binomial(test_count, p)
    return bench.Pool("synthetic", labels, list(range(100, 100 + seeds)), val, val_count, test, test_count)


def test_figures_equal_the_engine_ways(bench):
    """Figures from the stored counts equal those of the real predictions (from_predictions and
    seed_figures on them), every field, for several runs of one layout."""
    rng = np.random.default_rng(0)
    y_val = rng.permutation(np.repeat(np.arange(K), rng.integers(3, 12, K)))  # uneven, shuffled classes
    y_test = rng.permutation(np.repeat(np.arange(K), rng.integers(40, 60, K)))
    halves = split_halves(y_val).astype(np.int64)
    index = halves * K + y_val
    count = np.bincount(index, minlength=2 * K).reshape(2, K)
    test_count = np.bincount(y_test, minlength=K)
    layout = bench.Layout(count, test_count)
    for run in range(5):
        p_val = np.where(rng.random(y_val.size) < 0.3 + 0.1 * run, y_val, rng.integers(0, K, y_val.size))
        p_test = np.where(rng.random(y_test.size) < 0.6, y_test, rng.integers(0, K, y_test.size))
        expected = ValidationFigures.from_predictions("a@3", 3, y_val, p_val, K)
        correct = np.bincount(index, weights=(y_val == p_val), minlength=2 * K).reshape(2, K).astype(np.int64)
        assert layout.validation("a", 3, correct, expected.labels_digest) == expected
        hard = [1, 4, 7]
        test_correct = np.bincount(y_test, weights=(y_test == p_test), minlength=K).astype(np.int64)
        assert layout.test(test_correct, hard) == seed_figures(y_test, p_test, hard, K)


def test_truth_against_a_loop(bench):
    pool = synthetic_pool(bench, np.random.default_rng(1), {"a": 0.02, "b": -0.01})
    seeds = pool.seeds[-5:]
    truth = bench.measure_truth(pool, seeds)
    assert truth.hard == [7, 8, 9]
    for i, label in enumerate(pool.labels):
        diffs = []
        for s in seeds:
            j = pool.seeds.index(s)
            mine = sum(pool.test_correct[i, j, k] / 1000 for k in (7, 8, 9)) / 3
            erm = sum(pool.test_correct[0, j, k] / 1000 for k in (7, 8, 9)) / 3
            diffs.append(100 * (mine - erm))
        assert truth.hard_change[label] == pytest.approx(sum(diffs) / 5, abs=1e-9)


def test_equal_candidates_adopted_near_the_null_and_a_broken_level_is_caught(bench):
    """Six candidates equal to ERM, 3 pools x 100 tunes: the shipped design adopts at most 5 % plus
    three binomial SEs; the same design with alpha = 0.9 split equally over its looks and no futility
    stop adopts far more (the check can fail)."""
    lifts = {f"c{i}": 0.0 for i in range(6)}
    sizes = bench.pool_sizes("default", DEFAULT_DESIGN)
    adopted = broken = tunes = broken_tunes = 0
    for p in range(3):
        pool = synthetic_pool(bench, np.random.default_rng([2, p]), lifts)
        truth = bench.measure_truth(pool, pool.seeds[-4:])
        ok = bench.run_scenario(pool, truth, DEFAULT_DESIGN, sizes, "as-is", 100, np.random.default_rng([3, p]))
        broken_design = replace(DEFAULT_DESIGN, alpha=0.9, futility=None, spending="bonferroni")
        bad = bench.run_scenario(pool, truth, broken_design, sizes, "as-is", 40, np.random.default_rng([3, p]))
        adopted += ok.adopt
        tunes += ok.tunes
        broken += bad.adopt
        broken_tunes += bad.tunes
    bound = 0.05 + 3 * math.sqrt(0.05 * 0.95 / tunes)
    assert adopted / tunes <= bound
    assert broken / broken_tunes > 2 * bound


def test_a_dominating_candidate_is_adopted(bench):
    """c2 is +10 points on the hard classes on every seed (50 validation images per class): adopted in
    (almost) every tune, as itself."""
    pool = synthetic_pool(bench, np.random.default_rng(4), {"c0": 0.0, "c1": 0.0, "c2": 0.10, "c3": 0.0},
                          val_per_half=25)
    truth = bench.measure_truth(pool, pool.seeds[-4:])
    assert truth.hard_change["c2"] > 8
    summary = bench.run_scenario(pool, truth, DEFAULT_DESIGN, bench.pool_sizes("default", DEFAULT_DESIGN),
                                 "as-is", 40, np.random.default_rng(5))
    assert summary.adopt >= 38
    assert summary.adopted["c2"] == summary.adopt
    assert summary.useful == summary.adopt and summary.useless == 0
    assert summary.gain / summary.tunes == pytest.approx(truth.hard_change["c2"] * summary.adopt / 40)


def test_no_tune_sees_a_truth_seed(bench, monkeypatch):
    pool = synthetic_pool(bench, np.random.default_rng(6), {"c0": 0.0, "c1": 0.01})
    truth = bench.measure_truth(pool, pool.seeds[-6:])
    seen: list[tuple[list[int], list[int]]] = []
    original = bench.run_tune

    def spy(pool_, design, selection, confirmation, *rest):
        seen.append((list(selection), list(confirmation)))
        return original(pool_, design, selection, confirmation, *rest)

    monkeypatch.setattr(bench, "run_tune", spy)
    bench.run_scenario(pool, truth, DEFAULT_DESIGN, (3, 9), "as-is", 30, np.random.default_rng(7))
    assert len(seen) == 30
    for selection, confirmation in seen:
        assert len(selection) == 3 and len(confirmation) == 9
        assert not set(selection) & set(confirmation)
        assert not (set(selection) | set(confirmation)) & set(truth.seeds)
    assert len({tuple(s) for s, _ in seen}) > 5  # the draws vary
    seen.clear()  # in-sample truth (a first look): the tunes may use every seed
    bench.run_scenario(pool, truth, DEFAULT_DESIGN, (3, 9), "as-is", 10, np.random.default_rng(7), held_out=False)
    assert any((set(s) | set(c)) & set(truth.seeds) for s, c in seen)


def test_too_few_seeds_is_refused(bench):
    pool = synthetic_pool(bench, np.random.default_rng(8), {"c0": 0.0}, seeds=14)
    truth = bench.measure_truth(pool, pool.seeds[-4:])
    with pytest.raises(bench.PoolError, match="10 pool seeds outside the truth's, a tune needs 3 \\+ 9"):
        bench.run_scenario(pool, truth, DEFAULT_DESIGN, (3, 9), "as-is", 1, np.random.default_rng(0))


def test_shift_lifts_the_hard_classes_by_delta(bench):
    """Turning each wrong prediction right with probability delta / (1 - a_k) lifts class k by delta
    on average (float64 oracle over many draws); other classes are untouched."""
    rng = np.random.default_rng(9)
    count = np.full(K, 1000)
    correct = np.rint(BASE * 1000).astype(np.int64)
    probability = 0.02 / (1 - BASE)
    draws = np.stack([bench.shifted(correct, count, [7, 8, 9], probability, rng) for _ in range(4000)])
    lift = (draws - correct).mean(0) / 1000
    assert np.all(lift[:7] == 0)
    np.testing.assert_allclose(lift[7:], 0.02, atol=0.0015)


def test_load_pool_keeps_complete_seeds(bench, tmp_path):
    folder = tmp_path / "cell"
    folder.mkdir()
    meta = {"val_half_count": [[1, 1], [1, 0]], "test_count": [3, 2], "val_labels_digest": "x",
            "candidates": {"erm": {}, "a": {}}}
    (folder / "meta.json").write_text(json.dumps(meta))
    with (folder / "runs.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["label", "seed", "val_half_correct", "test_correct", "wall_s", "cpu_s", "commit"])
        writer.writerow(["erm", 100, "[[1,0],[1,0]]", "[2,1]", 1, 1, "x"])
        writer.writerow(["a", 100, "[[0,1],[1,0]]", "[3,0]", 1, 1, "x"])
        writer.writerow(["erm", 101, "[[1,1],[0,0]]", "[1,1]", 1, 1, "x"])  # a has no run on 101
    pool = bench.load_pool("cell", tmp_path)
    assert pool.labels == ["erm", "a"] and pool.seeds == [100]
    assert pool.val_correct.tolist() == [[[[1, 0], [1, 0]]], [[[0, 1], [1, 0]]]]
    assert pool.test_correct.tolist() == [[[2, 1]], [[3, 0]]]
    with pytest.raises(bench.PoolError, match="no pool for 'other'"):
        bench.load_pool("other", tmp_path)
