"""`mr2 report --predictions`: reading .npz / .pt / .csv predictions of any classifier."""

from __future__ import annotations

import json
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.metrics import confusion_matrix as sk_confusion_matrix

from mr2.cli import report as report_cli
from mr2.cli.main import main as cli_main
from mr2.report import predictions as predictions_module
from mr2.report.exceptions import PredictionsError
from mr2.report.limits import DEFAULT_MAX_CLASSES, confusion_bytes, format_bytes
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


def test_pt_views_that_fit_their_storage_are_read(tmp_path: Path) -> None:
    # Slices with an offset, strides and a transpose: fewer bytes than the storage holds, so the
    # expanded-view guard lets them through, and the values are the views', not the storage's.
    y_true, logits = make_data(2)
    padded_ids = torch.from_numpy(np.repeat(np.concatenate([[0], y_true]), 2))
    transposed = torch.from_numpy(np.ascontiguousarray(logits.T)).t()
    torch.save({"y_true": padded_ids[2::2], "logits": transposed}, tmp_path / "views.pt")
    run = read_predictions(tmp_path / "views.pt")
    np.testing.assert_array_equal(run.y_true, y_true)
    np.testing.assert_array_equal(run.y_pred, logits.argmax(axis=1))


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
    return ["--predictions", str(tmp / "a.csv")], predictions_module.COLUMN_MISSING.format(
        path=tmp / "a.csv", found="label,y_pred", hint=""
    )


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


def _too_many(path: Path, what: str, num_classes: int, limit: int = DEFAULT_MAX_CLASSES) -> str:
    return predictions_module.TOO_MANY_CLASSES.format(
        path=path, what=what, limit=limit, size=format_bytes(confusion_bytes(num_classes))
    )


def _sixty_rows_with(bad_id: object, key: str, dtype: type = np.int64) -> dict[str, np.ndarray]:
    y = (np.arange(60) % 4).astype(dtype)
    data = {"y_true": y, "y_pred": y.copy()}
    data[key][17] = bad_id
    return data


def case_id_30000_without_names(tmp: Path) -> tuple[list[str], str]:
    # One stray id in a 60-row file used to make K = 30,001 and allocate a 7.2 GB confusion matrix.
    np.savez(tmp / "a.npz", **_sixty_rows_with(30_000, "y_pred"))
    return ["--predictions", str(tmp / "a.npz")], _too_many(tmp / "a.npz", "y_pred holds class id 30000", 30_001)


def case_id_1e9_float(tmp: Path) -> tuple[list[str], str]:
    np.savez(tmp / "a.npz", **_sixty_rows_with(1e9, "y_true", np.float64))
    return ["--predictions", str(tmp / "a.npz")], _too_many(
        tmp / "a.npz", "y_true holds class id 1000000000", 10**9 + 1
    )


def case_id_int64_max(tmp: Path) -> tuple[list[str], str]:
    top = np.iinfo(np.int64).max
    np.savez(tmp / "a.npz", **_sixty_rows_with(top, "y_true"))
    return ["--predictions", str(tmp / "a.npz")], _too_many(tmp / "a.npz", f"y_true holds class id {top}", top + 1)


def case_id_uint64_max(tmp: Path) -> tuple[list[str], str]:
    top = np.iinfo(np.uint64).max
    np.savez(tmp / "a.npz", **_sixty_rows_with(top, "y_pred", np.uint64))
    return ["--predictions", str(tmp / "a.npz")], _too_many(tmp / "a.npz", f"y_pred holds class id {top}", top + 1)


def case_id_above_names_in_csv(tmp: Path) -> tuple[list[str], str]:
    write_csv(tmp / "a.csv", ["y_true", "y_pred"], [[0, 0], [1, 1], [2, 30_000], [3, 3]])
    (tmp / "names.txt").write_text("\n".join(NAMES) + "\n")
    args = ["--predictions", str(tmp / "a.csv"), "--class-names", str(tmp / "names.txt")]
    return args, _too_many(tmp / "a.csv", "y_pred holds class id 30000", 30_001)


