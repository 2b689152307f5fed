"""`mr2 report --predictions`: reading .npz / .pt / .csv predictions of any classifier."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.metrics import confusion_matrix as sk_confusion_matrix

from mr2.cli.main import main as cli_main
from mr2.report import predictions as predictions_module
from mr2.report.exceptions import PredictionsError
from mr2.report.predictions import load_predictions, parse_label, read_predictions

NUM_CLASSES = 4
NAMES = ["ant", "bee", "cat", "dog"]


def make_data(seed: int, n: int = 120) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y_true = np.random.default_rng(0).integers(0, NUM_CLASSES, n)  # the same test set for every seed
    logits = rng.normal(size=(n, NUM_CLASSES))
    logits[np.arange(n), y_true] += 1.0 + 0.3 * seed
    return y_true, logits


def write_csv(path: Path, header: list[str], rows: list[list[object]]) -> Path:
    path.write_text(",".join(header) + "\n" + "".join(",".join(map(str, r)) + "\n" for r in rows))
    return path


def test_every_format_gives_the_sklearn_confusion_matrix(tmp_path: Path) -> None:
    y_true, logits = make_data(1)
    y_pred = logits.argmax(axis=1)
    expected = sk_confusion_matrix(y_true, y_pred, labels=range(NUM_CLASSES))
    np.savez(tmp_path / "ids.npz", y_true=y_true, y_pred=y_pred)
    np.savez(tmp_path / "logits.npz", y_true=y_true, logits=logits, class_names=np.array(NAMES))
    torch.save({"y_true": torch.from_numpy(y_true), "logits": torch.from_numpy(logits)}, tmp_path / "logits.pt")
    torch.save({"y_true": y_true.tolist(), "y_pred": y_pred.tolist()}, tmp_path / "lists.pt")
    write_csv(tmp_path / "ids.csv", ["y_true", "y_pred"], [[t, p] for t, p in zip(y_true, y_pred)])
    write_csv(tmp_path / "scores.csv", ["y_true", *NAMES], [[t, *map(repr, row.tolist())] for t, row in zip(y_true, logits)])
    files = ["ids.npz", "logits.npz", "logits.pt", "lists.pt", "ids.csv", "scores.csv"]
    runs = load_predictions([f"{tmp_path / f}={Path(f).suffix[1:]}{Path(f).stem}" for f in files])
    for run in runs:
        np.testing.assert_array_equal(run.confusion, expected, err_msg=run.name)
        assert run.class_names == NAMES  # from logits.npz, the other files agree or have none
    assert [r.method for r in runs] == ["npzids", "npzlogits", "ptlogits", "ptlists", "csvids", "csvscores"]
    assert read_predictions(tmp_path / "scores.csv").class_names == NAMES
    assert read_predictions(tmp_path / "ids.csv").class_names is None


def test_labels_group_methods_and_seeds(tmp_path: Path) -> None:
    specs = []
    for method, shift in (("erm", 0), ("mr2", 3)):
        for seed in range(3):
            y_true, logits = make_data(seed + shift)
            np.savez(tmp_path / f"{method}{seed}.npz", y_true=y_true, logits=logits)
            specs.append(f"{tmp_path / f'{method}{seed}.npz'}={method}@{seed}")
    runs = load_predictions(specs, class_names=NAMES)
    assert [(r.name, r.method, r.seed) for r in runs[:2]] == [("erm@0", "erm", 0), ("erm@1", "erm", 1)]
    out = tmp_path / "out"
    assert cli_main(["report", "--predictions", *specs, "--out", str(out), "--bootstrap", "0", "--no-plots"]) == 0
    data = json.loads((out / "report.json").read_text())
    assert data["methods"]["mr2"]["seeds"] == [0, 1, 2]
    assert data["methods"]["mr2"]["paired_t_test"]["overall"]["num_pairs"] == 3
    assert "| mr2 | 3 |" in (out / "report.md").read_text()


def test_default_label_is_the_stem_without_seed(tmp_path: Path) -> None:
    y_true, logits = make_data(0)
    np.savez(tmp_path / "resnet.npz", y_true=y_true, logits=logits)
    (run,) = load_predictions([tmp_path / "resnet.npz"])
    assert (run.name, run.method, run.seed, run.path) == ("resnet", "resnet", None, tmp_path / "resnet.npz")
    assert parse_label("a@b@7") == ("a@b", 7)


def _error(message: str) -> str:
    return f"mr2 report: error: {message}"


ErrorCase = Callable[[Path], tuple[list[str], str]]


def case_label_out_of_range(tmp: Path) -> tuple[list[str], str]:
    np.savez(tmp / "a.npz", y_true=np.array([0, 1, 2, 3]), y_pred=np.array([0, 1, 2, 4]))
    (tmp / "names.txt").write_text("\n".join(NAMES) + "\n")
    args = ["--predictions", str(tmp / "a.npz"), "--class-names", str(tmp / "names.txt")]
    return args, predictions_module.LABEL_OUT_OF_RANGE.format(path=tmp / "a.npz", key="y_pred", value=4, num_classes=4)


def case_negative_label(tmp: Path) -> tuple[list[str], str]:
    np.savez(tmp / "a.npz", y_true=np.array([0, -1]), y_pred=np.array([0, 1]))
    return ["--predictions", str(tmp / "a.npz")], predictions_module.LABEL_OUT_OF_RANGE.format(
        path=tmp / "a.npz", key="y_true", value=-1, num_classes="K"
    )


def case_nan_logits(tmp: Path) -> tuple[list[str], str]:
    logits = np.zeros((3, 2))
    logits[1, 0] = np.nan
    np.savez(tmp / "a.npz", y_true=np.array([0, 1, 1]), logits=logits)
    return ["--predictions", str(tmp / "a.npz")], predictions_module.NOT_FINITE.format(path=tmp / "a.npz", count=1, row=1)


def case_empty_npz(tmp: Path) -> tuple[list[str], str]:
    np.savez(tmp / "a.npz", y_true=np.zeros(0, dtype=np.int64), y_pred=np.zeros(0, dtype=np.int64))
    return ["--predictions", str(tmp / "a.npz")], predictions_module.EMPTY_FILE.format(path=tmp / "a.npz")


def case_empty_csv(tmp: Path) -> tuple[list[str], str]:
    (tmp / "a.csv").write_text("y_true,y_pred\n")
    return ["--predictions", str(tmp / "a.csv")], predictions_module.EMPTY_FILE.format(path=tmp / "a.csv")


def case_unknown_column(tmp: Path) -> tuple[list[str], str]:
    write_csv(tmp / "a.csv", ["y_true", "y_pred", "weight"], [[0, 0, 1.0]])
    return ["--predictions", str(tmp / "a.csv")], predictions_module.UNKNOWN_COLUMNS.format(path=tmp / "a.csv", columns=["weight"])


def case_unknown_key(tmp: Path) -> tuple[list[str], str]:
    np.savez(tmp / "a.npz", y_true=np.array([0, 1]), preds=np.array([0, 1]))
    return ["--predictions", str(tmp / "a.npz")], predictions_module.UNKNOWN_KEYS.format(path=tmp / "a.npz", keys=["preds"])


def case_bad_cell(tmp: Path) -> tuple[list[str], str]:
    write_csv(tmp / "a.csv", ["y_true", "y_pred"], [[0, 0], [1, "cat"]])
    return ["--predictions", str(tmp / "a.csv")], predictions_module.CELL_INVALID.format(
        path=tmp / "a.csv", line=3, column="y_pred", value="cat"
    )


def case_no_y_true_column(tmp: Path) -> tuple[list[str], str]:
    write_csv(tmp / "a.csv", ["label", "y_pred"], [[0, 0]])
    return ["--predictions", str(tmp / "a.csv")], predictions_module.COLUMN_MISSING.format(path=tmp / "a.csv")


def case_different_test_sets(tmp: Path) -> tuple[list[str], str]:
    np.savez(tmp / "a.npz", y_true=np.array([0, 1, 1]), y_pred=np.array([0, 1, 0]))
    np.savez(tmp / "b.npz", y_true=np.array([0, 0, 1]), y_pred=np.array([0, 1, 0]))
    return ["--predictions", str(tmp / "a.npz"), str(tmp / "b.npz")], predictions_module.Y_TRUE_MISMATCH.format(
        first=tmp / "a.npz", other=tmp / "b.npz", index=1, first_value=1, other_value=0
    )


def case_different_sizes(tmp: Path) -> tuple[list[str], str]:
    np.savez(tmp / "a.npz", y_true=np.array([0, 1, 1]), y_pred=np.array([0, 1, 0]))
    np.savez(tmp / "b.npz", y_true=np.array([0, 1]), y_pred=np.array([0, 1]))
    return ["--predictions", str(tmp / "a.npz"), str(tmp / "b.npz")], predictions_module.NUM_SAMPLES_MISMATCH.format(
        first=tmp / "a.npz", first_n=3, other=tmp / "b.npz", other_n=2
    )


def case_different_class_counts(tmp: Path) -> tuple[list[str], str]:
    np.savez(tmp / "a.npz", y_true=np.array([0, 1]), logits=np.eye(2))
    np.savez(tmp / "b.npz", y_true=np.array([0, 1]), logits=np.eye(3)[:2])
    return ["--predictions", str(tmp / "a.npz"), str(tmp / "b.npz")], predictions_module.NUM_CLASSES_MISMATCH.format(
        first=tmp / "a.npz", first_k=2, other=tmp / "b.npz", other_k=3
    )


def case_bad_label(tmp: Path) -> tuple[list[str], str]:
    np.savez(tmp / "a.npz", y_true=np.array([0, 1]), y_pred=np.array([0, 1]))
    return ["--predictions", f"{tmp / 'a.npz'}=mr2@first"], predictions_module.LABEL_INVALID.format(
        label="mr2@first", path=tmp / "a.npz", problem="seed 'first' is not an integer"
    )


def case_duplicate_label(tmp: Path) -> tuple[list[str], str]:
    np.savez(tmp / "a.npz", y_true=np.array([0, 1]), y_pred=np.array([0, 1]))
    np.savez(tmp / "b.npz", y_true=np.array([0, 1]), y_pred=np.array([1, 1]))
    return ["--predictions", f"{tmp / 'a.npz'}=m@0", f"{tmp / 'b.npz'}=m@0"], predictions_module.DUPLICATE_LABEL.format(
        first=tmp / "a.npz", other=tmp / "b.npz", label="m@0"
    )


def case_missing_file(tmp: Path) -> tuple[list[str], str]:
    return ["--predictions", str(tmp / "nope.npz")], predictions_module.FILE_NOT_FOUND.format(path=tmp / "nope.npz")


def case_corrupt_file(tmp: Path) -> tuple[list[str], str]:
    (tmp / "a.npz").write_bytes(b"not a zip archive")
    args = ["--predictions", str(tmp / "a.npz")]
    with pytest.raises(PredictionsError) as info:
        read_predictions(tmp / "a.npz")
    assert str(info.value).startswith(predictions_module.FILE_UNREADABLE.split("{error}")[0].format(path=tmp / "a.npz"))
    return args, str(info.value)


def case_wrong_suffix(tmp: Path) -> tuple[list[str], str]:
    (tmp / "a.json").write_text("{}")
    return ["--predictions", str(tmp / "a.json")], predictions_module.FORMAT_UNKNOWN.format(path=tmp / "a.json", suffix=".json")


def case_class_names_disagree(tmp: Path) -> tuple[list[str], str]:
    np.savez(tmp / "a.npz", y_true=np.array([0, 1]), logits=np.eye(2), class_names=np.array(["x", "y"]))
    (tmp / "names.txt").write_text("y\nx\n")
    args = ["--predictions", str(tmp / "a.npz"), "--class-names", str(tmp / "names.txt")]
    return args, predictions_module.CLASS_NAMES_MISMATCH.format(first="--class-names", other=tmp / "a.npz")


def case_fractional_ids(tmp: Path) -> tuple[list[str], str]:
    np.savez(tmp / "a.npz", y_true=np.array([0.0, 1.5]), y_pred=np.array([0, 1]))
    return ["--predictions", str(tmp / "a.npz")], predictions_module.NOT_INTEGER.format(
        path=tmp / "a.npz", key="y_true", problem="fractional values"
    )


ERROR_CASES: list[ErrorCase] = [
    case_label_out_of_range, case_negative_label, case_nan_logits, case_empty_npz, case_empty_csv,
    case_unknown_column, case_unknown_key, case_bad_cell, case_no_y_true_column, case_different_test_sets,
    case_different_sizes, case_different_class_counts, case_bad_label, case_duplicate_label, case_missing_file,
    case_corrupt_file, case_wrong_suffix, case_class_names_disagree, case_fractional_ids,
]


@pytest.mark.parametrize("case", ERROR_CASES, ids=[c.__name__[5:] for c in ERROR_CASES])
def test_bad_files_exit_2_with_one_line_and_write_nothing(
    case: ErrorCase, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args, message = case(tmp_path)
    out = tmp_path / "out"
    assert cli_main(["report", *args, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == _error(message) + "\n"
    assert "\n" not in message
    assert not out.exists()
