"""``fixed_split`` and augmentation (issue 45 item 2), sizes and seeds (issue 43 item 5).

A dataset whose training transform is random gives validation inputs that differ in every trial
while ``y_true`` stays the same, so tune cannot notice: with ``eval_data`` (the same samples under the
evaluation transform) the validation split is predicted without the augmentation, the same in every
trial. Sizes no memory holds and seeds ``torch.Generator`` cannot take are one-line errors before any
allocation."""

from __future__ import annotations

import resource
import subprocess
import sys
import warnings

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from mr2.tune import TuneInputError
from mr2.tune.script import (
    RANDOM_TRANSFORM,
    SPLIT_EVAL_LENGTH,
    SPLIT_EVAL_WITH_COUNT,
    SPLIT_MEMORY,
    SPLIT_SEED,
    fixed_split,
    write_predictions,
)

N, D, K = 200, 8, 4


class RandomNoise:
    """A random training transform (a stand-in for RandomCrop / RandomHorizontalFlip): global RNG."""

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.randn_like(x)

    def __repr__(self) -> str:
        return "RandomNoise(std=1.0)"


class Samples(Dataset):
    """N fixed samples under a transform (torchvision's datasets keep theirs in ``.transform``)."""

    def __init__(self, transform=None) -> None:
        generator = torch.Generator().manual_seed(0)
        self.x = torch.randn(N, D, generator=generator)
        self.y = torch.arange(N) % K
        self.transform = transform

    def __len__(self) -> int:
        return N

    def __getitem__(self, index: int):
        x = self.x[index]
        return (x if self.transform is None else self.transform(x)), self.y[index]


def _validation_logits(val_part, tmp_path, name: str) -> np.ndarray:
    with torch.random.fork_rng():  # one fixed model: only the inputs can differ between the calls
        torch.manual_seed(0)
        model = nn.Linear(D, K)
    loader = DataLoader(val_part, batch_size=32)
    files = write_predictions(tmp_path / name, model, loader, loader, num_classes=K)
    with np.load(files["val"]) as data:
        return data["logits"]


def test_with_eval_data_the_validation_predictions_are_the_same_in_every_trial(tmp_path):
    train_view, eval_view = Samples(RandomNoise()), Samples()
    train_part, val_part = fixed_split(train_view, 0.25, eval_data=eval_view)
    assert val_part.dataset is eval_view and train_part.dataset is train_view
    assert (train_part.indices, val_part.indices) == fixed_split(N, 0.25)
    # Two trials (two seeds) predict the validation split: identical, and equal to the clean inputs.
    torch.manual_seed(1)
    first = _validation_logits(val_part, tmp_path, "a")
    torch.manual_seed(2)
    second = _validation_logits(val_part, tmp_path, "b")
    assert np.array_equal(first, second)
    # The training view still augments: two draws of one training sample differ.
    assert not torch.equal(train_part[0][0], train_part[0][0])
    # Without eval_data the validation inputs are augmented: they differ between trials (the bug), and
    # fixed_split warns, naming the random transform.
    with pytest.warns(UserWarning) as caught:
        _, augmented = fixed_split(train_view, 0.25)
    assert str(caught[0].message) == RANDOM_TRANSFORM.format(names="RandomNoise", fraction=0.25)
    torch.manual_seed(1)
    noisy_first = _validation_logits(augmented, tmp_path, "c")
    torch.manual_seed(2)
    assert not np.array_equal(noisy_first, _validation_logits(augmented, tmp_path, "d"))


