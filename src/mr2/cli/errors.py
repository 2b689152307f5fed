"""The exceptions the command line reports as one-line errors (exit code 2) instead of tracebacks.

Each of them carries a message that says what was wrong and how to fix it; anything else is a bug
and keeps its traceback.
"""

from __future__ import annotations


def user_errors() -> tuple[type[BaseException], ...]:
    """Every :class:`~mr2.errors.MR2Error` (bad configuration, data, weights, checkpoints, method
    options, run directories, sweeps, tune...).

    Imported lazily: the CLI starts without importing torch.
    """
    from mr2.errors import MR2Error

    return (MR2Error,)
