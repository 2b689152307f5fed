"""A sweep owns its trainers: they die with it (kill -9 included), stop with it (SIGTERM), and a
run directory owned by another process is left alone."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml

import mr2
from helpers.sweeps import sweep_dict, write_npz
from mr2.rundir import RunDirectory, RunLock
from mr2.sweep import plan_sweep, run_points, spec_from_dict
from mr2.sweep.runner import IN_USE

SRC = str(Path(mr2.__file__).resolve().parent.parent)
RUNS = ("erm__seed=0", "mr2__seed=0")


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([SRC, *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]])
    env["OMP_NUM_THREADS"] = "1"
    return env


def _alive(pid: int) -> bool:
    """Exists and is not a zombie (a process killed but not reaped yet is dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


def _descendants(root: int, depth: int = 1) -> set[int]:
    """Every process at least ``depth`` levels below ``root`` (1: children, their children, ...)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rpartition(")")[2].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    found: set[int] = set()
    todo = [(root, 0)]
    while todo:
        parent, level = todo.pop()
        for child in children.get(parent, []):
            if level + 1 >= depth:
                found.add(child)
            todo.append((child, level + 1))
    return found


def _write_sweep(path: Path, output_dir: Path) -> Path:
    """Two runs (ERM, MR2) of ~6 s each on synthetic data, deterministic, two workers."""
    spec = {
        "name": "own",
        "output_dir": str(output_dir),
        "base": {
            "data": {"name": "synthetic", "val_fraction": 0.25, "batch_size": 32, "eval_batch_size": 128,
                     "options": {"num_classes": 4, "dim": 8, "train_per_class": 400}},
            "model": {"name": "mlp", "options": {"hidden_dims": [64]}},
            "optim": {"name": "sgd", "lr": 0.05, "epochs": 6},
            "device": "cpu",
            "deterministic": True,
        },
        "methods": {"erm": {}, "mr2": {}},
        "seeds": [0],
        "reference": "erm",
        "workers": 2,
        "threads_per_run": 1,
    }
    path.write_text(yaml.safe_dump(spec))
    return path


def _sweep(spec: Path, log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "mr2", "sweep", str(spec), "--no-report"],
                                stdout=out, stderr=subprocess.STDOUT, env=_environment())


def _wait_for_a_trainer_mid_run(
    sweep: subprocess.Popen[bytes], sweep_dir: Path
) -> tuple[set[int], set[int], list[RunDirectory]]:
    """Wait until a run has its first checkpoint but no final.json; return the sweep's processes
    (all, and the trainers: those below its fork server) and the runs caught mid-run."""
    deadline = time.time() + 180
    while time.time() < deadline:
        assert sweep.poll() is None, "the sweep ended before a trainer was caught mid-run"
        directories = [RunDirectory(sweep_dir / name) for name in RUNS]
        caught = [d for d in directories if d.last_checkpoint.is_file() and not d.is_finished]
        if caught:
            processes, trainers = _descendants(sweep.pid), _descendants(sweep.pid, depth=2)
            holders = {d.holder() for d in directories} - {None}
            assert holders <= trainers  # the engine's run lock (where it takes one) names a trainer
            return processes, trainers, caught
        time.sleep(0.05)
    raise AssertionError("no trainer reached its first checkpoint in time")


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> dict[str, bytes]:
    """final.json of every run of an uninterrupted sweep (two uninterrupted sweeps agree byte for byte)."""
    root = tmp_path_factory.mktemp("uninterrupted")
    spec = _write_sweep(root / "sweep.yaml", root / "runs")
    sweep = _sweep(spec, root / "sweep.log")
    assert sweep.wait(timeout=300) == 0, (root / "sweep.log").read_text()
    return {name: (root / "runs" / "own" / name / "final.json").read_bytes() for name in RUNS}


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM], ids=["SIGKILL", "SIGTERM"])
def test_stopping_the_sweep_stops_its_trainers_and_a_rerun_resumes_to_the_same_results(
    tmp_path, uninterrupted, signum
):
    spec = _write_sweep(tmp_path / "sweep.yaml", tmp_path / "runs")
    sweep_dir = tmp_path / "runs" / "own"
    log = tmp_path / "sweep.log"
    sweep = _sweep(spec, log)
    processes, trainers, caught = _wait_for_a_trainer_mid_run(sweep, sweep_dir)
    assert trainers and all(_alive(pid) for pid in trainers)  # at least one trainer mid-run
    os.kill(sweep.pid, signum)
    code = sweep.wait(timeout=60)
    if signum == signal.SIGTERM:
        # Forwarded: the sweep stopped its trainers, waited for them, then exited 128 + 15.
        assert code == 128 + signal.SIGTERM, log.read_text()
        assert "interrupted (SIGTERM); its trainers were stopped" in log.read_text()
        assert not {pid for pid in trainers if _alive(pid)}  # ended before the sweep did
    deadline = time.time() + 10
    while time.time() < deadline and any(_alive(pid) for pid in processes):
        time.sleep(0.05)
    survivors = {pid for pid in processes if _alive(pid)}
    for pid in survivors:  # do not leave them running whatever happens
        os.kill(pid, signal.SIGKILL)
    assert not survivors, f"processes of the killed sweep still alive: {sorted(survivors)}"
    # Its trainer did not carry on to the end of the run (nor did it finish between the checks).
    assert not any(d.is_finished for d in caught)
    assert all(RunDirectory(sweep_dir / name).holder() is None for name in RUNS)

    rerun = _sweep(spec, log)
    assert rerun.wait(timeout=300) == 0, log.read_text()
    text = log.read_text()
    assert "resuming from a checkpoint" in text and "0 failed" in text
    assert any("resumed" in (sweep_dir / name / "train.log").read_text() for name in RUNS)
    for name in RUNS:
        assert (sweep_dir / name / "final.json").read_bytes() == uninterrupted[name], name


def test_a_run_directory_owned_by_another_process_is_left_alone(tmp_path):
    npz = write_npz(tmp_path / "data.npz")
    spec = spec_from_dict(sweep_dict(npz, tmp_path / "runs", methods={"erm": {}}, seeds=[0, 1]))
    owned, free = plan_sweep(spec)
    out = io.StringIO()
    with RunLock(owned.run_dir):  # as a trainer of another sweep would hold it
        outcomes = run_points([owned, free], workers=1, stream=out)
    assert [o.status for o in outcomes] == ["running", "done"]
    message = IN_USE.format(process=f"process {os.getpid()}", run_dir=owned.run_dir)
    assert outcomes[0].message == message
    assert f"running elsewhere {owned.name}: {message}" in out.getvalue()
    directory = RunDirectory(owned.run_dir)
    assert not directory.log.exists() and not directory.has_run_files()


def test_the_cli_reports_a_run_in_use_and_exits_1(tmp_path, capsys):
    from mr2.cli.main import main

    npz = write_npz(tmp_path / "data.npz")
    data = sweep_dict(npz, tmp_path / "runs", methods={"erm": {}}, seeds=[0])
    file = tmp_path / "sweep.yaml"
    file.write_text(yaml.safe_dump(data))
    (point,) = plan_sweep(spec_from_dict(data))
    with RunLock(point.run_dir):
        assert main(["sweep", str(file), "--dry-run"]) == 0
        assert f"running (pid {os.getpid()})" in capsys.readouterr().out
        assert main(["sweep", str(file), "--no-report"]) == 1
    out = capsys.readouterr().out
    assert "RUNNING ELSEWHERE erm__seed=0: not started: process" in out
    assert "1 running in another process (not started again)" in out


_PARENT = textwrap.dedent("""
    import sys, threading, time
    from mr2.sweep.processes import start_subprocess

    started = []
    worker = threading.Thread(target=lambda: started.append(start_subprocess(["sleep", "120"])))
    worker.start()
    worker.join()  # the thread that asked for the child has ended: the child must live on
    time.sleep(0.5)
    print(started[0].pid, flush=True)
    time.sleep(120)
""")


def test_a_subprocess_trainer_outlives_the_thread_that_started_it_but_not_the_sweep():
    parent = subprocess.Popen([sys.executable, "-c", _PARENT], stdout=subprocess.PIPE, env=_environment())
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        assert _alive(child)  # not killed by the end of the worker thread
        assert os.getpgid(child) == child  # leads its own process group (torchrun and its workers)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        deadline = time.time() + 10
        while time.time() < deadline and _alive(child):
            time.sleep(0.05)
        alive = _alive(child)
        if alive:
            os.kill(child, signal.SIGKILL)
        assert not alive, "the subprocess outlived the killed sweep"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if parent.stdout is not None:
            parent.stdout.close()


def test_a_lock_that_names_no_pid_is_another_process_not_process_minus_1():
    """Issue 38: a lock file without a pid made the sweep print 'process -1 owns ...'."""
    from mr2.sweep.runner import _process

    assert _process(-1) == "another process (its lock file names no pid)"
    assert _process(4242) == "process 4242"
    assert "-1" not in IN_USE.format(process=_process(-1), run_dir="RUN")
