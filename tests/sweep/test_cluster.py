"""The submitit launcher without a cluster: real submitit jobs through its ``local`` executor give the
local pool's results, a killed job is resubmitted and resumes, ``status`` reads each state from
files, invalid launcher options are clear errors."""

from __future__ import annotations

import copy
import io
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from mr2.cli.main import main
from mr2.config import ConfigError
from mr2.rundir import RunLock
from mr2.sweep import plan_sweep, prepare_sweep, run_sweep, spec_from_dict
from mr2.sweep.cluster import read_jobs
from mr2.sweep.launcher import NEEDS_SUBMITIT, SLURM_ONLY, launcher_from_dict
from mr2.sweep.status import status_table, sweep_status

pytest.importorskip("submitit", reason="submitit is the cluster extra (pip install 'mr2[cluster]')")

BASE: dict[str, Any] = {
    "data": {"name": "synthetic", "val_fraction": 0.25, "batch_size": 32, "eval_batch_size": 128,
             "options": {"num_classes": 4, "dim": 8, "train_per_class": 200}},
    "model": {"name": "mlp", "options": {"hidden_dims": [32]}},
    "optim": {"name": "sgd", "lr": 0.05, "epochs": 8},
    "device": "cpu",
    "deterministic": True,
}
LOCAL_JOBS = {"name": "slurm", "executor": "local", "timeout_min": 10, "max_requeues": 1}


def _spec(output_dir: Path, **changes: Any) -> dict[str, Any]:
    spec = {
        "name": "clu",
        "output_dir": str(output_dir),
        "base": copy.deepcopy(BASE),
        "methods": {"erm": {}, "mr2": {}},
        "seeds": [0, 1],
        "reference": "erm",
        "workers": 2,
        "threads_per_run": 1,
        "report": {"bootstrap": 20, "plots": False},
    }
    spec.update(changes)
    return spec


@pytest.fixture(scope="module")
def pool_and_jobs(tmp_path_factory):
    """The same 2-method x 2-seed sweep through the local pool and as submitit jobs."""
    root = tmp_path_factory.mktemp("cluster")
    pool = run_sweep(spec_from_dict(_spec(root / "pool")), stream=io.StringIO())
    out = io.StringIO()
    jobs = run_sweep(spec_from_dict(_spec(root / "jobs", launcher=LOCAL_JOBS)), stream=out)
    return root, pool, jobs, out.getvalue()


@pytest.mark.slow
def test_submitit_jobs_give_the_local_pools_results(pool_and_jobs):
    root, pool, jobs, output = pool_and_jobs
    assert pool.ok and jobs.ok, output
    assert "submitted 4 run(s) to submitit's local executor" in output
    for point in jobs.points:
        other = root / "pool" / "clu" / point.name / "final.json"
        assert (point.directory.final).read_bytes() == other.read_bytes(), point.name
        assert "=== mr2 sweep (submitit job " in point.directory.log.read_text()
    for name in ("comparison.csv", "per_class.csv"):
        assert (root / "jobs" / "clu" / "report" / name).read_text() == (
            root / "pool" / "clu" / "report" / name).read_text()
    record = read_jobs(root / "jobs" / "clu")
    assert record["executor"] == "local" and set(record["runs"]) == {p.name for p in jobs.points}
    for entry in record["runs"].values():
        assert entry["state"] == "done" and entry["attempt"] == 1 and Path(entry["stdout"]).parent.is_dir()
    assert [s.state for s in sweep_status(root / "jobs" / "clu")] == ["done"] * 4


@pytest.mark.slow
def test_a_killed_job_is_resubmitted_and_resumes_to_the_same_final_json(pool_and_jobs, tmp_path):
    root, _, _, _ = pool_and_jobs
    spec = spec_from_dict(_spec(tmp_path, methods={"erm": {}}, seeds=[0], launcher=LOCAL_JOBS))
    (point,) = plan_sweep(spec)
    out = io.StringIO()
    result: dict[str, Any] = {}
    worker = threading.Thread(target=lambda: result.update(sweep=run_sweep(spec, stream=out)))
    worker.start()
    killed = None
    deadline = time.time() + 240
    while time.time() < deadline and worker.is_alive():
        holder = point.directory.holder()
        if holder is not None and point.directory.last_checkpoint.is_file() and not point.directory.is_finished:
            os.kill(holder, signal.SIGKILL)  # the job's process, mid-run
            killed = holder
            break
        time.sleep(0.02)
    worker.join(timeout=300)
    assert killed is not None, "the job was not caught mid-run:\n" + out.getvalue()
    assert result["sweep"].ok, out.getvalue()
    assert "requeued erm__seed=0 as job" in out.getvalue()
    entry = read_jobs(spec.sweep_dir)["runs"]["erm__seed=0"]
    assert entry["attempt"] == 2 and len(entry["job_ids"]) == 2 and entry["state"] == "done"
    assert "resumed" in point.directory.log.read_text()
    uninterrupted = root / "pool" / "clu" / "erm__seed=0" / "final.json"
    assert point.directory.final.read_bytes() == uninterrupted.read_bytes()
    epochs = [r["epoch"] for r in point.directory.read_metrics()]
    assert epochs == sorted(set(epochs)) == list(range(1, BASE["optim"]["epochs"] + 1))


