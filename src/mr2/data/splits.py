"""Seeded, stratified train/validation splits, and per-class subsampling.

Both are "take the first ``n_k`` samples of class ``k`` in a seeded permutation", computed without a
Python loop over samples or classes: a stable sort of the permuted labels groups each class, and a
sample's rank inside its class is its position minus the class's start.
"""

from __future__ import annotations

import torch

__all__ = ["first_per_class", "rank_within_class", "stratified_split"]


def _generator(seed: int) -> torch.Generator:
    generator = torch.Generator()
    generator.manual_seed(seed)
    return generator


def rank_within_class(targets: torch.Tensor, num_classes: int) -> torch.Tensor:
    """Each sample's rank among the samples of its class, in the given order.

    Args:
        targets: int64 class ids, [N].
        num_classes: K.

    Returns:
        int64 [N]; the j-th occurrence (0-based) of a class gets rank j.

    Example:
        >>> rank_within_class(torch.tensor([2, 0, 2, 2, 0]), 3)
        tensor([0, 0, 1, 2, 1])
    """
    order = torch.argsort(targets, stable=True)
    counts = torch.bincount(targets, minlength=num_classes)
    starts = torch.cumsum(counts, 0) - counts
    ranks = torch.empty_like(targets)
    ranks[order] = torch.arange(targets.numel()) - starts[targets[order]]
    return ranks


def first_per_class(
    targets: torch.Tensor, keep_per_class: torch.Tensor, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Split indices into the first ``keep_per_class[k]`` samples of each class (in a seeded
    permutation) and the rest.

    Args:
        targets: int64 class ids, [N].
        keep_per_class: int64 [K], how many samples of each class to select (capped at the class
            size).
        seed: seeds the permutation; the result depends only on ``seed`` and ``targets``.

    Returns:
        ``(selected, rest)``: sorted int64 index tensors that partition ``0..N-1``.

    Example:
        >>> selected, rest = first_per_class(torch.tensor([0, 0, 1, 1, 1]), torch.tensor([1, 2]), 0)
        >>> torch.bincount(torch.tensor([0, 0, 1, 1, 1])[selected]).tolist(), len(rest)
        ([1, 2], 2)
    """
    targets = torch.as_tensor(targets, dtype=torch.int64)
    permutation = torch.randperm(targets.numel(), generator=_generator(seed))
    permuted_targets = targets[permutation]
    ranks = rank_within_class(permuted_targets, keep_per_class.numel())
    chosen = ranks < keep_per_class.to(torch.int64)[permuted_targets]
    selected = torch.sort(permutation[chosen]).values
    rest = torch.sort(permutation[~chosen]).values
    return selected, rest


def stratified_split(
    targets: torch.Tensor, val_fraction: float, seed: int, num_classes: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Hold out ``val_fraction`` of every class as a validation split.

    Class ``k`` with ``n_k`` samples gives ``round(val_fraction * n_k)`` samples to validation, but
    always leaves at least one in training. The split depends only on ``seed`` and ``targets``.

    Args:
        targets: int64 class ids of the training set, [N].
        val_fraction: in ``[0, 1)``; 0 gives an empty validation split.
        seed: seeds the permutation.
        num_classes: K (default: ``max(targets) + 1``).

    Returns:
        ``(train_indices, val_indices)``: sorted int64 tensors partitioning ``0..N-1``.

    Raises:
        ValueError: ``val_fraction`` outside ``[0, 1)``.

    Example:
        >>> targets = torch.tensor([0] * 10 + [1] * 20)
        >>> train, val = stratified_split(targets, 0.1, seed=0)
        >>> torch.bincount(targets[val]).tolist(), len(train)
        ([1, 2], 27)
    """
    if not 0.0 <= val_fraction < 1.0:
        raise ValueError(f"val_fraction must lie in [0, 1), got {val_fraction}")
    targets = torch.as_tensor(targets, dtype=torch.int64)
    if num_classes is None:
        num_classes = int(targets.max()) + 1 if targets.numel() else 0
    counts = torch.bincount(targets, minlength=num_classes)
    n_val = torch.round(counts.to(torch.float64) * val_fraction).to(torch.int64)
    n_val = torch.minimum(n_val, (counts - 1).clamp(min=0))
    val, train = first_per_class(targets, n_val, seed)
    return train, val
