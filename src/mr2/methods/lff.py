"""LfF (Learning from Failure, Nam et al., NeurIPS 2020) with the classes as the groups."""

from __future__ import annotations

from typing import Any, Literal

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from mr2 import distributed
from mr2.checks import MR2InputError, check_classification_inputs, check_num_classes
from mr2.errors import check_choice, either
from mr2.functional.baselines import (
    class_max,
    generalized_cross_entropy,
    generalized_cross_entropy_surrogate,
    per_sample_ema,
    relative_difficulty,
)
from mr2.functional.reduction import working_dtype
from mr2.methods.base import MethodContext, TrainingMethod, checked_cross_entropy
from mr2.methods.registry import register_method

__all__ = ["LfF"]

GCEForm = Literal["reference", "paper"]

_NO_MODEL_FACTORY = (
    "LfF needs context.model_factory to build its biased model; the engine must pass it to setup()."
)
_NOT_SET_UP = "LfF.setup(context) must be called before training (it builds the biased model)."
_NO_BIASED_LOGITS = (
    "LfF.forward was called in training mode without a preceding on_batch(inputs, target, index): "
    "the engine must call method.on_batch before the model's forward on every training batch."
)
_BAD_Q = "q must be in (0, 1]; got {value!r}."
_BAD_DECAY = "ema_decay must be in [0, 1); got {value!r}."
_BAD_GCE_FORM = f"gce_form must be {either(GCEForm, {'reference': 'alinlab/LfF'})}; got {{value!r}}."


def _logits_of(output: Any) -> torch.Tensor:
    """Models built by the engine return ``(logits, features)``; a bare tensor is accepted too."""
    return output[0] if isinstance(output, (tuple, list)) else output


