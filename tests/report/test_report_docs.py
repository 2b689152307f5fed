"""docs/report.md's worked example, run as written: a scikit-learn classifier's predictions through
`mr2 report --predictions`; the per-class accuracies equal scikit-learn's per-class recall."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import numpy as np
import pytest
from sklearn.metrics import recall_score

from mr2.cli.main import main as cli_main

DOC = Path(__file__).parents[2] / "docs" / "report.md"


def block_after(marker: str, language: str) -> str:
    text = DOC.read_text(encoding="utf-8")
    start = text.index(marker)
    match = re.compile(rf"```{language}\n(.*?)```", re.DOTALL).search(text, start)
    assert match is not None, marker
    return match.group(1)


def test_wine_worked_example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {}
    exec(block_after("<!-- worked-example: python", "python"), namespace)
    (command,) = [line for line in block_after("<!-- worked-example: shell", "bash").splitlines() if line]
    argv = shlex.split(command)
    assert argv[:2] == ["mr2", "report"]
    assert cli_main(argv[1:]) == 0, capsys.readouterr().err

    data = json.loads((tmp_path / "wine-report" / "report.json").read_text())
    models = namespace["models"]
    x_test, y_test = namespace["x_test"], namespace["y_test"]
    assert isinstance(models, dict)
    for name, model in models.items():
        recall = recall_score(y_test, model.predict(x_test), average=None)
        np.testing.assert_array_equal(data["runs"][name]["report"]["by_class"], recall)
        assert data["runs"][name]["report"]["class_names"] == ["class_0", "class_1", "class_2"]
    # Two labelled files: a comparison of the two models against the reference.
    assert data["reference"] == "logreg" and set(data["methods"]) == {"logreg", "tree"}
    assert data["methods"]["tree"]["sign_test"]["better"] + data["methods"]["tree"]["sign_test"]["worse"] >= 1
    markdown = (tmp_path / "wine-report" / "report.md").read_text()
    assert "| logreg | 1 |" in markdown and "| tree | 1 |" in markdown and "Difference to logreg" in markdown
    assert (tmp_path / "wine-report" / "report.html").stat().st_size > 10_000
