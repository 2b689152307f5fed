"""Small torch.distributed helpers with an injectable process group.

Every function is a no-op (returns its input) when torch.distributed is not initialised, so the same
code runs in a single process, under ``torchrun`` with gloo on CPU, and with NCCL on GPUs.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

__all__ = [
    "all_gather_variable",
    "all_gather_with_grad",
    "all_reduce_sum_",
    "gather_sizes",
    "is_distributed",
    "rank",
    "world_size",
]


def is_distributed(group: Any = None) -> bool:
    """True when torch.distributed is initialised and ``group`` has more than one process."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size(group) > 1


def world_size(group: Any = None) -> int:
    return dist.get_world_size(group) if dist.is_available() and dist.is_initialized() else 1


def rank(group: Any = None) -> int:
    return dist.get_rank(group) if dist.is_available() and dist.is_initialized() else 0


def all_reduce_sum_(tensor: torch.Tensor, group: Any = None) -> torch.Tensor:
    """Sum ``tensor`` over the ranks of ``group`` in place (no-op in a single process)."""
    if is_distributed(group):
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM, group=group)
    return tensor


def gather_sizes(length: int, device: torch.device, group: Any = None) -> list[int]:
    """Every rank's ``length`` (one all_gather; ``[length]`` in a single process)."""
    if not is_distributed(group):
        return [length]
    size = torch.tensor([length], dtype=torch.long, device=device)
    sizes = [torch.zeros_like(size) for _ in range(world_size(group))]
    dist.all_gather(sizes, size, group=group)
    return [int(s) for s in sizes]


def all_gather_variable(
    tensor: torch.Tensor, group: Any = None, sizes: list[int] | None = None
) -> tuple[torch.Tensor, list[int]]:
    """Concatenate ``tensor`` (first dimension may differ per rank) over ranks, in rank order.

    Returns the gathered tensor and the per-rank lengths (gathered first unless ``sizes`` is given).
    Not differentiable.
    """
    if not is_distributed(group):
        return tensor, [tensor.shape[0]]
    if sizes is None:
        sizes = gather_sizes(tensor.shape[0], tensor.device, group)
    longest = max(sizes)
    padded = tensor.new_zeros((longest, *tensor.shape[1:]))
    padded[: tensor.shape[0]] = tensor
    buffers = [torch.empty_like(padded) for _ in sizes]
    dist.all_gather(buffers, padded.contiguous(), group=group)
    return torch.cat([buf[:n] for buf, n in zip(buffers, sizes, strict=True)]), sizes


class _AllGatherWithGrad(torch.autograd.Function):
    """all_gather whose backward hands each rank the summed gradient of its own slice.

    The backward all-reduces the gradient of the gathered tensor (every rank's loss may depend on
    every rank's rows) and keeps the rows this rank contributed. It only uses ``all_reduce``, so it
    works with gloo, which has no reduce_scatter.
    """

    @staticmethod
    def forward(
        ctx: Any, tensor: torch.Tensor, group: Any, sizes: list[int], start: int
    ) -> torch.Tensor:
        gathered, _ = all_gather_variable(tensor, group, sizes)
        ctx.group = group
        ctx.start = start
        ctx.length = tensor.shape[0]
        return gathered

    @staticmethod
    def backward(
        ctx: Any, grad: torch.Tensor
    ) -> tuple[torch.Tensor, None, None, None]:
        grad = grad.contiguous().clone()
        all_reduce_sum_(grad, ctx.group)
        return grad[ctx.start : ctx.start + ctx.length], None, None, None


def all_gather_with_grad(
    tensor: torch.Tensor, group: Any = None, sizes: list[int] | None = None
) -> tuple[torch.Tensor, int]:
    """Differentiable all_gather along dim 0; returns the gathered tensor and this rank's offset.

    ``sizes``: every rank's length if already gathered (see :func:`gather_sizes`).
    """
    if not is_distributed(group):
        return tensor, 0
    if sizes is None:
        sizes = gather_sizes(tensor.shape[0], tensor.device, group)
    start = sum(sizes[: rank(group)])
    return _AllGatherWithGrad.apply(tensor, group, sizes, start), start
