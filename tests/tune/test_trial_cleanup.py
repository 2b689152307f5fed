"""Issue 43 item 2: a trial owns everything it starts. A ``--command`` that leaves processes behind
(``sleep 301 &``, a child in a new session) leaves nothing running once the trial's command has ended,
normally, on ``--trial-timeout``, or with tune killed by ``kill -9``; with ``--launcher slurm``
(submitit's local executor) ``kill -9`` of tune leaves no job or controller running.

Real processes, no mocks. Every process a test starts carries a unique environment variable
(``MR2_CLEANUP_TEST=<marker>``, read back from ``/proc/<pid>/environ``): the leftovers are found by
it, whatever they are (shells, sleeps, submitit controllers and tasks), and each test's teardown kills
whatever still carries its marker.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from mr2.sweep.processes import start_subprocess
from mr2.tune.command import STOP_GRACE, TRIAL_PROCESS

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc (Linux)")

SCRIPT = Path(__file__).with_name("command_script.py")
TRAIN = f"{sys.executable} {SCRIPT} --loss-json {{loss}} --seed {{seed}} --out {{out}}"
VARIABLE = "MR2_CLEANUP_TEST"
#: Seconds after tune's end within which nothing of its trials may be left (the issue's bound).
SETTLE = 5.0


def _state(pid: str) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]


def leftovers(marker: str) -> dict[int, str]:
    """pid -> command line of every live (not zombie) process whose environment holds the marker."""
    needle = f"{VARIABLE}={marker}".encode()
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            if needle not in Path(f"/proc/{entry}/environ").read_bytes().split(b"\0"):
                continue
            if _state(entry) in ("Z", "X"):
                continue
            found[int(entry)] = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:  # ended meanwhile, or not ours
            continue
    return found


def settled(marker: str, seconds: float = SETTLE) -> dict[int, str]:
    """The processes still carrying the marker after up to ``seconds`` (empty as soon as none is)."""
    deadline = time.monotonic() + seconds
    while True:
        left = leftovers(marker)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def wait_for(condition, seconds: float = 60.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return bool(condition())


@pytest.fixture
def marker() -> Iterator[str]:
    """A unique marker; whatever still carries it at the end of the test is killed (SIGKILL)."""
    value = uuid.uuid4().hex
    yield value
    for pid in leftovers(value):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def _environment(marker: str, **extra: str) -> dict[str, str]:
    return {**os.environ, VARIABLE: marker, "PYTHONUNBUFFERED": "1", **extra}


def _tune(tmp_path: Path, marker: str, command: str, *extra: str, **env: str) -> subprocess.Popen[str]:
    """``mr2 tune --command`` in a process of its own, stderr to ``tmp_path/stderr`` (never a pipe: a
    process left behind would hold it open)."""
    with open(tmp_path / "stderr", "w") as err:
        return subprocess.Popen(
            [sys.executable, "-m", "mr2", "tune", "--command", command, "--num-classes", "6",
             "--candidates", "erm,mr2-paper-c1", "--seeds", "2", "--confirm-seeds", "2",
             "--output-dir", str(tmp_path), "--name", "t", *extra],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, text=True,
            env=_environment(marker, **env))


def _finish(process: subprocess.Popen[str], timeout: float = 120.0) -> int:
    try:
        return process.wait(timeout=timeout)
    finally:
        process.kill()
        process.wait()


def _kill_9(process: subprocess.Popen[str]) -> None:
    process.kill()
    process.wait(timeout=30)


#: Leaves a background process (in the trial's group) and one in a session of its own behind.
LITTERING = f"sleep 301 & setsid sleep 302 & {TRAIN}"


def test_a_normal_exit_leaves_no_process_of_any_trial(tmp_path, marker):
    """Every trial leaves ``sleep 301 &`` and a ``setsid`` sleep behind when its command exits 0: none
    of them outlives its trial (they used to run on after tune, 16 of them)."""
    assert _finish(_tune(tmp_path, marker, LITTERING)) == 0, (tmp_path / "stderr").read_text()
    assert settled(marker) == {}


def test_kill_9_of_tune_leaves_no_process(tmp_path, marker):
    """tune killed with SIGKILL while a trial hangs, after other trials left processes behind: nothing
    of any trial is left 5 s later, the hanging trial's ``setsid`` child included."""
    started = tmp_path / "t" / "trials" / "selection" / "mr2-paper-c1" / "seed=0" / "output" / "started"
    process = _tune(tmp_path, marker, f"{LITTERING.removesuffix(TRAIN)}touch {{out}}/started; {TRAIN}",
                    FAKE_FAIL="mr2-paper-c1:hang")
    try:
        assert wait_for(started.is_file), (tmp_path / "stderr").read_text()
        assert len(leftovers(marker)) >= 5  # tune, the hanging trial's leader, shell, script and sleeps
    finally:
        _kill_9(process)
    assert settled(marker) == {}


def test_a_trial_over_the_timeout_leaves_no_process(tmp_path, marker):
    """``--trial-timeout``: the hanging trial is stopped with everything it started, its ``setsid``
    child included; nothing of any trial is left 5 s after tune's normal end."""
    tune = _tune(tmp_path, marker, LITTERING, "--trial-timeout", "3", FAKE_FAIL="mr2-paper-c1:hang")
    assert _finish(tune) == 0, (tmp_path / "stderr").read_text()
    record = (tmp_path / "t" / "recommendation.json").read_text()
    assert "--trial-timeout 3 s" in record  # the hanging trial did time out
    assert settled(marker) == {}


