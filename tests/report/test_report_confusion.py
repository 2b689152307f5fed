"""Confusion matrix and the distributed-safe accumulator."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
from sklearn.metrics import confusion_matrix as sk_confusion_matrix

from mr2.report import confusion as confusion_module
from mr2.report.confusion import ConfusionMatrix, confusion_matrix
from mr2.report.exceptions import ReportError


def loop_confusion(preds: list[int], target: list[int], num_classes: int) -> np.ndarray:
    matrix = np.zeros((num_classes, num_classes), dtype=np.int64)
    for p, t in zip(preds, target, strict=True):
        matrix[t, p] += 1
    return matrix


@pytest.mark.parametrize("num_classes", [1, 2, 7, 1000])
def test_matches_sklearn_and_loop(num_classes: int) -> None:
    generator = torch.Generator().manual_seed(num_classes)
    target = torch.randint(0, num_classes, (3000,), generator=generator)
    preds = torch.randint(0, num_classes, (3000,), generator=generator)
    ours = confusion_matrix(preds, target, num_classes).numpy()
    labels = list(range(num_classes))
    with warnings.catch_warnings():
        # sklearn warns that a single label was found when K = 1; the matrix is still right.
        warnings.simplefilter("ignore", UserWarning)
        expected = sk_confusion_matrix(target, preds, labels=labels)
    np.testing.assert_array_equal(ours, expected)
    np.testing.assert_array_equal(ours, loop_confusion(preds.tolist(), target.tolist(), num_classes))
    assert ours.dtype == np.int64


def test_matches_torchmetrics() -> None:
    torchmetrics = pytest.importorskip("torchmetrics")
    generator = torch.Generator().manual_seed(1)
    target = torch.randint(0, 5, (500,), generator=generator)
    preds = torch.randint(0, 5, (500,), generator=generator)
    expected = torchmetrics.functional.confusion_matrix(preds, target, task="multiclass", num_classes=5)
    torch.testing.assert_close(confusion_matrix(preds, target, 5), expected.long())


def test_logits_are_argmaxed() -> None:
    logits = torch.tensor([[0.1, 2.0, 0.3], [5.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    target = torch.tensor([1, 2, 2])
    expected = confusion_matrix(logits.argmax(dim=1), target, 3)
    torch.testing.assert_close(confusion_matrix(logits, target, 3), expected)
    assert int(expected[2, 0]) == 1 and int(expected[1, 1]) == 1


def test_valid_mask_drops_samples() -> None:
    preds = torch.tensor([0, 1, 1, 0])
    target = torch.tensor([0, 1, 0, 0])
    valid = torch.tensor([True, False, True, False])
    matrix = confusion_matrix(preds, target, 2, valid=valid)
    np.testing.assert_array_equal(matrix.numpy(), [[1, 1], [0, 0]])


@pytest.mark.parametrize(
    ("preds", "target", "message"),
    [
        (torch.tensor([0, 1]), torch.tensor([0, 1, 1]), "must describe the same samples"),
        (torch.tensor([0.0, 1.0]), torch.tensor([0, 1]), "must hold integer class ids"),
        (torch.tensor([0, 3]), torch.tensor([0, 1]), "outside [0, 3)"),
        (torch.tensor([0, 1]), torch.tensor([-1, 1]), "outside [0, 3)"),
        (torch.zeros(2, 5), torch.tensor([0, 1]), "logits have 5 columns"),
    ],
)
def test_bad_input_is_explained(preds: torch.Tensor, target: torch.Tensor, message: str) -> None:
    with pytest.raises(ReportError, match=message.replace("[", r"\[").replace(")", r"\)")):
        confusion_matrix(preds, target, 3)


def test_error_messages_are_the_constants() -> None:
    with pytest.raises(ReportError) as info:
        confusion_matrix(torch.tensor([0, 9]), torch.tensor([0, 1]), 3)
    assert str(info.value) == confusion_module.LABEL_OUT_OF_RANGE.format(
        name="preds", num_classes=3, low=0, high=9
    )
    with pytest.raises(ReportError) as info:
        confusion_matrix(torch.tensor([0]), torch.tensor([0]), 0)
    assert str(info.value) == confusion_module.NUM_CLASSES_INVALID.format(value=0)


def test_accumulator_over_batches_equals_one_shot() -> None:
    generator = torch.Generator().manual_seed(2)
    target = torch.randint(0, 6, (101,), generator=generator)
    preds = torch.randint(0, 6, (101,), generator=generator)
    metric = ConfusionMatrix(6)
    for start in range(0, 101, 16):
        metric.update(preds[start : start + 16], target[start : start + 16])
    torch.testing.assert_close(metric.compute(), confusion_matrix(preds, target, 6))
    # compute() does not change the state; reset() clears it.
    torch.testing.assert_close(metric.compute(), confusion_matrix(preds, target, 6))
    metric.reset()
    assert int(metric.compute().sum()) == 0 and metric.num_seen == 0


@pytest.mark.parametrize(("num_samples", "world_size"), [(11, 2), (10, 3), (7, 4), (12, 4)])
def test_sampler_padding_is_not_counted(num_samples: int, world_size: int) -> None:
    """Simulated ranks (no process group): the sum of the per-rank matrices equals the data set's,
    and what the accumulator dropped is exactly the sampler's padding (positions >= N of the padded
    list, position r + i * world_size being the i-th sample of rank r)."""
    from torch.utils.data import DistributedSampler, TensorDataset

    generator = torch.Generator().manual_seed(num_samples)
    target = torch.randint(0, 3, (num_samples,), generator=generator)
    preds = torch.randint(0, 3, (num_samples,), generator=generator)
    total = torch.zeros(3, 3, dtype=torch.int64)
    naive = torch.zeros(3, 3, dtype=torch.int64)
    padding: list[int] = []
    for rank in range(world_size):
        sampler: DistributedSampler[int] = DistributedSampler(
            TensorDataset(torch.arange(num_samples)),
            num_replicas=world_size,
            rank=rank,
            shuffle=True,
            seed=5,
        )
        indices = torch.tensor(list(sampler))
        padding += [int(index) for i, index in enumerate(indices) if rank + i * world_size >= num_samples]
        metric = ConfusionMatrix(3, dataset_length=num_samples, rank=rank, world_size=world_size)
        counted = ConfusionMatrix(3)
        for batch in indices.split(2):
            metric.update(preds[batch], target[batch])
            counted.update(preds[batch], target[batch])
        total += metric.local
        naive += counted.local
    torch.testing.assert_close(total, confusion_matrix(preds, target, 3))
    assert len(padding) == (-num_samples) % world_size
    pad = torch.tensor(padding, dtype=torch.int64)
    torch.testing.assert_close(naive - total, confusion_matrix(preds[pad], target[pad], 3))


def test_count_mismatch_is_an_error() -> None:
    metric = ConfusionMatrix(2, dataset_length=5)
    metric.update(torch.tensor([0, 1, 1]), torch.tensor([0, 1, 0]))
    with pytest.raises(ReportError) as info:
        metric.compute()
    assert str(info.value) == confusion_module.COUNT_MISMATCH.format(counted=3, expected=5)


def test_invalid_rank_is_an_error() -> None:
    with pytest.raises(ReportError, match="rank must satisfy"):
        ConfusionMatrix(3, rank=2, world_size=2)


@pytest.mark.distributed
def test_two_gloo_ranks_equal_one_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if not dist.is_available() or not dist.is_gloo_available():
        pytest.skip("torch.distributed with the gloo backend is not available in this torch build")
    import torch.multiprocessing as mp

    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    # The spawned children import the worker by name and mr2 from the parent's sys.path.
    monkeypatch.setenv("PYTHONPATH", ":".join(p for p in sys.path if p))
    import dist_confusion_worker as worker

    mp.spawn(
        worker.run,
        args=(2, str(tmp_path / "init"), str(tmp_path)),
        nprocs=2,
        join=True,
    )
    data = worker.dataset()
    preds, target = data.tensors
    expected = confusion_matrix(preds, target, worker.NUM_CLASSES)
    for rank in range(2):
        result = torch.load(tmp_path / f"rank{rank}.pt", weights_only=True)
        torch.testing.assert_close(result["padded_aware"], expected)
        assert int(result["padded_aware"].sum()) == worker.NUM_SAMPLES
        # Without the data set length the sampler's padding is counted twice.
        assert int(result["naive"].sum()) == worker.NUM_SAMPLES + 1
        assert result["seen"] == 6
