"""Hugging Face ``Trainer``: train with :class:`~mr2.MR2Loss` and report class-wise disparity.

The pieces (see examples/hf_trainer_mr2.py and docs/integrations.md)::

    model = ClassifierForTrainer(backbone, MR2Loss(num_classes, feature_dim=d))
    trainer = Trainer(
        model=model, args=args, train_dataset=..., eval_dataset=...,
        compute_loss_func=MR2ComputeLoss(model.criterion),
        compute_metrics=DisparityMetrics(num_classes, class_names),
        callbacks=[MR2StatisticsCallback(model.criterion)],
    )

- :class:`ClassifierForTrainer` returns ``{"logits", "features"}`` (the features are the input of
  the classifier's final linear layer, captured by a hook) and holds the loss as a submodule: the
  class statistics are in the model's ``state_dict``, hence in every checkpoint the Trainer writes,
  and ``trainer.train(resume_from_checkpoint=...)`` restores them with the weights.
- :class:`MR2ComputeLoss` is the ``compute_loss_func``: MR2 of the logits and the pooled features,
  scaled for gradient accumulation the way the Trainer expects from a ``compute_loss_func``.
- :class:`MR2StatisticsCallback`: with ``gradient_accumulation_steps = k > 1`` the statistics add the
  ``k`` micro-batches up and apply them once per optimiser step (see
  :class:`~mr2.ClassFeatureStatistics`); with ``k = 1`` it does nothing.
- :class:`DisparityMetrics` is the ``compute_metrics``: the disparity summary and per-class
  accuracies as ``{name: float}`` (the Trainer prefixes ``eval_``; its TensorBoard callback writes
  ``eval/class_accuracy/<name>``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from mr2.extras import needs_extra

with needs_extra("mr2.integrations.transformers", "transformers", "transformers"):
    from transformers import TrainerCallback

from mr2.losses.mr2 import MR2Loss
from mr2.metrics.classwise_disparity import ClasswiseDisparity
from mr2.models.feature_capture import HeadInput, head_module
from mr2.report.tiers import TierSplit
from mr2.statistics.accumulation import apply_accumulation, begin_accumulation, end_accumulation

__all__ = ["ClassifierForTrainer", "DisparityMetrics", "MR2ComputeLoss", "MR2StatisticsCallback"]

NO_FEATURES = (
    "MR2ComputeLoss needs the model's outputs to hold 'logits' and 'features' (a mapping, or a "
    "(logits, features) tuple); got {kind}. Wrap the model in ClassifierForTrainer."
)


class ClassifierForTrainer(nn.Module):
    """A classifier plus its MR2 loss, as the ``model`` of a Hugging Face ``Trainer``.

    ``forward(pixel_values)`` returns ``{"logits": [B, K], "features": [B, d]}``, the features being
    the input of ``head`` (a forward pre-hook, flattened). The wrapped model's logits may be a
    tensor, a tuple whose first item is the logits, or a ``ModelOutput`` with ``.logits`` (a
    transformers ``*ForImageClassification`` model). The head is looked up, not registered a second
    time, so every parameter has one name in the ``state_dict`` (safetensors refuses shared ones).

    Args:
        model: the classifier (``model.`` in the ``state_dict``).
        criterion: the :class:`~mr2.MR2Loss` (``criterion.`` in the ``state_dict``); pass it to
            :class:`MR2ComputeLoss` too.
        head: dotted name of the module producing the logits (default: timm's
            ``get_classifier()`` or the last ``nn.Linear``).

    Example:
        >>> net = nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 3))
        >>> model = ClassifierForTrainer(net, MR2Loss(3, feature_dim=5))
        >>> outputs = model(torch.randn(6, 4))
        >>> outputs["logits"].shape, outputs["features"].shape
        (torch.Size([6, 3]), torch.Size([6, 5]))
        >>> loss = MR2ComputeLoss(model.criterion)(outputs, torch.tensor([0, 1, 2, 0, 1, 2]))
        >>> sorted(k for k in model.state_dict() if k.startswith("criterion."))[:2]
        ['criterion.statistics.batch_mean_sq_norm', 'criterion.statistics.batch_spread']
    """

    def __init__(self, model: nn.Module, criterion: MR2Loss, head: str | None = None) -> None:
        super().__init__()
        self.model = model
        self.criterion = criterion
        self.head_name, head_layer = head_module(model, head)
        self._features = HeadInput(head_layer, self.head_name)  # ClassifierWithFeatures' capture

    def forward(
        self, pixel_values: torch.Tensor, labels: torch.Tensor | None = None
    ) -> dict[str, torch.Tensor]:
        """``labels`` is accepted (and ignored) so that the Trainer finds the label column; the loss
        is computed by :class:`MR2ComputeLoss`."""
        output, features = self._features.run(self.model, pixel_values)
        logits = getattr(output, "logits", output)
        if isinstance(logits, (tuple, list)):
            logits = logits[0]
        return {"logits": logits, "features": features}


class MR2ComputeLoss:
    """The Trainer's ``compute_loss_func``: ``criterion(logits, features, labels)``.

    A ``compute_loss_func``'s loss is not divided by the number of accumulation steps by the Trainer
    (it is expected to be normalised over the accumulated batch): MR2's batch mean is multiplied by
    ``labels.numel() / num_items_in_batch``, so the accumulated gradient is that of the mean over
    all the micro-batches (over all ranks under DDP, where the Trainer gathers ``num_items_in_batch``
    and scales by the number of processes; tested on 2 gloo ranks with ``pairs="global"``).
    Without ``num_items_in_batch`` (evaluation) the batch mean is returned.
    """

    def __init__(self, criterion: MR2Loss) -> None:
        self.criterion = criterion

    def __call__(
        self, outputs: Any, labels: torch.Tensor, num_items_in_batch: torch.Tensor | int | None = None
    ) -> torch.Tensor:
        if isinstance(outputs, Mapping) and "logits" in outputs and "features" in outputs:
            logits, features = outputs["logits"], outputs["features"]
        elif isinstance(outputs, (tuple, list)) and len(outputs) == 2:
            logits, features = outputs
        else:
            raise TypeError(NO_FEATURES.format(kind=type(outputs).__name__))
        loss = self.criterion(logits, features, labels)
        if num_items_in_batch is not None and self.criterion.training:
            loss = loss * (labels.numel() / num_items_in_batch)
        return loss


class MR2StatisticsCallback(TrainerCallback):
    """Gradient accumulation for MR2's class statistics inside the ``Trainer``.

    With ``gradient_accumulation_steps = k > 1`` (or ``defer=True``) the statistics add up the
    micro-batches and apply them once, in ``on_pre_optimizer_step`` (after the last micro-batch's
    backward, on every rank): the statistics of one batch of ``k`` micro-batches. Without this
    callback every micro-batch is one moving-average step.

    Args:
        criterion: the :class:`~mr2.MR2Loss` (the one held by :class:`ClassifierForTrainer`).
        defer: force deferral on/off; None (default): on when ``gradient_accumulation_steps > 1``.
    """

    def __init__(self, criterion: MR2Loss, defer: bool | None = None) -> None:
        self.statistics = criterion.statistics
        self.defer = defer

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        defer = args.gradient_accumulation_steps > 1 if self.defer is None else self.defer
        begin_accumulation([self.statistics], defer=defer)

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        apply_accumulation([self.statistics])

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        end_accumulation([self.statistics])


class DisparityMetrics:
    """The Trainer's ``compute_metrics``: ``ClasswiseDisparity(...).to_log_dict()`` of the predictions.

    ``EvalPrediction.predictions`` may be the logits [N, K] or a tuple whose first item is the logits
    (``(logits, features)`` from :class:`ClassifierForTrainer`; ``ignore_keys=["features"]`` in
    ``evaluate`` and ``ignore_keys_for_eval`` in ``train`` keep the Trainer from gathering the
    features of the whole evaluation set). Returns the flat ``{name: float}``
    of :meth:`~mr2.metrics.ClasswiseDisparity.to_log_dict`: overall, worst/best class, difference,
    tiers (with ``tiers``, fixed from a reference run) and ``class_accuracy/<name>``.
    """

    def __init__(
        self,
        num_classes: int,
        class_names: Sequence[str] | None = None,
        *,
        tiers: TierSplit | None = None,
    ) -> None:
        self.num_classes = num_classes
        self.class_names = class_names
        self.tiers = tiers

    def __call__(self, eval_prediction: Any) -> dict[str, float]:
        predictions = eval_prediction.predictions
        if isinstance(predictions, (tuple, list)):
            predictions = predictions[0]
        metric = ClasswiseDisparity(self.num_classes, self.class_names, tiers=self.tiers)
        metric.update(torch.as_tensor(np.asarray(predictions)),
                      torch.as_tensor(np.asarray(eval_prediction.label_ids)))
        return metric.to_log_dict()
