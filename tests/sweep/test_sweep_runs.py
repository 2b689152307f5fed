"""Real sweeps on a tiny .npz: worker processes, report with selection, resume, skip, failures, CLI."""

from __future__ import annotations

import io
import json
import re
import sys

import pytest
import yaml

from helpers.sweeps import sweep_dict, write_npz
from mr2.cli.main import main
from mr2.engine import TrainingSession
from mr2.sweep import plan_sweep, prepare_sweep, run_points, run_sweep, spec_from_dict


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """The sweep of ``sweep_dict`` (6 runs, 2 workers), one run interrupted beforehand."""
    root = tmp_path_factory.mktemp("sweep")
    npz = write_npz(root / "data.npz")
    spec = spec_from_dict(sweep_dict(npz, root / "runs"))
    points = plan_sweep(spec)
    # An interrupted run: a checkpoint after epoch 1 of 2 and no final.json.
    interrupted = next(p for p in points if p.name == "mr2__c_bar=2__seed=1")
    assert TrainingSession(interrupted.config, quiet=True).fit(stop_after_epoch=1) is None
    assert not (interrupted.run_dir / "final.json").exists()
    out = io.StringIO()
    result = run_sweep(spec, stream=out)
    return spec, points, result, out.getvalue(), root


def test_every_run_finishes_and_progress_is_reported(finished):
    spec, points, result, output, _ = finished
    assert result.ok and [o.status for o in result.outcomes] == ["done"] * 6
    assert "running 6 of 6 runs (1 resuming from a checkpoint) with 2 workers, 1 thread each" in output
    done = re.findall(r"^\[(\d)/6\] done (\S+) \(\d+ s\)", output, flags=re.MULTILINE)
    assert sorted(name for _, name in done) == sorted(p.name for p in points)
    assert [int(i) for i, _ in done] == list(range(1, 7))
    assert re.search(r"\[1/6\] done \S+ \(\d+ s\), ETA \d+ s", output)
    for point in points:
        log = (point.run_dir / "train.log").read_text()
        assert log.startswith("=== mr2 sweep, ") and f"[{point.name}] test accuracy" in log
        assert (spec.sweep_dir / "configs" / f"{point.name}.yaml").is_file()
    saved = json.loads((spec.sweep_dir / "sweep.json").read_text())
    assert [r["name"] for r in saved["runs"]] == [p.name for p in points]


