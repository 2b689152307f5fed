"""Fixtures of the engine tests: a tiny real data file (tests/helpers writes it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import write_spread_npz


@pytest.fixture
def spread_npz(tmp_path: Path) -> Path:
    return write_spread_npz(tmp_path / "spread.npz")
