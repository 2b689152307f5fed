"""The leader of a ``mr2 tune --command`` trial's process group: runs the trial's shell command and
takes the whole group down when it is told to stop, so no trial command outlives tune.

Run as a script (``python trial_process.py GRACE COMMAND``; standard library only, so it starts in
milliseconds and imports nothing of mr2). tune starts it with
:func:`mr2.sweep.processes.start_subprocess`: in a process group of its own, with the kernel's death
signal (SIGTERM when tune dies, ``kill -9`` included). On SIGTERM, SIGINT or SIGHUP it sends SIGTERM
to its whole group (the shell and everything the command started), waits ``GRACE`` seconds, then
sends SIGKILL to the group, whether or not the shell is still alive, so a training script that
traps SIGTERM (Lightning does) is stopped too. Its exit status is the command's (128 + signal when
the command was killed by a signal).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

#: Seconds between SIGTERM and SIGKILL of the group when tune dies or stops.
DEFAULT_GRACE = 2.0


def _stop_group(grace: float) -> None:
    group = os.getpgrp()
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the group's SIGTERM below reaches this process too
    try:
        os.killpg(group, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        try:
            finished, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break  # the shell is gone; its children may not be: SIGKILL the group anyway
        if finished == 0:
            time.sleep(0.05)
    os.killpg(group, signal.SIGKILL)  # this process included: the group ends here


def main(argv: list[str]) -> int:
    grace = float(argv[1])
    command = argv[2]
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, lambda *_: _stop_group(grace))
    shell = subprocess.Popen(["/bin/sh", "-c", command], stdin=subprocess.DEVNULL)
    code = shell.wait()
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main(sys.argv))
