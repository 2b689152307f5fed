"""Epoch-seeded sharded sampling: the same global order for any number of ranks."""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch.utils.data import Sampler

__all__ = ["ShardedEpochSampler", "shard_for_eval"]


class ShardedEpochSampler(Sampler[int]):
    """Shuffle ``indices`` with a generator seeded ``seed + epoch``, then take this rank's share.

    The global order is a permutation that does not depend on the number of ranks, padded (by
    repeating its start) to a multiple of ``num_replicas``; rank r takes positions r, r + R, ...
    (the rule of torch's DistributedSampler). So R ranks with batch B see, step by step, the same
    samples as one process with batch R * B.

    Args:
        indices: [N] data-set indices to draw from (all of them, or an upsampled list).
        num_replicas: R, the number of ranks.
        rank: this rank.
        seed: base seed; call :meth:`set_epoch` before each epoch.
        shuffle: False keeps ``indices`` in order.
    """

    def __init__(
        self, indices: torch.Tensor, num_replicas: int = 1, rank: int = 0, seed: int = 0,
        shuffle: bool = True,
    ) -> None:
        self.indices = indices.long()
        self.num_replicas, self.rank, self.seed, self.shuffle = num_replicas, rank, seed, shuffle
        self.epoch = 0
        self.num_samples = -(-len(self.indices) // num_replicas)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def global_order(self) -> torch.Tensor:
        """The padded global order of this epoch (the same on every rank)."""
        order = self.indices
        if self.shuffle:
            generator = torch.Generator().manual_seed(self.seed + self.epoch)
            order = order[torch.randperm(len(order), generator=generator)]
        padding = self.num_samples * self.num_replicas - len(order)
        if padding:
            order = torch.cat([order, order[:padding]])
        return order

    def __iter__(self) -> Iterator[int]:
        return iter(self.global_order()[self.rank :: self.num_replicas].tolist())

    def __len__(self) -> int:
        return self.num_samples


def shard_for_eval(length: int, num_replicas: int, rank: int) -> list[int]:
    """Indices ``rank, rank + R, ...`` of ``range(length)``: every sample exactly once, no padding."""
    return list(range(rank, length, num_replicas))
