"""Run directories: one owner per run (a lock), their layout, the rules that keep them consistent,
and the run record they hold (``final.json``).

The messages of the errors are constants of the module that raises them (:mod:`mr2.rundir.layout`,
:mod:`mr2.rundir.lock`, :mod:`mr2.rundir.record`).
"""

from mr2.rundir.errors import RunDirectoryError
from mr2.rundir.layout import RunDirectory
from mr2.rundir.lock import RunLock, RunLockedError, lock_holder
from mr2.rundir.record import DatasetInfo, FinalRecord, SplitFigures

__all__ = [
    "DatasetInfo",
    "FinalRecord",
    "RunDirectory",
    "RunDirectoryError",
    "RunLock",
    "RunLockedError",
    "SplitFigures",
    "lock_holder",
]