def case_wide_csv(tmp: Path) -> tuple[list[str], str]:
    # 200,000 score columns: K = 200,000 would be a 320 GB confusion matrix.
    width = 200_000
    header = ["y_true", *(f"c{k}" for k in range(width))]
    write_csv(tmp / "a.csv", header, [[0, *([0] * width)]])
    return ["--predictions", str(tmp / "a.csv")], _too_many(tmp / "a.csv", f"logits have {width} columns", width)


def case_wide_npz_logits_refused_before_loading(tmp: Path) -> tuple[list[str], str]:
    np.savez(tmp / "a.npz", y_true=np.zeros(2, dtype=np.int64), logits=np.zeros((2, 20_000), dtype=np.float16))
    return ["--predictions", str(tmp / "a.npz")], _too_many(tmp / "a.npz", "logits have 20000 columns", 20_000)


def case_many_class_names_file(tmp: Path) -> tuple[list[str], str]:
    np.savez(tmp / "a.npz", y_true=np.array([0, 1]), y_pred=np.array([0, 1]))
    (tmp / "names.txt").write_text("".join(f"c{k}\n" for k in range(20_000)))
    args = ["--predictions", str(tmp / "a.npz"), "--class-names", str(tmp / "names.txt")]
    return args, predictions_module.CLASS_NAMES_FILE_INVALID.format(
        path=tmp / "names.txt",
        problem=predictions_module.NAMES_ABOVE_LIMIT.format(
            count=20_000, limit=DEFAULT_MAX_CLASSES, size=format_bytes(confusion_bytes(20_000))
        ),
    )


def case_max_classes_flag_lowers_the_limit(tmp: Path) -> tuple[list[str], str]:
    np.savez(tmp / "a.npz", y_true=np.array([0, 1]), logits=np.zeros((2, 6)))
    args = ["--predictions", str(tmp / "a.npz"), "--max-classes", "5"]
    return args, _too_many(tmp / "a.npz", "logits have 6 columns", 6, limit=5)


def case_max_classes_not_positive(tmp: Path) -> tuple[list[str], str]:
    np.savez(tmp / "a.npz", y_true=np.array([0, 1]), y_pred=np.array([0, 1]))
    return ["--predictions", str(tmp / "a.npz"), "--max-classes", "0"], predictions_module.MAX_CLASSES_INVALID.format(value=0)


def case_npz_header_claims_more_than_it_holds(tmp: Path) -> tuple[list[str], str]:
    # A 1 kB archive whose logits header declares 10^6 x 10^6 float64 (8 TB): refused from the header.
    with zipfile.ZipFile(tmp / "a.npz", "w") as archive:
        with archive.open("y_true.npy", "w") as handle:
            np.lib.format.write_array(handle, np.array([0, 1]))
        with archive.open("logits.npy", "w") as handle:
            header = {"descr": "<f8", "fortran_order": False, "shape": (10**6, 10**6)}
            np.lib.format.write_array_header_1_0(handle, header)
    return ["--predictions", str(tmp / "a.npz")], _too_many(tmp / "a.npz", "logits have 1000000 columns", 10**6)


def case_npz_truncated_array(tmp: Path) -> tuple[list[str], str]:
    with zipfile.ZipFile(tmp / "a.npz", "w") as archive:
        with archive.open("y_true.npy", "w") as handle:
            np.lib.format.write_array_header_1_0(handle, {"descr": "<i8", "fortran_order": False, "shape": (10**9,)})
            handle.write(b"\0" * 16)
        with archive.open("y_pred.npy", "w") as handle:
            np.lib.format.write_array(handle, np.array([0, 1]))
    return ["--predictions", str(tmp / "a.npz")], predictions_module.ARRAY_TRUNCATED.format(
        path=tmp / "a.npz", key="y_true", shape=[10**9], size=format_bytes(8 * 10**9), stored=format_bytes(16)
    )


