"""Shared pieces of the MR2Loss fast-path tests: an aten-operation counter and a bit-for-bit
comparison of one training step of two losses."""

from __future__ import annotations

from collections.abc import Callable
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


def steady_batch(seed: int, k: int, b: int, d: int = 6, dtype: torch.dtype = torch.float32, *,
                 distinct: int | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(logits, features, target)`` of one step of the steady-path tests: the first ``n`` rows hold
    classes ``seed * n, ...`` (mod K), the others random classes, so that every class is seen within a
    few steps also when K > B (``n = distinct``, default ``min(K, B)``); ReLU features whose scale
    grows with the class. Nothing requires a gradient."""
    g = torch.Generator().manual_seed(seed)
    target = torch.randint(0, k, (b,), generator=g)
    n = min(k, b) if distinct is None else distinct
    target[:n] = (torch.arange(n) + seed * n) % k
    features = (torch.randn(b, d, generator=g, dtype=dtype) * (1 + 0.1 * target.unsqueeze(1)) + 0.5).relu()
    logits = torch.randn(b, k, generator=g, dtype=dtype)
    return logits, features, target


def count_calls(monkeypatch: Any, owner: type, name: str) -> list[Any]:
    """The ``self`` of every call of the method ``owner.name`` from now on (patched through
    ``monkeypatch``)."""
    calls: list[Any] = []
    original = getattr(owner, name)

    def counted(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(self)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return calls


def fast_and_full(k: int, dtype: torch.dtype, variant: str | None) -> tuple[Any, Any]:
    """Two equal ``MR2Loss`` (momentum 0.8; ``variant`` None: the default), the second on the general
    path only (``steady_probe_path = False``)."""
    from mr2 import MR2Loss

    def make() -> Any:
        loss = MR2Loss(k, momentum=0.8) if variant is None else MR2Loss.from_variant(variant, k, momentum=0.8)
        return loss.to(dtype)

    fast, full = make(), make()
    full.steady_probe_path = False
    return fast, full


def assert_same_state(fast: Any, full: Any) -> None:
    """The two losses' state dicts and moving moments equal bit for bit."""
    for (name, a), (_, b) in zip(fast.state_dict().items(), full.state_dict().items(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)
    for a, b in zip(fast.statistics.moments(), full.statistics.moments(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def eager_steady_step(monkeypatch: Any) -> None:
    """Hold ``MR2Loss``'s steady step to its eager operations (bit for bit the general path's values)
    where numba would run it as one compiled function (:mod:`mr2.statistics._fused_cpu`, held to the
    eager step within rounding by tests/core/test_fused_step.py)."""
    from mr2.statistics import _fused_cpu

    monkeypatch.setattr(_fused_cpu, "available", lambda: False)


def change_statistics(loss: Any, change: str, batch: Callable[[int], tuple[torch.Tensor, ...]]) -> Any:
    """Change ``loss``'s class statistics as the deferred-parts tests do, from ``batch(seed)``'s
    ``(logits, features, target)``: ``"update"`` (a direct update), ``"load"`` (the state of a fresh loss
    that saw one batch), ``"accumulate"`` (an update inside ``accumulate()``, applied as it exits) or
    ``"deepcopy"`` (a copy, then an update of the copy). Returns the loss to read (the copy for
    ``"deepcopy"``)."""
    import copy

    other = batch(9)[1:]
    if change == "update":
        loss.statistics.update(*other)
    elif change == "load":
        fresh = type(loss)(loss.num_classes)
        fresh(*batch(7))
        loss.load_state_dict(fresh.state_dict())
    elif change == "accumulate":
        with loss.statistics.accumulate():
            loss.statistics.update(*other)
    elif change == "deepcopy":
        loss = copy.deepcopy(loss)
        loss.statistics.update(*other)
    else:
        raise ValueError(f"unknown change {change!r}")
    return loss