def test_status_reads_every_state_from_the_files(tmp_path, capsys):
    spec = spec_from_dict(_spec(tmp_path, methods={"erm": {}}, seeds=[0, 1, 2, 3, 4]))
    points = prepare_sweep(spec)
    done, running, failed, requeued, pending = points
    done.directory.path.mkdir(parents=True)
    done.directory.final.write_text("{}")
    done.directory.metrics.write_text("".join(json.dumps({"epoch": e}) + "\n" for e in (1, 2)))
    jobs = {
        failed.name: {"job_id": "7_2", "attempt": 2, "state": "failed", "error": "failed 2 time(s)"},
        requeued.name: {"job_id": "7_3", "attempt": 2, "state": "requeued", "error": "exit code -9"},
        pending.name: {"job_id": "7_4", "attempt": 1, "state": "submitted"},
    }
    (spec.sweep_dir / "submitit").mkdir()
    (spec.sweep_dir / "submitit" / "jobs.json").write_text(json.dumps({"runs": jobs}))
    with RunLock(running.run_dir):
        statuses = sweep_status(spec.sweep_dir)
        assert main(["sweep", "status", str(spec.sweep_dir)]) == 0
    assert [s.state for s in statuses] == ["done", "running", "failed", "requeued", "pending"]
    assert statuses[0].epoch == 2 and statuses[0].epochs == 8
    assert statuses[1].note == f"pid {os.getpid()}"
    assert [s.job_id for s in statuses] == [None, None, "7_2", "7_3", "7_4"]
    out = capsys.readouterr().out
    assert out.strip() == status_table(statuses).strip()
    assert "5 run(s): 1 done, 1 running, 1 requeued, 1 failed, 1 pending" in out
    # The report over whatever finished is refused without a finished reference run of real results.
    assert main(["sweep", "report", str(tmp_path / "nowhere")]) == 2
    assert "is not a sweep directory" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--launcher-option", "partitoin=gpu"], "unknown sweep key 'launcher.partitoin'"),
        (["--launcher-option", "gpus_per_run=two"], "sweep key 'launcher.gpus_per_run' must be"),
        (["--launcher-option", "executor=kubernetes"], "sweep key 'launcher.executor' must be"),
        (["--launcher-option", "timeout_min=0"], "launcher key 'launcher.timeout_min' must be >= 1"),
        (["--launcher-option", "nodes_per_run=2", "--launcher-option", "executor=local"],
         "launcher key 'launcher.nodes_per_run' > 1 needs executor 'slurm'"),
        (["--launcher-option", "partition"], "--launcher-option takes KEY=VALUE"),
    ],
    ids=["unknown-key", "type", "executor", "range", "nodes-local", "not-key-value"],
)
def test_invalid_launcher_options_are_clear_errors(tmp_path, capsys, options, message):
    file = tmp_path / "sweep.yaml"
    file.write_text(yaml.safe_dump(_spec(tmp_path / "runs")))
    assert main(["sweep", str(file), "--launcher", "slurm", *options]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mr2 sweep: error: ") and message in err and err.count("\n") == 1
    assert not (tmp_path / "runs").exists()


def test_a_slurm_key_with_the_local_launcher_and_a_missing_submitit_are_errors(tmp_path, capsys, monkeypatch):
    with pytest.raises(ConfigError) as error:
        launcher_from_dict({"name": "local", "partition": "gpu"})
    assert str(error.value) == SLURM_ONLY.format(key="partition")
    monkeypatch.setitem(sys.modules, "submitit", None)  # as if not installed
    file = tmp_path / "sweep.yaml"
    file.write_text(yaml.safe_dump(_spec(tmp_path / "runs", launcher=LOCAL_JOBS)))
    assert main(["sweep", str(file)]) == 2
    assert capsys.readouterr().err.strip() == f"mr2 sweep: error: {NEEDS_SUBMITIT}"
    assert not (tmp_path / "runs").exists()
