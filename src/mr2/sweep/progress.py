"""What a running sweep prints: one numbered line per run outcome, an ETA, "still running" lines.

::

    [3/12] done mr2__c_bar=2__seed=0 (41 s), ETA 4 min
      ... 5 min elapsed; running: erm__seed=1 epoch 3/10, mr2__c_bar=1__seed=1 starting
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Sequence
from pathlib import Path

from mr2.sweep.plan import RunPoint

__all__ = ["LOG_TAIL_LINES", "epoch_progress", "estimate_remaining", "format_duration", "log_tail",
           "running_line"]

LOG_TAIL_LINES = 25


def format_duration(seconds: float) -> str:
    """Seconds as a short human duration.

    Example:
        >>> format_duration(41.2), format_duration(600), format_duration(7200)
        ('41 s', '10 min', '2.0 h')
    """
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def estimate_remaining(durations: Sequence[float], left: int, running: Sequence[tuple[str, float]],
                       workers: int, now: float | None = None) -> float:
    """Seconds until ``left`` unfinished runs end, assuming each run takes the mean duration so far:
    each running one (started at the given times) keeps its worker for what remains of the mean, and
    each run not yet started goes to the worker that frees first (list scheduling); the estimate is
    when the last worker frees. A run that has just started therefore counts a whole mean duration:
    with 3 equal runs on 2 workers, the first run's end announces one more run's duration, not half
    of it (the old estimate divided the total by the workers and said half).

    Example:
        >>> estimate_remaining([10.0, 20.0], left=3, running=[("a", 95.0)], workers=2, now=100.0)
        25.0
        >>> estimate_remaining([60.0], left=2, running=[("b", 0.0), ("c", 60.0)], workers=2, now=60.0)
        60.0
    """
    mean = sum(durations) / len(durations)
    now = time.time() if now is None else now
    slots = max(1, workers)
    free = sorted(max(0.0, mean - (now - started)) for _, started in running)
    free = (free + [0.0] * slots)[:max(slots, len(free))]
    heapq.heapify(free)
    for _ in range(max(0, left - len(running))):
        heapq.heapreplace(free, free[0] + mean)
    return max(free)


def epoch_progress(point: RunPoint) -> str:
    """``epoch 3/10`` from the run's metrics.jsonl ("starting" before the first epoch ends)."""
    done = len(point.directory.read_metrics())
    return f"epoch {done}/{point.config.optim.epochs}" if done else "starting"


def running_line(elapsed: float, running: Sequence[RunPoint]) -> str:
    """The periodic "still running" line."""
    parts = [f"{point.name} {epoch_progress(point)}" for point in running]
    return f"  ... {format_duration(elapsed)} elapsed; running: " + ", ".join(parts)


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of a log ("" if it cannot be read)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.rstrip().splitlines()[-lines:])
