"""One training epoch and one evaluation pass (explicit objects, no global state)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from torch import nn

from mr2 import distributed
from mr2.engine.streams import RandomStream
from mr2.methods.base import TrainingMethod
from mr2.optim.sam import SAM
from mr2.report.accuracy import confusion_accuracy
from mr2.report.confusion import LABEL_OUT_OF_RANGE, confusion_matrix
from mr2.report.exceptions import ReportError
from mr2.report.margins import logit_margins, per_class_margin_summary

__all__ = ["EpochResult", "EvalResult", "StepSetup", "evaluate", "train_one_epoch"]


@dataclass
class StepSetup:
    """How a training step runs.

    Attributes:
        device: where tensors go.
        amp_dtype: None (float32), torch.bfloat16 or torch.float16 for autocast.
        scaler: a GradScaler for float16, else None.
        grad_clip: max global gradient norm, or None.
        log_every: steps between host syncs for step-level logging (progress bar, TensorBoard).
        process_group: torch.distributed group (gradients of the method's own parameters are
            averaged over it; the model's are averaged by DistributedDataParallel).
        sam: a :class:`~mr2.optim.SAM` around the optimiser (``optim.sam``), or None: each step then
            takes the gradients at the sharpness-aware point (two forward/backward passes).
        method_stream: the method's own random stream (:class:`~mr2.engine.streams.RandomStream`):
            the method's ``on_batch`` and ``forward`` draw from it, not from the model's dropout
            stream (the engine passes it for a method with ``draws_in_step``); None: the global one.
    """

    device: torch.device
    amp_dtype: torch.dtype | None = None
    scaler: torch.amp.GradScaler | None = None
    grad_clip: float | None = None
    log_every: int = 50
    process_group: Any = None
    sam: SAM | None = None
    method_stream: RandomStream | None = None


@dataclass
class EpochResult:
    """One epoch, summed over ranks: mean loss and accuracy, samples, wall time, and the epoch means
    of the method's logged values (``loss_logit``, ``loss_rep``, ...)."""

    loss: float
    accuracy: float
    samples: int
    seconds: float
    values: dict[str, float]


def _autocast(setup: StepSetup) -> contextlib.AbstractContextManager[Any]:
    if setup.amp_dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=setup.device.type, dtype=setup.amp_dtype)


def _method_rng(setup: StepSetup) -> contextlib.AbstractContextManager[Any]:
    """The method's random stream while it runs (the global one when it has none)."""
    if setup.method_stream is None:
        return contextlib.nullcontext()
    return setup.method_stream.active(setup.device)


def _backward(loss: torch.Tensor, setup: StepSetup) -> None:
    if setup.scaler is not None:
        setup.scaler.scale(loss).backward()
    else:
        loss.backward()


def _sam_second_pass(
    model: nn.Module, method: TrainingMethod, inputs: torch.Tensor, target: torch.Tensor,
    index: torch.Tensor, setup: StepSetup,
) -> None:
    """SAM's second forward/backward on the same batch (at the perturbed weights)."""
    with _method_rng(setup):
        method.on_batch(inputs, target, index)
    with _autocast(setup):
        logits, features = model(inputs)
        with _method_rng(setup):
            loss = method(logits, features, target)
    _backward(loss, setup)


def _average_method_gradients(method: nn.Module, group: Any) -> None:
    """Average the gradients of the method's own parameters (e.g. LfF's biased model) over ranks."""
    grads = [p.grad for p in method.parameters() if p.grad is not None]
    if not grads or not distributed.is_distributed(group):
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    distributed.all_reduce_sum_(flat, group).div_(distributed.world_size(group))
    offset = 0
    for g in grads:
        g.copy_(flat[offset : offset + g.numel()].view_as(g))
        offset += g.numel()