def case_pt_view_claims_more_than_it_stores(tmp: Path) -> tuple[list[str], str]:
    # A 2 kB .pt file: y_true is one stored element expanded (stride 0) to 10^7; loading it and
    # converting it used to allocate the whole shape (10^9 needed 7.45 GiB, then a traceback).
    torch.save({"y_true": torch.zeros(1, dtype=torch.long).expand(10**7), "y_pred": torch.zeros(10**7, dtype=torch.long)},
               tmp / "a.pt")
    return ["--predictions", str(tmp / "a.pt")], predictions_module.TENSOR_OVER_STORAGE.format(
        path=tmp / "a.pt", key="y_true", shape=[10**7], size=format_bytes(8 * 10**7), stored=format_bytes(8)
    )


def case_npz_duplicate_class_names(tmp: Path) -> tuple[list[str], str]:
    np.savez(tmp / "a.npz", y_true=np.array([0, 1, 2]), logits=np.eye(3), class_names=np.array(["x", "y", "x"]))
    return ["--predictions", str(tmp / "a.npz")], predictions_module.CLASS_NAMES_INVALID.format(
        path=tmp / "a.npz", num_classes=3, problem="the name 'x' twice (classes 0 and 2)"
    )


def case_npz_empty_class_name(tmp: Path) -> tuple[list[str], str]:
    np.savez(tmp / "a.npz", y_true=np.array([0, 1, 2]), logits=np.eye(3), class_names=np.array(["x", " ", "z"]))
    return ["--predictions", str(tmp / "a.npz")], predictions_module.CLASS_NAMES_INVALID.format(
        path=tmp / "a.npz", num_classes=3, problem="an empty name (class 1)"
    )


def case_csv_duplicate_score_columns(tmp: Path) -> tuple[list[str], str]:
    write_csv(tmp / "a.csv", ["y_true", "x", "y", "x"], [[0, 1.0, 0.0, 0.0]])
    return ["--predictions", str(tmp / "a.csv")], predictions_module.COLUMN_REPEATED.format(path=tmp / "a.csv", column="x")


def case_complex_logits(tmp: Path) -> tuple[list[str], str]:
    np.savez(tmp / "a.npz", y_true=np.array([0, 1]), logits=np.eye(2) + 1j)
    return ["--predictions", str(tmp / "a.npz")], predictions_module.LOGITS_NOT_REAL.format(
        path=tmp / "a.npz", dtype="complex128"
    )


def case_complex_ids(tmp: Path) -> tuple[list[str], str]:
    np.savez(tmp / "a.npz", y_true=np.array([0, 1]) + 0j, y_pred=np.array([0, 1]))
    return ["--predictions", str(tmp / "a.npz")], predictions_module.NOT_INTEGER.format(
        path=tmp / "a.npz", key="y_true", problem="dtype complex128"
    )


def case_nan_ids(tmp: Path) -> tuple[list[str], str]:
    write_csv(tmp / "a.csv", ["y_true", "y_pred"], [[0, 0], ["nan", 1]])
    return ["--predictions", str(tmp / "a.csv")], predictions_module.NOT_INTEGER.format(
        path=tmp / "a.csv", key="y_true", problem="NaN or infinite values"
    )


def case_csv_header_typo(tmp: Path) -> tuple[list[str], str]:
    # "ypred" used to be read as the score column of a single class, then reported as a range error.
    write_csv(tmp / "a.csv", ["y_true", "ypred"], [[0, 0], [1, 1], [2, 1]])
    return ["--predictions", str(tmp / "a.csv")], predictions_module.COLUMNS_UNEXPECTED.format(
        path=tmp / "a.csv", found="y_true,ypred", hint=predictions_module.DID_YOU_MEAN.format(column="ypred", name="y_pred")
    )


def case_csv_one_score_column(tmp: Path) -> tuple[list[str], str]:
    write_csv(tmp / "a.csv", ["y_true", "cat"], [[0, 0.5]])
    return ["--predictions", str(tmp / "a.csv")], predictions_module.COLUMNS_UNEXPECTED.format(
        path=tmp / "a.csv", found="y_true,cat", hint=""
    )


