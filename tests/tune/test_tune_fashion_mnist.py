"""A plain PyTorch training script mr2 did not write (``examples/tune_fashion_mnist.py``: its own data
loading and model class, a Fashion-MNIST subset, one epoch) through ``mr2 tune --command`` and
``mr2.tune.tune`` (in this process and as submitit jobs): each writes ``recommendation.json`` with a
verdict and the confirmation report."""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path

import pytest

from mr2.cli.main import main
from mr2.tune import tune

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
SCRIPT = EXAMPLES / "tune_fashion_mnist.py"
ROOT = Path(os.environ.get("FMNIST_ROOT", "/usr/share/datasets/fashion-mnist"))
#: Two candidates (ERM and one MR2 form), two seeds each way: the smallest tune (4 + 4 trials).
CANDIDATES = "erm,mr2-logit_only-c1"

pytestmark = pytest.mark.skipif(
    not (ROOT / "train-images-idx3-ubyte.gz").is_file(),
    reason=f"Fashion-MNIST is not in {ROOT} (make data, or set FMNIST_ROOT)",
)


def _check(directory: Path) -> dict:
    record = json.loads((directory / "recommendation.json").read_text())
    assert record["label"] in CANDIDATES.split(",")
    assert record["loss_spec"]["method"] == record["method"]
    assert record["label"] == (record["chosen"]["label"] if record["adopt"] else "erm")
    if record["verdict"] is not None:
        assert record["verdict"]["outcome"] in ("confirmed", "gain with a cost", "inconclusive", "contradicted",
                                                "nothing to confirm")
        assert record["verdict"]["seeds"] == [2, 3]
    assert [c["label"] for c in record["selection"]["candidates"]] == CANDIDATES.split(",")
    assert all(1 <= len(c["runs"]) <= 2 for c in record["selection"]["candidates"])  # racing: 1, or 2
    if record["confirmation"]["figures"] is not None:
        assert (directory / "confirmation" / "report" / "report.md").is_file()
        methods = record["confirmation"]["figures"]["methods"]
        assert all(m["seeds"] == [2, 3] for m in methods.values())
    return record


@pytest.fixture
def example(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLES))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(EXAMPLES), os.environ.get("PYTHONPATH", "")]))
    import tune_fashion_mnist

    return tune_fashion_mnist


def test_the_python_api_tunes_a_plain_pytorch_script(example, tmp_path):
    result = tune(example.train_fn, num_classes=10, candidates=CANDIDATES, seeds=2, confirm_seeds=2,
                  output_dir=tmp_path, name="py", stream=io.StringIO())
    record = _check(tmp_path / "py")
    assert record["source"] == {"kind": "python"} and result.record.to_dict() == record


@pytest.mark.slow
def test_the_command_line_tunes_the_same_script(tmp_path, capsys):
    command = f"{sys.executable} {SCRIPT} --loss-json {{loss}} --seed {{seed}} --out {{out}}"
    code = main(["tune", "--command", command, "--num-classes", "10", "--candidates", CANDIDATES, "--seeds", "2",
                 "--confirm-seeds", "2", "--workers", "2", "--output-dir", str(tmp_path), "--name", "cmd"])
    assert code == 0, capsys.readouterr()
    record = _check(tmp_path / "cmd")
    assert record["source"]["kind"] == "command"


@pytest.mark.slow
def test_the_python_api_runs_trials_as_submitit_jobs(example, tmp_path):
    submitit = pytest.importorskip("submitit", reason="submitit is the cluster extra (pip install 'mr2[cluster]')")
    executor = submitit.LocalExecutor(folder=tmp_path / "jobs")
    executor.update_parameters(timeout_min=10)
    tune(example.train_fn, num_classes=10, candidates=CANDIDATES, seeds=2, confirm_seeds=2, output_dir=tmp_path,
         name="jobs", executor=executor, stream=io.StringIO())
    record = _check(tmp_path / "jobs")
    assert len(list((tmp_path / "jobs").glob("*_result.pkl"))) == record["trainings"]  # each trial a job