def train_one_epoch(
    model: nn.Module,
    method: TrainingMethod,
    loader: Iterable[Any],
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None,
    setup: StepSetup,
    *,
    progress: Callable[[int, dict[str, float]], None] | None = None,
) -> EpochResult:
    """Train ``model`` for one pass over ``loader`` (items ``(inputs, target, index)``).

    The AMP order is scale, backward, unscale, clip, step. Loss, accuracy and the method's
    :meth:`~mr2.methods.base.TrainingMethod.log_values` are accumulated on the device; the host reads
    them only every ``setup.log_every`` steps and at the epoch's last step (``progress(step,
    values)``: that step's loss and parts; an epoch shorter than ``log_every`` still reports its
    last step) and at the end. ``EpochResult.values`` are the sample-weighted epoch means of the
    method's log values over all ranks. With ``setup.sam`` the backward is SAM's two passes
    (:meth:`~mr2.optim.SAM.sharpness_aware_gradients`); loss, accuracy and log values are the first
    pass's (at the unperturbed weights).
    """
    model.train()
    method.train()
    device = setup.device
    loss_sum = torch.zeros((), device=device)
    correct = torch.zeros((), device=device, dtype=torch.long)
    samples = 0
    start = time.perf_counter()
    params = [p for group in optimizer.param_groups for p in group["params"]]
    value_sums: dict[str, torch.Tensor] = {}
    steps = 0
    for step, (inputs, target, index) in enumerate(loader):
        inputs = inputs.to(device, non_blocking=True)
        target = target.to(device, non_blocking=True)
        index = index.to(device, non_blocking=True)
        method_state = setup.sam.snapshot(method) if setup.sam is not None else None
        with _method_rng(setup):
            method.on_batch(inputs, target, index)
        with SAM.first_pass(setup.sam, model):  # under DDP with SAM: no_sync
            with _autocast(setup):
                logits, features = model(inputs)
                with _method_rng(setup):
                    loss = method(logits, features, target)
            optimizer.zero_grad(set_to_none=True)
            _backward(loss, setup)
        step_values = method.log_values()
        if setup.sam is not None:
            setup.sam.sharpness_aware_gradients(
                model, method, partial(_sam_second_pass, model, method, inputs, target, index, setup),
                method_state,
            )
        if setup.scaler is not None:
            setup.scaler.unscale_(optimizer)
        _average_method_gradients(method, setup.process_group)
        if setup.grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(params, setup.grad_clip)
        if setup.scaler is not None:
            setup.scaler.step(optimizer)
            setup.scaler.update()
        else:
            optimizer.step()
        if scheduler is not None:
            scheduler.step()
        batch = target.shape[0]
        loss_sum += loss.detach() * batch
        correct += (logits.detach().argmax(dim=1) == target).sum()
        samples += batch
        for key, value in step_values.items():
            weighted = value.detach().float() * batch
            value_sums[key] = value_sums[key] + weighted if key in value_sums else weighted
        steps = step + 1
        if progress is not None and steps % setup.log_every == 0:
            progress(steps, {"loss": float(loss.detach()), **{k: float(v) for k, v in step_values.items()}})
    if progress is not None and steps % setup.log_every:
        # The epoch's last step, so an epoch shorter than log_every still logs one step.
        progress(steps, {"loss": float(loss.detach()), **{k: float(v) for k, v in step_values.items()}})
    keys = sorted(value_sums)
    totals = torch.stack(
        [loss_sum, correct.to(loss_sum.dtype), torch.tensor(float(samples), device=device)]
        + [value_sums[k].to(loss_sum.dtype) for k in keys]
    )
    distributed.all_reduce_sum_(totals, setup.process_group)
    n = max(float(totals[2]), 1.0)
    values = {k: float(totals[3 + i]) / n for i, k in enumerate(keys)}
    return EpochResult(
        float(totals[0]) / n, float(totals[1]) / n, int(totals[2]), time.perf_counter() - start, values
    )


