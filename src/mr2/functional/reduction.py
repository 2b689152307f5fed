"""Shared numerics of the loss functions: working dtype and reduction."""

from __future__ import annotations

from typing import Literal

import torch

from mr2.checks import MR2InputError

__all__ = ["Reduction", "reduce_loss", "working_dtype"]

Reduction = Literal["mean", "sum", "none"]

_BAD_REDUCTION = "reduction must be 'mean', 'sum' or 'none'; got {value!r}."


def working_dtype(tensor: torch.Tensor) -> torch.dtype:
    """float32 for half/bfloat16 inputs (losses are computed in at least float32), else as is."""
    return torch.promote_types(tensor.dtype, torch.float32)


def reduce_loss(values: torch.Tensor, reduction: str) -> torch.Tensor:
    """``mean`` (0 for an empty batch), ``sum`` or ``none`` of per-sample values."""
    if reduction == "mean":
        return values.mean() if values.numel() else values.sum()
    if reduction == "sum":
        return values.sum()
    if reduction == "none":
        return values
    raise MR2InputError(_BAD_REDUCTION.format(value=reduction))
