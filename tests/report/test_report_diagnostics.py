"""Diagnostics: Spearman correlation, per-class statistics, evolution, logit margins."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import stats

from mr2.report.diagnostics import ClassDiagnostics, training_evolution
from mr2.report.exceptions import ReportError
from mr2.report.margins import logit_margins, per_class_margin_summary
from mr2.report.run_dir import load_run
from mr2.report.tiers import TierSplit


def test_class_diagnostics_from_run(comparison_runs: list[Path]) -> None:
    run = load_run(comparison_runs[3])  # mr2, seed 0
    item = ClassDiagnostics.from_run(run)
    assert item.available() == [
        "temperatures",
        "spread",
        "mean_sq_norm",
        "second_moment",
        "margin_mean",
        "margin_median",
    ]
    correlations = item.correlations()
    error = 1.0 - np.diagonal(run.confusion) / run.support
    assert run.class_statistics is not None
    expected = stats.spearmanr(run.class_statistics["spread"], error).statistic
    assert correlations["spread"].rho == pytest.approx(expected)
    # The toy data: later classes are harder and more spread out, and have smaller margins.
    assert correlations["spread"].rho > 0.5
    assert correlations["margin_mean"].rho < -0.5
    rows = list(csv.DictReader(io.StringIO(item.to_csv())))
    assert len(rows) == 9 and float(rows[0]["accuracy"]) == pytest.approx(1 - error[0])
    assert rows[0]["class_name"] == "class0"


def test_erm_run_has_no_statistics(comparison_runs: list[Path]) -> None:
    item = ClassDiagnostics.from_run(load_run(comparison_runs[0]))
    assert item.available() == [] and item.correlations() == {}


def test_training_evolution(comparison_runs: list[Path]) -> None:
    run = load_run(comparison_runs[3])
    accuracy = np.diagonal(run.confusion) / run.support
    tiers = TierSplit.from_accuracy(accuracy, 3)
    evolution = training_evolution(run.metrics, accuracy, tiers)
    assert evolution is not None
    assert evolution.epochs.tolist() == [0, 1, 2, 3]
    assert evolution.series["spread"].shape == (4, 9)
    # The spread is scaled uniformly each epoch, so its rank correlation stays the same.
    rho = evolution.spearman_vs_final_error["spread"]
    np.testing.assert_allclose(rho, rho[0])
    np.testing.assert_allclose(
        evolution.tier_means["spread"][2], tiers.accuracy(evolution.series["spread"][2])
    )
    assert evolution.scalars["train_loss"].tolist() == pytest.approx([2.0, 1.0, 2 / 3, 0.5])
    assert training_evolution([], accuracy) is None
    assert training_evolution([{"epoch": 0, "train_loss": 1.0}], accuracy) is None


def test_logit_margins_match_loop() -> None:
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(50, 6, generator=generator, dtype=torch.float64)
    target = torch.randint(0, 6, (50,), generator=generator)
    margins = logit_margins(logits, target)
    for n in range(50):
        others = [float(logits[n, j]) for j in range(6) if j != int(target[n])]
        assert float(margins[n]) == pytest.approx(float(logits[n, target[n]]) - max(others))


def test_per_class_margin_summary_matches_numpy() -> None:
    generator = torch.Generator().manual_seed(1)
    margins = torch.randn(101, generator=generator)
    target = torch.randint(0, 7, (101,), generator=generator)
    target[target == 4] = 5  # class 4 empty
    mean, median = per_class_margin_summary(margins, target, 8)  # class 7 empty too
    for k in range(8):
        values = margins[target == k].double().numpy()
        if values.size == 0:
            assert math.isnan(mean[k]) and math.isnan(median[k])
        else:
            assert float(mean[k]) == pytest.approx(values.mean())
            assert float(median[k]) == pytest.approx(np.median(values))


def test_margin_input_errors() -> None:
    with pytest.raises(ReportError, match="logits must have shape"):
        logit_margins(torch.zeros(3, 1), torch.zeros(3, dtype=torch.long))
    with pytest.raises(ReportError, match="margins and target must both have shape"):
        per_class_margin_summary(torch.zeros(3), torch.zeros(2, dtype=torch.long), 2)
