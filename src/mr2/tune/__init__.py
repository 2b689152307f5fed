"""``mr2 tune``: choose a configuration on the user's own validation data, confirm it on fresh seeds,
and advise (adopt it, or keep ERM) at a stated error rate.

Modules:
    candidates: ERM, the MR2 variants and the baselines compared (:func:`candidates`).
    loss_spec: a candidate's loss as JSON, and back to the loss module (:func:`loss_from_spec`).
    errors: the error family (:class:`TuneInputError`, :class:`TrialError`, :class:`TrialFailed`).
    selection: the validation-only rule (:func:`choose`; it never sees a test number).
    verdict: the fresh-seed test of a contender against ERM (:func:`mr2.tune.verdict.judge_figures`).
    design: which trials run and what is advised, pure (:class:`mr2.tune.design.Plan`).
    request: one validated tune (:class:`TuneRequest`, :func:`make_request`).
    source, engine_source, command: the trial sources (your function, mr2's engine, your command).
    driver: the one driver over a source (:func:`run_tune`, :class:`TuneResult`).
    record: ``recommendation.json`` (:class:`TuneRecord`).
    api: :func:`tune` for your own training function.
    script: helpers that make a training script tune-ready.

Names are imported on first use, so ``from mr2.tune import loss_from_spec`` (run by a user's script
in every trial) loads the loss modules only: no sweep, engine or report module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mr2.lazy import lazy_exports

# Light, and imported here so that the function ``candidates`` (not its module) is ``mr2.tune.candidates``.
from mr2.tune.candidates import CANDIDATE_SETS, Candidate, candidates
from mr2.tune.errors import TrialError, TrialFailed, TuneInputError
from mr2.tune.loss_spec import SpecLoss, loss_from_spec, parse_loss_spec

if TYPE_CHECKING:
    from mr2.tune.api import describe_tune, tune
    from mr2.tune.design import DEFAULT_DESIGN, Advice, Design, Plan
    from mr2.tune.driver import TuneResult, run_tune
    from mr2.tune.record import TuneRecord
    from mr2.tune.request import TuneRequest, make_request
    from mr2.tune.script import add_trial_arguments, fixed_split, write_predictions
    from mr2.tune.selection import (
        CRITERIA,
        Choice,
        TuneSelectionError,
        ValidationFigures,
        choose,
    )
    from mr2.tune.trials import Predictions, Trial, TrialPredictions

EXPORTS = {
    "CRITERIA": "mr2.tune.selection",
    "DEFAULT_DESIGN": "mr2.tune.design",
    "Advice": "mr2.tune.design",
    "Choice": "mr2.tune.selection",
    "Design": "mr2.tune.design",
    "Plan": "mr2.tune.design",
    "Predictions": "mr2.tune.trials",
    "Trial": "mr2.tune.trials",
    "TrialPredictions": "mr2.tune.trials",
    "TuneRecord": "mr2.tune.record",
    "TuneRequest": "mr2.tune.request",
    "TuneResult": "mr2.tune.driver",
    "TuneSelectionError": "mr2.tune.selection",
    "ValidationFigures": "mr2.tune.selection",
    "choose": "mr2.tune.selection",
    "make_request": "mr2.tune.request",
    "run_tune": "mr2.tune.driver",
    "tune": "mr2.tune.api",
    "describe_tune": "mr2.tune.api",
    "add_trial_arguments": "mr2.tune.script",
    "fixed_split": "mr2.tune.script",
    "write_predictions": "mr2.tune.script",
}

__all__ = [
    "CANDIDATE_SETS",
    "CRITERIA",
    "DEFAULT_DESIGN",
    "Advice",
    "Candidate",
    "Choice",
    "Design",
    "Plan",
    "Predictions",
    "SpecLoss",
    "Trial",
    "TrialError",
    "TrialFailed",
    "TrialPredictions",
    "TuneInputError",
    "TuneRecord",
    "TuneRequest",
    "TuneResult",
    "TuneSelectionError",
    "ValidationFigures",
    "add_trial_arguments",
    "candidates",
    "choose",
    "describe_tune",
    "fixed_split",
    "loss_from_spec",
    "make_request",
    "parse_loss_spec",
    "run_tune",
    "tune",
    "write_predictions",
]

if not TYPE_CHECKING:
    __getattr__ = lazy_exports(__name__, EXPORTS)
