"""Seeded stratified train/validation splits, checked against slow loop oracles."""

from __future__ import annotations

import pytest
import torch

from mr2.data.splits import first_per_class, rank_within_class, stratified_split


def _targets(seed: int = 0, n: int = 97, k: int = 6) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, k, (n,), generator=generator)


def test_rank_within_class_matches_loop() -> None:
    targets = _targets()
    seen: dict[int, int] = {}
    expected = []
    for label in targets.tolist():
        expected.append(seen.get(label, 0))
        seen[label] = seen.get(label, 0) + 1
    assert rank_within_class(targets, 6).tolist() == expected


def test_first_per_class_matches_loop() -> None:
    targets = _targets(1)
    keep = torch.tensor([0, 1, 2, 3, 50, 5])
    selected, rest = first_per_class(targets, keep, seed=7)
    permutation = torch.randperm(targets.numel(), generator=torch.Generator().manual_seed(7))
    taken = [0] * 6
    oracle = []
    for index in permutation.tolist():
        label = int(targets[index])
        if taken[label] < int(keep[label]):
            taken[label] += 1
            oracle.append(index)
    assert selected.tolist() == sorted(oracle)
    assert sorted(selected.tolist() + rest.tolist()) == list(range(targets.numel()))


@pytest.mark.parametrize("fraction", [0.0, 0.1, 0.25, 0.5])
def test_stratified_counts_and_partition(fraction: float) -> None:
    targets = _targets(2, n=300)
    train, val = stratified_split(targets, fraction, seed=0)
    counts = torch.bincount(targets, minlength=6)
    val_counts = torch.bincount(targets[val], minlength=6)
    for k in range(6):
        assert int(val_counts[k]) == min(round(fraction * int(counts[k])), int(counts[k]) - 1)
    assert sorted(train.tolist() + val.tolist()) == list(range(300))
    assert train.dtype == val.dtype == torch.int64
    assert torch.equal(train, torch.sort(train).values) and torch.equal(val, torch.sort(val).values)


def test_split_is_stable_for_seed_and_data() -> None:
    targets = _targets(3, n=500)
    first = stratified_split(targets, 0.2, seed=11)
    second = stratified_split(targets.clone(), 0.2, seed=11)
    assert torch.equal(first[0], second[0]) and torch.equal(first[1], second[1])
    other = stratified_split(targets, 0.2, seed=12)
    assert not torch.equal(first[1], other[1])


def test_a_class_of_one_stays_in_training() -> None:
    targets = torch.tensor([0, 0, 0, 0, 1, 2, 2])
    train, _ = stratified_split(targets, 0.5, seed=0)
    assert 4 in train.tolist()
    assert torch.bincount(targets[train], minlength=3).tolist() == [2, 1, 1]


def test_invalid_fraction() -> None:
    with pytest.raises(ValueError, match=r"val_fraction must lie in \[0, 1\)"):
        stratified_split(torch.tensor([0, 1]), 1.0, seed=0)
