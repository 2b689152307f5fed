"""Targets for the multiprocessing children of tests/sweep (importable by the fork server)."""

from __future__ import annotations

import time


def sleep_then_exit(seconds: float) -> None:
    time.sleep(seconds)
