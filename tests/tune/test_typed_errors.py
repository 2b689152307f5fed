"""Errors told apart by their type, never by their text (issue 46, item 2): a text that happens to hold
the words of another message (a method named "not valid JSON", a directory named after the
non-finite message) is not taken for it."""

from __future__ import annotations

import argparse

import numpy as np
import pytest

from mr2.methods.spec import LossSpecError, LossSpecJSONError, parse_loss_spec
from mr2.report.predictions import NOT_FINITE, NonFinitePredictions, PredictionsError, read_predictions
from mr2.tune.candidates import candidates
from mr2.tune.errors import TrialError, TrialFailed
from mr2.tune.script import QUOTED_HINT, _loss_json
from mr2.tune.trials import Trial, read_trial_file

TRIAL = Trial("selection", candidates("quick")[0], 0)


def test_text_that_is_no_json_is_a_json_error_and_gets_the_quoting_hint():
    with pytest.raises(LossSpecJSONError):
        parse_loss_spec("{not json")
    with pytest.raises(argparse.ArgumentTypeError) as raised:
        _loss_json("{not json")
    assert str(raised.value).endswith(QUOTED_HINT)


def test_a_method_named_like_the_json_message_is_no_json_error():
    with pytest.raises(LossSpecError) as raised:
        parse_loss_spec('{"method": "not valid JSON", "options": {}}')
    assert not isinstance(raised.value, LossSpecJSONError)
    with pytest.raises(argparse.ArgumentTypeError) as hinted:
        _loss_json('{"method": "not valid JSON", "options": {}}')
    assert QUOTED_HINT not in str(hinted.value)  # the old text search added it
    assert str(hinted.value) == str(raised.value)


def test_non_finite_logits_are_their_own_predictions_error(tmp_path):
    path = tmp_path / "val.npz"
    np.savez(path, y_true=np.array([0, 1, 1]), logits=np.array([[0.0, 1.0], [np.nan, 0.0], [1.0, 0.0]]))
    with pytest.raises(NonFinitePredictions) as raised:
        read_predictions(path)
    assert str(raised.value) == NOT_FINITE.format(path=path, count=1, row=1)
    with pytest.raises(TrialFailed) as failed:
        read_trial_file(TRIAL, "val", path, 2)
    assert str(failed.value) == f"trial selection/erm@0: {NOT_FINITE.format(path=path, count=1, row=1)}"


def test_a_path_holding_the_non_finite_words_is_still_bad_input(tmp_path):
    """The old check searched the error's text for ' non-finite value': a bad file in a directory so
    named failed the trial (its candidate ruled out) instead of stopping the tune as bad input."""
    directory = tmp_path / "a non-finite value(s) here"
    directory.mkdir()
    path = directory / "val.npz"
    np.savez(path, y_true=np.array([0, 1]), preds=np.array([0, 1]))
    with pytest.raises(TrialError) as raised:
        read_trial_file(TRIAL, "val", path, 2)
    assert type(raised.value) is TrialError
    assert "unknown key(s) ['preds']" in str(raised.value)
    with pytest.raises(PredictionsError) as plain:
        read_predictions(path)
    assert not isinstance(plain.value, NonFinitePredictions)


@pytest.mark.parametrize(("y_true", "y_pred"), [([0, 1], [0, 1, 1]), ([0, 3], [0, 1]), ([0, 1], [0.0, 1.0])])
def test_a_trial_and_the_selection_say_the_same_of_the_same_arrays(y_true, y_pred):
    """One checker of predictions (report.predictions.predictions_problem) for the trials and the
    selection's figures: the old selection said 'class ids from 0 to 3' where the trial said which
    array and which K."""
    from mr2.report.predictions import predictions_problem
    from mr2.tune.selection import BAD_PREDICTIONS, TuneSelectionError, ValidationFigures
    from mr2.tune.trials import TrialPredictions, check_trial_predictions

    true, pred = np.array(y_true), np.array(y_pred)
    detail = predictions_problem(true, pred, None, 3)
    assert detail
    with pytest.raises(TuneSelectionError) as selection:
        ValidationFigures.from_predictions("erm@0", 0, true, pred, 3)
    assert str(selection.value) == BAD_PREDICTIONS.format(run="erm@0", detail=detail)
    split = {"y_true": true, "y_pred": pred}
    with pytest.raises(TrialError) as trial:
        check_trial_predictions(TRIAL, TrialPredictions(val=split, test=split), 3)
    assert str(trial.value) == f"trial selection/erm@0, val split: {detail}"
