"""Imported first by a sweep's fork server (its preload list): ties the fork server to the sweep.

The fork server forks the sweep's trainers, and each trainer asks for SIGTERM when the fork server
dies (:mod:`mr2.sweep.processes`). The fork server would not die with the sweep by itself: it exits
when every holder of its "alive" pipe is gone, and the trainers hold that pipe too. So, on import,
this module asks the kernel to send the fork server SIGTERM when the sweep's thread that started
it ends (the sweep starts it from a thread that lives as long as the sweep process), and exits at
once if the sweep is already gone. The chain sweep -> fork server -> trainers then ends within a
moment of the sweep, ``kill -9`` included.

Outside a sweep's fork server (no :data:`SWEEP_PID_VARIABLE` naming this process's parent),
importing it does nothing.
"""

from __future__ import annotations

import os

from mr2.sweep.deathsignal import ORPHANED, SWEEP_PID_VARIABLE, die_with_parent

__all__: list[str] = []


def _tether() -> None:
    sweep = os.environ.get(SWEEP_PID_VARIABLE, "")
    if not sweep.isdigit() or int(sweep) == os.getpid():
        return
    die_with_parent()
    if os.getppid() != int(sweep):
        os._exit(ORPHANED)


_tether()
