"""What tune prints says what it means: labelled ±, the criterion's column, the validation size and
its warning, ERM explained at first use, the verdict's advice and paste block."""

from __future__ import annotations

import re

import numpy as np
import pytest

from mr2.report.tiers import TierSplit
from mr2.tune.selection import ValidationFigures, choose, rule_text
from mr2.tune.text import (
    ERM_AT_FIRST_USE,
    SMALL_VALIDATION_WARNING,
    choice_table,
    choice_text,
    hard_tier_note,
    verdict_text,
)
from mr2.tune.verdict import OUTCOMES, SeedFigures, judge_figures

PASTE = "method:\n  name: mr2\n  options:\n    variant: paper\n"


def _runs(per_class: int, seed: int = 0, missing: bool = False) -> dict[str, list[ValidationFigures]]:
    rng = np.random.default_rng(seed)
    num_classes = 6
    y_true = np.repeat(np.arange(num_classes), per_class)
    base = np.linspace(0.5, 0.95, num_classes)
    runs = {}
    for label, shift in (("erm", 0.0), ("mr2-paper-c1", 0.1), ("mr2-logit_only-c1", -0.1)):
        runs[label] = []
        for s in ([0, 2] if missing and label == "mr2-logit_only-c1" else [0, 1, 2]):
            hit = rng.random(y_true.size) < np.clip(base + shift, 0, 1)[y_true]
            y_pred = np.where(hit, y_true, (y_true + 1) % num_classes)
            runs[label].append(ValidationFigures.from_predictions(f"{label}@{s}", s, y_true, y_pred, num_classes))
    return runs


def _check_plus_minus_labelled(text: str) -> int:
    """Every ± is labelled: in a table, its column's header says '± seed SE'; elsewhere the same
    line says SE or SD right after it. Returns how many ± were checked."""
    checked = 0
    header: list[str] = []
    for line in text.splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            if not header:
                header = cells
                continue
            if set("".join(cells)) <= set("-"):
                continue
            for cell, title in zip(cells, header):
                if "±" in cell:
                    assert "± seed SE" in title, (title, line)
                    checked += 1
            continue
        header = []
        for match in re.finditer("±", line):
            assert re.match(r"± ?(is the (seed SE|standard error)|SD|[0-9.]+ \(seed SE)", line[match.start():]), line
            checked += 1
    return checked


def test_every_plus_minus_says_what_it_is():
    choice = choose(_runs(40, missing=True), seeds=[0, 1, 2])
    assert _check_plus_minus_labelled(choice_text(choice)) == 1 + 6  # the legend, 3 candidates x 2 columns
    assert _check_plus_minus_labelled(rule_text("hard_tier")) == 1
    erm = {3: SeedFigures(0.70, 0.90), 4: SeedFigures(0.72, 0.91), 5: SeedFigures(0.71, 0.90)}
    new = {3: SeedFigures(0.74, 0.90), 4: SeedFigures(0.70, 0.91), 5: SeedFigures(0.73, 0.90)}
    assert _check_plus_minus_labelled(verdict_text(judge_figures(erm, new), PASTE)) == 2
    assert "(seed SE over 3 seeds)" in verdict_text(judge_figures(erm, new), PASTE)
    assert "± SD 3.06 over 3 seeds" in verdict_text(judge_figures(erm, new), PASTE)


@pytest.mark.parametrize(("criterion", "column"), [
    ("hard_tier", "validation hard-tier accuracy"),
    ("worst_class", "validation worst-class accuracy"),
    ("overall", "validation overall accuracy"),
])
def test_the_criterion_column_is_named(criterion, column):
    table = choice_table(choose(_runs(30), criterion))
    header = next(line for line in table.splitlines() if line.startswith("| candidate"))
    cells = [c.strip() for c in header.strip("|").split("|")]
    marked = [c for c in cells if "(criterion)" in c]
    assert marked == [f"{column} (criterion), mean ± seed SE"]
    assert f"The criterion is '{column}'." in table


@pytest.mark.parametrize(("per_class", "half", "warned"), [(98, 49, True), (100, 50, False), (20, 10, True)])
def test_the_validation_size_is_named_and_a_small_one_warned(per_class, half, warned):
    text = choice_text(choose(_runs(per_class)))
    assert f"Validation samples per class in each scoring half: min {half}, median {half}." in text
    warning = SMALL_VALIDATION_WARNING.format(median=half, min=half, limit=50)
    assert (warning in text) == warned
    if warned:
        assert "scores this noisy choose ERM most of the time" in text
    hard = ", ".join(str(k) for k in choose(_runs(per_class)).hard_classes)
    assert f"test hard tier (ranked on all of ERM's validation samples): {hard}." in text
    # The other criteria score on all of a class's validation samples.
    assert f"scored: min {per_class}, median {per_class}." in choice_text(choose(_runs(per_class), "overall"))


def test_the_size_is_unknown_without_per_sample_figures():
    runs = {label: [ValidationFigures(f"{label}@{s}", s, 0.8, (0.9, 0.8, 0.7)) for s in (0, 1)]
            for label in ("erm", "m")}
    text = choice_text(choose(runs))
    assert "Validation size per class: unknown" in text and "WARNING" not in text
    assert "ranked and scored on the same validation samples" in text


