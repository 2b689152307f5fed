"""Fixtures of the data tests: the writers of tests/helpers/data_files.py (small files in the exact
on-disk formats the data readers accept)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from helpers import data_files


@pytest.fixture
def write_idx() -> Callable[..., Path]:
    return data_files.write_idx


@pytest.fixture
def write_fashion_mnist() -> Callable[..., dict[str, np.ndarray]]:
    return data_files.write_fashion_mnist


@pytest.fixture
def write_cifar() -> Callable[..., dict[str, np.ndarray]]:
    return data_files.write_cifar


@pytest.fixture
def dump_pickle() -> Callable[..., None]:
    return data_files.dump_pickle


@pytest.fixture
def write_image_folder() -> Callable[..., dict[str, list[tuple[Path, tuple[int, int, int]]]]]:
    return data_files.write_image_folder