@dataclass
class EvalResult:
    """Evaluation of one split, summed over ranks.

    Attributes:
        confusion: [K, K] int64, rows true class, columns prediction.
        margins: [N] logit margin of every sample (true logit - largest other logit).
        targets: [N] their classes.
        predictions: [N] the predicted classes (argmax of the logits), in the order of ``targets``.
        shards: how many ranks evaluated (each the strided shard of
            :func:`~mr2.engine.samplers.shard_for_eval`); the per-sample tensors are concatenated in
            rank order, :meth:`in_dataset_order` restores the split's order.
    """

    confusion: torch.Tensor
    margins: torch.Tensor
    targets: torch.Tensor
    predictions: torch.Tensor | None = None
    shards: int = 1

    def in_dataset_order(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(targets, predictions)`` [N] each, in the evaluated split's sample order."""
        assert self.predictions is not None
        n = int(self.targets.shape[0])
        order = torch.cat([torch.arange(rank, n, self.shards) for rank in range(self.shards)])
        targets = torch.empty_like(self.targets)
        predictions = torch.empty_like(self.predictions)
        targets[order] = self.targets
        predictions[order] = self.predictions
        return targets, predictions

    @property
    def num_samples(self) -> int:
        return int(self.confusion.sum())

    @property
    def overall_accuracy(self) -> float:
        return float(self.confusion.diagonal().sum()) / max(self.num_samples, 1)

    def per_class_accuracy(self) -> torch.Tensor:
        """[K] recall; NaN for classes without samples."""
        return confusion_accuracy(self.confusion)

    def margin_summary(self, num_classes: int) -> dict[str, list[float]]:
        """Per-class mean and median logit margin (NaN for classes without samples)."""
        mean, median = per_class_margin_summary(self.margins, self.targets, num_classes)
        return {"mean": mean.tolist(), "median": median.tolist()}


def _check_label_range(low: torch.Tensor, high: torch.Tensor, num_classes: int) -> None:
    """Raise the confusion matrix's out-of-range error from the evaluation's label extremes."""
    low_value, high_value = (int(v) for v in torch.stack([low, high]).tolist())  # one host sync
    if low_value < 0 or high_value >= num_classes:
        raise ReportError(
            LABEL_OUT_OF_RANGE.format(
                name="target", num_classes=num_classes, low=low_value, high=high_value
            )
        )


@torch.no_grad()
def evaluate(
    model: nn.Module,
    loader: Iterable[Any],
    num_classes: int,
    device: torch.device,
    *,
    amp_dtype: torch.dtype | None = None,
    process_group: Any = None,
) -> EvalResult:
    """Confusion matrix and logit margins of ``model`` over ``loader``, summed over ranks.

    Each rank must see a disjoint shard of the split (see :func:`~mr2.engine.samplers.shard_for_eval`):
    nothing is padded, so no sample is counted twice. The confusion matrix is accumulated on the
    device without a host sync per batch; the label range is checked once, at the end (the
    confusion matrix's out-of-range error, with the extremes over the whole evaluation).
    """
    model.eval()
    confusion = torch.zeros(num_classes, num_classes, dtype=torch.long, device=device)
    low = torch.zeros((), dtype=torch.long, device=device)
    high = torch.zeros((), dtype=torch.long, device=device)
    margins, targets, predicted = [], [], []
    for batch in loader:
        inputs, target = batch[0].to(device), batch[1].to(device)
        ctx = (
            torch.autocast(device_type=device.type, dtype=amp_dtype)
            if amp_dtype is not None
            else contextlib.nullcontext()
        )
        with ctx:
            logits, _ = model(inputs)
        logits = logits.float()
        if target.numel():
            low = torch.minimum(low, target.min())
            high = torch.maximum(high, target.max())
        # Clamped for the counting only: an out-of-range label is reported after the loop.
        safe = target.clamp(0, num_classes - 1)
        confusion += confusion_matrix(logits, safe, num_classes, validate_args=False)
        margins.append(logit_margins(logits, safe))
        targets.append(target)
        predicted.append(logits.argmax(dim=1))
    _check_label_range(low, high, num_classes)
    distributed.all_reduce_sum_(confusion, process_group)
    local_margins = torch.cat(margins) if margins else torch.zeros(0, device=device)
    local_targets = torch.cat(targets) if targets else torch.zeros(0, dtype=torch.long, device=device)
    all_margins, _ = distributed.all_gather_variable(local_margins, process_group)
    all_targets, sizes = distributed.all_gather_variable(local_targets, process_group)
    local_predicted = torch.cat(predicted) if predicted else torch.zeros(0, dtype=torch.long, device=device)
    all_predicted, _ = distributed.all_gather_variable(local_predicted, process_group, sizes)
    return EvalResult(confusion.cpu(), all_margins.cpu(), all_targets.cpu(), all_predicted.cpu(), len(sizes))
