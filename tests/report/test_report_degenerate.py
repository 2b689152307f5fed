"""Issue 45 item 3: a run that predicts one class for every sample, or sits at chance, is named in the
printed summary, report.md and report.html, kept in every figure, and a mean that includes it is
marked. The rule is checked against a slow oracle built from the individual predictions."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from mr2.cli.main import main
from mr2.report.degenerate import CHANCE_LEVEL, DEGENERATE_MARK, flag_run

K = 10
PER_CLASS = 100
NAMES = ["T-shirt", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Boot"]


def _samples(confusion: np.ndarray) -> tuple[list[int], list[int]]:
    """The (true, predicted) label of every sample a confusion matrix counts."""
    y_true, y_pred = [], []
    for i in range(confusion.shape[0]):
        for j in range(confusion.shape[1]):
            y_true += [i] * int(confusion[i, j])
            y_pred += [j] * int(confusion[i, j])
    return y_true, y_pred


def _oracle(confusion: np.ndarray) -> tuple[str | None, float, float]:
    """(kind, chance, p-value) by the obvious slow route: chance is the accuracy of pairing every
    prediction with every true label (predictions independent of the input), the p-value the exact
    binomial upper tail summed term by term."""
    y_true, y_pred = _samples(confusion)
    n = len(y_true)
    chance = sum(1 for t in y_true for p in y_pred if t == p) / (n * n)
    correct = sum(1 for t, p in zip(y_true, y_pred, strict=True) if t == p)
    pvalue = math.fsum(math.comb(n, k) * chance**k * (1 - chance) ** (n - k) for k in range(correct, n + 1))
    if len(set(y_pred)) == 1:
        return "one_class", chance, pvalue
    return ("at_chance" if pvalue >= CHANCE_LEVEL else None), chance, pvalue


def _confusion(rng: np.random.Generator, accuracy: float, num_classes: int, counts: np.ndarray) -> np.ndarray:
    matrix = np.zeros((num_classes, num_classes), dtype=np.int64)
    for k in range(num_classes):
        correct = rng.binomial(counts[k], accuracy)
        matrix[k, k] = correct
        np.add.at(matrix[k], rng.integers(0, num_classes, counts[k] - correct), 1)
    return matrix


@pytest.mark.parametrize("seed", range(12))
def test_the_flag_follows_the_stated_rule(seed: int) -> None:
    rng = np.random.default_rng(seed)
    num_classes = int(rng.integers(2, 7))
    counts = rng.integers(3, 40, num_classes)  # imbalanced: chance is not 1/K
    accuracy = float(rng.choice([0.0, 0.2, 0.4, 0.7, 0.95]))
    confusion = _confusion(rng, accuracy, num_classes, counts)
    if seed % 4 == 0:  # every sample predicted as one class
        confusion = np.zeros_like(confusion)
        confusion[:, seed % num_classes] = counts
    kind, chance, pvalue = _oracle(confusion)
    flag = flag_run(confusion)
    assert (flag.kind if flag is not None else None) == kind
    if flag is not None:
        assert flag.chance == pytest.approx(chance, rel=1e-12)
        assert flag.pvalue == pytest.approx(pvalue, rel=1e-9, abs=1e-300)
        assert flag.accuracy == np.trace(confusion) / confusion.sum()


def test_chance_is_one_over_k_on_a_balanced_split_and_the_issues_run_is_flagged() -> None:
    rng = np.random.default_rng(1)
    balanced = np.full(K, PER_CLASS)
    # Predictions that ignore the input, with any class frequencies: chance is 1/K.
    confusion = np.stack([rng.multinomial(PER_CLASS, rng.dirichlet(np.ones(K))) for _ in range(K)])
    flag = flag_run(confusion)
    assert flag is not None and flag.kind == "at_chance" and flag.chance == pytest.approx(1 / K, rel=1e-12)
    # The issue's run: 10.00 % by predicting one class.
    one = np.zeros((K, K), dtype=np.int64)
    one[:, 3] = balanced
    flag = flag_run(one, NAMES)
    assert flag is not None and flag.reason() == "predicts class 3 (Dress) for every sample (accuracy 10.00%)"
    # One point above chance on 10,000 samples is beyond noise (p < 0.001): not flagged.
    above = np.zeros((K, K), dtype=np.int64)
    for k in range(K):
        above[k, k] = 110
        above[k, np.arange(K) != k] = rng.multinomial(890, np.full(K - 1, 1 / (K - 1)))
    assert above.sum() == 10_000 and np.trace(above) / above.sum() == 0.11
    assert flag_run(above) is None


def _write_runs(make_run: Callable[..., Path], root: Path) -> tuple[list[Path], dict[str, np.ndarray]]:
    """erm, mr2 and jtt x 3 seeds on a balanced 10-class split; mr2's seed 1 predicts class 0
    for every sample, jtt's seed 2 ignores its input (random predictions)."""
    rng = np.random.default_rng(0)
    counts = np.full(K, PER_CLASS)
    paths, confusions = [], {}
    for method in ("erm", "mr2", "jtt"):
        for seed in range(3):
            confusion = _confusion(rng, 0.7, K, counts)
            if (method, seed) == ("mr2", 1):
                confusion = np.zeros((K, K), dtype=np.int64)
                confusion[:, 0] = counts
            if (method, seed) == ("jtt", 2):
                confusion = np.stack([rng.multinomial(PER_CLASS, np.full(K, 1 / K)) for _ in range(K)])
            confusions[f"{method}-seed{seed}"] = confusion
            paths.append(make_run(root / f"{method}-{seed}", method=method, seed=seed, confusion=confusion,
                                  class_names=NAMES))
    return paths, confusions


