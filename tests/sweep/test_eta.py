"""The sweep's ETA (issue 45 item 7: the demo's ETA said 58 s, then 2 min, and the last run took 54 s):
when each run takes the mean duration so far, the ETA is when the last run ends, checked against a
second-by-second simulation of the workers."""

from __future__ import annotations

import itertools

import pytest

from mr2.sweep.progress import estimate_remaining


def _simulated(mean: int, elapsed: list[int], queued: int, workers: int) -> int:
    """Seconds until every run ends: tick by tick, a free worker takes the next queued run."""
    busy = [mean - e for e in elapsed] + [0] * max(0, workers - len(elapsed))
    seconds = 0
    while True:
        for index, left in enumerate(busy):
            if left <= 0 and queued:
                busy[index] = mean
                queued -= 1
        if all(left <= 0 for left in busy) and not queued:
            return seconds
        busy = [left - 1 for left in busy]
        seconds += 1


@pytest.mark.parametrize(("workers", "running", "queued"),
                         [(w, r, q) for w, r, q in itertools.product((1, 2, 3), (0, 1, 2), (0, 1, 2, 5)) if r <= w])
def test_the_eta_is_when_the_last_run_ends(workers: int, running: int, queued: int) -> None:
    mean = 60
    elapsed = [7 * (k + 1) for k in range(running)]
    now = 1000.0
    started = [(f"run{k}", now - e) for k, e in enumerate(elapsed)]
    got = estimate_remaining([50.0, 70.0], left=running + queued, running=started, workers=workers, now=now)
    assert got == _simulated(mean, elapsed, queued, workers)


def test_three_equal_runs_on_two_workers() -> None:
    # The demo: 3 runs of about a minute on 2 workers. When the first ends, the third has just
    # started: a whole run's duration is left, not half of it (the old estimate said 30 s).
    assert estimate_remaining([60.0], left=2, running=[("b", 0.0), ("c", 60.0)], workers=2, now=60.0) == 60.0
    # The third not yet registered as started when the first ends: the same answer.
    assert estimate_remaining([60.0], left=2, running=[("b", 0.0)], workers=2, now=60.0) == 60.0
