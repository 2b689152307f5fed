"""The training engine: one epoch, evaluation, checkpoints, and whole runs from a config."""

from mr2.engine.loop import EvalResult, StepSetup, evaluate, train_one_epoch
from mr2.engine.run import RunError, TrainingSession, evaluate_run, train

__all__ = [
    "EvalResult",
    "RunError",
    "StepSetup",
    "TrainingSession",
    "evaluate",
    "evaluate_run",
    "train",
    "train_one_epoch",
]
