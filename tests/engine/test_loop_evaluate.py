"""evaluate(): the confusion matrix accumulated on the device equals the per-batch path, and the
label range is checked once per evaluation."""

from __future__ import annotations

import re

import pytest
import torch
from torch import nn

from mr2.engine.loop import evaluate
from mr2.report.confusion import confusion_matrix
from mr2.report.exceptions import ReportError


class _Linear(nn.Module):
    def __init__(self, dim: int, num_classes: int) -> None:
        super().__init__()
        self.fc = nn.Linear(dim, num_classes)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.fc(x), x


def _loader(num_batches=5, batch=13, dim=4, num_classes=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [
        (torch.randn(batch, dim, generator=g), torch.randint(0, num_classes, (batch,), generator=g))
        for _ in range(num_batches)
    ]


def test_confusion_matrix_without_validation_counts_the_same():
    g = torch.Generator().manual_seed(1)
    preds, target = torch.randint(0, 7, (200,), generator=g), torch.randint(0, 7, (200,), generator=g)
    valid = torch.rand(200, generator=g) > 0.3
    checked = confusion_matrix(preds, target, 7, valid=valid)
    unchecked = confusion_matrix(preds, target, 7, valid=valid, validate_args=False)
    assert torch.equal(checked, unchecked)
    # float64 loop oracle
    oracle = torch.zeros(7, 7, dtype=torch.long)
    for p, t, v in zip(preds.tolist(), target.tolist(), valid.tolist(), strict=True):
        oracle[t, p] += int(v)
    assert torch.equal(unchecked, oracle)


def test_confusion_matrix_validation_is_on_by_default_and_can_be_turned_off():
    with pytest.raises(ReportError, match=re.escape("target holds class ids outside [0, 3)")):
        confusion_matrix(torch.tensor([0, 1]), torch.tensor([0, 3]), 3)
    with pytest.raises(IndexError):  # unchecked: an indexing error, not a wrong count
        confusion_matrix(torch.tensor([0, 1]), torch.tensor([0, 3]), 3, validate_args=False)


def test_evaluate_equals_the_per_batch_confusion_matrices():
    torch.manual_seed(0)
    model = _Linear(4, 6)
    loader = _loader()
    result = evaluate(model, loader, 6, torch.device("cpu"))
    expected = sum(confusion_matrix(model(x)[0], y, 6) for x, y in loader)
    assert torch.equal(result.confusion, expected)
    assert result.num_samples == 65 and result.targets.tolist() == torch.cat([y for _, y in loader]).tolist()


def test_evaluate_checks_the_label_range_once_over_the_whole_evaluation():
    loader = _loader()
    loader[2][1][4] = 9  # one label past K in the third batch
    loader[4][1][0] = -1
    with pytest.raises(
        ReportError, match=re.escape("target holds class ids outside [0, 6): min -1, max 9")
    ):
        evaluate(_Linear(4, 6), loader, 6, torch.device("cpu"))


def test_evaluate_validates_labels_once_not_per_batch(monkeypatch):
    # The per-batch path validated (read min/max on the host) in every confusion_matrix call.
    from mr2.report import confusion as confusion_module

    original = confusion_module._as_labels
    validated = []

    def as_labels(preds, target, num_classes, validate_args=True):
        validated.append(validate_args)
        return original(preds, target, num_classes, validate_args)

    monkeypatch.setattr(confusion_module, "_as_labels", as_labels)
    host_reads = []
    original_tolist = torch.Tensor.tolist
    monkeypatch.setattr(torch.Tensor, "tolist", lambda self: host_reads.append(1) or original_tolist(self))
    evaluate(_Linear(4, 6), _loader(num_batches=6), 6, torch.device("cpu"))
    assert validated == [False] * 6 and len(host_reads) == 1