def test_the_interrupted_run_resumed_from_its_checkpoint(finished):
    _, points, _, _, _ = finished
    run_dir = next(p.run_dir for p in points if p.name == "mr2__c_bar=2__seed=1")
    epochs = [json.loads(line)["epoch"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert epochs == [1, 2]  # epoch 1 was not trained again
    assert "resumed" in (run_dir / "train.log").read_text()


def test_report_selects_on_validation_and_records_it(finished):
    spec, points, result, output, _ = finished
    report_dir = spec.sweep_dir / "report"
    # The choice, recomputed from the validation sections of final.json.
    scores: dict[str, list[float]] = {}
    for point in points:
        final = json.loads((point.run_dir / "final.json").read_text())
        if point.label == "mr2":
            scores.setdefault(point.setting_name, []).append(final["validation"]["overall_accuracy"])
    means = {name: sum(v) / len(v) for name, v in scores.items()}
    best = max(means, key=lambda name: (means[name], -list(means).index(name)))
    selection = json.loads((report_dir / "selection.json").read_text())
    assert selection["select_by"] == "val_accuracy" and selection["split"] == "validation"
    assert selection["selected"] == {"erm": "", "mr2": best}
    recorded = {s["setting_name"]: s["mean"] for s in selection["settings"]["mr2"]}
    assert recorded == pytest.approx(means)
    # Only the selected setting is in the main comparison.
    report = json.loads((report_dir / "report.json").read_text())
    assert sorted(report["methods"]) == ["erm", "mr2"]
    assert report["methods"]["mr2"]["runs"] == [f"mr2__{best}__seed=0", f"mr2__{best}__seed=1"]
    markdown = (report_dir / "report.md").read_text()
    assert "## Hyperparameter selection (validation split)" in markdown
    assert f"| mr2 | **{best}** | 2/2 |" in markdown
    other = next(name for name in means if name != best)
    assert f"| mr2 | {other} | 2/2 |" in markdown and f"Selected: mr2: {best}." in markdown
    settings = (report_dir / "settings.csv").read_text().splitlines()
    assert settings[0].startswith("method,setting,selected,finished_seeds,planned_seeds,val_accuracy_mean")
    assert len(settings) == 1 + 3
    assert f"mr2: {best} (val_accuracy" in output
    assert result.report is not None and result.report.markdown_path == report_dir / "report.md"


def test_report_html_carries_the_sweep_section(finished):
    spec, points, _, _, _ = finished
    report_dir = spec.sweep_dir / "report"
    selection = json.loads((report_dir / "selection.json").read_text())
    best = selection["selected"]["mr2"]
    other = next(p.setting_name for p in points if p.label == "mr2" and p.setting_name != best)
    page = (report_dir / "report.html").read_text()
    assert "<h2>Sweep</h2>" in page
    assert f"<p>Sweep tiny in {spec.sweep_dir}: 6 of 6 planned runs finished; 2 seed(s) (0, 1); reference erm.</p>" in page
    assert "<h2>Hyperparameter selection (validation split)</h2>" in page
    assert "(select_by: val_accuracy)" in page
    assert f'<td class="left" data-value="{best}">{best} (selected)</td>' in page
    assert f'<td class="left" data-value="{other}">{other}</td>' in page
    assert f"<p>Selected: mr2: {best}.</p>" in page
    assert "Failed runs" not in page
    assert page.index("<h2>Per-class accuracy</h2>") < page.index("<h2>Sweep</h2>") < page.index("<script>")


def test_a_second_invocation_skips_finished_runs(finished):
    spec, points, _, _, _ = finished
    stamps = {p.name: (p.run_dir / "final.json").stat().st_mtime_ns for p in points}
    out = io.StringIO()
    again = run_sweep(spec, stream=out, report=False)
    assert [o.status for o in again.outcomes] == ["skipped"] * 6
    assert {p.name: (p.run_dir / "final.json").stat().st_mtime_ns for p in points} == stamps
    assert "[6/6] skipped" in out.getvalue() and "running" not in out.getvalue()


def test_a_finished_run_with_another_configuration_is_not_reused(finished):
    _, _, _, _, root = finished
    changed = spec_from_dict(sweep_dict(root / "data.npz", root / "runs",
                                        methods={"erm": {"optim.lr": 0.5}}))
    out = io.StringIO()
    result = run_sweep(changed, stream=out, report=False)
    assert [o.status for o in result.outcomes] == ["failed", "failed"]
    assert "holds a finished run with a different configuration (differs in: optim.lr)" in result.failed[0].message


def test_a_failing_run_is_reported_with_its_log_and_the_others_finish(tmp_path, capsys):
    npz = write_npz(tmp_path / "data.npz")
    data = sweep_dict(npz, tmp_path / "runs", seeds=[0],
                      methods={"erm": {}, "mr2": {"method.options.c_bar": [-1, 1]}},
                      report={"bootstrap": 0, "plots": False})
    file = tmp_path / "sweep.yaml"
    file.write_text(yaml.safe_dump(data))
    assert main(["sweep", str(file)]) == 1
    captured = capsys.readouterr().out
    sweep_dir = tmp_path / "runs" / "tiny"
    assert re.search(r"\[\d/3\] FAILED mr2__c_bar=-1__seed=0 \(exit code 2, \d+ s\); log: ", captured)
    assert "c_bar must be a positive number; got -1" in captured  # the tail of the log is shown
    assert (sweep_dir / "erm__seed=0" / "final.json").is_file()
    assert (sweep_dir / "mr2__c_bar=1__seed=0" / "final.json").is_file()
    markdown = (sweep_dir / "report" / "report.md").read_text()
    assert "## Failed runs" in markdown and "`mr2__c_bar=-1__seed=0`: exit code 2" in markdown
    assert "| mr2 | **c_bar=1** | 1/1 |" in markdown and "| mr2 | c_bar=-1 | 0/1 |" in markdown
    page = (sweep_dir / "report" / "report.html").read_text()
    assert "<h2>Failed runs</h2>" in page
    assert re.search(r"<li>mr2__c_bar=-1__seed=0: exit code 2 \(log: \S+train\.log\)</li>", page)
    assert '<td class="left" data-value="c_bar=1">c_bar=1 (selected)</td>' in page
    assert "2 run(s) trained, 0 skipped (finished earlier), 1 failed." in captured


def test_cli_dry_run_writes_configs_and_trains_nothing(tmp_path, capsys):
    npz = write_npz(tmp_path / "data.npz")
    file = tmp_path / "sweep.yaml"
    file.write_text(yaml.safe_dump(sweep_dict(npz, tmp_path / "runs")))
    args = ["sweep", str(file), "--dry-run", "--seeds", "3", "--methods", "mr2", "--set", "optim.epochs=5",
            "--name", "other"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "sweep 'other': 3 runs in" in printed and "to run" in printed
    assert "-m mr2 train --config " in printed
    config = yaml.safe_load((tmp_path / "runs" / "other" / "configs" / "mr2__c_bar=2__seed=3.yaml").read_text())
    assert config["optim"]["epochs"] == 5 and config["seed"] == 3 and config["method"]["options"] == {"c_bar": 2.0}
    assert not (tmp_path / "runs" / "other" / "erm__seed=3").exists()


def test_cli_errors_and_presets(tmp_path, capsys):
    assert main(["sweep"]) == 2
    assert "give a sweep file or --preset NAME" in capsys.readouterr().err
    assert main(["sweep", "--preset", "nope"]) == 2
    assert "unknown preset 'nope'" in capsys.readouterr().err
    assert main(["sweep", "--preset", "cifar100-resnet32", "--dry-run"]) == 2
    assert "pass --set data.root=..." in capsys.readouterr().err
    (tmp_path / "bad.yaml").write_text("methods: {erm: {}}\nseed: 1\n")
    assert main(["sweep", str(tmp_path / "bad.yaml")]) == 2
    assert "unknown sweep key 'seed'" in capsys.readouterr().err
    assert main(["presets"]) == 0
    listing = capsys.readouterr().out
    assert re.search(r"^demo +ERM vs MR2 \(default, T = d\) vs MR2 \(paper, T = 1\) on Fashion-MNIST", listing, flags=re.MULTILINE)
    assert main(["presets", "demo"]) == 0
    assert "name: demo" in capsys.readouterr().out


def test_runs_launched_as_python_processes_and_devices_per_worker(tmp_path):
    npz = write_npz(tmp_path / "data.npz")
    spec = spec_from_dict(sweep_dict(npz, tmp_path / "runs", methods={"erm": {}}, seeds=[0, 1], workers=2,
                                     devices=[3, 5]))
    points = prepare_sweep(spec)
    # A fresh interpreter per run (`python -m mr2 train --config ...`), as with torchrun.
    outcomes = run_points(points[:1], python=sys.executable, stream=io.StringIO(), devices=[3])
    assert outcomes[0].status == "done", outcomes[0].log_tail
    header = (points[0].run_dir / "train.log").read_text().splitlines()[0]
    assert header.endswith(f"-m mr2 train --config {points[0].run_dir.parent / 'configs' / 'erm__seed=0.yaml'}"
                           ", CUDA_VISIBLE_DEVICES=3")
    # Forked runs: each worker has its own device.
    outcomes = run_points(points, workers=2, stream=io.StringIO(), devices=spec.devices)
    assert [o.status for o in outcomes] == ["skipped", "done"]
    assert re.search(r"\(1 thread, CUDA_VISIBLE_DEVICES=[35]\)$", (points[1].run_dir / "train.log").read_text().splitlines()[0])


def test_a_configuration_field_added_later_with_its_default_does_not_make_runs_stale(tmp_path):
    npz = write_npz(tmp_path / "data.npz")
    spec = spec_from_dict(sweep_dict(npz, tmp_path / "runs", methods={"erm": {}}, seeds=[0]))
    (point,) = plan_sweep(spec)
    from mr2.config import config_to_dict
    from mr2.sweep.runner import finished_config_mismatch

    point.run_dir.mkdir(parents=True)
    old = config_to_dict(point.config)
    del old["optim"]["grad_clip"]  # as written by an mr2 without that field (its default: null)
    (point.run_dir / "config.yaml").write_text(yaml.safe_dump(old))
    assert finished_config_mismatch(point) == []
    old["optim"]["lr"] = 0.3
    del old["model"]["options"]["hidden_dims"]
    (point.run_dir / "config.yaml").write_text(yaml.safe_dump(old))
    assert finished_config_mismatch(point) == ["model.options.hidden_dims", "optim.lr"]
