"""``mr2 tune``: choose a configuration on the user's own validation data, confirm it on fresh seeds.

Modules:
    candidates: ERM and the MR2 variants compared, as plain sweep entries (:func:`candidates`).
    loss_spec: a candidate's loss as JSON, and back to the loss module (:func:`loss_from_spec`).
    errors: the error family (:class:`TuneInputError`, :class:`TrialError`).
    selection: the validation-only rule (:func:`choose`; it never sees a test number).
    run: both phases as sweeps and ``recommendation.json`` (:func:`run_tune`).
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

__all__ = [
    "CANDIDATE_SETS",
    "CRITERIA",
    "Candidate",
    "Choice",
    "SpecLoss",
    "TrialError",
    "TuneInputError",
    "TuneOutcome",
    "TuneRequest",
    "TuneSelectionError",
    "ValidationFigures",
    "candidates",
    "choose",
    "describe_tune",
    "loss_from_spec",
    "make_request",
    "parse_loss_spec",
    "read_validation",
    "run_tune",
]
