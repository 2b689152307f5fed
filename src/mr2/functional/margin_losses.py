"""The two MR2 loss terms as pure functions (no state, no I/O)."""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F

from mr2.checks import MR2InputError, check_features, check_logits, check_target
from mr2.functional import _cpu_kernels
from mr2.functional._cpu_kernels import (
    block_layout,
    class_block_log_sum_exp,
    pair_list_log_sum_exp,
    pair_path,
    same_pair_log_sum_exp,
)
from mr2.functional.reduction import Reduction, reduce_loss, working_dtype

__all__ = [
    "additive_margin_loss",
    "logit_margin_loss",
    "pairwise_sq_distances",
    "representation_margin_loss",
]


_TEMPERATURES_SHAPE = "temperatures must have shape [num_classes]={expected}; got {shape}."
_MARGINS_SHAPE = "margins must have shape [num_classes]={expected}; got {shape}."
_BAD_DISTANCE_TEMPERATURE = "temperature must be a positive number; got {value!r}."
_BAD_PAIR_MODE = "pair_mode must be 'auto', 'dense', 'blocks' or 'sparse'; got {value!r}."
_BLOCKS_WITH_PARTNERS = (
    "pair_mode='blocks' pairs a batch with itself; with partner_features use 'auto', 'dense' or 'sparse'."
)

PairMode = Literal["auto", "dense", "blocks", "sparse"]


def _check_logit_inputs(
    logits: torch.Tensor, target: torch.Tensor, per_class: torch.Tensor, wrong_shape: str
) -> None:
    """Logits [B, K], target [B] of class ids and a per-class vector [K] (else ``wrong_shape``)."""
    check_logits(logits, target, None)
    check_target(target, logits.shape[1], logits.shape[0])
    if per_class.shape != (logits.shape[1],):
        raise MR2InputError(wrong_shape.format(expected=logits.shape[1], shape=tuple(per_class.shape)))


def logit_margin_loss(
    logits: torch.Tensor,
    target: torch.Tensor,
    temperatures: torch.Tensor,
    *,
    reduction: Reduction = "mean",
) -> torch.Tensor:
    r"""Logit margin loss: cross-entropy of the logits divided by the true class's temperature.

    .. math::
        \ell_\gamma(x, y) = -\log \mathrm{softmax}(z / \gamma_y)_y

    Every logit of a sample is divided by the temperature ``gamma_y`` of its TRUE class, so a larger
    ``gamma_y`` demands a ``gamma_y``-times larger logit gap for the same loss. With all temperatures
    equal to 1 this is exactly cross-entropy. Computed with ``log_softmax`` (stable for small gamma)
    in at least float32.

    Args:
        logits: [B, K] raw classifier outputs.
        target: [B] class ids.
        temperatures: [K] positive per-class temperatures gamma (treated as constants: detach them
            if they are computed from something with a gradient).
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"`` (per-sample [B]).

    Returns:
        The loss, 0-dim (or [B] with ``reduction="none"``).

    Example:
        >>> z = torch.tensor([[2.0, 0.0], [0.0, 1.0]])
        >>> y = torch.tensor([0, 1])
        >>> ce = F.cross_entropy(z, y)
        >>> bool(torch.isclose(logit_margin_loss(z, y, torch.ones(2)), ce))
        True
        >>> logit_margin_loss(z, y, torch.tensor([2.0, 1.0]), reduction="none")
        tensor([0.3133, 0.3133])
    """
    _check_logit_inputs(logits, target, temperatures, _TEMPERATURES_SHAPE)
    return scaled_logit_loss(logits, target, temperatures, reduction)


def scaled_logit_loss(
    logits: torch.Tensor, target: torch.Tensor, temperatures: torch.Tensor, reduction: Reduction = "mean"
) -> torch.Tensor:
    """:func:`logit_margin_loss` without its input checks (for a caller that has made them).

    One division of the logits by their row's temperature and the built-in cross-entropy, whose
    fused log-softmax and mean are faster on CPU than a custom kernel at every K measured (issue 47:
    B = 512, K = 10 / 100 / 1,000, forward + backward 0.16 / 0.16 / 0.57 ms against 0.25 / 0.35 /
    1.10 ms for the fused kernel this replaced, 2 threads).
    """
    dtype = _working_dtype(logits)
    if temperatures.requires_grad:
        temperatures = temperatures.detach()
    # .to() only where the dtype differs (a same-dtype .to() is still a dispatched call).
    if temperatures.dtype != dtype:
        temperatures = temperatures.to(dtype)
    scale = temperatures.index_select(0, target).unsqueeze(1)
    scaled = (logits if logits.dtype == dtype else logits.to(dtype)) / scale
    if target.dtype != torch.long:  # the built-in loss takes int64 class ids (int32 ones are valid here)
        target = target.long()
    if reduction == "mean" and target.numel():  # the mean inside the built-in loss: one op less
        return F.cross_entropy(scaled, target)
    return reduce_loss(F.cross_entropy(scaled, target, reduction="none"), reduction)


