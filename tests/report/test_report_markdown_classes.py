"""report.md names the classes: the per-class table, the worst classes in the summary, the heading of a
predictions report, and tests that need seeds said once."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from mr2.report.predictions import load_predictions
from mr2.report.run_dir import load_runs
from mr2.report.tables import format_percent
from mr2.report.writer import write_report

NAMES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
         "Ankle boot"]


def _predictions(tmp_path: Path) -> tuple[list[str], dict[str, np.ndarray], np.ndarray]:
    """Two predictions files of a 10-class test set with 20 samples per class, known accuracies."""
    rng = np.random.default_rng(3)
    y_true = np.repeat(np.arange(10), 20)
    files, predictions = [], {}
    for label, correct_per_class in (("logreg", [19, 20, 12, 15, 11, 20, 7, 18, 20, 19]),
                                     ("tree", [17, 20, 14, 13, 12, 19, 9, 18, 19, 20])):
        y_pred = y_true.copy()
        for k, correct in enumerate(correct_per_class):
            wrong = np.flatnonzero(y_true == k)[correct:]
            y_pred[wrong] = (k + 1 + rng.integers(0, 9, wrong.size)) % 10
        path = tmp_path / f"{label}.npz"
        np.savez(path, y_true=y_true, y_pred=y_pred, class_names=np.array(NAMES))
        files.append(str(path))
        predictions[label] = y_pred
    return files, predictions, y_true


def _row_of(markdown: str, name: str) -> str:
    # None of these names holds a character markdown escapes.
    rows = [line for line in markdown.splitlines() if line.startswith("|") and f"| {name} |" in line]
    assert len(rows) == 1, (name, rows)
    return rows[0]


def test_report_md_names_every_class_with_its_accuracy(tmp_path: Path) -> None:
    files, predictions, y_true = _predictions(tmp_path)
    output = write_report(load_predictions(files), tmp_path / "out", bootstrap_resamples=0, plots=False)
    markdown = (tmp_path / "out" / "report.md").read_text()
    assert markdown == output.markdown
    assert "## Per-class accuracy" in markdown
    for k, name in enumerate(NAMES):
        row = _row_of(markdown, name)
        cells = [c.strip() for c in row.strip("|").split("|")]
        accuracy = {label: float((y_pred[y_true == k] == k).mean()) for label, y_pred in predictions.items()}
        # Every method's accuracy of the class, and the change against the reference, in this row.
        assert format_percent(accuracy["logreg"]) in cells, (name, cells)
        assert format_percent(accuracy["tree"]) in cells, (name, cells)
        assert format_percent(accuracy["tree"] - accuracy["logreg"], signed=True) in cells, (name, cells)
        assert cells[1] == name and cells[0] == str(k)


def test_per_class_rows_run_from_the_hardest_class_and_name_the_tier(tmp_path: Path) -> None:
    files, predictions, y_true = _predictions(tmp_path)
    comparison = write_report(load_predictions(files), tmp_path / "out", bootstrap_resamples=0,
                              plots=False).comparison
    markdown = (tmp_path / "out" / "report.md").read_text()
    section = markdown.split("## Per-class accuracy", 1)[1]
    rows = [line for line in section.splitlines() if re.match(r"\| \d+ \|", line)]
    assert len(rows) == 10
    ids = [int(row.split("|")[1]) for row in rows]
    reference = np.array([(predictions["logreg"][y_true == k] == k).mean() for k in range(10)])
    # Hardest first: the tiers' ranking (accuracy descending, ties by class id ascending) reversed, so
    # the rows run through the hard tier, then medium, then easy, even across ties (logreg has three
    # classes at 100% and two at 95%).
    assert ids == sorted(range(10), key=lambda k: (reference[k], -k))
    tiers = comparison.tiers
    tier_of = {k: tiers.names[tiers.assignment[k]] for k in range(10)}
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[3] == tier_of[int(cells[0])]
    assert [tiers.assignment[k] for k in ids] == sorted((tiers.assignment[k] for k in ids), reverse=True)


def test_summary_names_the_worst_classes(tmp_path: Path) -> None:
    files, _, _ = _predictions(tmp_path)
    write_report(load_predictions(files), tmp_path / "out", bootstrap_resamples=0, plots=False)
    markdown = (tmp_path / "out" / "report.md").read_text()
    summary = markdown.split("## Comparison", 1)[0]
    lines = [line for line in summary.splitlines() if line.startswith("Worst classes")]
    assert len(lines) == 1
    # logreg: Shirt 35%, Coat 55%, Pullover 60%; tree: Shirt 45%, Coat 60%, Dress 65%.
    assert lines[0] == ("Worst classes (mean accuracy over seeds, %): logreg: Shirt 35.00, Coat 55.00, "
                        "Pullover 60.00; tree: Shirt 45.00, Coat 60.00, Dress 65.00.")


def test_heading_of_a_predictions_report_names_the_files(tmp_path: Path) -> None:
    files, _, _ = _predictions(tmp_path)
    write_report(load_predictions(files), tmp_path / "out", bootstrap_resamples=0, plots=False, html=True)
    markdown = (tmp_path / "out" / "report.md").read_text()
    assert "unknown data set" not in markdown
    assert "2 runs on predictions files: logreg.npz, tree.npz (10 classes, test split, 200 samples)." in markdown
    page = (tmp_path / "out" / "report.html").read_text()
    assert "unknown data set" not in page and "predictions files: logreg.npz, tree.npz" in page


def test_single_run_tests_say_once_that_they_need_seeds(tmp_path: Path) -> None:
    files, _, _ = _predictions(tmp_path)
    write_report(load_predictions(files), tmp_path / "out", bootstrap_resamples=0, plots=False, html=True)
    markdown = (tmp_path / "out" / "report.md").read_text()
    assert "p=n/a" not in markdown
    assert markdown.count("needs at least 2 seeds") == 1
    page = (tmp_path / "out" / "report.html").read_text()
    assert "p=n/a" not in page and page.count("needs at least 2 seeds") == 1


def test_runs_with_seeds_keep_their_p_values(comparison_runs: list[Path], tmp_path: Path) -> None:
    write_report(load_runs(comparison_runs), tmp_path / "out", bootstrap_resamples=0, plots=False)
    markdown = (tmp_path / "out" / "report.md").read_text()
    assert "(p=" in markdown and "needs at least 2 seeds" not in markdown
    assert "## Per-class accuracy" in markdown and "| class8 |" in markdown


@pytest.mark.parametrize("tier_source", ["test", "validation"])
def test_tier_note_does_not_advise_what_was_done(tier_source: str, comparison_runs: list[Path],
                                                 tmp_path: Path) -> None:
    runs = load_runs(comparison_runs)
    if tier_source == "validation":
        for run in runs:
            run.validation_confusion = run.confusion.copy()
    write_report(runs, tmp_path / "out", bootstrap_resamples=0, plots=False, tier_source=tier_source)
    markdown = (tmp_path / "out" / "report.md").read_text()
    assert (f"({tier_source} split" in markdown)
    advice = "`--tier-source validation` ranks on the validation split instead"
    assert (advice in markdown) == (tier_source == "test")
