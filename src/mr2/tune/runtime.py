"""Running a tune from the command line until it ends or is stopped: signals, the trial commands'
processes, exit codes (:func:`run_stoppable`).

SIGTERM and SIGHUP (and Ctrl-C) stop the tune: the source's ``stop_signals`` are turned into a stop
here and the source's :meth:`~mr2.tune.source.TrialSource.stop` stops its running trials (the
commands of ``--command``); the engine's sweep forwards its own signals to its trainers and raises
:class:`mr2.sweep.SweepInterrupted`, a KeyboardInterrupt. Finished trials are kept, and the same
command resumes.
"""

from __future__ import annotations

import signal
import sys
from typing import Any

from mr2.tune.driver import run_tune
from mr2.tune.errors import EXIT_BAD_INPUT, EXIT_NO_ADVICE, TuneInputError
from mr2.tune.request import TuneRequest
from mr2.tune.source import TrialSource

__all__ = ["run_stoppable"]


class _Stopped(BaseException):
    """SIGTERM or SIGHUP while the trials run (a BaseException, like KeyboardInterrupt, so that no
    ``except Exception`` on the way takes it for a trial's failure)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise_stopped(signum: int, frame: Any) -> None:
    # From the first stop signal on, the process is shutting down: more signals must not interrupt
    # the shutdown (stopping the trials' process groups); ignore them until it exits.
    for repeated in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(repeated, signal.SIG_IGN)
    raise _Stopped(signum)


def run_stoppable(request: TuneRequest, source: TrialSource) -> int:
    """Run the tune; the exit code of ``mr2 tune`` (its ``run``'s docstring)."""
    from mr2.tune.selection import TuneSelectionError

    signals = source.stop_signals
    previous = {signum: signal.signal(signum, _raise_stopped) for signum in signals}
    previous.setdefault(signal.SIGINT, signal.getsignal(signal.SIGINT))
    stopped = False
    try:
        run_tune(request, source)
    except TuneInputError as error:  # a trial's predictions could not be used at all
        print(f"mr2 tune: error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except TuneSelectionError as error:
        print(f"mr2 tune: no recommendation: {error}", file=sys.stderr)
        return EXIT_NO_ADVICE
    except (_Stopped, KeyboardInterrupt) as stop:  # the sweep's SweepInterrupted is a KeyboardInterrupt
        signum = getattr(stop, "signum", signal.SIGINT)
        stopped = True
        for repeated in (*signals, signal.SIGINT):  # a second signal must not cut the shutdown short
            signal.signal(repeated, signal.SIG_IGN)
        source.stop()
        print(f"\nmr2 tune: interrupted ({signal.Signals(signum).name}); {source.stopped_text}; run the same "
              "command again to resume.", file=sys.stderr)
        return 128 + signum
    finally:
        source.stop()  # e.g. after an error while other trials still run
        if not stopped:  # after a stop the process exits: stop signals stay ignored until then
            for restored, handler in previous.items():
                if handler is not None:
                    signal.signal(restored, handler)
    return 0
