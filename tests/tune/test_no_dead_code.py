"""Dead code and compatibility paths of the unreleased 0.1.0 stay gone (issue 46, item 4), and the
rule's prose lives with the rest of what tune prints."""

from __future__ import annotations

import re
from pathlib import Path

import mr2.tune
from mr2.tune import record, selection, text
from mr2.tune.trials import TrialStore

ROOT = Path(__file__).resolve().parents[2]


def test_no_reader_of_final_json_for_the_choice_and_no_validation_only_store_read():
    assert not hasattr(selection, "read_validation") and "read_validation" not in mr2.tune.__all__
    assert not hasattr(TrialStore, "validation")
    from mr2.tune import verdict

    assert not hasattr(verdict, "judge")  # judge_figures on seed_figures is the one way


def test_the_rule_in_words_is_text_s():
    assert not hasattr(selection, "rule_text") and not hasattr(selection, "_SCORE_NAMES")
    assert text.rule_text("overall").startswith("ERM (plain cross-entropy training, the reference) is what")


def test_exit_codes_are_declared_once():
    declared = [(path.relative_to(ROOT).as_posix(), line) for path in
                [*(ROOT / "src" / "mr2" / "tune").glob("*.py"), ROOT / "src" / "mr2" / "cli" / "tune.py"]
                for line in path.read_text().splitlines() if re.match(r"EXIT_[A-Z_]+ = \d", line)]
    assert declared == [("src/mr2/tune/errors.py", "EXIT_NO_ADVICE = 1"),
                        ("src/mr2/tune/errors.py", "EXIT_BAD_INPUT = 2")]


def test_a_record_of_this_mr2_only_round_trips():
    """The pre-``adopt`` reading is the track study's (studies/tune_track/track.py read_record)."""
    assert "before ``adopt``" not in (record.TuneRecord.from_dict.__doc__ or "")
    assert "def read_record" in (ROOT / "studies" / "tune_track" / "track.py").read_text()


def test_constants_are_written_once():
    from mr2.tune import command, design, script, trial_process, trials

    assert command.STOP_GRACE is trial_process.DEFAULT_GRACE
    assert script.SPLITS is trials.SPLITS
    assert not hasattr(trials, "PHASES") and design.PHASES == ("selection", "confirmation")
    sources = {path.name: path.read_text() for path in (ROOT / "src" / "mr2" / "tune").glob("*.py")}
    assert [name for name, source in sources.items() if re.search(r"^SPLITS = ", source, re.M)] == ["trials.py"]


def test_class_ids_are_the_argmax_of_the_logits_or_the_ids_given():
    import numpy as np

    from mr2.tune.trials import Predictions, class_ids

    logits = np.array([[0.1, 0.9, 0.0], [2.0, 1.0, 2.0], [0.0, 0.0, 3.0]], dtype=np.float32)
    y_true, y_pred = class_ids(Predictions(np.array([1, 0, 2], dtype=np.int16), logits=logits))
    assert y_true.dtype == y_pred.dtype == np.int64
    assert y_true.tolist() == [1, 0, 2] and y_pred.tolist() == [1, 0, 2]  # a tie: the first maximum
    y_true, y_pred = class_ids(Predictions(np.array([0, 1]), y_pred=np.array([1, 1], dtype=np.int32)))
    assert y_pred.dtype == np.int64 and y_pred.tolist() == [1, 1]


def test_a_choice_is_frozen_and_deciding_again_gives_a_new_one():
    import dataclasses

    import pytest

    from mr2.tune.selection import ValidationFigures, choose, decide

    runs = {label: [ValidationFigures(f"{label}@{s}", s, 0.8, (0.9, 0.8, accuracy + 0.01 * s)) for s in (0, 1)]
            for label, accuracy in (("erm", 0.5), ("m", 0.7))}
    choice = choose(runs, "worst_class")
    assert (choice.best, choice.recommended) == ("m", "m")
    with pytest.raises(dataclasses.FrozenInstanceError):
        choice.best = None  # type: ignore[misc]
    choice.scores[1].eligible = False  # ruled out by the race: decided again, into a new choice
    again = decide(choice, choice.score("erm"))
    assert (again.best, again.recommended, again.threshold) == (None, "erm", choice.threshold)
    assert (choice.best, choice.recommended) == ("m", "m")
