"""Small files that declare gigabytes, for the tests of the readers' memory bounds."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np
import torch

__all__ = ["write_deep_pt", "write_zero_npz"]


def write_zero_npz(path: Path, num_samples: int, keys: tuple[str, ...] = ("y_true", "y_pred")) -> Path:
    """An ``.npz`` whose int64 arrays of ``num_samples`` zeros are DEFLATE-compressed (about 1,000 : 1),
    written in chunks: a valid archive (sizes and CRCs right) of a few MB that declares gigabytes."""
    zeros = bytes(2**24)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for key in keys:
            header = io.BytesIO()
            np.lib.format.write_array_header_1_0(
                header, {"descr": "<i8", "fortran_order": False, "shape": (num_samples,)}
            )
            with archive.open(f"{key}.npy", "w", force_zip64=True) as member:
                member.write(header.getvalue())
                left = 8 * num_samples
                while left:
                    member.write(zeros[: min(left, len(zeros))])
                    left -= min(left, len(zeros))
    return path


def write_deep_pt(path: Path, depth: int) -> Path:
    """A torch.save archive whose ``y_true`` is a list nested ``depth`` deep: its pickle is written by
    hand (pickle.dumps would recurse), EMPTY_LIST ``depth`` times then APPEND ``depth - 1`` times."""
    torch.save({"y_true": [0], "y_pred": [0]}, path)
    pickled = (
        b"\x80\x02}X\x06\x00\x00\x00y_true" + b"]" * depth + b"a" * (depth - 1) + b"s"
        + b"X\x06\x00\x00\x00y_pred]K\x00as."
    )
    with zipfile.ZipFile(path) as archive:
        members = {info.filename: archive.read(info.filename) for info in archive.infolist()}
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, pickled if name.endswith("/data.pkl") else data)
    return path
