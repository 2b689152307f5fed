"""JTT (Just Train Twice, Liu et al., ICML 2021) with the classes as the groups."""

from __future__ import annotations

from typing import Any, Literal

import torch

from mr2 import distributed
from mr2.checks import MR2InputError, is_int
from mr2.errors import MR2Error, check_choice, either
from mr2.functional.baselines import jtt_upsampled_indices
from mr2.methods.base import MethodContext, TrainingMethod, checked_cross_entropy
from mr2.methods.registry import register_method
from mr2.methods.stages import NO_INDEX, STAGE2_TOO_EARLY, TwoStageReset, resolve_stage1

__all__ = ["EMPTY_ERROR_SET", "JTT", "EmptyErrorSetError"]

ErrorSource = Literal["train_mode", "eval_pass"]

EMPTY_ERROR_SET = (
    "JTT: the stage-1 model (after {epochs} epoch(s), {source} predictions) misclassified none of the "
    "{seen} training samples it was checked on, so stage 2 would just train ERM again. Use a smaller "
    "stage1_epochs: an earlier, less fitted model."
)
_BAD_LAMBDA_UP = "lambda_up must be an integer >= 0; got {value!r}."
_BAD_SOURCE = f"error_source must be {either(ErrorSource, {'train_mode': 'the reference'})}; got {{value!r}}."
_NO_PREDICTOR = (
    "JTT with error_source='eval_pass' needs context.predict_train_set (the engine's eval pass over "
    "the training set); it is None."
)


class EmptyErrorSetError(MR2Error, RuntimeError):
    """JTT's first stage misclassified no training sample (see :data:`EMPTY_ERROR_SET`)."""


