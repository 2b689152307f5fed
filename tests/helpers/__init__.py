"""Helpers shared by the test files: tiny seeded data, run configurations, loading a script by path;
the writers of data files in the readers' formats are in :mod:`helpers.data_files`.

Imported as ``helpers`` (tests/conftest.py puts tests/ on ``sys.path``); conftests hold fixtures only.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import torch

REPOSITORY = Path(__file__).resolve().parents[2]


def classification_batch(
    batch: int = 24,
    num_classes: int = 4,
    dim: int = 6,
    *,
    seed: int = 0,
    dtype: torch.dtype = torch.float64,
    balanced: bool = True,
    scale: float = 1.0,
    spread_by_class: bool = True,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(logits [B, K], features [B, d], target [B])`` from one seeded generator.

    ``balanced``: target ``0, 1, ..., K-1, 0, ...``; else drawn at random, with samples 0 and 1 of one
    class (at least one same-class pair). Features: ``scale`` times standard normal; with
    ``spread_by_class`` multiplied by ``1 + k`` for class k (classes of growing spread), rectified and
    shifted by 0.5 (positive, like post-ReLU features). Logits: normal with standard deviation 2.
    """
    generator = torch.Generator().manual_seed(seed)
    if balanced:
        target = torch.arange(batch) % num_classes
    else:
        target = torch.randint(0, num_classes, (batch,), generator=generator)
        target[1] = target[0]
    features = torch.randn(batch, dim, generator=generator, dtype=dtype) * scale
    if spread_by_class:
        features = (features * (1 + target.unsqueeze(1))).relu() + 0.5
    logits = torch.randn(batch, num_classes, generator=generator, dtype=dtype) * 2
    return logits, features, target


def write_spread_npz(path: Path, *, num_classes: int = 4, dim: int = 12, train_per_class: int = 40,
                     test_per_class: int = 15, seed: int = 0, drop_last_test: bool = True) -> Path:
    """Gaussian classes of growing spread saved as an .npz in the arrays format (x_train, y_train,
    x_test, y_test); ``drop_last_test`` leaves one test sample out (a test set of unequal classes)."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(num_classes, dim)) * 2.0
    def draw(per_class: int) -> tuple[np.ndarray, np.ndarray]:
        y = np.repeat(np.arange(num_classes), per_class)
        x = centers[y] + rng.normal(size=(len(y), dim)) * (0.5 + 0.5 * y[:, None])
        order = rng.permutation(len(y))
        return x[order].astype(np.float32), y[order].astype(np.int64)
    x_train, y_train = draw(train_per_class)
    x_test, y_test = draw(test_per_class)
    end = -1 if drop_last_test else None
    np.savez(path, x_train=x_train, y_train=y_train, x_test=x_test[:end], y_test=y_test[:end])
    return path


def base_config(npz: Path, out: Path, **sections: dict) -> dict:
    config = {
        "name": "run",
        "output_dir": str(out),
        "seed": 0,
        "log_every": 5,
        "data": {"name": "arrays", "root": str(npz), "val_fraction": 0.2, "batch_size": 16,
                 "eval_batch_size": 32},
        "model": {"name": "mlp", "options": {"hidden_dims": [32, 16]}},
        "method": {"name": "mr2"},
        "optim": {"name": "sgd", "lr": 0.05, "epochs": 3, "warmup_epochs": 1},
    }
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(config.get(key), dict):
            config[key] = {**config[key], **value}
        else:
            config[key] = value
    return config


def load_script(path: Path, name: str | None = None) -> ModuleType:
    """Import a script that is not part of a package (a benchmark, an example) by its path, under
    ``name`` (default: the file's stem) in ``sys.modules`` while it runs its top level (dataclasses
    and pickling look the module up there)."""
    module_name = name or path.stem
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module


@contextlib.contextmanager
def read_only(path: Path) -> Iterator[None]:
    """Make the directory ``path`` unwritable for this process, for real: ``chmod 0o555`` for a
    normal user; as root (which ignores permissions) the immutable attribute (``chattr +i``)."""
    if os.geteuid() != 0:
        path.chmod(0o555)
        try:
            yield
        finally:
            path.chmod(0o755)
        return
    chattr = shutil.which("chattr")
    if chattr is None or subprocess.run([chattr, "+i", str(path)], capture_output=True).returncode != 0:
        pytest.skip("running as root, which ignores permissions, and chattr +i is unavailable here "
                    "(needs CAP_LINUX_IMMUTABLE and a file system with the attribute)")
    try:
        yield
    finally:
        subprocess.run([chattr, "-i", str(path)], check=True)


def torchrun(script: Path, *args: str, nproc: int = 2, timeout: int = 240) -> None:
    """Run ``script`` under ``torch.distributed.run`` with ``nproc`` CPU processes; fail with its output."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(sys.path)}
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone",
        f"--nproc-per-node={nproc}", str(script), *args,
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"torchrun failed:\n{done.stdout}\n{done.stderr}"
