"""The exceptions the command line reports as one-line errors (exit code 2) instead of tracebacks.

Each of them carries a message that says what was wrong and how to fix it; anything else is a bug
and keeps its traceback.
"""

from __future__ import annotations


def user_errors() -> tuple[type[BaseException], ...]:
    """Bad configuration, data, weights, checkpoints or method options (imported lazily: the CLI
    starts without importing torch)."""
    from mr2.checks import MR2InputError, StatisticsOverflowError
    from mr2.config import ConfigError
    from mr2.data.errors import DatasetError
    from mr2.engine.checkpoint import CheckpointError
    from mr2.engine.runtime import RunError
    from mr2.methods.jtt import EmptyErrorSetError
    from mr2.methods.registry import MethodConfigError
    from mr2.models.registry import ModelConfigError
    from mr2.models.weights import WeightsFileError, WeightsMismatchError
    from mr2.rundir import RunDirectoryError, RunLockedError

    return (
        ConfigError,
        RunError,
        DatasetError,
        MethodConfigError,
        MR2InputError,
        StatisticsOverflowError,
        CheckpointError,
        WeightsMismatchError,
        EmptyErrorSetError,
        RunDirectoryError,
        RunLockedError,
        ModelConfigError,
        WeightsFileError,
    )
