"""``mr2 tune``: choose a configuration on the user's own validation data, confirm it on fresh seeds.

Modules:
    candidates: ERM, the MR2 variants and the baselines compared, as plain sweep entries (:func:`candidates`).
    loss_spec: a candidate's loss as JSON, and back to the loss module (:func:`loss_from_spec`).
    errors: the error family (:class:`TuneInputError`, :class:`TrialError`).
    selection: the validation-only rule (:func:`choose`; it never sees a test number).
    run: both phases as sweeps of mr2's engine and ``recommendation.json`` (:func:`run_tune`).
    trials: a trial of training code of your own (:class:`TrialPredictions`) and the per-trial store.
    trial_tune: both phases over such trials (:func:`tune`, and ``mr2 tune --command``).
"""

from __future__ import annotations

from mr2.tune.candidates import CANDIDATE_SETS, Candidate, candidates
from mr2.tune.errors import TrialError, TuneInputError
from mr2.tune.loss_spec import SpecLoss, loss_from_spec, parse_loss_spec
from mr2.tune.run import TuneOutcome, TuneRequest, describe_tune, make_request, run_tune
from mr2.tune.selection import (
    CRITERIA,
    Choice,
    TuneSelectionError,
    ValidationFigures,
    choose,
    read_validation,
)
from mr2.tune.trial_tune import TrialTuneRequest, TuneResult, describe_trials, make_trial_request, tune
from mr2.tune.trials import Predictions, Trial, TrialPredictions

__all__ = [
    "CANDIDATE_SETS",
    "CRITERIA",
    "Candidate",
    "Choice",
    "Predictions",
    "SpecLoss",
    "Trial",
    "TrialError",
    "TrialPredictions",
    "TrialTuneRequest",
    "TuneInputError",
    "TuneOutcome",
    "TuneRequest",
    "TuneResult",
    "TuneSelectionError",
    "ValidationFigures",
    "candidates",
    "choose",
    "describe_trials",
    "describe_tune",
    "loss_from_spec",
    "make_request",
    "make_trial_request",
    "parse_loss_spec",
    "read_validation",
    "run_tune",
    "tune",
]
