"""Run directories: one owner per run (a lock), their layout and the rules that keep them consistent."""

from mr2.rundir.layout import (
    CONFIG_CHANGED,
    DANGLING_LINK,
    NOT_A_RUN,
    NOT_A_RUN_DIRECTORY,
    NOT_WRITABLE,
    OVERWRITE_IN_PROGRESS,
    OVERWRITE_NOT_RESTORED,
    OVERWRITTEN_DIR,
    PARENT_NOT_A_DIRECTORY,
    RUN_DIR_NOT_A_DIRECTORY,
    RUN_EXISTS,
    TRAINER_LOG,
    RunDirectory,
    RunDirectoryError,
)
from mr2.rundir.lock import LOCK_FILE, RUN_LOCKED, RunLock, RunLockedError, lock_holder

__all__ = [
    "CONFIG_CHANGED",
    "DANGLING_LINK",
    "LOCK_FILE",
    "NOT_A_RUN",
    "NOT_A_RUN_DIRECTORY",
    "NOT_WRITABLE",
    "OVERWRITE_IN_PROGRESS",
    "OVERWRITE_NOT_RESTORED",
    "OVERWRITTEN_DIR",
    "PARENT_NOT_A_DIRECTORY",
    "RUN_DIR_NOT_A_DIRECTORY",
    "RUN_EXISTS",
    "RUN_LOCKED",
    "TRAINER_LOG",
    "RunDirectory",
    "RunDirectoryError",
    "RunLock",
    "RunLockedError",
    "lock_holder",
]