def case_csv_y_true_typo(tmp: Path) -> tuple[list[str], str]:
    write_csv(tmp / "a.csv", ["Y_True", "y_pred"], [[0, 0]])
    message = predictions_module.COLUMN_MISSING.format(
        path=tmp / "a.csv", found="Y_True,y_pred", hint=predictions_module.DID_YOU_MEAN.format(column="Y_True", name="y_true")
    )
    assert "Y_True,y_pred" in message and "'y_true'" in message  # says what was found and expected
    return ["--predictions", str(tmp / "a.csv")], message


def case_label_with_a_newline(tmp: Path) -> tuple[list[str], str]:
    np.savez(tmp / "a.npz", y_true=np.array([0, 1]), y_pred=np.array([0, 1]))
    return ["--predictions", f"{tmp / 'a.npz'}=mr2\n# injected"], predictions_module.LABEL_INVALID.format(
        label="mr2\n# injected", path=tmp / "a.npz", problem="it holds a control character"
    )


ERROR_CASES: list[ErrorCase] = [
    case_label_out_of_range, case_negative_label, case_nan_logits, case_empty_npz, case_empty_csv,
    case_unknown_column, case_unknown_key, case_bad_cell, case_no_y_true_column, case_different_test_sets,
    case_different_sizes, case_different_class_counts, case_bad_label, case_duplicate_label, case_missing_file,
    case_corrupt_file, case_wrong_suffix, case_class_names_disagree, case_fractional_ids,
    case_id_30000_without_names, case_id_1e9_float, case_id_int64_max, case_id_uint64_max,
    case_id_above_names_in_csv, case_wide_csv, case_wide_npz_logits_refused_before_loading,
    case_many_class_names_file, case_max_classes_flag_lowers_the_limit, case_max_classes_not_positive,
    case_npz_header_claims_more_than_it_holds, case_npz_truncated_array, case_pt_view_claims_more_than_it_stores,
    case_npz_duplicate_class_names,
    case_npz_empty_class_name, case_csv_duplicate_score_columns, case_complex_logits, case_complex_ids,
    case_nan_ids, case_csv_header_typo, case_csv_one_score_column, case_csv_y_true_typo,
    case_label_with_a_newline,
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


def test_a_utf8_bom_header_is_read(tmp_path: Path) -> None:
    # Excel's "CSV UTF-8" starts the file with a byte-order mark; it used to hide the y_true column.
    y_true, logits = make_data(2, 30)
    plain = write_csv(tmp_path / "plain.csv", ["y_true", *NAMES], [[t, *row.tolist()] for t, row in zip(y_true, logits)])
    (tmp_path / "bom.csv").write_bytes(b"\xef\xbb\xbf" + plain.read_bytes())
    bom = read_predictions(tmp_path / "bom.csv")
    assert bom.class_names == NAMES
    np.testing.assert_array_equal(bom.y_pred, read_predictions(plain).y_pred)
    np.testing.assert_array_equal(bom.y_true, y_true)


def test_the_limit_applies_to_k_not_to_correct_files(tmp_path: Path) -> None:
    # K = limit is accepted; the flag raises the limit for a file that needs more.
    y = np.arange(6) % 6
    np.savez(tmp_path / "a.npz", y_true=y, y_pred=y[::-1].copy())
    (run,) = load_predictions([tmp_path / "a.npz"], max_classes=6)
    assert run.confusion.shape == (6, 6) and int(np.trace(run.confusion)) == 0
    with pytest.raises(PredictionsError):
        load_predictions([tmp_path / "a.npz"], max_classes=5)
    write_csv(tmp_path / "b.csv", ["y_true", "y_pred"], [[0, 0], [1, 2], [2, 1]])
    out = tmp_path / "out"
    args = ["report", "--predictions", str(tmp_path / "b.csv"), "--out", str(out), "--bootstrap", "0", "--no-plots"]
    assert cli_main([*args, "--max-classes", "3"]) == 0
    assert json.loads((out / "report.json").read_text())["methods"]["b"]["per_class_mean"] == [1.0, 0.0, 0.0]


def test_max_classes_with_run_directories_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["report", str(tmp_path), "--max-classes", "10", "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == _error(report_cli.MAX_CLASSES_WITHOUT_PREDICTIONS) + "\n"
