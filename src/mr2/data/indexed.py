"""The Dataset the engine sees: ``(input, target, index)`` over a subset of a source data set."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils.data import Dataset

__all__ = ["IndexedDataset"]


class IndexedDataset(Dataset[tuple[Any, int, int]]):
    """A subset of a source data set whose items carry their own position.

    Item ``i`` is ``(transform(source[source_indices[i]][0]), targets[i], i)``: the index is the
    sample's position in THIS data set (``0..len-1``), which for the training split is what
    per-sample methods (LfF, JTT) index their state with. The targets are known up front (no image
    is decoded to count classes or to build a sampler).

    Args:
        source: a data set whose item ``j`` is ``(input, target)`` (targets are ignored; the
            ``source_targets`` given here are authoritative).
        source_targets: int64 [len(source)], the class id of every source item.
        source_indices: int64 [n], which source items this data set holds, in order; ``None``
            for all of them.
        transform: applied to each input (augmentation, tensor conversion, normalisation).
        precompute: apply a DETERMINISTIC ``transform`` once, in chunks, to an in-memory tensor
            source and keep the result (items are then plain indexing instead of a
            per-item transform). Only for sources with an ``inputs`` tensor and transforms that
            work on batches (tensor conversion, normalisation); never for augmentation.

    Attributes:
        targets: int64 [n], class id of item ``i``.
        source_indices: int64 [n], the source position of item ``i``.

    Example:
        >>> from mr2.data.sources import InMemoryDataset
        >>> source = InMemoryDataset(torch.arange(5.0)[:, None], torch.tensor([0, 1, 0, 1, 1]))
        >>> subset = IndexedDataset(source, source.targets, torch.tensor([4, 1]))
        >>> subset[0], subset[1]
        ((tensor([4.]), 1, 0), (tensor([1.]), 1, 1))
        >>> subset.targets
        tensor([1, 1])
    """

    def __init__(
        self,
        source: Dataset[Any],
        source_targets: torch.Tensor,
        source_indices: torch.Tensor | None = None,
        transform: Callable[[Any], Any] | None = None,
        precompute: bool = False,
    ) -> None:
        source_targets = torch.as_tensor(source_targets, dtype=torch.int64)
        if source_indices is None:
            source_indices = torch.arange(source_targets.numel())
        self.source = source
        self.source_indices = torch.as_tensor(source_indices, dtype=torch.int64)
        self.targets = source_targets[self.source_indices]
        self.transform = transform
        self.precomputed: torch.Tensor | None = None
        inputs = getattr(source, "inputs", None)
        if precompute and isinstance(inputs, torch.Tensor):
            chunks = [
                inputs[chunk] if transform is None else transform(inputs[chunk])
                for chunk in self.source_indices.split(4096)
            ]
            self.precomputed = torch.cat(chunks) if chunks else None

    def __len__(self) -> int:
        return int(self.source_indices.numel())

    def __getitem__(self, index: int) -> tuple[Any, int, int]:
        if not -len(self) <= index < len(self):
            raise IndexError(f"index {index} out of range for a data set of {len(self)} samples")
        index = index % len(self)
        if self.precomputed is not None:
            return self.precomputed[index], int(self.targets[index]), index
        inputs = self.source[int(self.source_indices[index])][0]
        if self.transform is not None:
            inputs = self.transform(inputs)
        return inputs, int(self.targets[index]), index

    def class_counts(self, num_classes: int) -> torch.Tensor:
        """Samples per class, int64 [K] (``bincount`` of :attr:`targets`)."""
        return torch.bincount(self.targets, minlength=num_classes)
