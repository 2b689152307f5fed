"""The run record (final.json) as one type: round trip, the reader's errors naming the file, and
the one RunDirectoryError that the report's and the engine's callers both catch."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from mr2.report.exceptions import ReportError
from mr2.report.exceptions import RunDirectoryError as ReportsRunDirectoryError
from mr2.rundir import DatasetInfo, FinalRecord, RunDirectory, RunDirectoryError, SplitFigures
from mr2.rundir.layout import FILE_UNREADABLE, RUN_UNFINISHED
from mr2.rundir.record import (
    CONFUSION_SHAPE,
    FIELD_INVALID,
    FIELD_MISSING,
    FINAL_NOT_MAPPING,
    FORMAT_UNSUPPORTED,
)

RECORD = FinalRecord(
    run_name="hbr-seed1",
    method="hbr",
    seed=1,
    dataset=DatasetInfo(num_classes=3, name="toy", class_names=("a", "b", "c")),
    split="test",
    num_samples=9,
    confusion_matrix=((3, 0, 0), (1, 2, 0), (0, 0, 3)),
    overall_accuracy=8 / 9,
    per_class_accuracy=(1.0, 2 / 3, 1.0),
    class_statistics={"class_hardness": (0.5, -0.25, 1.5), "resampled_count": (4, 10, 2)},
    logit_margins={"mean": (1.0, 0.5, 2.0), "median": (1.5, 0.25, 2.0)},
    validation=SplitFigures(overall_accuracy=0.5, per_class_accuracy=(0.5, 0.5, 0.5),
                            confusion_matrix=((1, 1, 0), (0, 1, 1), (1, 0, 1))),
    checkpoint="best.pt",
)


def test_round_trip() -> None:
    assert FinalRecord.from_dict(RECORD.to_dict(), "run") == RECORD
    through_json = FinalRecord.from_dict(json.loads(json.dumps(RECORD.to_dict())), "run")
    assert through_json == RECORD
    assert through_json.class_statistics is not None
    assert [type(v) for v in through_json.class_statistics["resampled_count"]] == [int] * 3


def test_the_dict_has_the_files_key_order() -> None:
    assert list(RECORD.to_dict()) == [
        "format_version", "run_name", "method", "seed", "dataset", "split", "num_samples",
        "confusion_matrix", "overall_accuracy", "per_class_accuracy", "class_statistics",
        "logit_margins", "validation", "checkpoint",
    ]
    assert list(RECORD.to_dict()["dataset"]) == ["name", "num_classes", "class_names"]
    bare = FinalRecord(method="erm", dataset=DatasetInfo(num_classes=1), confusion_matrix=((2,),))
    assert "validation" not in bare.to_dict() and "checkpoint" not in bare.to_dict()
    assert bare.to_dict()["class_statistics"] is None


def test_nan_and_null_read_as_nan() -> None:
    data = RECORD.to_dict()
    data["per_class_accuracy"] = [1.0, None, math.nan]
    data["class_statistics"] = {"spread": [1.0, None, 2.0], "empty": [], "absent": None}
    record = FinalRecord.from_dict(data, "run")
    assert record.per_class_accuracy is not None and record.class_statistics is not None
    assert record.per_class_accuracy[0] == 1.0
    assert math.isnan(record.per_class_accuracy[1]) and math.isnan(record.per_class_accuracy[2])
    assert list(record.class_statistics) == ["spread"]
    assert json.dumps(record.to_dict()["per_class_accuracy"]) == "[1.0, NaN, NaN]"


def _written(tmp_path: Path, data: Any) -> RunDirectory:
    run = RunDirectory(tmp_path / "run")
    run.path.mkdir()
    run.final.write_text(data if isinstance(data, str) else json.dumps(data))
    return run


def _edited(**changes: Any) -> dict[str, Any]:
    data = RECORD.to_dict()
    for key, value in changes.items():
        if value is None:
            data.pop(key)
        else:
            data[key] = value
    return data


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (_edited(format_version=2), FORMAT_UNSUPPORTED.format(path="{path}", version=2, supported=[1])),
        (_edited(format_version=None), FORMAT_UNSUPPORTED.format(path="{path}", version=None, supported=[1])),
        (_edited(method=None), FIELD_MISSING.format(path="{path}", field="method")),
        (_edited(confusion_matrix=None), FIELD_MISSING.format(path="{path}", field="confusion_matrix")),
        (_edited(dataset={"name": "toy"}), FIELD_MISSING.format(path="{path}", field="dataset.num_classes")),
        (_edited(seed="1"), FIELD_INVALID.format(path="{path}", field="seed", problem="not an integer: '1'")),
        (
            _edited(class_statistics={"class_hardness": [1.0, 2.0]}),
            FIELD_INVALID.format(path="{path}", field="class_statistics.class_hardness",
                                 problem="expected 3 values, got shape (2,)"),
        ),
        (
            _edited(confusion_matrix=[[1, 0], [0, 1]]),
            CONFUSION_SHAPE.format(path="{path}", shape=(2, 2), num_classes=3),
        ),
        ([1, 2], FINAL_NOT_MAPPING.format(path="{path}", kind="list")),
    ],
)
def test_a_bad_record_is_one_error_naming_the_file(tmp_path: Path, data: Any, expected: str) -> None:
    run = _written(tmp_path, data)
    with pytest.raises(RunDirectoryError) as caught:
        run.read_final()
    assert str(caught.value) == expected.replace("{path}", str(run.path))
    assert "final.json" in str(caught.value)


def test_an_unreadable_or_missing_file(tmp_path: Path) -> None:
    run = _written(tmp_path, '{"format_version": 1, "meth')
    with pytest.raises(RunDirectoryError) as caught:
        run.read_final()
    assert str(caught.value).startswith(
        FILE_UNREADABLE.split("({error})")[0].format(file="final.json", path=run.path)
    )
    run.final.unlink()
    with pytest.raises(RunDirectoryError) as caught:
        run.read_final()
    assert str(caught.value) == RUN_UNFINISHED.format(path=run.path)


def test_one_run_directory_error_for_both_kinds_of_caller() -> None:
    assert ReportsRunDirectoryError is RunDirectoryError
    error = RunDirectoryError("x")
    assert isinstance(error, ReportError) and isinstance(error, ValueError)
    assert isinstance(error, RuntimeError)


def test_write_final_and_read_it_back(tmp_path: Path) -> None:
    run = RunDirectory(tmp_path / "run")
    run.write_final(RECORD)
    assert run.is_finished and run.read_final() == RECORD
    assert run.final.read_text() == json.dumps(RECORD.to_dict(), indent=2) + "\n"
    assert run.write_eval(RECORD) == run.eval_file("test")
    assert json.loads(run.eval_file("test").read_text())["checkpoint"] == "best.pt"
