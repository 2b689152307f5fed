"""Fixtures of the baseline-method tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch


@pytest.fixture(autouse=True)
def _one_intra_op_thread() -> Iterator[None]:
    """These tests run tiny tensors: intra-op threads only add spinning overhead (5x the CPU time)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
