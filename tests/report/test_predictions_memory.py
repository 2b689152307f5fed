"""Predictions files are read in bounded memory whatever their compression: what a file declares (the
arrays' shapes in an ``.npz``, the storages of a ``.pt``, the values of a ``.pt``'s lists) is bounded
by ``max_array_bytes`` (``mr2 report --max-array-bytes``) before anything of that size is allocated.

The compression bombs run in a child process under ``RLIMIT_AS`` (its address space after importing
torch plus 1.5 GB), so a reader that does allocate fails there, not on the machine.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from helpers.bombs import write_deep_pt, write_zero_npz
from mr2.report import predictions as predictions_module
from mr2.report.exceptions import PredictionsError
from mr2.report.limits import DEFAULT_MAX_ARRAY_BYTES, format_bytes
from mr2.report.predictions import load_predictions, read_predictions

GB = 10**9


CHILD = """
import contextlib, io, json, resource, sys
from pathlib import Path
import torch  # imported before the limit: the CLI imports them lazily
import mr2.cli.report, mr2.report.predictions
from mr2.cli.main import main

def address_space():
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024

def high_water():
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024

limit = address_space() + 1536 * 2**20
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
# The peak from here on: the imports' own transient peak (compiling .pyc files in a fresh virtual
# environment) is not the input's; writing 5 to clear_refs resets the high-water mark (Linux >= 4.0).
Path("/proc/self/clear_refs").write_text("5")
err = io.StringIO()
with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
    code = main(["report", "--predictions", *sys.argv[2:], "--out", sys.argv[1], "--bootstrap", "0",
                 "--no-plots"])