def test_mr2_report_names_degenerate_runs_and_keeps_them(
    tmp_path: Path, make_run: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    paths, confusions = _write_runs(make_run, tmp_path / "runs")
    out = tmp_path / "out"
    assert main(["report", *map(str, paths), "--out", str(out), "--bootstrap", "0", "--no-plots"]) == 0
    printed = capsys.readouterr().out
    markdown = (out / "report.md").read_text()
    page = (out / "report.html").read_text()
    report = json.loads((out / "report.json").read_text())

    one_class = "mr2-seed1 predicts class 0 (T-shirt) for every sample (accuracy 10.00%)"
    assert f"{DEGENERATE_MARK} Degenerate runs" in printed and one_class in printed
    assert "jtt-seed2 at chance: accuracy " in printed and "erm-seed" not in printed.split("Degenerate runs")[1]
    # The printed summary and report.md mark every table row of a method whose mean includes one.
    for text in (printed, markdown):
        assert "| erm | 3 |" in text
        assert text.count(f"| mr2 {DEGENERATE_MARK} |") == 3  # summary, difference, sign test
        assert text.count(f"| jtt {DEGENERATE_MARK} |") == 3
        assert "| erm (!)" not in text
    assert "mr2-seed1 predicts class 0 \\(T-shirt\\) for every sample" not in markdown  # no stray escapes
    assert one_class in markdown
    assert f"| mr2-seed1 {DEGENERATE_MARK} | mr2 | 1 |" in markdown and "| degenerate |" in markdown
    assert one_class in page and f"mr2 {DEGENERATE_MARK}" in page
    # Kept: the mean over seeds includes the flagged run.
    accuracy = {name: np.trace(c) / c.sum() for name, c in confusions.items()}
    expected = np.mean([accuracy[f"mr2-seed{s}"] for s in range(3)])
    assert report["methods"]["mr2"]["mean"]["overall"] == pytest.approx(expected, abs=1e-15)
    assert len(report["methods"]["mr2"]["values"]["overall"]) == 3
    assert report["methods"]["mr2"]["flagged_runs"] == ["mr2-seed1"]
    assert report["methods"]["erm"]["flagged_runs"] == []
    assert report["runs"]["mr2-seed1"]["flag"]["kind"] == "one_class"
    assert report["runs"]["jtt-seed2"]["flag"]["kind"] == "at_chance"
    assert report["runs"]["erm-seed0"]["flag"] is None


def test_a_report_without_degenerate_runs_says_nothing_of_them(
    comparison_runs: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert main(["report", *map(str, comparison_runs), "--out", str(out), "--bootstrap", "0", "--no-plots"]) == 0
    printed = capsys.readouterr().out
    assert DEGENERATE_MARK not in printed and DEGENERATE_MARK not in (out / "report.md").read_text()
    assert "| run | method | seed | directory |" in (out / "report.md").read_text()
