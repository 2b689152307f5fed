"""Run directories: one owner per run (a lock), their layout and the rules that keep them consistent."""

from mr2.rundir.layout import OVERWRITTEN_DIR, TRAINER_LOG, RunDirectory
from mr2.rundir.lock import LOCK_FILE, RUN_LOCKED, RunLock, RunLockedError, lock_holder

__all__ = [
    "LOCK_FILE",
    "OVERWRITTEN_DIR",
    "RUN_LOCKED",
    "TRAINER_LOG",
    "RunDirectory",
    "RunLock",
    "RunLockedError",
    "lock_holder",
]
