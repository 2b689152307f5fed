"""Two sweeps of the same spec at once, and runs another process holds: every run trains once, none
is reported failed, and a sweep whose runs all finished (here or elsewhere) exits 0."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import textwrap
import threading
import time

import yaml

from helpers.sweeps import sweep_dict, write_npz
from mr2.rundir import RunDirectory
from mr2.sweep import plan_sweep, prepare_sweep, run_points, spec_from_dict
from mr2.sweep.processes import config_path
from mr2.sweep.runner import FINISHED_ELSEWHERE


def _epochs(run_dir):
    return [json.loads(line)["epoch"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_two_concurrent_sweeps_of_one_spec_both_succeed(tmp_path):
    npz = write_npz(tmp_path / "data.npz", train_per_class=20, test_per_class=8)
    data = sweep_dict(npz, tmp_path / "runs", workers=2, seeds=[0, 1],
                      methods={"erm": {}, "mr2": {"method.options.c_bar": [2.0]}})
    data["base"]["optim"]["epochs"] = 1
    file = tmp_path / "sweep.yaml"
    file.write_text(yaml.safe_dump(data))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "mr2", "sweep", str(file), "--no-plots"]
    sweeps = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
              for _ in range(2)]
    outputs = [sweep.communicate(timeout=240)[0] for sweep in sweeps]
    assert [sweep.returncode for sweep in sweeps] == [0, 0], "\n=====\n".join(outputs)
    points = plan_sweep(spec_from_dict(data))
    trained = [name for output in outputs for name in re.findall(r"\] done (\S+) \(", output)]
    assert sorted(trained) == sorted(p.name for p in points)  # each run trained by one sweep, once
    for output in outputs:
        assert "FAILED" not in output and "0 failed" in output, output
        finished = re.findall(r"\] (?:done|skipped|finished elsewhere) (\S+)", output)
        assert sorted(finished) == sorted(p.name for p in points), output
    for point in points:
        assert _epochs(point.run_dir) == [1]
    report = (tmp_path / "runs" / "tiny" / "report" / "report.md").read_text()
    assert "Failed runs" not in report


def _holding_trainer(config_file, run_dir):
    """`mr2 train` on a sweep's run in another process, returned once it holds the run directory."""
    trainer = subprocess.Popen([sys.executable, "-m", "mr2", "train", "--config", str(config_file), "--quiet"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               env={**os.environ, "OMP_NUM_THREADS": "1"})
    directory = RunDirectory(run_dir)
    while directory.holder() != trainer.pid:
        assert trainer.poll() is None, trainer.communicate()[0]
        time.sleep(0.002)
    return trainer


def test_a_run_another_process_is_training_is_waited_for_and_not_trained_again(tmp_path):
    npz = write_npz(tmp_path / "data.npz", train_per_class=20, test_per_class=8)
    data = sweep_dict(npz, tmp_path / "runs", methods={"erm": {}}, seeds=[0], workers=1)
    data["base"]["optim"]["epochs"] = 10  # long enough to be seen holding its lock
    spec = spec_from_dict(data)
    (held,) = prepare_sweep(spec)
    trainer = _holding_trainer(config_path(held), held.run_dir)
    out = io.StringIO()
    try:
        outcomes = run_points([held], workers=1, stream=out)
    finally:
        trainer.communicate(timeout=120)
    assert trainer.returncode == 0
    assert [(o.status, o.message) for o in outcomes] == [("skipped", FINISHED_ELSEWHERE)]
    text = out.getvalue()
    assert f"waiting for {held.name}: process {trainer.pid} owns {held.run_dir}" in text
    assert f"[1/1] finished elsewhere {held.name} ({FINISHED_ELSEWHERE})" in text
    assert _epochs(held.run_dir) == list(range(1, 11))  # trained once, by the other process
    log = held.run_dir / "train.log"  # the sweep started no trainer of its own
    assert not log.exists() or "=== mr2 sweep" not in log.read_text()


_LOCK_HOLDER = textwrap.dedent("""
    import sys, time
    from mr2.rundir import RunLock
    with RunLock(sys.argv[1]):
        print("held", flush=True)
        sys.stdin.readline()
""")


def test_a_run_released_unfinished_by_another_process_is_trained_by_the_sweep(tmp_path):
    npz = write_npz(tmp_path / "data.npz")
    spec = spec_from_dict(sweep_dict(npz, tmp_path / "runs", methods={"erm": {}}, seeds=[0], workers=1))
    (point,) = prepare_sweep(spec)
    holder = subprocess.Popen([sys.executable, "-c", _LOCK_HOLDER, str(point.run_dir)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdin is not None
    assert holder.stdout.readline() == "held\n"
    out = io.StringIO()

    def release():  # once the sweep waits: the other process lets go without finishing the run
        _wait_for_line(out, "waiting for")
        holder.stdin.close()

    waiter = threading.Thread(target=release)
    waiter.start()
    try:
        (outcome,) = run_points([point], workers=1, stream=out)
    finally:
        waiter.join()
        holder.wait(timeout=60)
        holder.stdout.close()
    assert outcome.status == "done", out.getvalue()
    assert f"waiting for {point.name}: process {holder.pid} owns" in out.getvalue()
    assert _epochs(point.run_dir) == [1, 2]


def _wait_for_line(stream, text, timeout=60.0):
    deadline = time.time() + timeout
    while text not in stream.getvalue() and time.time() < deadline:
        time.sleep(0.01)
