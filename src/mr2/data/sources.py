"""What a reader returns: the train and test splits, as in-memory arrays or as source data sets."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import Dataset

__all__ = ["InMemoryDataset", "SourceSplits", "SplitArrays"]


@dataclass
class SplitArrays:
    """A data set's train and test splits as tensors.

    Attributes:
        x_train: training inputs, [N, ...] (uint8 images as [N, C, H, W], or float features).
        y_train: training class ids, int64 [N].
        x_test: test inputs, [M, ...] with the same per-sample shape.
        y_test: test class ids, int64 [M].
        class_names: one name per class id; its length is K.
        source: where the data came from (a file or directory), for messages.
    """

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    class_names: list[str]
    source: str

    @property
    def num_classes(self) -> int:
        """K, the number of classes."""
        return len(self.class_names)

    def to_sources(self) -> SourceSplits:
        """The same splits as :class:`InMemoryDataset` sources."""
        return SourceSplits(
            train=InMemoryDataset(self.x_train, self.y_train),
            train_targets=self.y_train,
            test=InMemoryDataset(self.x_test, self.y_test),
            test_targets=self.y_test,
            class_names=self.class_names,
            source=self.source,
        )


@dataclass
class SourceSplits:
    """A data set's train and test splits as data sets of ``(input, target)`` (untransformed).

    Attributes:
        train: training source; item ``j`` is ``(input, target)``.
        train_targets: int64 [len(train)], the class of every training item (known without
            decoding any input).
        test: test source.
        test_targets: int64 [len(test)].
        class_names: one name per class id; its length is K.
        source: where the data came from (a file or directory), for messages.
    """

    train: Dataset[Any]
    train_targets: torch.Tensor
    test: Dataset[Any]
    test_targets: torch.Tensor
    class_names: list[str]
    source: str

    @property
    def num_classes(self) -> int:
        """K, the number of classes."""
        return len(self.class_names)


class InMemoryDataset(Dataset[tuple[Any, int]]):
    """``(inputs[i], int(targets[i]))`` over tensors held in memory, without a PIL round trip.

    Transforms are applied by the :class:`~mr2.data.indexed.IndexedDataset` that wraps this source,
    so one source serves the training split (augmented) and the validation split (not augmented).

    Args:
        inputs: [N, ...] tensor (uint8 images [N, C, H, W] or float features [N, d]).
        targets: int64 [N].

    Example:
        >>> source = InMemoryDataset(torch.zeros(3, 2), torch.tensor([0, 1, 1]))
        >>> len(source), source[2]
        (3, (tensor([0., 0.]), 1))
    """

    def __init__(self, inputs: torch.Tensor, targets: torch.Tensor) -> None:
        if inputs.shape[0] != targets.shape[0]:
            raise ValueError(f"{inputs.shape[0]} inputs but {targets.shape[0]} targets")
        self.inputs = inputs
        self.targets = targets.to(torch.int64)

    def __len__(self) -> int:
        return int(self.inputs.shape[0])

    def __getitem__(self, index: int) -> tuple[Any, int]:
        return self.inputs[index], int(self.targets[index])
