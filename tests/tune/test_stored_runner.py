"""The stored-trial runner's progress (issue 46, item 3): one duration formatter, and the ETA of the
sweep's runner (:func:`mr2.sweep.progress.estimate_remaining`), exact where the trial times are fixed."""

from __future__ import annotations

import io

import numpy as np
import pytest

from mr2.tune import source
from mr2.tune.candidates import candidates
from mr2.tune.source import format_seconds, run_stored_trials
from mr2.tune.trials import Predictions, Trial, TrialPredictions, TrialStore

SECONDS = {0: 10.0, 1: 30.0, 2: 5.0}


def _predict(trial: Trial) -> TrialPredictions:
    y = np.array([0, 1, 2, 1])
    return TrialPredictions(val=Predictions(y, y_pred=y), test=Predictions(y, y_pred=y))


@pytest.mark.parametrize("workers", [None, 2])
def test_one_trial_at_a_time_counts_every_trial_left_at_the_mean_time(tmp_path, monkeypatch, workers):
    """Without an executor the trials run one after another whatever ``workers`` says: the old ETA
    divided by ``workers`` (2: half the time left)."""
    monkeypatch.setattr(source, "_timed", lambda call, trial: (call(trial), SECONDS[trial.seed]))
    trials = [Trial("selection", candidates("quick")[0], seed) for seed in SECONDS]
    out = io.StringIO()
    results = run_stored_trials(trials, _predict, TrialStore(tmp_path, 3), stream=out, workers=workers)
    assert [r.seconds for r in results] == [10.0, 30.0, 5.0] and all(r.ok for r in results)
    assert [line for line in out.getvalue().splitlines() if line.startswith("[")] == [
        "[1/3] selection/erm@0 done in 10.0 s; about 20.0 s left in this round",  # 2 x 10
        "[2/3] selection/erm@1 done in 30.0 s; about 20.0 s left in this round",  # 1 x 20
        "[3/3] selection/erm@2 done in 5.0 s",
    ]


def test_the_one_duration_formatter():
    assert [format_seconds(s) for s in (0.04, 59.94, 60, 185, 3599.4, 3600, 7400)] == [
        "0.0 s", "59.9 s", "1 min 00 s", "3 min 05 s", "59 min 59 s", "1 h 00 min", "2 h 03 min"]
