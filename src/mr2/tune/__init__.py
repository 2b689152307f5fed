"""``mr2 tune``: choose a configuration on the user's own validation data, confirm it on fresh seeds.

Modules:
    candidates: ERM and the MR2 variants compared, as plain sweep entries (:func:`candidates`).
    selection: the validation-only rule (:func:`choose`; it never sees a test number).
    run: both phases as sweeps and ``recommendation.json`` (:func:`run_tune`).
"""

from __future__ import annotations

from mr2.tune.candidates import CANDIDATE_SETS, Candidate, candidates
from mr2.tune.run import TuneInputError, TuneOutcome, TuneRequest, describe_tune, make_request, run_tune
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
    "TuneInputError",
    "TuneOutcome",
    "TuneRequest",
    "TuneSelectionError",
    "ValidationFigures",
    "candidates",
    "choose",
    "describe_tune",
    "make_request",
    "read_validation",
    "run_tune",
]
