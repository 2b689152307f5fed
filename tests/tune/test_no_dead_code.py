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