@register_method("jtt")
class JTT(TwoStageReset, TrainingMethod):
    r"""Train ERM for T epochs, record its training errors E, retrain from scratch on D plus E upsampled.

    Stage 1 (epochs ``0 .. T-1``) is cross-entropy. Its error set is

    .. math::
        E = \{ i : \arg\max_k f_{T}(x_i)_k \ne y_i \}

    where ``f_T`` is, with ``error_source="train_mode"`` (default, as anniesch/jtt), the
    training-mode prediction of each sample during epoch ``T-1`` (logits of the batch forward, before
    that batch's optimizer step, with training augmentation); with ``"eval_pass"``, the model after
    epoch ``T-1`` evaluated in eval mode on the whole training set (``context.predict_train_set``).
    After epoch ``T-1`` the method asks the engine for a fresh model, optimizer and scheduler
    (:meth:`wants_model_reset`), and stage 2 (epochs ``T .. epochs-1``) trains cross-entropy on

    .. math::
        D_{up} = D \cup \lambda_{up} \times E

    (each error index appears ``1 + lambda_up`` times per epoch, shuffled by :meth:`epoch_indices`).
    An empty ``E`` raises :class:`EmptyErrorSetError` instead of silently training ERM twice.

    State (``state_dict``): ``errors`` (bool [N], the frozen set after stage 1), ``checked`` (bool
    [N], samples whose stage-1 prediction was recorded) and ``frozen`` (bool). Under
    ``torch.distributed`` the per-rank records are summed over ranks before freezing, so all ranks
    hold the same set (a sample predicted on several ranks, e.g. a sampler's padding, is an error if
    any of its predictions is wrong).

    Args:
        num_classes: K.
        stage1_epochs: T; default (None): ``max(1, round(0.2 * epochs))``.
        lambda_up: upsampling factor (default 20, the smallest value of the reference's own sweep).
        error_source: ``"train_mode"`` or ``"eval_pass"``.
    """

    plain_loss = False  # a second training stage on resampled errors

    errors: torch.Tensor
    checked: torch.Tensor
    frozen: torch.Tensor
    wrong_count: torch.Tensor
    seen_count: torch.Tensor

    def __init__(
        self,
        num_classes: int,
        *,
        stage1_epochs: int | None = None,
        lambda_up: int = 20,
        error_source: ErrorSource = "train_mode",
    ) -> None:
        super().__init__()
        self.init_stages(num_classes, stage1_epochs, MR2InputError)
        if not is_int(lambda_up) or lambda_up < 0:
            raise MR2InputError(_BAD_LAMBDA_UP.format(value=lambda_up))
        check_choice(error_source, ErrorSource, _BAD_SOURCE, MR2InputError)
        self.lambda_up = lambda_up
        self.error_source: ErrorSource = error_source
        self.register_buffer("errors", torch.zeros(0, dtype=torch.bool))
        self.register_buffer("checked", torch.zeros(0, dtype=torch.bool))
        # Recording counters of the current stage-1 epoch (not checkpointed: reset at its start).
        self.register_buffer("wrong_count", torch.zeros(0, dtype=torch.int32), persistent=False)
        self.register_buffer("seen_count", torch.zeros(0, dtype=torch.int32), persistent=False)
        self._group: Any = None
        self._predict: Any = None
        self._epoch = 0
        self._index: torch.Tensor | None = None

    def setup(self, context: MethodContext) -> None:
        t = resolve_stage1("jtt", self.requested_stage1_epochs, context.epochs, MR2InputError)
        if self.error_source == "eval_pass" and context.predict_train_set is None:
            raise MR2InputError(_NO_PREDICTOR)
        self.stage1_epochs = t
        n = context.num_train_samples
        self.errors = torch.zeros(n, dtype=torch.bool, device=context.device)
        self.checked = torch.zeros(n, dtype=torch.bool, device=context.device)
        self.frozen = torch.zeros((), dtype=torch.bool, device=context.device)
        self.wrong_count = torch.zeros(n, dtype=torch.int32, device=context.device)
        self.seen_count = torch.zeros(n, dtype=torch.int32, device=context.device)
        self._group = context.process_group
        self._predict = context.predict_train_set

    # -- stage bookkeeping ---------------------------------------------------------------------

    @property
    def recording_epoch(self) -> int:
        """The epoch (0-based) whose predictions define the error set: ``T - 1``."""
        return self.stage1_epochs - 1

    def on_epoch_start(self, epoch: int) -> None:
        self._epoch = epoch
        if epoch == self.recording_epoch and self.error_source == "train_mode":
            self.wrong_count.zero_()
            self.seen_count.zero_()

    def on_batch(self, inputs: torch.Tensor, target: torch.Tensor, index: torch.Tensor) -> None:
        if self.training:
            self._index = index.to(device=self.errors.device, dtype=torch.long)

    def forward(
        self, logits: torch.Tensor, features: torch.Tensor | None, target: torch.Tensor
    ) -> torch.Tensor:
        loss = checked_cross_entropy(logits, target, self.num_classes)
        if self.training and self.error_source == "train_mode" and self._epoch == self.recording_epoch:
            if self._index is None:
                raise MR2InputError(NO_INDEX.format(method="JTT", stage="the recording epoch"))
            with torch.no_grad():
                wrong = (logits.detach().argmax(dim=1) != target).to(torch.int32)
                self.wrong_count.index_add_(0, self._index, wrong)
                self.seen_count.index_add_(0, self._index, torch.ones_like(wrong))
        self._index = None
        self.record(loss=loss)
        return loss

    def on_epoch_end(self, epoch: int) -> None:
        if epoch != self.recording_epoch or bool(self.frozen):
            return
        if self.error_source == "eval_pass":
            predicted, target = self._predict()
            errors = predicted.to(self.errors.device) != target.to(self.errors.device)
            checked = torch.ones_like(errors)
        else:
            counts = torch.stack([self.wrong_count, self.seen_count])
            distributed.all_reduce_sum_(counts, self._group)
            errors, checked = counts[0] > 0, counts[1] > 0
        self.errors.copy_(errors)
        self.checked.copy_(checked)
        self.frozen.fill_(True)
        if not bool(errors.any()):
            raise EmptyErrorSetError(
                EMPTY_ERROR_SET.format(
                    epochs=self.stage1_epochs,
                    source=self.error_source.replace("_", "-"),
                    seen=int(checked.sum()),
                )
            )

    def epoch_indices(self, epoch: int, generator: torch.Generator) -> torch.Tensor | None:
        """Stage 2: the shuffled upsampled index list (same on every rank for the same generator)."""
        if epoch < self.stage1_epochs:
            return None
        if not bool(self.frozen):
            raise MR2InputError(STAGE2_TOO_EARLY.format(method="JTT", epoch=epoch, what="the error set",
                                                        last=self.recording_epoch))
        error_index = self.errors.nonzero().squeeze(1).cpu()
        indices = jtt_upsampled_indices(self.errors.numel(), error_index, self.lambda_up)
        return indices[torch.randperm(indices.numel(), generator=generator)]

    def error_indices(self) -> torch.Tensor:
        """Indices of the frozen error set (empty before it is recorded)."""
        return self.errors.nonzero().squeeze(1)

    def log_values(self) -> dict[str, torch.Tensor]:
        """The loss and the size of the frozen error set (0 until it is recorded)."""
        return {**super().log_values(), "error_set_size": self.errors.sum()}