peak = high_water()
print(json.dumps({"code": code, "stderr": err.getvalue(), "peak": peak}))
"""


def _report_in_child(out: Path, *specs: str) -> dict:
    completed = subprocess.run(
        [sys.executable, "-c", CHILD, str(out), *specs], capture_output=True, text=True, timeout=300,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    return json.loads(completed.stdout)


def _too_large(path: Path, what: str, size: int, limit: int = DEFAULT_MAX_ARRAY_BYTES) -> str:
    return predictions_module.ARRAYS_TOO_LARGE.format(
        path=path, what=what, size=format_bytes(size), limit=format_bytes(limit)
    )


def test_a_deflate_npz_declaring_300_million_samples_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    # A few MB on disk, 2 x 2.4 GB once read: refused from the members' headers, before np.load
    # allocates; the whole process (torch included) stays under 1.5 GB.
    bomb = write_zero_npz(tmp_path / "bomb.npz", 300_000_000)
    assert bomb.stat().st_size < 30 * 10**6
    result = _report_in_child(tmp_path / "out", str(bomb))
    expected = _too_large(bomb, "y_true [300000000] int64, y_pred [300000000] int64", 4_800_000_000)
    assert result["stderr"] == f"mr2 report: error: {expected}\n"
    assert result["code"] == 2
    assert result["peak"] < 1.5 * 2**30
    assert not (tmp_path / "out").exists()


def test_the_limit_is_stated_and_can_be_raised(tmp_path: Path) -> None:
    y = np.arange(1000) % 4
    path = tmp_path / "ids.npz"
    np.savez_compressed(path, y_true=y, y_pred=y)  # 2 x 8,000 bytes once read
    with pytest.raises(PredictionsError) as caught:
        read_predictions(path, max_array_bytes=10_000)
    assert str(caught.value) == _too_large(path, "y_true [1000] int64, y_pred [1000] int64", 16_000, 10_000)
    assert "--max-array-bytes" in str(caught.value)
    assert read_predictions(path, max_array_bytes=16_000).num_samples == 1000
    assert load_predictions([str(path)], max_array_bytes=16_000)[0].confusion.sum() == 1000
    for bad in (0, -1, 1.5, "1e9", True):
        with pytest.raises(PredictionsError) as caught:
            read_predictions(path, max_array_bytes=bad)  # type: ignore[arg-type]
        assert str(caught.value) == predictions_module.MAX_ARRAY_BYTES_INVALID.format(value=bad)


def test_the_cli_flag_raises_the_limit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from mr2.cli.main import main

    y = np.arange(1000) % 4
    path = tmp_path / "ids.npz"
    np.savez(path, y_true=y, y_pred=y)
    common = ["--out", str(tmp_path / "out"), "--bootstrap", "0", "--no-plots"]
    assert main(["report", "--predictions", str(path), "--max-array-bytes", "10000", *common]) == 2
    err = capsys.readouterr().err
    assert err == "mr2 report: error: " + _too_large(
        path, "y_true [1000] int64, y_pred [1000] int64", 16_000, 10_000
    ) + "\n"
    assert main(["report", "--predictions", str(path), "--max-array-bytes", "16000", *common]) == 0
    assert main(["report", "--predictions", str(path), "--max-array-bytes", "0", *common]) == 2
    assert "mr2 report: error: " + predictions_module.MAX_ARRAY_BYTES_INVALID.format(value=0) in (
        capsys.readouterr().err
    )


def _deflate_pt(source: Path, target: Path) -> Path:
    """``source`` (a torch.save zip) rewritten with DEFLATE members: torch.load reads it."""
    with zipfile.ZipFile(source) as archive, zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as out:
        for info in archive.infolist():
            out.writestr(info.filename, archive.read(info.filename))
    return target


def test_a_deflated_pt_is_bounded_by_what_it_declares(tmp_path: Path) -> None:
    plain = tmp_path / "plain.pt"
    torch.save({"y_true": torch.zeros(200_000, dtype=torch.long), "y_pred": torch.zeros(200_000, dtype=torch.long)}, plain)
    packed = _deflate_pt(plain, tmp_path / "packed.pt")
    assert packed.stat().st_size < 20_000 < 3_200_000
    assert read_predictions(packed).num_samples == 200_000  # torch.load reads DEFLATE members
    with pytest.raises(PredictionsError) as caught:
        read_predictions(packed, max_array_bytes=1_000_000)
    message = str(caught.value)
    assert message.startswith(f"predictions file {packed} declares the members of a torch.save archive,")
    assert "more than the limit of 1.0 MB" in message and "--max-array-bytes" in message


def test_a_pt_list_bomb_is_refused_before_conversion(tmp_path: Path) -> None:
    # 7 kB: a list of 1,000 references to one list of 1,000 references to one list of 1,000 zeros:
    # numpy would build 10^9 int64 values (7.45 GiB). Counted through the references, not expanded.
    inner: list = [0] * 1000
    middle = [inner] * 1000
    path = tmp_path / "bomb.pt"
    torch.save({"y_true": [middle] * 1000, "y_pred": [0]}, path)
    assert path.stat().st_size < 10_000
    with pytest.raises(PredictionsError) as caught:
        read_predictions(path)
    assert str(caught.value) == _too_large(path, "lists of 1000000000 values in 'y_true'", 8 * 10**9)


def test_a_pt_list_nested_past_numpys_dimensions_is_refused(tmp_path: Path) -> None:
    path = write_deep_pt(tmp_path / "deep.pt", 100_000)
    assert torch.load(path, weights_only=True)["y_pred"] == [0]  # torch reads it
    with pytest.raises(PredictionsError) as caught:
        read_predictions(path)
    assert str(caught.value) == predictions_module.LIST_TOO_DEEP.format(path=path, key="y_true", limit=32)


def test_a_single_npy_under_npz_is_refused_without_loading(tmp_path: Path) -> None:
    # A bare .npy whose header declares 10^12 values: not an archive, so np.load is never asked.
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<i8", "fortran_order": False, "shape": (10**12,)})
    path = tmp_path / "single.npz"
    path.write_bytes(header.getvalue() + bytes(64))
    with pytest.raises(PredictionsError) as caught:
        read_predictions(path)
    assert "a single numpy array" in str(caught.value)
    pickled = tmp_path / "pickled.npz"
    pickled.write_bytes(pickle.dumps({"y_true": [0]}))
    with pytest.raises(PredictionsError, match="cannot be read"):
        read_predictions(pickled)


def test_a_fifo_is_not_reported_as_missing(tmp_path: Path) -> None:
    # os.path.isfile is False for a FIFO: it used to be reported as "does not exist" (and np.load
    # or torch.load would block on it).
    fifo = tmp_path / "preds.npz"
    os.mkfifo(fifo)
    with pytest.raises(PredictionsError) as caught:
        read_predictions(fifo)
    assert str(caught.value) == predictions_module.NOT_A_REGULAR_FILE.format(path=fifo, kind="a FIFO (named pipe)")