def test_a_torchvision_random_transform_is_named_in_the_warning_and_a_plain_one_is_not():
    transforms = pytest.importorskip("torchvision.transforms")
    augmenting = Samples(transforms.Compose([transforms.RandomCrop(8, padding=2), transforms.RandomHorizontalFlip()]))
    with pytest.warns(UserWarning, match=r"looks random \(RandomCrop, RandomHorizontalFlip\)"):
        fixed_split(augmenting, 0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fixed_split(Samples(transforms.Compose([transforms.Normalize([0.0], [1.0])])), 0.5)
        fixed_split(Samples(), 0.5)


@pytest.mark.parametrize(("data", "kwargs", "message"), [
    (Samples(), {"eval_data": Samples().x[:10]}, SPLIT_EVAL_LENGTH.format(eval_n=10, n=N)),
    (Samples(), {"eval_data": object()}, SPLIT_EVAL_LENGTH.format(eval_n="no len()", n=N)),
    (N, {"eval_data": Samples()}, SPLIT_EVAL_WITH_COUNT),
    (10, {"seed": 2**70}, SPLIT_SEED.format(value=2**70)),
    (10, {"seed": 2**200}, SPLIT_SEED.format(value="an integer of 201 bits")),
    (10, {"seed": 2**64}, SPLIT_SEED.format(value=2**64)),
    (10, {"seed": -1}, SPLIT_SEED.format(value=-1)),
    (10, {"seed": True}, SPLIT_SEED.format(value=True)),
    (10, {"seed": 1.0}, SPLIT_SEED.format(value=1.0)),
], ids=["eval-length", "eval-no-len", "eval-with-count", "seed-70-bits", "seed-200-bits", "seed-2**64", "seed-negative", "seed-bool",
        "seed-float"])
def test_bad_eval_data_and_seeds_are_one_line(data, kwargs, message):
    with pytest.raises(TuneInputError) as caught:
        fixed_split(data, 0.5, **kwargs)
    assert str(caught.value) == message and "\n" not in message


def test_the_largest_seed_works_and_gives_a_split():
    train, val = fixed_split(100, 0.5, seed=2**64 - 1)
    assert sorted(train + val) == list(range(100)) and len(val) == 50


class Huge:
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        return index


@pytest.mark.parametrize("data", [10**9, 10**12, 2**63, 2**80, Huge(10**12), Huge(2**63)],
                         ids=["1e9", "1e12", "2**63", "2**80", "dataset-1e12", "dataset-2**63"])
def test_sizes_no_memory_holds_are_refused_before_allocating(data, monkeypatch):
    """Issue 43: 10**9 samples allocated 23.6 GB (killed by the kernel); 10**12 and 2**63 were raw errors.
    The available memory is pinned to 8 GB here, so the outcome does not depend on the machine."""
    from mr2.tune import script

    monkeypatch.setattr(script, "_allocatable_bytes", lambda: 8 * 10**9)
    n = len(data) if isinstance(data, Huge) and data.n < 2**63 else data if isinstance(data, int) else None
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(TuneInputError) as caught:
        fixed_split(data, 0.5)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 100_000  # KiB: nothing allocated
    message = str(caught.value)
    assert "\n" not in message and message.endswith("this process can get 8 GB; split a smaller dataset (or a "
                                                    "subsample of its indices)")
    if n is not None:
        assert message == SPLIT_MEMORY.format(n=n, need=script._gigabytes(64 * n), free="8 GB")


def test_a_size_that_fits_still_splits_and_the_bound_uses_the_real_memory():
    """In a fresh process (the real available memory): 10**9 samples is refused on a machine that has
    less than 64 GB to give, and 10**6 samples splits."""
    code = ("from mr2.tune.script import fixed_split, _allocatable_bytes\n"
            "free = _allocatable_bytes()\n"
            "train, val = fixed_split(10**6, 0.5)\n"
            "assert len(val) == 500_000\n"
            "try:\n"
            "    fixed_split(10**9, 0.5)\n"
            "except ValueError as error:\n"
            "    print('refused', free < 64 * 10**9, error)\n"
            "else:\n"
            "    print('split', free >= 64 * 10**9)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert result.stdout.startswith(("refused True fixed_split of 1000000000 samples", "split True")), result.stdout
