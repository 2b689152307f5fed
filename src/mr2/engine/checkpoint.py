"""Checkpoints: everything needed to resume a run exactly, written atomically."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mr2.errors import MR2Error
from mr2.io import atomic_save_torch, load_error_text

__all__ = ["CheckpointError", "load_checkpoint", "rng_state", "save_checkpoint", "set_rng_state"]

_CORRUPT = "checkpoint {path} cannot be read ({error}); delete it to start the run afresh."


class CheckpointError(MR2Error, RuntimeError):
    """A checkpoint that cannot be loaded; the message names the file."""


def rng_state() -> dict[str, Any]:
    """The random states of torch (CPU and CUDA), Python and NumPy, as weights-only-safe values."""
    np_state: Any = np.random.get_state()
    py_version, py_state, py_gauss = random.getstate()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "python": list(py_state),
        "python_version": py_version,
        "python_gauss": py_gauss,
        "numpy_keys": torch.from_numpy(np.asarray(np_state[1], dtype=np.int64)),
        "numpy_pos": int(np_state[2]),
        "numpy_gauss": [int(np_state[3]), float(np_state[4])],
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore :func:`rng_state`."""
    torch.set_rng_state(state["torch"])
    random.setstate((state["python_version"], tuple(state["python"]), state["python_gauss"]))
    np.random.set_state(
        (
            "MT19937",
            state["numpy_keys"].numpy().astype(np.uint32),
            state["numpy_pos"],
            state["numpy_gauss"][0],
            state["numpy_gauss"][1],
        )
    )
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(path: str | os.PathLike[str], payload: dict[str, Any]) -> None:
    """Write ``payload`` atomically (the previous checkpoint survives a crash mid-write)."""
    atomic_save_torch(path, payload)


def load_checkpoint(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Load a checkpoint with ``weights_only=True``, raising :class:`CheckpointError` if corrupt."""
    try:
        payload: dict[str, Any] = torch.load(Path(path), map_location="cpu", weights_only=True)
    except Exception as error:  # any unpickling failure means a corrupt file
        raise CheckpointError(_CORRUPT.format(path=path, error=load_error_text(error))) from error
    return payload
