"""A tiny batch-norm network, seeded batches and the reference SAM loop written out by hand."""

from __future__ import annotations

import copy
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from methods.representation_oracles import sam_perturbation_oracle

K, IN_DIM, HIDDEN = 3, 5, 6


class BNNet(nn.Module):
    """Linear -> BatchNorm1d -> ReLU (the features) -> Linear; forward gives (logits, features)."""

    def __init__(self) -> None:
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(IN_DIM, HIDDEN), nn.BatchNorm1d(HIDDEN), nn.ReLU())
        self.classifier = nn.Linear(HIDDEN, K)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = self.backbone(x)
        return self.classifier(features), features


def make_net(dtype: torch.dtype = torch.float32) -> BNNet:
    with torch.random.fork_rng():
        torch.manual_seed(4)
        return BNNet().to(dtype)


def batches(steps: int = 3, batch: int = 8, dtype: torch.dtype = torch.float32, seed: int = 6) -> list[Any]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for step in range(steps):
        x = torch.randn(batch, IN_DIM, generator=g).to(dtype)
        y = torch.randint(0, K, (batch,), generator=g)
        out.append((x, y, torch.arange(step * batch, (step + 1) * batch)))
    return out


def reference_sam_steps(model: nn.Module, data: list[Any], rho: float, adaptive: bool, lr: float,
                        momentum: float, weight_decay: float) -> nn.Module:
    """davda54/sam's README loop (enable_running_stats / first_step / disable_running_stats /
    second_step) with SGD, written with the float64 oracle of the perturbation."""
    model = copy.deepcopy(model)
    params = list(model.parameters())
    optimizer = torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
    bns = [m for m in model.modules() if isinstance(m, nn.BatchNorm1d)]
    for x, y, _ in data:
        model.train()
        F.cross_entropy(model(x)[0], y).backward()
        with torch.no_grad():
            old = [p.detach().clone() for p in params]
            shifts = sam_perturbation_oracle([p.detach().double() for p in params],
                                             [p.grad.double() for p in params], rho, adaptive)
            for p, e in zip(params, shifts, strict=True):
                p.add_(e.to(p.dtype))
        optimizer.zero_grad()
        tracked = [m.num_batches_tracked.clone() for m in bns]
        for m in bns:
            m.backup_momentum, m.momentum = m.momentum, 0.0
        F.cross_entropy(model(x)[0], y).backward()
        for m, t in zip(bns, tracked, strict=True):
            m.momentum = m.backup_momentum
            m.num_batches_tracked.copy_(t)
        with torch.no_grad():
            for p, o in zip(params, old, strict=True):
                p.copy_(o)
        optimizer.step()
        optimizer.zero_grad()
    return model
