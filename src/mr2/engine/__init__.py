"""The training engine: one epoch, evaluation, checkpoints, and whole runs from a config.

- :mod:`~mr2.engine.loop`: one training epoch and one evaluation pass (explicit objects);
- :mod:`~mr2.engine.runtime`: device, torch.distributed, seeds, precision;
- :mod:`~mr2.engine.builders`: the run's data and model from its config;
- :mod:`~mr2.engine.trainer`: model, method, optimiser, schedule, loaders and checkpoint state;
- :mod:`~mr2.engine.fit`: the epoch loop (records, checkpoints, resume);
- :mod:`~mr2.engine.final`: the final evaluation (final.json);
- :mod:`~mr2.engine.logger`: console, progress bar and TensorBoard;
- :mod:`~mr2.engine.run`: ``mr2 train`` / ``mr2 eval`` over a run directory (:mod:`mr2.rundir`).
"""

from mr2.engine.loop import EvalResult, StepSetup, evaluate, train_one_epoch
from mr2.engine.run import TrainingSession, evaluate_run, train
from mr2.engine.runtime import RunError, Runtime
from mr2.engine.trainer import Trainer

__all__ = [
    "EvalResult",
    "RunError",
    "Runtime",
    "StepSetup",
    "Trainer",
    "TrainingSession",
    "evaluate",
    "evaluate_run",
    "train",
    "train_one_epoch",
]
