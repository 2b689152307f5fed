"""Exit codes of forked trainers started and waited for from several threads at once (a sweep's
workers): multiprocessing's forkserver ``Popen.poll`` is not thread-safe, and ``Process.start()``
polls every live child, so without serialising those reads a run that succeeded could be recorded
as exit code 255."""

from __future__ import annotations

import multiprocessing
import threading
from collections import Counter

from mr2.sweep.processes import TrainerProcess, start_process
from sweep.process_targets import sleep_then_exit


def _many_children(threads: int, per_thread: int) -> Counter[int]:
    context = multiprocessing.get_context("forkserver")
    codes: list[int] = []
    lock = threading.Lock()

    def worker(k: int) -> None:
        for i in range(per_thread):
            # Staggered lifetimes, so children end while other threads are starting theirs.
            process = context.Process(target=sleep_then_exit, args=(0.002 * ((i + k) % 5),))
            start_process(process)
            code = TrainerProcess(process).wait()
            with lock:
                codes.append(code)

    workers = [threading.Thread(target=worker, args=(k,)) for k in range(threads)]
    for thread in workers:
        thread.start()
    for thread in workers:
        thread.join()
    return Counter(codes)


def test_children_started_and_awaited_from_several_threads_all_report_their_own_exit_code():
    # Unserialised (plain start() and join()), this many children gave about 3% spurious 255s here.
    codes = _many_children(threads=3, per_thread=60)
    assert codes == Counter({0: 180})


def test_wait_for_times_out_on_a_running_child_then_sees_it_end():
    process = multiprocessing.get_context("forkserver").Process(target=sleep_then_exit, args=(0.5,))
    start_process(process)
    child = TrainerProcess(process)
    assert child.alive() and child.wait_for(0.01) is False
    assert child.wait_for(10.0) is True and not child.alive() and child.wait() == 0
