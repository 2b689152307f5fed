"""The validation-only rule of ``mr2 tune`` against a slow, obvious float64 oracle."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mr2.tune.candidates import PENDING_VARIANTS, candidates
from mr2.tune.selection import (
    TOO_FEW_REFERENCE_SEEDS,
    TuneSelectionError,
    ValidationFigures,
    choose,
)


def _figures(label: str, seed: int, per_class: list[float]) -> ValidationFigures:
    return ValidationFigures(f"{label}__seed={seed}", seed, float(np.mean(per_class)), tuple(per_class))


def _oracle(runs: dict[str, list[ValidationFigures]], criterion: str) -> tuple[str, float, float]:
    """The rule written out with loops: (recommended, margin, threshold)."""

    def mean(values: list[float]) -> float:
        return sum(values) / len(values)

    def se(values: list[float]) -> float:
        m = mean(values)
        return math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1)) / math.sqrt(len(values))

    erm = runs["erm"]
    num_classes = len(erm[0].per_class_accuracy)
    average = [mean([f.per_class_accuracy[k] for f in erm]) for k in range(num_classes)]
    # Rank descending, ties by class id; the last third (np.array_split sizes) is the hard tier.
    order = sorted(range(num_classes), key=lambda k: (-average[k], k))
    sizes = [len(part) for part in np.array_split(np.arange(num_classes), 3)]
    hard = order[num_classes - sizes[-1]:]

    def score(f: ValidationFigures) -> float:
        if criterion == "overall":
            return f.overall_accuracy
        if criterion == "worst_class":
            return min(f.per_class_accuracy)
        return mean([f.per_class_accuracy[k] for k in hard])

    erm_scores = [score(f) for f in erm]
    erm_overall = [f.overall_accuracy for f in erm]
    best, best_mean = None, -math.inf
    for label, group in runs.items():
        if label == "erm":
            continue
        if mean([f.overall_accuracy for f in group]) < mean(erm_overall) - se(erm_overall):
            continue
        value = mean([score(f) for f in group])
        if value > best_mean:
            best, best_mean = label, value
    threshold = se(erm_scores)
    if best is None:
        return "erm", math.nan, threshold
    margin = best_mean - mean(erm_scores)
    return (best if margin > threshold else "erm"), margin, threshold


@pytest.mark.parametrize("criterion", ["hard_tier", "worst_class", "overall"])
@pytest.mark.parametrize("trial", range(12))
def test_the_rule_matches_the_oracle(criterion, trial):
    rng = np.random.default_rng(trial)
    num_classes = int(rng.integers(3, 11))
    base = rng.uniform(0.3, 0.95, size=num_classes)
    runs: dict[str, list[ValidationFigures]] = {}
    for label in ("erm", "a", "b", "c"):
        shift = rng.normal(0, 0.04, size=num_classes)
        runs[label] = [
            _figures(label, seed, list(np.clip(base + shift + rng.normal(0, 0.02, size=num_classes), 0, 1)))
            for seed in range(int(rng.integers(2, 5)))
        ]
    choice = choose(runs, criterion)
    recommended, margin, threshold = _oracle(runs, criterion)
    assert choice.recommended == recommended
    assert choice.threshold == pytest.approx(threshold, rel=1e-12, abs=1e-15)
    if math.isnan(margin):
        assert choice.best is None
    else:
        assert choice.margin == pytest.approx(margin, rel=1e-12, abs=1e-15)


def test_erm_is_the_answer_when_nothing_beats_it_by_its_standard_error():
    erm = [_figures("erm", 0, [0.9, 0.8, 0.50]), _figures("erm", 1, [0.9, 0.8, 0.54])]  # hard SE 0.02
    close = [_figures("m", 0, [0.9, 0.8, 0.53]), _figures("m", 1, [0.9, 0.8, 0.54])]  # +0.015 only
    choice = choose({"erm": erm, "m": close})
    assert choice.recommended == "erm" and choice.best == "m" and choice.is_reference
    assert choice.explanation.startswith(
        "No candidate beats ERM's validation hard-tier accuracy by more than its seed standard error"
    )
    assert "the recommendation is ERM, plain cross-entropy." in choice.explanation
    better = [_figures("m", 0, [0.9, 0.8, 0.57]), _figures("m", 1, [0.9, 0.8, 0.58])]  # +0.055
    assert choose({"erm": erm, "m": better}).recommended == "m"


def test_a_better_hard_tier_bought_with_overall_accuracy_is_not_eligible():
    erm = [_figures("erm", 0, [0.9, 0.8, 0.50]), _figures("erm", 1, [0.92, 0.8, 0.52])]
    costly = [_figures("m", 0, [0.6, 0.6, 0.70]), _figures("m", 1, [0.6, 0.6, 0.71])]
    choice = choose({"erm": erm, "m": costly})
    assert choice.recommended == "erm" and choice.best is None and not choice.score("m").eligible


def test_too_few_erm_runs_is_an_error():
    with pytest.raises(TuneSelectionError) as error:
        choose({"erm": [_figures("erm", 0, [0.9, 0.8, 0.5])], "m": []})
    assert str(error.value) == TOO_FEW_REFERENCE_SEEDS.format(count=1)


def test_candidate_sets():
    quick = candidates("quick")
    assert [(c.method, c.options) for c in quick] == [
        ("erm", {}),
        ("mr2", {"variant": "paper", "c_bar": 1.0}),
        ("mr2", {"variant": "logit_only", "c_bar": 1.0}),
        ("mr2", {"variant": "distance_1d", "c_bar": 1.0}),
    ]
    from mr2.losses.mr2 import VARIANTS

    full = candidates("full")
    variants = ["paper", "logit_only", "distance_1d", *[v for v in PENDING_VARIANTS if v in VARIANTS]]
    mr2 = [c for c in full if c.method == "mr2"]
    assert [(c.options.get("variant"), c.options.get("c_bar"), c.options.get("margin_scale")) for c in mr2] == [
        (v, None, m) if v == "additive_margin" else (v, c, None)
        for v in variants for c, m in zip((0.5, 1.0, 2.0), (0.25, 0.5, 1.0))
    ]
    assert [(c.label, c.method, c.options) for c in full[1 + len(mr2):]] == [
        (m, m, {}) for m in ("jtt", "group_dro", "center_loss", "supcon", "hbr")
    ]
    assert len({c.label for c in full}) == len(full) == 1 + 3 * len(variants) + 5
