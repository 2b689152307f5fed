"""Shared test configuration."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

# Test helpers (oracles, worker scripts) live beside the tests; make them importable.
sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("MPLBACKEND", "Agg")


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)
