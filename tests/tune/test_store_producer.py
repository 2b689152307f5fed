"""The trial store refuses another producer's trials in its source's words, with no switch on the
source's kind: the refusal's words are the :class:`mr2.tune.trials.Producer`'s, and the records'
fields are compared one by one whatever kind recorded them."""

from __future__ import annotations

import numpy as np
import pytest

from mr2.tune.candidates import candidates
from mr2.tune.errors import TrialError
from mr2.tune.trials import (
    PRODUCER_DIFFERS,
    Predictions,
    Producer,
    Trial,
    TrialPredictions,
    TrialStore,
    check_trial_predictions,
    producer_difference,
)

K = 3
ERM = candidates("quick")[0]
TRIAL = Trial("selection", ERM, 0)
Y = np.array([0, 1, 2, 1])


def _store(tmp_path, producer: Producer | None, *, retrain: bool = False) -> TrialStore:
    return TrialStore(tmp_path, K, producer, retrain=retrain)


def _finish(store: TrialStore) -> None:
    split = Predictions(Y, y_pred=Y)
    store.write(check_trial_predictions(TRIAL, TrialPredictions(val=split, test=split), K), 1.0)


def test_a_refusal_says_what_the_producer_says(tmp_path) -> None:
    """The words came from a table by the record's kind ('train_fn' / 'command', else 'source' with the
    Python way out): a producer of a new kind was refused in another source's words."""
    first = Producer({"kind": "notebook", "cell": 1}, "notebook cell", "run the cell again with name=")
    _finish(_store(tmp_path, first))
    assert _store(tmp_path, first).is_finished(TRIAL)
    second = Producer({"kind": "notebook", "cell": 2}, "notebook cell", "run the cell again with name=")
    with pytest.raises(TrialError) as caught:
        _store(tmp_path, second).is_finished(TRIAL)
    assert str(caught.value) == PRODUCER_DIFFERS.format(
        directory=tmp_path, trial="selection/erm@0", what="notebook cell",
        difference=producer_difference({"kind": "notebook", "cell": 1}, second.record),
        way_out="run the cell again with name=")
    assert not _store(tmp_path, second, retrain=True).is_finished(TRIAL)


@pytest.mark.parametrize(("stored", "now", "difference"), [
    # A command compared on a record of any kind (it was compared only when the kind was 'command').
    ({"kind": "k", "command": "a {loss}"}, {"kind": "k", "command": "b {loss}"},
     "the command differs: stored 'a {loss}', now 'b {loss}'"),
    ({"kind": "k", "files": {"t.py": "1" * 64}}, {"kind": "k", "files": {}},
     "t.py changed: it is no longer a file here (it was when they were trained)"),
    ({"kind": "k", "version": "v1"}, {"kind": "k", "version": "v2"}, "version is 'v2', stored 'v1'"),
    # The command's fields first, then the function's, as before.
    ({"kind": "command", "command": "a", "files": {}}, {"kind": "command", "command": "a", "files": {"x": "2"}},
     "x changed: it is a file now, and was none when they were trained"),
    ({"kind": "python", "function": "m.f", "source": "ab" * 32, "version": None},
     {"kind": "python", "function": "m.g", "source": "ab" * 32, "version": None},
     "the training function is 'm.g', stored 'm.f'"),
    ({"kind": "python"}, {"kind": "command"}, "they were trained by a Python train_fn, this tune by mr2 tune --command"),
    ({"kind": "engine"}, {"kind": "python"}, "they were trained by 'engine', this tune by a Python train_fn"),
])
def test_records_are_compared_field_by_field_whatever_their_kind(stored, now, difference) -> None:
    assert producer_difference(stored, now) == difference
    assert producer_difference(dict(now), now) == ""