def _first_use_explained(text: str) -> None:
    first = text.index("ERM")
    assert text[first:].startswith(ERM_AT_FIRST_USE), text[first:first + 80]


def test_erm_is_explained_at_first_use():
    choice = choose(_runs(40))
    for text in (rule_text("hard_tier"), rule_text("overall"), choice_text(choice)):
        _first_use_explained(text)
    # In the table, the reference's label is tied to ERM before the table starts.
    table = choice_table(choice)
    assert table.index(f"erm = {ERM_AT_FIRST_USE}") < table.index("| candidate")
    erm = {3: SeedFigures(0.70, 0.90), 4: SeedFigures(0.72, 0.91)}
    for chosen in (None, {3: SeedFigures(0.8, 0.9), 4: SeedFigures(0.7, 0.9)}):
        _first_use_explained(verdict_text(judge_figures(erm, chosen), PASTE))


ERM = {3: SeedFigures(0.70, 0.90), 4: SeedFigures(0.72, 0.91), 5: SeedFigures(0.71, 0.90), 6: SeedFigures(0.69, 0.92)}
CHOSEN = {
    "confirmed": [(0.74, 0.90), (0.75, 0.91), (0.76, 0.91), (0.73, 0.91)],
    "supported": [(0.74, 0.90), (0.70, 0.91), (0.73, 0.90), (0.69, 0.92)],
    "supported, with a cost": [(0.74, 0.86), (0.75, 0.87), (0.76, 0.86), (0.73, 0.88)],
    "not confirmed": [(0.71, 0.90), (0.69, 0.91), (0.70, 0.90), (0.70, 0.92)],
    "contradicted": [(0.66, 0.90), (0.67, 0.91), (0.665, 0.90), (0.68, 0.92)],
}
ADVICE = {
    "confirmed": "Confirmed: m beats ERM on the test hard tier (p = ",
    "supported": "Supported, not settled: the direction held (",
    "supported, with a cost": "Supported, with a cost: the test hard-tier gain is significant (p = ",
    "not confirmed": "ERM is the safe default: keep plain cross-entropy training",
    "contradicted": "Do not use it; recommend ERM.",
}


@pytest.mark.parametrize("case", list(CHOSEN))
def test_the_verdict_text_advises_and_pastes_only_where_it_may(case):
    chosen = {seed: SeedFigures(*pair) for seed, pair in zip(ERM, CHOSEN[case])}
    verdict = judge_figures(ERM, chosen, hard_classes=[1, 4], chosen_label="m")
    assert verdict.outcome == case.split(",")[0]
    text = verdict_text(verdict, PASTE)
    assert text.splitlines()[0] == (
        f"Verdict on the confirmation (test split, fresh seeds 3, 4, 5, 6): {verdict.outcome.upper()}")
    assert ADVICE[case] in text
    assert "classes 1, 4, ranked on ERM's validation accuracies" in text
    pasted = "\n    method:\n      name: mr2\n      options:\n        variant: paper" in text
    assert pasted == (case != "not confirmed" and case != "contradicted")
    assert ("(with the caveat above):" in text) == case.startswith("supported")
    if case == "supported":
        assert f"{verdict.seeds_needed} confirmation seeds would give a one-sided paired t-test" in text


def test_nothing_to_confirm_prints_what_to_do():
    text = verdict_text(judge_figures(ERM, None), PASTE)
    assert text.splitlines()[0].endswith("NOTHING TO CONFIRM")
    assert "ERM was chosen on validation: there is nothing to confirm." in text
    assert "variant: paper" not in text
    assert set(OUTCOMES) == {"confirmed", "supported", "not confirmed", "contradicted", "nothing to confirm"}


def test_the_hard_tier_note_names_few_classes_counts_many_and_is_silent_when_the_tiers_agree():
    erm = {3: SeedFigures(0.70, 0.9), 4: SeedFigures(0.72, 0.9)}
    verdict = judge_figures(erm, erm, chosen_label="m", hard_classes=list(range(32, -1, -1)))
    ascending = np.arange(100) / 100  # classes 0-32 lowest: the hard tier (thirds of 100: 34, 33, 33)
    assert TierSplit.from_accuracy(ascending, 3).members(2).tolist() == list(range(33))
    assert hard_tier_note(verdict, TierSplit.from_accuracy(ascending, 3)) == ""  # the same classes
    assert hard_tier_note(None, TierSplit.from_accuracy(ascending, 3)) == ""  # no verdict: nothing to compare
    many = hard_tier_note(verdict, TierSplit.from_accuracy(np.roll(ascending, 3), 3))  # hard: classes 3-35
    assert many.startswith("Note: the table's hard tier (33 classes: ranked on the confirmation's own ERM runs) "
                           "is not the verdict's (33 classes: ranked on ERM's selection runs")
    assert "they share 30 of 33 classes" in many
    few = hard_tier_note(judge_figures(erm, erm, chosen_label="m", hard_classes=[7, 2]),
                         TierSplit.from_accuracy([0.1 if k in (2, 9) else 0.9 - k / 100 for k in range(6 + 4)], 5))
    assert "(classes 2, 9: ranked on the confirmation's" in few and "(classes 2, 7: ranked on ERM's" in few
    assert "they share 1 of 2 classes" in few
