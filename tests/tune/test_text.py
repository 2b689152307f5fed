"""What tune prints says what it means: labelled ±, the criterion's column, the validation size and
its warning, ERM explained at first use, the advice (printed last) and the block to use."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import numpy as np
import pytest
import yaml

from mr2.tune.candidates import Candidate
from mr2.tune.command import CommandSource
from mr2.tune.design import Advice, Design, Look
from mr2.tune.engine_source import EngineSource
from mr2.tune.selection import ValidationFigures, choose
from mr2.tune.source import FunctionSource
from mr2.tune.text import (
    ERM_AT_FIRST_USE,
    HAPPENED,
    SMALL_VALIDATION_WARNING,
    advice_text,
    choice_explanation,
    choice_table,
    choice_text,
    design_text,
    rule_text,
    verdict_lines,
    what_happened,
)
from mr2.tune.verdict import OUTCOMES, SeedFigures, judge_figures


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
        assert "the validation ranking is noisy, so the screen on fresh test seeds does most of the finding" in text
        assert "choose ERM most of the time" not in text  # it does not: the rule is scale-free
    hard = ", ".join(str(k) for k in choose(_runs(per_class)).hard_classes)
    assert f"test hard tier (ranked on all of ERM's validation samples): {hard}." in text
    # The other criteria score on all of a class's validation samples.
    assert f"Validation samples per class: min {per_class}, median {per_class}." in choice_text(
        choose(_runs(per_class), "overall"))


def test_the_size_is_unknown_without_per_sample_figures():
    runs = {label: [ValidationFigures(f"{label}@{s}", s, 0.8, (0.9, 0.8, 0.7)) for s in (0, 1)]
            for label in ("erm", "m")}
    text = choice_text(choose(runs, "worst_class"))
    assert "Validation size per class: unknown (per-class figures only)." in text and "WARNING" not in text
    assert "Hard tier:" not in text


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
    for case in CHOSEN:
        advice = _advice(case)
        _first_use_explained(advice_text(advice, CANDIDATE if advice.adopt else ERM_CANDIDATE, "engine"))


ERM = {3: SeedFigures(0.70, 0.90), 4: SeedFigures(0.72, 0.91), 5: SeedFigures(0.71, 0.90), 6: SeedFigures(0.69, 0.92)}
CHOSEN = {
    "confirmed": [(0.74, 0.90), (0.75, 0.91), (0.76, 0.91), (0.73, 0.91)],
    "inconclusive, up": [(0.74, 0.90), (0.70, 0.91), (0.73, 0.90), (0.69, 0.92)],
    "gain with a cost": [(0.74, 0.86), (0.75, 0.87), (0.76, 0.86), (0.73, 0.88)],
    "inconclusive, down": [(0.71, 0.90), (0.69, 0.91), (0.70, 0.90), (0.70, 0.92)],
    "contradicted": [(0.66, 0.90), (0.67, 0.91), (0.665, 0.90), (0.68, 0.92)],
}
REASON = {"confirmed": "confirmed", "inconclusive": "inconclusive", "gain with a cost": "overall_cost",
          "contradicted": "contradicted"}
SAYS = {
    "confirmed": "ADOPT mr2-paper-c1: on fresh seeds it beats ERM on the test hard tier at the stated error rate",
    "inconclusive, up": ("KEEP ERM (plain cross-entropy training, the reference). A gain below the level: on fresh "
                         "seeds mr2-paper-c1 gained +1.00 points on the test hard tier over 4 seeds"),
    "gain with a cost": ("A cost in overall accuracy, not adopted: mr2-paper-c1 gained on the test hard tier "
                         "significantly, but lost more overall accuracy than ERM's seed standard error. "
                         "mr2-paper-c1: overall accuracy -4.00 points, the cost allowed 0.48 points"),
    "inconclusive, down": ("KEEP ERM (plain cross-entropy training, the reference). No gain: on fresh seeds "
                           "mr2-paper-c1's mean change of the test hard tier against ERM was -0.50 points over 4 "
                           "seeds."),
    "contradicted": "Contradicted: on fresh seeds the best contender is significantly worse than ERM on the hard tier.",
}
CANDIDATE = Candidate("mr2-paper-c1", "mr2", {"variant": "paper", "c_bar": 1.0})
ERM_CANDIDATE = Candidate("erm", "erm")


def _advice(case: str) -> Advice:
    chosen = {seed: SeedFigures(*pair) for seed, pair in zip(ERM, CHOSEN[case])}
    verdict = judge_figures(ERM, chosen, hard_classes=[1, 4], chosen_label=CANDIDATE.label)
    outcome = case.split(",")[0]
    assert verdict.outcome == outcome
    adopt = outcome == "confirmed"
    return Advice(adopt, CANDIDATE.label if adopt else "erm", CANDIDATE.label, verdict, [], REASON[outcome])


@pytest.mark.parametrize("case", list(CHOSEN))
@pytest.mark.parametrize("kind", ["engine", "command", "python"])
def test_the_advice_says_what_to_do_last_and_pastes_what_to_use(case, kind):
    advice = _advice(case)
    text = advice_text(advice, CANDIDATE if advice.adopt else ERM_CANDIDATE, kind)
    assert SAYS[case] in text
    assert "classes 1, 4, ranked on ERM's validation accuracies" in text
    assert f"fresh seeds 3, 4, 5, 6), {CANDIDATE.label} against {ERM_AT_FIRST_USE}" in text
    block = text.rsplit("\n\n", 1)[1]  # the last paragraph: what to use
    if kind == "engine":
        used = yaml.safe_load(textwrap.dedent(block))["method"]
        assert used == (CANDIDATE.method_block() if advice.adopt else {"name": "erm", "options": {}})
    else:
        spec = json.loads(block.strip().removeprefix("loss_spec: "))
        assert spec == (CANDIDATE.loss_spec() if advice.adopt else {"method": "erm", "options": {}})
    how = {"engine": "paste into your run configuration:",
           "command": "in your training script, mr2.tune.loss_from_spec(spec, num_classes=K) builds the loss from:",
           "python": "in your train_fn, result.recommended.make_loss() builds the loss; the same as a spec:"}
    assert text.rsplit("\n\n", 2)[1].endswith(how[kind]) and text.count("((") == 0
    # "Supported" is gone: no paste of the chosen configuration unless it is adopted.
    assert ("variant: paper" in text or '"variant":"paper"' in text) == advice.adopt
    assert "supported" not in text.lower()


def test_the_figures_say_what_each_plus_minus_is():
    erm = {3: SeedFigures(0.70, 0.90), 4: SeedFigures(0.72, 0.91), 5: SeedFigures(0.71, 0.90)}
    new = {3: SeedFigures(0.74, 0.90), 4: SeedFigures(0.70, 0.91), 5: SeedFigures(0.73, 0.90)}
    text = "\n".join(verdict_lines(judge_figures(erm, new)))
    assert _check_plus_minus_labelled(text) == 2
    assert "(seed SE over 3 seeds)" in text and "± SD 3.06 over 3 seeds" in text


@pytest.mark.parametrize("reason", ["erm_chosen", "no_eligible", "failed"])
def test_no_confirmation_keeps_erm_and_says_why(reason):
    text = advice_text(Advice(False, "erm", None, None, [], reason), ERM_CANDIDATE, "python")
    assert text.startswith(f"KEEP {ERM_AT_FIRST_USE}.")
    assert text.rstrip().endswith('loss_spec: {"method":"erm","options":{}}')


def test_the_outcomes():
    assert set(OUTCOMES) >= {"confirmed", "gain with a cost", "inconclusive", "contradicted", "nothing to confirm"}


def test_the_design_in_words_states_the_error_rate():
    text = design_text(Design())
    assert "ADOPTED only if a one-sided paired t-test" in text and "at level 0.05" in text


def test_with_the_best_gate_selection_names_the_contenders_and_recommends_nothing():
    """The default design sends the best eligible candidates to the confirmation whatever their margin:
    its texts must not call a selection outcome 'recommended' (the advice comes from the fresh seeds)."""
    runs = {label: [ValidationFigures(f"{label}@{s}", s, 0.8 + 0.01 * i, (0.9, 0.8, 0.7 + 0.01 * i + 0.001 * s))
                    for s in (0, 1, 2)]
            for i, label in enumerate(("erm", "a", "b", "c"))}
    choice = choose(runs, "overall")
    text = choice_text(choice, ["c", "b"])
    assert "recommended" not in text and "| c (to the confirmation) |" in text and "| b (to the confirmation) |" in text
    assert "| a |" in text
    assert text.endswith("To the confirmation on fresh seeds (the 2 best eligible, whatever their margin over ERM; "
                         "the advice comes from the fresh seeds alone): c, b.")
    assert "recommended" not in rule_text("hard_tier", gate="best") and "recommended" in rule_text("hard_tier")
    assert "whatever their margin over ERM" in rule_text("hard_tier", gate="best")
    nothing = choice_explanation(choice, [])
    assert nothing.endswith("nothing goes to the confirmation and the advice is ERM.")
    assert "1 seed (the 7 best eligible stay), then 3 seeds" in design_text(Design(selection_looks=(1, 3), keep=(7,)))


def test_the_docs_section_the_small_validation_warning_names_exists():
    section = re.search(r"docs/tune\.md, '([^']+)'", SMALL_VALIDATION_WARNING).group(1)
    docs = (Path(__file__).resolve().parents[2] / "docs" / "tune.md").read_text()
    assert f"\n## {section}\n" in docs


def _look(contender: str, look: int, mean: float, decision: str, *, t: float = -0.8, p: float = 0.75,
          level: float = 1.5e-5) -> Look:
    return Look(contender, look, list(range(9, 9 + 3 * (look + 1))), mean, t, p, level, decision == "overall_cost",
                decision)


def test_a_futility_stop_is_said_as_such_not_as_a_gain_not_significant():
    """Issue 45: both contenders stopped for futility at the first look, mean change -0.50: the printed
    reason says futility, the look and that the confirmation ended early (it said 'the gain was not
    significant')."""
    looks = [_look("mr2-paper-c1", 0, -0.005, "futility"), _look("mr2-logit_only-c1", 0, -0.002, "futility")]
    verdict = judge_figures(ERM, {seed: SeedFigures(*pair) for seed, pair in zip(ERM, CHOSEN["inconclusive, down"])},
                            chosen_label="mr2-paper-c1")
    advice = Advice(False, "erm", "mr2-paper-c1", verdict, looks, "inconclusive",
                    ["mr2-paper-c1", "mr2-logit_only-c1"], design=Design(futility=0.5))
    text = advice_text(advice, ERM_CANDIDATE, "command")
    keep = next(line for line in text.splitlines() if line.startswith("KEEP"))
    assert "Stopped for futility at look 1 (3 fresh seeds): both contenders showed too little gain" in keep
    assert "(t at or below 0.5)" in keep and "mr2-paper-c1 -0.50, mr2-logit_only-c1 -0.20" in keep
    assert "ended early, before its last look" in keep
    assert "not significant" not in keep
    assert "  look 1 (3 seeds): mr2-paper-c1 -0.50 points (t = -0.80, p = 0.75; level 0.0015%): stopped for futility" in text
    assert what_happened(advice)[0] == "futility"


@pytest.mark.parametrize(
    ("decisions", "kind"),
    [
        ([("a", 0, 0.004, "continue"), ("b", 0, -0.01, "futility"), ("a", 1, 0.003, "stop")], "gain_below_level"),
        ([("a", 0, 0.004, "continue"), ("a", 1, -0.001, "stop")], "no_gain"),
        ([("a", 0, 0.004, "continue"), ("b", 0, 0.03, "overall_cost"), ("a", 1, 0.001, "stop")], "overall_cost"),
        ([("a", 0, -0.01, "futility"), ("b", 0, 0.0, "futility")], "futility"),
        ([("a", 0, 0.03, "unstable"), ("b", 0, -0.01, "futility")], "unstable"),
    ],
)
def test_what_happened_follows_the_looks_decisions(decisions, kind):
    """The kind comes from the looks' typed decisions (an oracle written out here), never from the
    wording of ``ruled_out``: those texts are nonsense here."""
    looks = [_look(c, j, m, d, t=1.0 if m > 0 else -1.0, p=0.2) for c, j, m, d in decisions]
    last = {c: (j, m, d) for c, j, m, d in decisions}
    reason = "overall_cost" if any(d == "overall_cost" for _, _, d in last.values()) else "inconclusive"
    advice = Advice(False, "erm", "a", None, looks, reason, ["a", "b"], ruled_out={"b": "zzz"})
    got, sentence = what_happened(advice)
    reached = [(m, c) for c, (j, m, d) in last.items() if d not in ("futility", "overall_cost")]
    expected = ("overall_cost" if reason == "overall_cost" else
                "unstable" if any(d == "unstable" for _, _, d in last.values()) else
                "futility" if not reached else "gain_below_level" if max(reached)[0] > 0 else "no_gain")
    assert got == expected == kind
    assert got in HAPPENED
    if kind == "overall_cost":
        assert sentence.startswith("A cost in overall accuracy, not adopted: b gained on the test hard tier")
        assert "b +3.00 points at look 1" in sentence
    if kind == "gain_below_level":
        assert "a gained +0.30 points" in sentence and "(b stopped for futility at look 1)" in sentence


NAMES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal"]


def test_hard_classes_are_named_when_the_names_are_known():
    choice = choose(_runs(40))
    hard = choice.hard_classes
    named = ", ".join(f"{NAMES[k]} ({k})" for k in hard)
    assert f"validation samples): {named}." in choice_text(choice, class_names=NAMES)
    advice = _advice("inconclusive, up")
    text = advice_text(advice, ERM_CANDIDATE, "command", class_names=NAMES)
    assert "classes Trouser (1), Coat (4), ranked on ERM's validation accuracies" in text
    assert "classes 1, 4, ranked" in advice_text(advice, ERM_CANDIDATE, "command")


def test_the_small_validation_warning_gives_the_measured_figures():
    """It said a one-point gain is 'seldom found'; with the screen reusing the selection seed's runs
    (issue 44, part 4) the simulation adopts +1.0 in 68-84% of tunes at 10 validation samples per class
    where the test split is clean and 21-44% where it is noisy: the warning quotes those, as
    docs/tune.md and BENCHMARKS 10e do."""
    text = SMALL_VALIDATION_WARNING.format(median=22, min=21, limit=50)
    assert "seldom" not in text
    assert "a +1.0-point gain is adopted in 68-84% of tunes where the test split is clean and 21-44% " \
           "where it is noisy" in text
    root = Path(__file__).resolve().parents[2]
    docs = root.joinpath("docs", "tune.md").read_text().replace("\n", " ")
    assert "a +1.0-point gain is still adopted in only 21-44 % of tunes" in docs
    # the default's table: section 10e
    table = root.joinpath("BENCHMARKS.md").read_text().split("### 10e.")[1].split("\n## ")[0]
    rows = {line.split(" | ")[0].strip("| "): line for line in table.splitlines()
            if line.startswith(("| mlp-n100 |", "| glyphs-cnn-n100 |", "| glyphs-mlp-n100 |", "| cnn-n"))
            and "(68)" in line}
    plus_one = {name: float(line.split(" | ")[4].split()[0]) for name, line in rows.items()}
    assert min(plus_one[c] for c in ("mlp-n100", "glyphs-cnn-n100", "glyphs-mlp-n100")) == 68.5
    assert max(plus_one[c] for c in ("mlp-n100", "glyphs-cnn-n100", "glyphs-mlp-n100")) == 83.5
    assert (min(plus_one[c] for c in ("cnn-n100", "cnn-n300", "cnn-n1000")),
            max(plus_one[c] for c in ("cnn-n100", "cnn-n300", "cnn-n1000"))) == (21.0, 44.5)


class _Source:
    """A trial source stub for ``describe``: nothing finished."""

    def __init__(self, kind: str) -> None:
        self.two_stage = kind == "engine"
        self.who_trains = {"engine": EngineSource.who_trains, "python": FunctionSource.who_trains,
                           "command": CommandSource.who_trains}[kind]

    def is_finished(self, trial: object) -> bool:
        return False

    def describe(self, trial: object) -> str:
        return ""


@pytest.mark.parametrize(("kind", "losses_only", "count"), [("engine", False, 17), ("python", True, 15),
                                                            ("command", True, 15)])
def test_the_header_counts_the_candidates_against_erm_as_the_docs_do(tmp_path, kind, losses_only, count):
    """It said '16 candidates' (Python) and '18' (--config) where the docs said 15 and 17 against ERM."""
    from mr2.tune.driver import describe
    from mr2.tune.request import make_request

    request = make_request(num_classes=6, candidates="full", losses_only=losses_only, output_dir=tmp_path, name="c")
    header = describe(request, _Source(kind)).splitlines()[0]  # type: ignore[arg-type]
    assert f": {count} candidates against ERM (full;" in header
    docs = (Path(__file__).resolve().parents[2] / "docs" / "tune.md").read_text()
    assert "(17 candidates against ERM; 15 with your own code" in docs and "(3 candidates against ERM)" in docs
    quick = make_request(num_classes=6, candidates="quick", losses_only=losses_only, output_dir=tmp_path, name="c")
    assert ": 3 candidates against ERM (quick;" in describe(quick, _Source(kind)).splitlines()[0]  # type: ignore[arg-type]