def _working_dtype(tensor: torch.Tensor) -> torch.dtype:
    """:func:`~mr2.functional.reduction.working_dtype` without a dispatched operation for the usual
    float32 and float64."""
    if tensor.dtype in (torch.float32, torch.float64):
        return tensor.dtype
    return working_dtype(tensor)


def additive_margin_loss(
    logits: torch.Tensor,
    target: torch.Tensor,
    margins: torch.Tensor,
    *,
    reduction: Reduction = "mean",
) -> torch.Tensor:
    r"""Additive (LDAM-form) logit margin loss: cross-entropy after subtracting ``Delta_y`` from z_y.

    .. math::
        \ell_\Delta(x, y) = -\log \mathrm{softmax}(z - \Delta_y e_y)_y

    Only the true class's logit is lowered; the other logits are untouched, so (unlike the
    temperature of :func:`logit_margin_loss`) the margin does not rescale a class's gradient. With
    all margins 0 this is exactly cross-entropy.

    Args:
        logits: [B, K] raw classifier outputs.
        target: [B] class ids.
        margins: [K] per-class additive margins ``Delta_k`` (treated as constants).
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"`` (per-sample [B]).

    Example:
        >>> z = torch.tensor([[2.0, 0.0], [0.0, 1.0]])
        >>> additive_margin_loss(z, torch.tensor([0, 1]), torch.tensor([2.0, 0.0]), reduction="none")
        tensor([0.6931, 0.3133])
    """
    _check_logit_inputs(logits, target, margins, _MARGINS_SHAPE)
    return shifted_logit_loss(logits, target, margins, reduction)


def shifted_logit_loss(
    logits: torch.Tensor, target: torch.Tensor, margins: torch.Tensor, reduction: Reduction = "mean"
) -> torch.Tensor:
    """:func:`additive_margin_loss` without its input checks (for a caller that has made them)."""
    dtype = _working_dtype(logits)
    shift = margins.detach().to(dtype)[target]
    if target.dtype != torch.long:
        target = target.long()
    shifted = logits.to(dtype).scatter_add(1, target.unsqueeze(1), -shift.unsqueeze(1))
    if reduction == "mean" and target.numel():
        return F.cross_entropy(shifted, target)
    return reduce_loss(F.cross_entropy(shifted, target, reduction="none"), reduction)


