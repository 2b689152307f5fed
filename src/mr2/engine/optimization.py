"""The optimiser and the learning-rate schedule of a run, from its ``optim`` section."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import torch

from mr2.config import OptimSection

__all__ = ["build_optimizer", "build_scheduler", "lr_factor"]


def lr_factor(total_steps: int, warmup_steps: int, scheduler: str) -> Callable[[int], float]:
    """The schedule as a factor of the base learning rate: linear warm-up, then cosine or constant.

    Example:
        >>> factor = lr_factor(total_steps=10, warmup_steps=2, scheduler="cosine")
        >>> [round(factor(s), 3) for s in (0, 1, 2, 6, 10)]
        [0.5, 1.0, 1.0, 0.5, 0.0]
    """

    def factor(step: int) -> float:
        if warmup_steps and step < warmup_steps:
            return (step + 1) / warmup_steps
        if scheduler == "constant":
            return 1.0
        progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

    return factor


def build_optimizer(params: Iterable[torch.nn.Parameter], optim: OptimSection) -> torch.optim.Optimizer:
    """SGD (momentum, Nesterov, weight decay) or AdamW over ``params``."""
    if optim.name == "sgd":
        return torch.optim.SGD(
            params, lr=optim.lr, momentum=optim.momentum, nesterov=optim.nesterov,
            weight_decay=optim.weight_decay,
        )
    return torch.optim.AdamW(params, lr=optim.lr, weight_decay=optim.weight_decay)


def build_scheduler(
    optimizer: torch.optim.Optimizer, optim: OptimSection, steps_per_epoch: int, first_epoch: int = 0
) -> torch.optim.lr_scheduler.LambdaLR:
    """A per-step schedule over the epochs ``first_epoch .. optim.epochs - 1``."""
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lr_factor(
            steps_per_epoch * (optim.epochs - first_epoch),
            round(steps_per_epoch * optim.warmup_epochs),
            optim.scheduler,
        ),
    )