def _leader(marker: str, command: str) -> subprocess.Popen[bytes]:
    """The trial's process-group leader as tune starts it (a group of its own)."""
    return start_subprocess([sys.executable, TRIAL_PROCESS, str(STOP_GRACE), command], env=_environment(marker),
                            stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("command", [
    "setsid sleep 301 & exit 7",
    "setsid -f sleep 301; exit 7",  # forks: the sleep's parent is gone at once
    "(setsid sleep 301 &); exit 7",  # a double fork: the subshell ends, the sleep is an orphan
    f"{sys.executable} -c \"import subprocess; subprocess.Popen(['sleep', '301'], start_new_session=True)\"; exit 7",
], ids=["setsid", "setsid-fork", "double-fork", "python-new-session"])
def test_a_child_in_a_new_session_is_reached_after_the_command_exits(marker, command):
    """A child that leaves the trial's process group (a new session) is stopped when the command
    exits, and the leader passes on the command's exit code."""
    leader = _leader(marker, command)
    assert leader.wait(timeout=30) == 7
    assert settled(marker) == {}


def test_a_child_that_traps_sigterm_is_killed_after_the_grace(marker):
    """A left-behind child that ignores SIGTERM gets SIGKILL after the grace; the leader then exits."""
    trap = f"{sys.executable} -c \"import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(301)\""
    leader = _leader(marker, f"setsid {trap} & sleep 1; exit 0")
    start = time.monotonic()
    assert leader.wait(timeout=30) == 0
    assert STOP_GRACE - 0.5 < time.monotonic() - start < STOP_GRACE + 15  # (a loaded machine starts slowly)
    assert leftovers(marker) == {}


def test_sigterm_to_the_leader_reaches_a_child_in_a_new_session(marker):
    """A stop (SIGTERM to the group, as tune's stop and the death signal send it) while the command
    runs: its child in a new session is stopped as well; the leader exits 128 + 15."""
    leader = _leader(marker, "setsid sleep 301 & sleep 302")
    try:
        assert wait_for(lambda: len(leftovers(marker)) >= 4, 10)  # leader, shell, two sleeps
        os.killpg(leader.pid, signal.SIGTERM)
        assert leader.wait(timeout=30) == 128 + signal.SIGTERM
    finally:
        leader.kill()
        leader.wait()
    assert settled(marker) == {}


@pytest.mark.slow
def test_kill_9_of_a_slurm_tune_leaves_no_job_or_controller(tmp_path, marker):
    """``--launcher slurm`` with submitit's local executor: tune killed with SIGKILL while a trial's job
    runs leaves no job, controller or trial process behind; the rerun finds none to stop."""
    pytest.importorskip("submitit", reason="submitit is the cluster extra (pip install 'mr2[cluster]')")
    started = tmp_path / "t" / "trials" / "selection" / "erm" / "seed=0" / "output" / "started"
    slurm = ("--launcher", "slurm", "--launcher-option", "executor=local", "--launcher-option", "timeout_min=10")
    process = _tune(tmp_path, marker, f"sleep 301 & setsid sleep 302 & touch {{out}}/started; sleep 303; {TRAIN}",
                    *slurm)
    try:
        assert wait_for(started.is_file, 90), (tmp_path / "stderr").read_text()
        processes = leftovers(marker)
        assert any("submitit.local._local" in line for line in processes.values()), processes
        assert any("submitit.core._submit" in line for line in processes.values()), processes
    finally:
        _kill_9(process)
    assert settled(marker, 10.0) == {}


def test_the_next_run_stops_local_jobs_an_earlier_run_left(tmp_path, marker, monkeypatch, capsys):
    """The record of submitted jobs (``submitit/running.json``): the first submission of the next run
    stops each earlier job still running (its submitit controller and everything under it), names
    them, and runs its own."""
    submitit = pytest.importorskip("submitit", reason="submitit is the cluster extra (pip install 'mr2[cluster]')")
    from mr2.sweep.cluster import RUNNING_FILE, OwnedExecutor

    monkeypatch.setenv(VARIABLE, marker)  # inherited by the controllers and their tasks
    folder = tmp_path / "submitit"

    def executor() -> OwnedExecutor:
        inner = submitit.AutoExecutor(folder=str(folder / "%j"), cluster="local")
        inner.update_parameters(timeout_min=10)
        return OwnedExecutor(inner, folder)

    earlier = executor().submit(time.sleep, 301)  # owned by this process: the tether leaves it be
    assert wait_for(lambda: any("submitit.core._submit" in line for line in leftovers(marker).values()), 60)
    assert sorted(json.loads((folder / RUNNING_FILE).read_text())["jobs"]) == [earlier.job_id]
    later = executor().submit(int, "7")
    assert f"left running (it was killed before it could stop them): {earlier.job_id}" in capsys.readouterr().err
    assert later.result() == 7
    assert settled(marker) == {}
    assert earlier.done()  # stopped (and its controller reaped)
    assert json.loads((folder / RUNNING_FILE).read_text())["jobs"] == [later.job_id]
