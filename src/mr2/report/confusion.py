"""Confusion matrices from predictions, and a distributed-safe accumulator.

Every figure of the disparity report is derived from one K x K confusion matrix ``C`` with
``C[i, j]`` = number of evaluated samples of true class ``i`` predicted as class ``j``. It is built
with a single ``bincount`` over ``i * K + j`` (no loop over classes or samples), so it scales to
K = 1000, and it is an integer sum, so per-rank matrices can be all-reduced exactly.

Under data parallelism, :class:`torch.utils.data.DistributedSampler` (with ``drop_last=False``) pads
the index list by repeating its first indices until its length is divisible by the number of ranks.
Counting every prediction would count those samples twice. :class:`ConfusionMatrix` drops them: given
the true ``dataset_length`` it knows that the ``i``-th sample seen on rank ``r`` of ``R`` sits at
position ``r + i * R`` of the padded list, and that positions ``>= dataset_length`` are padding (this
holds with and without shuffling, because the padding is appended after the permutation).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from mr2.checks import is_int
from mr2.report.exceptions import ReportError

__all__ = ["ConfusionMatrix", "confusion_matrix"]

NUM_CLASSES_INVALID = "num_classes must be a positive integer, got {value!r}"
_PREDS_SHAPE_MISMATCH = (
    "preds and target must describe the same samples: preds has shape {preds}, target has shape "
    "{target}; pass class ids of shape [N] or logits of shape [N, num_classes] with target of shape [N]"
)
_LOGITS_WIDTH_MISMATCH = (
    "logits have {width} columns but num_classes is {num_classes}; pass logits of shape "
    "[N, num_classes] or predicted class ids of shape [N]"
)
_NOT_INTEGER_LABELS = (
    "{name} must hold integer class ids, got dtype {dtype}; pass logits.argmax(dim=1) for predictions "
    "and integer targets"
)
LABEL_OUT_OF_RANGE = (
    "{name} holds class ids outside [0, {num_classes}): min {low}, max {high}; check num_classes and "
    "the label encoding of the data set"
)
_VALID_SHAPE_MISMATCH = "valid must be a boolean mask of shape {expected}, got shape {actual}"
_DATASET_LENGTH_INVALID = "dataset_length must be a positive integer or None, got {value!r}"
_RANK_INVALID = "rank must satisfy 0 <= rank < world_size, got rank={rank}, world_size={world_size}"
COUNT_MISMATCH = (
    "the confusion matrix counts {counted} samples over all ranks but the data set has {expected}; "
    "evaluate the whole split once (DistributedSampler with drop_last=False and a DataLoader with "
    "drop_last=False), call reset() between evaluations, and pass the true len(dataset) as "
    "dataset_length"
)


def _check_num_classes(num_classes: int) -> None:
    if not is_int(num_classes) or num_classes < 1:
        raise ReportError(NUM_CLASSES_INVALID.format(value=num_classes))


def _as_labels(
    preds: torch.Tensor, target: torch.Tensor, num_classes: int, validate_args: bool = True
) -> torch.Tensor:
    """Validate ``preds``/``target`` and return predicted class ids of shape [N].

    Shapes and dtypes are always checked (free); the label range (a host sync) only with
    ``validate_args``.
    """
    if preds.dim() == 2 and target.dim() == 1 and preds.shape[0] == target.shape[0]:
        if preds.shape[1] != num_classes:
            raise ReportError(
                _LOGITS_WIDTH_MISMATCH.format(width=preds.shape[1], num_classes=num_classes)
            )
        preds = preds.argmax(dim=1)
    if preds.dim() != 1 or target.dim() != 1 or preds.shape != target.shape:
        raise ReportError(
            _PREDS_SHAPE_MISMATCH.format(preds=tuple(preds.shape), target=tuple(target.shape))
        )
    for name, labels in (("preds", preds), ("target", target)):
        if labels.is_floating_point() or labels.is_complex() or labels.dtype == torch.bool:
            raise ReportError(_NOT_INTEGER_LABELS.format(name=name, dtype=labels.dtype))
        if validate_args and labels.numel() and (labels.min() < 0 or labels.max() >= num_classes):
            raise ReportError(
                LABEL_OUT_OF_RANGE.format(
                    name=name,
                    num_classes=num_classes,
                    low=int(labels.min()),
                    high=int(labels.max()),
                )
            )
    return preds


def confusion_matrix(
    preds: torch.Tensor,
    target: torch.Tensor,
    num_classes: int,
    *,
    valid: torch.Tensor | None = None,
    validate_args: bool = True,
) -> torch.Tensor:
    """Confusion matrix of predictions, ``C[i, j] = #{n : target[n] = i, pred[n] = j, valid[n]}``.

    Computed as one ``index_add_`` of ones at ``target * K + pred`` into a [K * K] zero vector (the
    counts of ``bincount(target * K + pred, minlength=K * K)``, but with a fixed output size, so
    no host sync on any device).

    Args:
        preds: predicted class ids, shape [N] (integer), or logits, shape [N, K] (argmax is taken).
        target: true class ids, shape [N] (integer).
        num_classes: K.
        valid: optional boolean mask, shape [N]; samples where it is False are not counted
            (the padding of a DistributedSampler, for instance).
        validate_args: check that the labels lie in ``[0, K)`` (reads them on the host, one sync
            per call). ``False`` skips it, like torchmetrics' ``validate_args``: for a caller
            that checks the range once per evaluation (out-of-range ids then raise an indexing
            error on CPU and a device-side assert on accelerators).

    Returns:
        int64 tensor of shape [K, K] on the device of ``target``.

    Raises:
        ReportError: shapes disagree, labels are not integers or fall outside [0, K).

    Example:
        >>> confusion_matrix(torch.tensor([0, 1, 1, 2]), torch.tensor([0, 1, 2, 2]), 3)
        tensor([[1, 0, 0],
                [0, 1, 0],
                [0, 1, 1]])
    """
    _check_num_classes(num_classes)
    labels = _as_labels(preds, target, num_classes, validate_args).to(target.device)
    index = target.long() * num_classes + labels.long()
    ones = torch.ones_like(index)
    if valid is not None:
        if valid.shape != target.shape or valid.dtype != torch.bool:
            raise ReportError(
                _VALID_SHAPE_MISMATCH.format(expected=tuple(target.shape), actual=tuple(valid.shape))
            )
        ones = valid.to(index.device).long()  # masked samples add 0 (no boolean indexing: no sync)
    counts = torch.zeros(num_classes * num_classes, dtype=torch.long, device=index.device)
    counts.index_add_(0, index, ones)
    return counts.view(num_classes, num_classes)


class ConfusionMatrix:
    """Accumulates a confusion matrix over batches and sums it across distributed ranks.

    Each rank calls :meth:`update` on its own batches; :meth:`compute` all-reduces (sums) the
    per-rank matrices over ``process_group`` and returns the global matrix, identical on every rank.

    DistributedSampler padding: pass ``dataset_length=len(dataset)``. The accumulator then counts the
    samples it sees on this rank in order; the ``i``-th one lies at position ``rank + i * world_size``
    of the sampler's padded index list and is dropped when that position is ``>= dataset_length``.
    This requires the loader to yield this rank's samples in the sampler's order (a DataLoader over a
    DistributedSampler does) and ``drop_last=False``. :meth:`compute` then checks that the global
    count equals ``dataset_length``. Without ``dataset_length`` every sample passed (and kept by the
    optional per-batch ``valid`` mask) is counted.

    Args:
        num_classes: K.
        dataset_length: the true number of samples in the evaluated split, or None.
        process_group: the torch.distributed group to sum over (None: the default group). Ignored
            when torch.distributed is not initialised.
        device: where the matrix lives (default: the device of the first ``target``). With NCCL this
            must be the rank's CUDA device.
        rank: this process's rank in ``process_group`` (default: from torch.distributed, else 0).
        world_size: the number of ranks (default: from torch.distributed, else 1).

    Example:
        >>> metric = ConfusionMatrix(2)
        >>> metric.update(torch.tensor([0, 1]), torch.tensor([0, 0]))
        >>> metric.update(torch.tensor([[0.1, 0.9]]), torch.tensor([1]))
        >>> metric.compute()
        tensor([[1, 1],
                [0, 1]])
    """

    def __init__(
        self,
        num_classes: int,
        *,
        dataset_length: int | None = None,
        process_group: Any = None,
        device: torch.device | str | None = None,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        _check_num_classes(num_classes)
        if dataset_length is not None and (
            not is_int(dataset_length) or dataset_length < 1
        ):
            raise ReportError(_DATASET_LENGTH_INVALID.format(value=dataset_length))
        distributed = dist.is_available() and dist.is_initialized()
        if world_size is None:
            world_size = dist.get_world_size(process_group) if distributed else 1
        if rank is None:
            rank = dist.get_rank(process_group) if distributed else 0
        if not 0 <= rank < world_size:
            raise ReportError(_RANK_INVALID.format(rank=rank, world_size=world_size))
        self.num_classes = num_classes
        self.dataset_length = dataset_length
        self.process_group = process_group
        self.rank = rank
        self.world_size = world_size
        self._device = torch.device(device) if device is not None else None
        self._matrix: torch.Tensor | None = None
        self._seen = 0

    @property
    def num_seen(self) -> int:
        """Samples passed to :meth:`update` on this rank since the last reset (padding included)."""
        return self._seen

    @property
    def local(self) -> torch.Tensor:
        """This rank's matrix (not reduced), int64 [K, K]."""
        if self._matrix is None:
            device = self._device if self._device is not None else torch.device("cpu")
            self._matrix = torch.zeros(
                self.num_classes, self.num_classes, dtype=torch.int64, device=device
            )
        return self._matrix

    def reset(self) -> None:
        """Forget every sample (call between evaluations)."""
        self._matrix = None
        self._seen = 0

    @torch.no_grad()
    def update(
        self, preds: torch.Tensor, target: torch.Tensor, valid: torch.Tensor | None = None
    ) -> None:
        """Add a batch: ``preds`` (ids [N] or logits [N, K]), ``target`` [N], optional mask [N]."""
        if self._matrix is None and self._device is None:
            self._device = target.device
        batch = int(target.shape[0]) if target.dim() >= 1 else 0
        if self.dataset_length is not None:
            position = self.rank + (self._seen + torch.arange(batch, device=target.device)) * (
                self.world_size
            )
            in_dataset = position < self.dataset_length
            if valid is not None and valid.shape == in_dataset.shape:
                valid = valid.to(target.device) & in_dataset
            elif valid is None:
                valid = in_dataset
        batch_matrix = confusion_matrix(preds, target, self.num_classes, valid=valid)
        self.local.add_(batch_matrix.to(self.local.device))
        self._seen += batch

    @torch.no_grad()
    def compute(self) -> torch.Tensor:
        """The global confusion matrix (summed over ranks), int64 [K, K], same on every rank.

        Raises:
            ReportError: ``dataset_length`` was given and the global count differs from it.
        """
        total = self.local.clone()
        if self.world_size > 1 and dist.is_available() and dist.is_initialized():
            dist.all_reduce(total, op=dist.ReduceOp.SUM, group=self.process_group)
        if self.dataset_length is not None:
            counted = int(total.sum())
            if counted != self.dataset_length:
                raise ReportError(
                    COUNT_MISMATCH.format(counted=counted, expected=self.dataset_length)
                )
        return total
