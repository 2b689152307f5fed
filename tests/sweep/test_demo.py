"""`mr2 demo`: the real demo on a tiny Fashion-MNIST in the IDX format, and its data messages."""

from __future__ import annotations

import re
import urllib.error
from pathlib import Path

import pytest

from helpers.data_files import write_fashion_mnist as _write_fashion_mnist
from mr2.cli.demo import DEMO_LEGEND, comparison_table
from mr2.cli.main import main


@pytest.fixture
def no_fashion_mnist(tmp_path, monkeypatch):
    """A machine without the Debian package and without data/fashion-mnist."""
    monkeypatch.setattr("mr2.data.fashion_mnist.DEFAULT_FASHION_MNIST_ROOT", tmp_path / "absent")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_demo_runs_the_preset_and_prints_the_table(tmp_path, capsys):
    _write_fashion_mnist(tmp_path / "fmnist", n_train=300, n_test=60)
    args = ["demo", "--data-root", str(tmp_path / "fmnist"), "--output-dir", str(tmp_path / "runs"),
            "--epochs", "1"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert ("mr2 demo: ERM vs MR2Loss() (default, T = d) vs the paper's MR2 (T = 1) on Fashion-MNIST (1 epoch, "
            "seed 0), 2 run(s) in parallel") in out
    assert re.search(r"\[3/3\] done (erm|mr2|mr2_paper)__seed=0", out)
    header = re.search(r"^method +overall +easy +medium +hard +worst class +\(which\)$", out, re.MULTILINE)
    assert header is not None
    assert re.search(r"^erm +\d+\.\d\d +\d+\.\d\d +\d+\.\d\d +\d+\.\d\d +\d+\.\d\d +\S", out, re.MULTILINE)
    assert re.search(r"^mr2 - erm +[+-]\d+\.\d\d", out, re.MULTILINE)
    assert re.search(r"^mr2_paper - erm +[+-]\d+\.\d\d", out, re.MULTILINE)
    assert DEMO_LEGEND in out and "MR2Loss(num_classes=10), the default" in out
    # The rows are the losses the legend names: MR2Loss()'s default and the paper's form.
    import yaml

    from mr2.losses.mr2 import DEFAULT_VARIANT

    runs = tmp_path / "runs" / "demo"
    variants = {name: yaml.safe_load((runs / f"{name}__seed=0" / "config.yaml").read_text())["method"]
                for name in ("mr2", "mr2_paper")}
    assert variants["mr2"]["options"].get("variant", DEFAULT_VARIANT) == "distance_1d" == DEFAULT_VARIANT
    assert variants["mr2_paper"]["options"]["variant"] == "paper"
    report = tmp_path / "runs" / "demo" / "report" / "report.md"
    assert f"Report: {report}" in out and report.is_file()
    markdown = report.read_text()
    assert "## Validation results" in markdown and "| mr2 | **(no grid)** | 1/1 |" in markdown
    plots = re.findall(r"^  (\S+\.png)$", out, re.MULTILINE)
    assert any(p.endswith("sorted_accuracy.png") for p in plots)
    assert all(Path(p).is_file() for p in plots)


def test_missing_data_without_download_says_how_to_get_it(no_fashion_mnist, capsys):
    assert main(["demo", "--no-download"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mr2 demo: Fashion-MNIST is not available.")
    assert "Fashion-MNIST file train-images-idx3-ubyte[.gz] not found" in err
    assert "sudo make data" in err and "apt-get install dataset-fashion-mnist" in err
    assert "disabled by --no-download" in err and "data/fashion-mnist" in err
    assert not (no_fashion_mnist / "runs").exists()


def test_a_failed_download_is_explained(no_fashion_mnist, monkeypatch, capsys):
    def offline(*args, **kwargs):
        raise urllib.error.URLError("no route to host")

    monkeypatch.setattr("torchvision.datasets.FashionMNIST", offline)
    assert main(["demo"]) == 2
    captured = capsys.readouterr()
    assert "downloading it with torchvision into data/fashion-mnist" in captured.out
    assert "(this attempt failed: URLError: <urlopen error no route to host>)" in captured.err


def test_a_data_root_without_the_files_is_refused(tmp_path, capsys):
    assert main(["demo", "--data-root", str(tmp_path)]) == 2
    assert "not attempted with --data-root" in capsys.readouterr().err


def test_comparison_table_alignment():
    from types import SimpleNamespace

    import numpy as np

    def summary(method, values, per_class):
        keys = ["overall", "tier:easy", "tier:medium", "tier:hard", "group_min"]
        return SimpleNamespace(
            method=method, mean=dict(zip(keys, values)), per_class_mean=np.array(per_class),
            difference={}, runs=[SimpleNamespace(class_names=["a", "b"])],
        )

    erm = summary("erm", [0.9, 0.99, 0.9, 0.8, 0.7], [0.7, 0.9])
    mr2 = summary("mr2", [0.91, 0.98, 0.92, 0.83, float("nan")], [0.95, 0.6])
    mr2.difference = {k: mr2.mean[k] - erm.mean[k] for k in erm.mean}
    tiers = SimpleNamespace(names=["easy", "medium", "hard"])
    table = comparison_table(SimpleNamespace(methods=[erm, mr2], tiers=tiers))
    lines = table.splitlines()
    assert lines[0] == "method     overall   easy  medium   hard  worst class  (which)"
    assert lines[1] == "erm          90.00  99.00   90.00  80.00        70.00  a"
    assert lines[2] == "mr2          91.00  98.00   92.00  83.00          n/a  b"
    assert lines[3] == "mr2 - erm    +1.00  -1.00   +2.00  +3.00          n/a"
