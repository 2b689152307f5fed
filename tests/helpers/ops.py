"""Shared pieces of the MR2Loss fast-path tests: an aten-operation counter and a bit-for-bit
comparison of one training step of two losses."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode


class CountOps(TorchDispatchMode):
    """Counts the aten operations dispatched inside the block (``count``)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self.count += 1
        return func(*args, **(kwargs or {}))


def assert_same_step(fast: Any, full: Any, logits: torch.Tensor, features: torch.Tensor,
                     target: torch.Tensor) -> None:
    """One step of both losses on copies of ``logits``: the same value, logit gradient and parts, bit
    for bit (NaN parts equal)."""
    z1, z2 = logits.detach().clone().requires_grad_(), logits.detach().clone().requires_grad_()
    got, want = fast(z1, features, target), full(z2, features, target)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    got.backward()
    want.backward()
    torch.testing.assert_close(z1.grad, z2.grad, rtol=0, atol=0)
    for name, a, b in zip(fast.parts._fields, fast.parts, full.parts, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True, msg=name)