@register_method("lff")
class LfF(TrainingMethod):
    r"""Train a biased model with GCE beside the debiased model, reweighted by relative difficulty.

    Per training batch (indices ``i``), with ``CE_B``, ``CE_D`` the per-sample cross-entropies of
    the biased model ``B`` and of the debiased model ``D`` (the engine's model):

    .. math::
        \bar\ell_B(i) &\leftarrow \alpha\, \bar\ell_B(i) + (1 - \alpha)\, \mathrm{CE}_B(i)
            \quad (\bar\ell_B(i) = \mathrm{CE}_B(i) \text{ at the first visit}), \text{ same for } D \\
        \hat\ell_B(i) &= \bar\ell_B(i) / \max_{j:\, y_j = y_i} \bar\ell_B(j), \qquad
            \hat\ell_D(i) = \bar\ell_D(i) / \max_{j:\, y_j = y_i} \bar\ell_D(j) \\
        W(i) &= \hat\ell_B(i) / (\hat\ell_B(i) + \hat\ell_D(i) + 10^{-8}) \\
        L &= \tfrac{1}{B} \textstyle\sum_i \mathrm{GCE}_q(B; i)
            + \tfrac{1}{B} \sum_i W(i)\, \mathrm{CE}_D(i)

    ``W`` is a constant (no gradient). The class-wise maximum runs over every training sample of
    the class (per-sample averages of unseen samples are 0, as in alinlab/LfF). Samples the biased
    model finds hard relative to the debiased one get up to weight 1; with two identical models
    every ``W = 1/2``.

    The biased model (``context.model_factory()``, same architecture and regime as the engine's
    model) is a submodule, so the engine's optimizer trains it with the same hyperparameters, as the
    reference's two identical optimizers do. :meth:`on_batch` keeps the batch's inputs and indices;
    the biased model's forward runs inside :meth:`forward`, i.e. under the engine's autocast.

    State (in ``state_dict``, so checkpoints resume it): the biased model and four per-sample
    buffers sized to the training set: ``ema_biased``, ``ema_debiased``, ``visited`` and
    ``sample_label`` (-1 until first seen). Under ``torch.distributed`` the (index, CE_B, CE_D,
    label) rows of all ranks are all-gathered before the update, so every rank holds the same
    averages as one process on the global batch; the biased model's initial weights are broadcast
    from rank 0 in :meth:`setup`, and its gradients are averaged over ranks by the engine like every
    method parameter. A sample seen more than once in one (global) step (a DistributedSampler's
    padding) is updated with the mean of its losses.

    Args:
        num_classes: K.
        q: GCE exponent (0.7).
        ema_decay: ``alpha`` of the per-sample moving averages (0.7).
        gce_form: ``"reference"`` (default): the biased loss is alinlab/LfF's
            ``q * sg(p_y^q) * CE`` (:func:`~mr2.functional.baselines.generalized_cross_entropy_surrogate`,
            gradient ``q`` times GCE's); ``"paper"``: ``(1 - p_y^q) / q``.
    """

    plain_loss = False  # a second (biased) model
    draws_in_step = True  # the biased model's dropout: the method's stream, not the model's

    biased_model: nn.Module | None
    ema_biased: torch.Tensor
    ema_debiased: torch.Tensor
    visited: torch.Tensor
    sample_label: torch.Tensor

    def __init__(
        self,
        num_classes: int,
        *,
        q: float = 0.7,
        ema_decay: float = 0.7,
        gce_form: GCEForm = "reference",
    ) -> None:
        super().__init__()
        self.num_classes = check_num_classes(num_classes)
        if not 0.0 < float(q) <= 1.0:
            raise MR2InputError(_BAD_Q.format(value=q))
        if not 0.0 <= float(ema_decay) < 1.0:
            raise MR2InputError(_BAD_DECAY.format(value=ema_decay))
        check_choice(gce_form, GCEForm, _BAD_GCE_FORM, MR2InputError)
        self.q = float(q)
        self.ema_decay = float(ema_decay)
        self.gce_form: GCEForm = gce_form
        self.biased_model = None
        self.register_buffer("ema_biased", torch.zeros(0))
        self.register_buffer("ema_debiased", torch.zeros(0))
        self.register_buffer("visited", torch.zeros(0, dtype=torch.bool))
        self.register_buffer("sample_label", torch.zeros(0, dtype=torch.long))
        self._group: Any = None
        self._inputs: torch.Tensor | None = None
        self._index: torch.Tensor | None = None

    # -- set-up --------------------------------------------------------------------------------

    def setup(self, context: MethodContext) -> None:
        if context.model_factory is None:
            raise MR2InputError(_NO_MODEL_FACTORY)
        device = context.device
        n = context.num_train_samples
        self.biased_model = context.model_factory().to(device)
        self.ema_biased = torch.zeros(n, device=device)
        self.ema_debiased = torch.zeros(n, device=device)
        self.visited = torch.zeros(n, dtype=torch.bool, device=device)
        self.sample_label = torch.full((n,), -1, dtype=torch.long, device=device)
        self._group = context.process_group
        if distributed.is_distributed(self._group):  # same initial biased model on every rank
            source = dist.get_global_rank(self._group, 0) if self._group is not None else 0
            for tensor in [*self.biased_model.parameters(), *self.biased_model.buffers()]:
                dist.broadcast(tensor.data, src=source, group=self._group)

    # -- hooks ---------------------------------------------------------------------------------

    def on_batch(self, inputs: torch.Tensor, target: torch.Tensor, index: torch.Tensor) -> None:
        if not self.training:
            return
        if self.biased_model is None:
            raise MR2InputError(_NOT_SET_UP)
        self._inputs = inputs
        self._index = index.to(device=self.ema_biased.device, dtype=torch.long)

    def forward(
        self, logits: torch.Tensor, features: torch.Tensor | None, target: torch.Tensor
    ) -> torch.Tensor:
        ce_debiased = checked_cross_entropy(logits, target, self.num_classes, reduction="none")
        dtype = ce_debiased.dtype
        if not self.training:
            return ce_debiased.mean()
        if self._inputs is None or self._index is None or self.biased_model is None:
            raise MR2InputError(_NO_BIASED_LOGITS)
        inputs, index = self._inputs, self._index
        self._inputs, self._index = None, None
        self.biased_model.train()
        biased_logits = _logits_of(self.biased_model(inputs))
        check_classification_inputs(biased_logits, None, target, self.num_classes)
        biased_logits = biased_logits.to(working_dtype(biased_logits))

        with torch.no_grad():
            ce_biased = F.cross_entropy(biased_logits, target, reduction="none")
            self._update_averages(index, ce_biased, ce_debiased.detach(), target)
            max_biased = class_max(self.ema_biased, self.sample_label, self.num_classes)
            max_debiased = class_max(self.ema_debiased, self.sample_label, self.num_classes)
            tiny = torch.finfo(self.ema_biased.dtype).tiny
            norm_biased = self.ema_biased[index] / max_biased[target].clamp_min(tiny)
            norm_debiased = self.ema_debiased[index] / max_debiased[target].clamp_min(tiny)
            weight = relative_difficulty(norm_biased, norm_debiased).to(dtype)

        if self.gce_form == "reference":
            loss_biased = generalized_cross_entropy_surrogate(biased_logits, target, self.q)
        else:
            loss_biased = generalized_cross_entropy(biased_logits, target, self.q)
        loss_debiased = (weight * ce_debiased).mean()
        loss = loss_biased + loss_debiased
        self.record(
            loss=loss,
            loss_biased=loss_biased,
            loss_debiased=loss_debiased,
            ce_biased=ce_biased.mean(),
            ce_debiased=ce_debiased.detach().mean(),
            weight_mean=weight.mean(),
        )
        return loss


    # -- per-sample state ----------------------------------------------------------------------

    @torch.no_grad()
    def _update_averages(
        self,
        index: torch.Tensor,
        ce_biased: torch.Tensor,
        ce_debiased: torch.Tensor,
        target: torch.Tensor,
    ) -> None:
        """EMA step of the visited samples of the GLOBAL batch (identical on every rank)."""
        rows = torch.stack([index.double(), ce_biased.double(), ce_debiased.double(), target.double()], dim=1)
        rows, _ = distributed.all_gather_variable(rows, self._group)
        idx = rows[:, 0].long()
        n = self.ema_biased.numel()
        dtype = self.ema_biased.dtype
        # Mean of the losses of each index in this step, via index_add_ (no host sync, and a sample
        # that appears twice (sampler padding) gets one deterministic update).
        count = torch.zeros(n, dtype=dtype, device=idx.device).index_add_(
            0, idx, torch.ones_like(idx, dtype=dtype)
        )
        touched = count > 0
        denom = count.clamp_min(1.0)
        mean_b = torch.zeros(n, dtype=dtype, device=idx.device).index_add_(0, idx, rows[:, 1].to(dtype))
        mean_d = torch.zeros(n, dtype=dtype, device=idx.device).index_add_(0, idx, rows[:, 2].to(dtype))
        new_b = per_sample_ema(self.ema_biased, mean_b / denom, self.ema_decay, self.visited)
        new_d = per_sample_ema(self.ema_debiased, mean_d / denom, self.ema_decay, self.visited)
        self.ema_biased.copy_(torch.where(touched, new_b, self.ema_biased))
        self.ema_debiased.copy_(torch.where(touched, new_d, self.ema_debiased))
        self.visited.logical_or_(touched)
        self.sample_label.index_put_((idx,), rows[:, 3].long())
