"""Reading run directories, with a clear error for every broken case."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from mr2.report import run_dir as run_dir_module
from mr2.report.exceptions import RunDirectoryError
from mr2.report.run_dir import load_run, load_runs
from mr2.rundir import layout, record

CONFUSION = np.array([[8, 2, 0], [1, 9, 0], [0, 3, 7]])


def test_reads_a_run(tmp_path: Path, make_run: Callable[..., Path]) -> None:
    path = make_run(
        tmp_path / "run",
        method="mr2",
        seed=3,
        confusion=CONFUSION,
        class_names=["a", "b", "c"],
        statistics={"spread": [1.0, None, 2.0], "temperatures": [1.0, 1.1, 0.9]},
        metrics=[{"epoch": 0, "train_loss": 1.0}],
    )
    run = load_run(path)
    assert (run.name, run.method, run.seed, run.dataset) == ("mr2-seed3", "mr2", 3, "toy")
    np.testing.assert_array_equal(run.confusion, CONFUSION)
    assert run.class_names == ["a", "b", "c"]
    assert run.class_statistics is not None
    assert np.isnan(run.class_statistics["spread"][1])
    assert run.metrics == [{"epoch": 0, "train_loss": 1.0}]
    assert run.config == {"method": "mr2", "seed": 3, "dataset": "toy"}


def expect(error: pytest.ExceptionInfo[RunDirectoryError], template: str, **fields: object) -> None:
    assert str(error.value) == template.format(**fields)


def test_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(RunDirectoryError) as info:
        load_run(tmp_path / "nope")
    expect(info, layout.RUN_DIR_NOT_FOUND, path=tmp_path / "nope")


def test_file_instead_of_directory(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(RunDirectoryError) as info:
        load_run(tmp_path / "file")
    expect(info, layout.RUN_DIR_IS_A_FILE, path=tmp_path / "file")


def test_unfinished_run(tmp_path: Path) -> None:
    path = tmp_path / "run"
    path.mkdir()
    (path / "config.yaml").write_text("method: erm\n")
    with pytest.raises(RunDirectoryError) as info:
        load_run(path)
    expect(info, layout.RUN_UNFINISHED, path=path)
    (path / "config.yaml").unlink()
    with pytest.raises(RunDirectoryError) as info:
        load_run(path)
    expect(info, layout.CONFIG_MISSING, path=path)


def test_half_written_final(tmp_path: Path, make_run: Callable[..., Path]) -> None:
    path = make_run(tmp_path / "run", method="erm", seed=0, confusion=CONFUSION)
    text = (path / "final.json").read_text()
    (path / "final.json").write_text(text[: len(text) // 2])
    with pytest.raises(RunDirectoryError, match=r"final.json in .* cannot be parsed .* half-written"):
        load_run(path)


@pytest.mark.parametrize(
    ("edit", "template", "fields"),
    [
        (lambda f: f.update(format_version=7), record.FORMAT_UNSUPPORTED, {"version": 7, "supported": [1]}),
        (lambda f: f.pop("confusion_matrix"), record.FIELD_MISSING, {"field": "confusion_matrix"}),
        (
            lambda f: f.update(num_samples=99),
            run_dir_module.SAMPLE_COUNT_MISMATCH,
            {"num_samples": 99, "counted": 30},
        ),
        (
            lambda f: f["dataset"].update(num_classes=4),
            record.CONFUSION_SHAPE,
            {"shape": (3, 3), "num_classes": 4},
        ),
    ],
)
def test_inconsistent_final(
    tmp_path: Path,
    make_run: Callable[..., Path],
    edit: Callable[[dict[str, object]], object],
    template: str,
    fields: dict[str, object],
) -> None:
    path = make_run(tmp_path / "run", method="erm", seed=0, confusion=CONFUSION)
    final = json.loads((path / "final.json").read_text())
    edit(final)
    (path / "final.json").write_text(json.dumps(final))
    with pytest.raises(RunDirectoryError) as info:
        load_run(path)
    expect(info, template, path=path, **fields)


def test_corrupt_metrics_line(tmp_path: Path, make_run: Callable[..., Path]) -> None:
    path = make_run(tmp_path / "run", method="erm", seed=0, confusion=CONFUSION)
    (path / "metrics.jsonl").write_text('{"epoch": 0}\n{"epoch": 1\n')
    with pytest.raises(RunDirectoryError, match=r"metrics.jsonl in .*, line 2"):
        load_run(path)


def test_runs_must_be_comparable(tmp_path: Path, make_run: Callable[..., Path]) -> None:
    first = make_run(tmp_path / "a", method="erm", seed=0, confusion=CONFUSION)
    other_data = make_run(tmp_path / "b", method="mr2", seed=0, confusion=CONFUSION, dataset="cifar100")
    with pytest.raises(RunDirectoryError) as info:
        load_runs([first, other_data])
    expect(
        info,
        run_dir_module.DATASET_MISMATCH,
        first=first,
        first_value="toy",
        other=other_data,
        other_value="cifar100",
    )
    four = np.eye(4, dtype=np.int64) * 10
    other_k = make_run(tmp_path / "c", method="mr2", seed=0, confusion=four)
    with pytest.raises(RunDirectoryError) as info:
        load_runs([first, other_k])
    expect(
        info, run_dir_module.NUM_CLASSES_MISMATCH, first=first, first_value=3, other=other_k, other_value=4
    )
    fewer = CONFUSION.copy()
    fewer[2, 2] -= 1
    other_test = make_run(tmp_path / "d", method="mr2", seed=0, confusion=fewer)
    with pytest.raises(RunDirectoryError, match="different test sets"):
        load_runs([first, other_test])
    with pytest.raises(RunDirectoryError, match="both method 'erm' with seed 0"):
        load_runs([first, first])
    with pytest.raises(RunDirectoryError, match="no run directory given"):
        load_runs([])


def _record(name: str, **changes: object) -> run_dir_module.RunRecord:
    fields: dict[str, object] = {"method": "erm", "seed": 0, "confusion": CONFUSION, "dataset": "toy"}
    fields.update(class_names=["a", "b", "c"], split="test", path=Path(f"/runs/{name}"))
    fields.update(changes)
    return run_dir_module.RunRecord(name=name, **fields)


@pytest.mark.parametrize(
    ("changes", "template", "fields"),
    [
        (
            {"dataset": "cifar100", "split": "val"},
            run_dir_module.DATASET_MISMATCH,
            {"first_value": "toy", "other_value": "cifar100"},
        ),
        ({"dataset": None, "seed": 1}, None, {}),
        (
            {"confusion": np.eye(4, dtype=np.int64), "class_names": None},
            run_dir_module.NUM_CLASSES_MISMATCH,
            {"first_value": 3, "other_value": 4},
        ),
        ({"class_names": ["a", "c", "b"], "split": "val"}, run_dir_module.CLASS_NAMES_MISMATCH, {}),
        ({"class_names": None, "seed": 1}, None, {}),
        (
            {"split": "val", "confusion": CONFUSION * 2},
            run_dir_module.SPLIT_MISMATCH,
            {"first_value": "test", "other_value": "val"},
        ),
        (
            {"confusion": CONFUSION + np.diag([0, 0, 2]), "seed": 1},
            run_dir_module.TEST_SET_MISMATCH,
            {"index": 2, "first_value": 10, "other_value": 12},
        ),
        ({}, run_dir_module.DUPLICATE_RUN, {"method": "erm", "seed": 0}),
        ({"seed": 1, "name": "first"}, run_dir_module.DUPLICATE_NAME, {"name": "first"}),
    ],
)
def test_comparable_checks_in_order(
    changes: dict[str, object], template: str | None, fields: dict[str, object]
) -> None:
    """Each check's message, the first failing check winning; an unknown data set or class names
    (None) and a run without a seed are compared with nothing."""
    changes = dict(changes)
    first, other = _record("first"), _record(str(changes.pop("name", "other")), **changes)
    if template is None:
        run_dir_module.check_comparable([first, other])
        return
    with pytest.raises(RunDirectoryError) as info:
        run_dir_module.check_comparable([first, other])
    expect(info, template, first=first.label, other=other.label, **fields)