def pairwise_sq_distances(queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    r"""Squared Euclidean distances ``||q_i - k_j||^2`` as a [Bq, Bk] matrix.

    Uses ``||q||^2 + ||k||^2 - 2 q.k`` (one matrix product, O(B^2) memory instead of O(B^2 d)),
    clamped at 0 against rounding.

    Example:
        >>> pairwise_sq_distances(torch.tensor([[0.0, 0.0], [3.0, 4.0]]), torch.tensor([[0.0, 4.0]]))
        tensor([[16.],
                [ 9.]])
    """
    q_sq = (queries * queries).sum(dim=1, keepdim=True)
    k_sq = (keys * keys).sum(dim=1).unsqueeze(0)
    return (q_sq + k_sq - 2.0 * (queries @ keys.T)).clamp_min(0.0)


def representation_margin_loss(
    features: torch.Tensor,
    target: torch.Tensor,
    margin: torch.Tensor | float,
    *,
    temperature: float = 1.0,
    reduction: Reduction = "mean",
    partner_features: torch.Tensor | None = None,
    partner_target: torch.Tensor | None = None,
    self_offset: int = 0,
    pair_mode: PairMode = "auto",
) -> torch.Tensor:
    r"""Representation margin loss: penalises same-class pairs further apart than ``margin``.

    .. math::
        \ell_{rep}(x_i, y_i) = \log\Big(1 + \sum_{j \ne i,\ y_j = y_i}
            \exp\big((\|\phi(x_i) - \phi(x_j)\|^2 - m) / T\big)\Big)

    MR2 uses ``m = 2 * s_bar`` (twice the mean within-class spread, the expected squared distance of
    two samples of an average class) and the paper's ``T = 1``. Same-class partners come from the
    mask ``target[:, None] == target[None, :]`` without the diagonal; the sum is a log-sum-exp with a
    zero logit for the ``1 +``, so large distances cannot overflow and samples without a partner
    contribute exactly 0 (with a zero gradient, never NaN).

    Args:
        features: [B, d] penultimate features of the batch.
        target: [B] class ids.
        margin: the distance margin ``m`` (float or 0-dim tensor, treated as a constant).
        temperature: ``T`` > 0 dividing ``(d^2 - m)``; 1 is the paper's form.
        reduction: ``"mean"`` over ALL B samples (default), ``"sum"`` or ``"none"`` ([B]).
        partner_features: optional [P, d] pool of partners (e.g. the global batch under data
            parallelism) that contains ``features`` at rows ``self_offset:self_offset + B``;
            default: ``features`` itself.
        partner_target: [P] class ids of ``partner_features``.
        self_offset: row of ``features[0]`` inside ``partner_features``.
        pair_mode: how the same-class pairs are computed; every mode gives the same values (to
            float rounding). ``"dense"`` computes all [B, P] distances with one matrix product and
            masks them (no host sync: the accelerator path, and the one under ``torch.compile``);
            ``"blocks"`` sorts the batch by class and computes each class's own [n_k, n_k]
            distances as one batched matrix product of the classes padded to the largest count
            (``C n_max^2`` entries instead of ``B^2``: about a K-th for K balanced classes; local pairs
            only; one host read of the counts); ``"sparse"`` computes only the same-class pairs
            (CPU kernels of :mod:`mr2.functional._cpu_kernels`: ``O(pairs * d)``, the pair count read
            on the host, first derivatives only; a batch's own pairs as a list of unordered pairs
            while few, else and for a pool a sampled CSR product); ``"auto"`` (default): on CPU (outside
            ``torch.compile``) the cheapest of the three by a cost per computed entry
            (:func:`~mr2.functional._cpu_kernels.pair_path`: blocks for a few classes, sparse for
            many), elsewhere ``"dense"`` (choosing would need a host read of the class counts, a
            sync in an accelerator's training step).

    Returns:
        The loss, 0-dim (or [B] with ``reduction="none"``).

    Example:
        >>> x = torch.tensor([[0.0, 0.0], [1.0, 0.0], [5.0, 5.0]])
        >>> y = torch.tensor([0, 0, 1])
        >>> representation_margin_loss(x, y, margin=1.0, reduction="none")
        tensor([0.6931, 0.6931, 0.0000])
    """
    check_features(features, target)
    if not temperature > 0:
        raise MR2InputError(_BAD_DISTANCE_TEMPERATURE.format(value=temperature))
    dtype = working_dtype(features)
    queries = features.to(dtype)
    if partner_features is None or partner_target is None:
        local, keys, key_target, self_offset = True, queries, target, 0
    else:
        local, keys, key_target = False, partner_features.to(dtype), partner_target
    batch = queries.shape[0]
    if pair_mode not in ("auto", "dense", "blocks", "sparse"):
        raise MR2InputError(_BAD_PAIR_MODE.format(value=pair_mode))
    margin_t = torch.as_tensor(margin, dtype=dtype, device=queries.device).detach()
    mode: str = pair_mode
    layout = None
    if pair_mode == "blocks" and partner_features is not None:
        raise MR2InputError(_BLOCKS_WITH_PARTNERS)
    if pair_mode == "auto":
        mode = "dense"
        if batch and queries.device.type == "cpu" and not torch.compiler.is_compiling():
            mode, layout = pair_path(target, None if local else key_target)
    per_sample: torch.Tensor | None = None
    if batch and mode == "sparse" and local:  # the batch's own pairs: a pair list if small
        if layout is None:
            layout, _ = block_layout(target)
        if (layout.pairs // 2) * queries.shape[1] <= _cpu_kernels.PAIR_LIST_MAX_ELEMENTS:
            per_sample = pair_list_log_sum_exp(queries, target, margin_t, temperature, layout)
    if batch and mode == "sparse" and per_sample is None:
        per_sample = same_pair_log_sum_exp(
            queries, keys, target, key_target, self_offset=self_offset, margin=margin_t,
            temperature=temperature,
        )
    elif batch and mode == "blocks":
        per_sample = class_block_log_sum_exp(queries, target, margin_t, temperature, layout)
    if per_sample is None:
        same_class = target.unsqueeze(1) == key_target.unsqueeze(0)
        rows = torch.arange(batch, device=queries.device)
        same_class[rows, rows + self_offset] = False
        logits = (pairwise_sq_distances(queries, keys) - margin_t) / temperature
        logits = logits.masked_fill(~same_class, float("-inf"))
        with_one = torch.cat([logits.new_zeros(batch, 1), logits], dim=1)
        per_sample = torch.logsumexp(with_one, dim=1)
    return reduce_loss(per_sample, reduction)
