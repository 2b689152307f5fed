"""End to end through the engine and the CLI on a real .npz file: outputs, resume, errors."""

from __future__ import annotations

import json

import pytest
import torch
import yaml

from helpers import base_config
from mr2.cli.main import main
from mr2.config import config_from_dict
from mr2.engine import TrainingSession, train
from mr2.engine.checkpoint import load_checkpoint
from mr2.rundir import RunDirectoryError


def test_cli_train_writes_a_complete_run_directory(spread_npz, tmp_path, capsys):
    config_file = tmp_path / "run.yaml"
    config_file.write_text(yaml.safe_dump(base_config(spread_npz, tmp_path / "runs")))
    assert main(["train", "--config", str(config_file), "--set", "optim.epochs=2", "--quiet"]) == 0
    run = tmp_path / "runs" / "run"
    assert "test accuracy" in capsys.readouterr().out
    resolved = yaml.safe_load((run / "config.yaml").read_text())
    assert resolved["optim"]["epochs"] == 2 and resolved["method"]["name"] == "mr2"
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in lines] == [1, 2]
    assert len(lines[-1]["temperatures"]) == 4 and "val_accuracy" in lines[-1]
    final = json.loads((run / "final.json").read_text())
    confusion = torch.tensor(final["confusion_matrix"])
    assert confusion.shape == (4, 4) and int(confusion.sum()) == 59 == final["num_samples"]
    assert final["overall_accuracy"] == pytest.approx(float(confusion.diagonal().sum()) / 59)
    per_class = confusion.diagonal().double() / confusion.sum(1).double()
    assert final["per_class_accuracy"] == pytest.approx(per_class.tolist())
    stats = final["class_statistics"]
    assert set(stats) == {"mean_sq_norm", "spread", "second_moment", "temperatures"}
    assert sum(stats["temperatures"]) == pytest.approx(4.0, rel=1e-5)  # mean gamma = c_bar
    assert len(final["logit_margins"]["median"]) == 4
    assert any((run / "tensorboard").iterdir())
    checkpoint = load_checkpoint(run / "checkpoints" / "last.pt")
    assert checkpoint["epoch"] == 2 and "statistics.loss.feature_sum" not in checkpoint["method"]
    assert checkpoint["method"]["loss.statistics.feature_sum"].shape == (4, 16)


def test_logit_margins_in_final_json_match_the_model(spread_npz, tmp_path):
    config = config_from_dict(base_config(spread_npz, tmp_path, optim={"epochs": 1}, method={"name": "erm"}))
    session = TrainingSession(config, quiet=True)
    final = session.fit()
    assert final is not None
    xs = torch.stack([session.data.test[i][0] for i in range(len(session.data.test))])
    ys = torch.tensor([session.data.test[i][1] for i in range(len(session.data.test))])
    with torch.no_grad():
        logits, _ = session.model.eval()(xs)
    for k in range(4):
        rows = logits[ys == k]
        true = rows[:, k]
        other = torch.cat([rows[:, :k], rows[:, k + 1 :]], 1).max(1).values
        assert final["logit_margins"]["mean"][k] == pytest.approx(float((true - other).mean()), rel=1e-4, abs=1e-5)
        assert final["logit_margins"]["median"][k] == pytest.approx(
            float((true - other).double().quantile(0.5)), rel=1e-4, abs=1e-5
        )


@pytest.mark.parametrize("method", ["erm", "mr2"])
def test_resume_from_checkpoint_equals_uninterrupted_run(spread_npz, tmp_path, method):
    whole = config_from_dict(base_config(spread_npz, tmp_path, name="whole", method={"name": method}))
    split = config_from_dict(base_config(spread_npz, tmp_path, name="split", method={"name": method}))
    expected = train(whole, quiet=True)
    assert TrainingSession(split, quiet=True).fit(stop_after_epoch=1) is None
    assert not (tmp_path / "split" / "final.json").exists()
    resumed = TrainingSession(split, quiet=True).fit()
    assert resumed is not None
    assert resumed["confusion_matrix"] == expected["confusion_matrix"]
    a = load_checkpoint(tmp_path / "whole" / "checkpoints" / "last.pt")
    b = load_checkpoint(tmp_path / "split" / "checkpoints" / "last.pt")
    for key in a["model"]:
        torch.testing.assert_close(a["model"][key], b["model"][key], msg=key)
    for key in a["method"]:
        torch.testing.assert_close(a["method"][key], b["method"][key], msg=key)
    metrics = (tmp_path / "split" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(m)["epoch"] for m in metrics] == [1, 2, 3]


def test_finished_run_is_not_overwritten_and_config_change_is_refused(spread_npz, tmp_path):
    config = config_from_dict(base_config(spread_npz, tmp_path, optim={"epochs": 1}, method={"name": "erm"}))
    train(config, quiet=True)
    before = (tmp_path / "run" / "final.json").read_text()
    with pytest.raises(RunDirectoryError, match="holds a finished run"):
        train(config, quiet=True)
    assert (tmp_path / "run" / "final.json").read_text() == before
    (tmp_path / "run" / "final.json").unlink()  # an unfinished run with a checkpoint
    changed = config_from_dict(base_config(spread_npz, tmp_path, optim={"epochs": 1, "lr": 0.2}, method={"name": "erm"}))
    with pytest.raises(RunDirectoryError, match=r"differs in: optim\.lr"):
        train(changed, quiet=True)


def test_cli_eval_and_errors(spread_npz, tmp_path, capsys):
    config = config_from_dict(base_config(spread_npz, tmp_path, optim={"epochs": 1}))
    final = train(config, quiet=True)
    assert main(["eval", str(tmp_path / "run")]) == 0
    again = json.loads((tmp_path / "run" / "eval_test.json").read_text())
    assert again["confusion_matrix"] == final["confusion_matrix"]
    assert main(["eval", str(tmp_path / "nothing")]) == 2
    assert "is not a run directory" in capsys.readouterr().err
    assert main(["train", "--set", "optim.lrr=1"]) == 2
    assert "unknown config key 'optim.lrr'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["data.root=/nonexistent/mr2-data"], "not found"),
        (["method.name=mr2", "method.options.c_bar=-1"], "c_bar must be a positive number; got -1"),
        (["method.name=jtt", "method.options.bogus=1"], "unknown option(s) ['bogus'] for method 'jtt'"),
    ],
)
def test_cli_train_reports_bad_data_and_method_options_in_one_line(
    overrides, message, spread_npz, tmp_path, capsys
):
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(base_config(spread_npz, tmp_path, optim={"epochs": 1})))
    sets = [arg for item in overrides for arg in ("--set", item)]
    if overrides[0].startswith("data.root"):
        sets = ["--set", "data.name=cifar10", *sets]
    assert main(["train", "--config", str(config), "--quiet", *sets]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mr2 train: error: ")
    assert message in err
    assert "Traceback" not in err
    assert not (tmp_path / "run" / "final.json").exists()
