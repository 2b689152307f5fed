"""The baselines' loss maths as pure tensor functions (no state, no I/O, no loop over classes).

Each training method in :mod:`mr2.methods` (ERM, LfF, JTT, group DRO, LDAM-DRW, logit adjustment,
focal loss, CDB-CE) is a thin stateful wrapper over these functions. Every function works in the
dtype of its inputs promoted to at least float32 (float64 inputs stay float64, which is what the
test oracles use).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from mr2.checks import MR2InputError, check_logits, check_target, is_int
from mr2.functional.reduction import Reduction, reduce_loss, working_dtype

__all__ = [
    "cdb_class_weights",
    "cdb_dynamic_tau",
    "class_loss_sums",
    "class_max",
    "drw_class_weights",
    "focal_loss",
    "generalized_cross_entropy",
    "generalized_cross_entropy_surrogate",
    "group_dro_update",
    "jtt_upsampled_indices",
    "ldam_logits",
    "ldam_margins",
    "logit_adjusted_cross_entropy",
    "per_sample_ema",
    "relative_difficulty",
]


_BAD_Q = "q of the generalized cross-entropy must be in (0, 1]; got {value!r}."
_BAD_GAMMA = "gamma of the focal loss must be >= 0; got {value!r}."
_BAD_CLASS_VECTOR = "{name} must have shape [num_classes]={expected}; got {shape}."
_BAD_COUNTS = "class_counts must all be >= 1 (a class without training samples has no margin)."
_BAD_BETA = "beta must be in [0, 1); got {value!r}."
_BAD_LAMBDA_UP = "lambda_up must be an integer >= 0; got {value!r}."


def _check_class_vector(name: str, vector: torch.Tensor, num_classes: int) -> None:
    if vector.shape != (num_classes,):
        raise MR2InputError(
            _BAD_CLASS_VECTOR.format(name=name, expected=num_classes, shape=tuple(vector.shape))
        )


def _true_class_log_prob(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    check_logits(logits, target, None)
    check_target(target, logits.shape[1], logits.shape[0])
    log_p = F.log_softmax(logits.to(working_dtype(logits)), dim=1)
    return log_p.gather(1, target.unsqueeze(1)).squeeze(1)


# --------------------------------------------------------------------------------------------------
# LfF: generalized cross-entropy, per-sample moving averages, relative difficulty
# --------------------------------------------------------------------------------------------------


def generalized_cross_entropy(
    logits: torch.Tensor, target: torch.Tensor, q: float = 0.7, *, reduction: Reduction = "mean"
) -> torch.Tensor:
    r"""Generalized cross-entropy (Zhang & Sabuncu, 2018), the loss LfF's paper gives its biased model.

    .. math::
        \mathrm{GCE}(p, y) = \frac{1 - p_y^{\,q}}{q}, \qquad
        \nabla \mathrm{GCE} = p_y^{\,q}\, \nabla \mathrm{CE}

    so samples the model already finds easy (large ``p_y``) get larger gradients: the model is
    pushed further towards the easy, "biased" solution. ``q -> 0`` recovers cross-entropy.
    ``p_y^q`` is computed as ``exp(q log_softmax(z)_y)`` (stable for large logits).

    Args:
        logits: [B, K] raw outputs.
        target: [B] class ids.
        q: exponent in (0, 1]; 0.7 in LfF.
        reduction: ``"mean"`` (default), ``"sum"`` or ``"none"`` ([B]).

    Example:
        >>> z = torch.tensor([[0.0, 0.0]])
        >>> generalized_cross_entropy(z, torch.tensor([0]), q=1.0)  # (1 - 0.5) / 1
        tensor(0.5000)
    """
    if not 0.0 < q <= 1.0:
        raise MR2InputError(_BAD_Q.format(value=q))
    log_p_y = _true_class_log_prob(logits, target)
    per_sample = -torch.expm1(q * log_p_y) / q
    return reduce_loss(per_sample, reduction)


def generalized_cross_entropy_surrogate(
    logits: torch.Tensor, target: torch.Tensor, q: float = 0.7, *, reduction: Reduction = "mean"
) -> torch.Tensor:
    r"""The form in which alinlab/LfF (``module/loss.py``) trains its biased model.

    .. math::
        \ell(p, y) = q\, \mathrm{sg}(p_y^{\,q})\, \mathrm{CE}(p, y), \qquad
        \nabla \ell = q\, p_y^{\,q}\, \nabla \mathrm{CE} = q\, \nabla \mathrm{GCE}

    (``sg``: stop-gradient.) Its gradient is ``q`` times that of :func:`generalized_cross_entropy`
    and its value is not GCE's; LfF's reported results were obtained with this form.

    Example:
        >>> z = torch.tensor([[0.0, 0.0]])
        >>> generalized_cross_entropy_surrogate(z, torch.tensor([0]), q=1.0)  # 1 * 0.5 * log 2
        tensor(0.3466)
    """
    if not 0.0 < q <= 1.0:
        raise MR2InputError(_BAD_Q.format(value=q))
    log_p_y = _true_class_log_prob(logits, target)
    per_sample = q * torch.exp(q * log_p_y).detach() * (-log_p_y)
    return reduce_loss(per_sample, reduction)


def per_sample_ema(
    previous: torch.Tensor, value: torch.Tensor, decay: float, initialised: torch.Tensor
) -> torch.Tensor:
    r"""One step of LfF's per-sample exponential moving average.

    .. math::
        \bar\ell \leftarrow \begin{cases} \ell & \text{first visit} \\
            \alpha \bar\ell + (1 - \alpha)\, \ell & \text{later visits} \end{cases}

    (alinlab/LfF ``util.EMA``: ``alpha * old + (1 - alpha * updated) * new`` with ``old = 0`` before
    the first visit.)

    Args:
        previous: [B] current averages of the visited samples.
        value: [B] new per-sample losses.
        decay: ``alpha`` (0.7 in LfF).
        initialised: [B] bool, whether each sample was visited before.

    Example:
        >>> per_sample_ema(torch.tensor([2.0, 0.0]), torch.tensor([1.0, 3.0]), 0.5,
        ...                torch.tensor([True, False]))
        tensor([1.5000, 3.0000])
    """
    return torch.where(initialised, decay * previous + (1.0 - decay) * value, value)


def class_max(values: torch.Tensor, labels: torch.Tensor, num_classes: int) -> torch.Tensor:
    """Per-class maximum of ``values`` [N]; entries with label -1 (never seen) are ignored.

    Returns [K]; a class without any labelled entry gets 0 (LfF's losses are >= 0, and its per-sample
    averages of unseen samples are 0 in the reference too).

    Example:
        >>> class_max(torch.tensor([1.0, 4.0, 2.0, 9.0]), torch.tensor([0, 0, 2, -1]), 3)
        tensor([4., 0., 2.])
    """
    slot = torch.where(labels >= 0, labels, torch.full_like(labels, num_classes))
    out = torch.zeros(num_classes + 1, dtype=values.dtype, device=values.device)
    out.scatter_reduce_(0, slot, values, reduce="amax", include_self=True)
    return out[:num_classes]


def relative_difficulty(
    loss_biased: torch.Tensor, loss_debiased: torch.Tensor, eps: float = 1e-8
) -> torch.Tensor:
    r"""LfF's per-sample weight of the debiased model's loss.

    .. math::
        W(x) = \frac{\ell_B(x)}{\ell_B(x) + \ell_D(x) + \epsilon}

    with both losses already averaged and class-normalised; ``eps = 1e-8`` as in alinlab/LfF.

    Example:
        >>> relative_difficulty(torch.tensor([1.0, 0.0]), torch.tensor([1.0, 2.0]))
        tensor([0.5000, 0.0000])
    """
    return loss_biased / (loss_biased + loss_debiased + eps)


# --------------------------------------------------------------------------------------------------
# JTT
# --------------------------------------------------------------------------------------------------


def jtt_upsampled_indices(num_samples: int, error_indices: torch.Tensor, lambda_up: int) -> torch.Tensor:
    r"""JTT's second-stage data set: every sample once, every stage-1 error ``lambda_up`` more times.

    .. math::
        D_{up} = D \cup \underbrace{E \cup \dots \cup E}_{\lambda_{up}}

    so each error index appears ``1 + lambda_up`` times (anniesch/jtt ``run_expt.py`` concatenates the
    training set with ``Subset(train, errors * up_weight)``). Not shuffled.

    Example:
        >>> jtt_upsampled_indices(4, torch.tensor([1, 3]), 2).tolist()
        [0, 1, 2, 3, 1, 3, 1, 3]
    """
    if not is_int(lambda_up) or lambda_up < 0:
        raise MR2InputError(_BAD_LAMBDA_UP.format(value=lambda_up))
    everything = torch.arange(num_samples, dtype=torch.long, device=error_indices.device)
    return torch.cat([everything, error_indices.to(torch.long).repeat(lambda_up)])


# --------------------------------------------------------------------------------------------------
# Group DRO over classes
# --------------------------------------------------------------------------------------------------


def class_loss_sums(
    losses: torch.Tensor, target: torch.Tensor, num_classes: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-class sums of per-sample ``losses`` and per-class counts, with ``index_add_``.

    Returns ``(sums [K], counts [K])`` in the losses' dtype; differentiable in ``losses``.

    Example:
        >>> s, n = class_loss_sums(torch.tensor([1.0, 2.0, 4.0]), torch.tensor([0, 2, 0]), 3)
        >>> s.tolist(), n.tolist()
        ([5.0, 0.0, 2.0], [2.0, 0.0, 1.0])
    """
    sums = torch.zeros(num_classes, dtype=losses.dtype, device=losses.device)
    sums = sums.index_add(0, target, losses)
    counts = torch.zeros(num_classes, dtype=losses.dtype, device=losses.device)
    counts.index_add_(0, target, torch.ones_like(losses))
    return sums, counts


def group_dro_update(
    q: torch.Tensor,
    class_loss: torch.Tensor,
    present: torch.Tensor,
    eta: float,
    adjustment: torch.Tensor | None = None,
) -> torch.Tensor:
    r"""One online (exponentiated-gradient) step of group DRO's class weights, absent classes untouched.

    For the classes present in the (global) batch, ``P``:

    .. math::
        \tilde q_k = q_k \exp\big(\eta\, (\ell_k + a_k)\big), \qquad
        q_k \leftarrow \tilde q_k \cdot \frac{\sum_{j \in P} q_j}{\sum_{j \in P} \tilde q_j}
        \quad (k \in P), \qquad q_k \leftarrow q_k \quad (k \notin P)

    ``a_k = C / sqrt(n_k)`` is the generalization adjustment (kohpangwei/group_DRO ``loss.py``).
    Renormalising the present classes to the mass they held keeps ``sum q = 1`` and leaves an
    absent class's weight EXACTLY unchanged: absent classes are unobserved, not zero-loss (the
    reference gives them loss 0, which shrinks their weight every step they are absent). With one
    group per class and K = 100 a batch of 128 misses about a quarter of the classes, so this matters.
    The exponent is shifted by its maximum over ``P`` before ``exp`` (no overflow).

    Args:
        q: [K] current weights (a probability vector).
        class_loss: [K] mean loss of each class in the batch (ignored where not ``present``).
        present: [K] bool, classes with at least one sample in the batch.
        eta: step size (0.01 in the reference).
        adjustment: optional [K] ``a_k``.

    Returns:
        The new [K] weights (``q`` is not modified).

    Example:
        >>> q = torch.full((3,), 1 / 3)
        >>> new = group_dro_update(q, torch.tensor([1.0, 0.0, 0.0]), torch.tensor([True, True, False]),
        ...                        eta=1.0)
        >>> new[2] == q[2], round(float(new.sum()), 6)
        (tensor(True), 1.0)
    """
    exponent = class_loss.detach().to(q.dtype) * eta
    if adjustment is not None:
        exponent = exponent + eta * adjustment.to(q.dtype)
    masked = torch.where(present, exponent, torch.full_like(exponent, -math.inf))
    shift = masked.max().clamp_min(-1e30) if masked.numel() else masked.new_zeros(())
    tilted = torch.where(present, q * torch.exp(masked - shift), torch.zeros_like(q))
    old_mass = torch.where(present, q, torch.zeros_like(q)).sum()
    new_mass = tilted.sum()
    scaled = tilted * (old_mass / new_mass.clamp_min(torch.finfo(q.dtype).tiny))
    return torch.where(present, scaled, q)


# --------------------------------------------------------------------------------------------------
# LDAM-DRW
# --------------------------------------------------------------------------------------------------


def ldam_margins(class_counts: torch.Tensor, max_margin: float = 0.5) -> torch.Tensor:
    r"""LDAM's per-class margins, proportional to ``n_k^{-1/4}`` and scaled so the largest is ``max_margin``.

    .. math::
        m_k = m_{max} \cdot \frac{n_k^{-1/4}}{\max_j n_j^{-1/4}}

    On class-balanced data every ``m_k = max_margin``: a class-agnostic margin.

    Example:
        >>> ldam_margins(torch.tensor([10, 10, 10]))
        tensor([0.5000, 0.5000, 0.5000])
        >>> ldam_margins(torch.tensor([1, 16]), max_margin=1.0)
        tensor([1.0000, 0.5000])
    """
    counts = class_counts.to(torch.float64)
    if bool((counts < 1).any()):
        raise MR2InputError(_BAD_COUNTS)
    raw = counts.pow(-0.25)
    return (raw * (max_margin / raw.max())).to(torch.float32)


def ldam_logits(
    cosine: torch.Tensor, target: torch.Tensor, margins: torch.Tensor, scale: float = 30.0
) -> torch.Tensor:
    r"""LDAM's logits: subtract the true class's margin from its cosine, then scale.

    .. math::
        \tilde z_{ij} = s\,(\cos\theta_{ij} - m_{y_i}\, [j = y_i])

    ``cross_entropy(ldam_logits(...), target)`` is the LDAM loss (kaidic/LDAM-DRW ``losses.py``).

    Args:
        cosine: [B, K] cosine similarities (a :class:`~mr2.methods.ldam.NormedLinear` head's output).
        target: [B] class ids.
        margins: [K] per-class margins.
        scale: ``s`` (30 in the reference).

    Example:
        >>> ldam_logits(torch.tensor([[0.5, 0.2]]), torch.tensor([0]), torch.tensor([0.5, 0.5]), 2.0)
        tensor([[0.0000, 0.4000]])
    """
    check_logits(cosine, target, None)
    check_target(target, cosine.shape[1], cosine.shape[0])
    _check_class_vector("margins", margins, cosine.shape[1])
    dtype = working_dtype(cosine)
    one_hot = F.one_hot(target, cosine.shape[1]).to(dtype)
    shift = one_hot * margins.to(device=cosine.device, dtype=dtype)[target].unsqueeze(1)
    return scale * (cosine.to(dtype) - shift)


def drw_class_weights(class_counts: torch.Tensor, beta: float = 0.9999) -> torch.Tensor:
    r"""Class-balanced weights by the effective number of samples (Cui et al.), used by DRW.

    .. math::
        w_k \propto \frac{1 - \beta}{1 - \beta^{n_k}}, \qquad \sum_k w_k = K

    ``beta = 0`` gives all ones; on class-balanced data every ``w_k = 1`` for any ``beta``.

    Example:
        >>> drw_class_weights(torch.tensor([5, 5, 5]))
        tensor([1., 1., 1.])
    """
    if not 0.0 <= beta < 1.0:
        raise MR2InputError(_BAD_BETA.format(value=beta))
    counts = class_counts.to(torch.float64)
    if bool((counts < 1).any()):
        raise MR2InputError(_BAD_COUNTS)
    effective = -torch.expm1(counts * math.log(beta)) if beta > 0 else torch.ones_like(counts)
    raw = (1.0 - beta) / effective
    return (raw / raw.sum() * counts.numel()).to(torch.float32)


# --------------------------------------------------------------------------------------------------
# Logit adjustment, focal loss
# --------------------------------------------------------------------------------------------------


def logit_adjusted_cross_entropy(
    logits: torch.Tensor,
    target: torch.Tensor,
    log_prior: torch.Tensor,
    tau: float = 1.0,
    *,
    reduction: Reduction = "mean",
) -> torch.Tensor:
    r"""Logit-adjusted softmax cross-entropy (Menon et al., ICLR 2021).

    .. math::
        \ell(z, y) = -\log \mathrm{softmax}(z + \tau \log \pi)_y

    ``pi`` is the training label prior. With a uniform prior ``tau log pi`` is the same constant for
    every class and softmax is shift-invariant, so the loss IS cross-entropy.

    Example:
        >>> z, y = torch.tensor([[2.0, 0.0, 1.0]]), torch.tensor([2])
        >>> uniform = torch.full((3,), 1 / 3).log()
        >>> bool(torch.isclose(logit_adjusted_cross_entropy(z, y, uniform), F.cross_entropy(z, y)))
        True
    """
    check_logits(logits, target, None)
    check_target(target, logits.shape[1], logits.shape[0])
    _check_class_vector("log_prior", log_prior, logits.shape[1])
    dtype = working_dtype(logits)
    adjusted = logits.to(dtype) + tau * log_prior.to(device=logits.device, dtype=dtype)
    return F.cross_entropy(adjusted, target, reduction=reduction)


def focal_loss(
    logits: torch.Tensor, target: torch.Tensor, gamma: float = 1.0, *, reduction: Reduction = "mean"
) -> torch.Tensor:
    r"""Focal loss (Lin et al., 2017) without the class-balance factor alpha.

    .. math::
        \mathrm{FL}(p, y) = -(1 - p_y)^\gamma \log p_y

    ``gamma = 0`` is cross-entropy. (kaidic/LDAM-DRW ``losses.py`` computes ``p_y = exp(-CE)``: the
    same quantity.)

    Example:
        >>> z, y = torch.tensor([[1.0, -1.0]]), torch.tensor([1])
        >>> bool(torch.isclose(focal_loss(z, y, gamma=0.0), F.cross_entropy(z, y)))
        True
    """
    if gamma < 0:
        raise MR2InputError(_BAD_GAMMA.format(value=gamma))
    log_p_y = _true_class_log_prob(logits, target)
    modulation = (-torch.expm1(log_p_y)).clamp_min(0.0).pow(gamma)
    return reduce_loss(-modulation * log_p_y, reduction)


# --------------------------------------------------------------------------------------------------
# CDB-CE
# --------------------------------------------------------------------------------------------------


def cdb_dynamic_tau(class_accuracy: torch.Tensor, eps: float = 0.01) -> float:
    r"""CDB's "dynamic" exponent (Sinha et al., 2020; hitachi-rd-cv/CDB-loss, ImageNet-LT code).

    .. math::
        \tau = 2\,\sigma\Big(\frac{\max_k A_k}{\min_k A_k + \epsilon} - 1\Big)

    Example:
        >>> cdb_dynamic_tau(torch.tensor([0.5, 0.5]), eps=0.0)  # equal accuracies: 2 sigmoid(0)
        1.0
    """
    bias = float(class_accuracy.max()) / (float(class_accuracy.min()) + eps) - 1.0
    return 2.0 / (1.0 + math.exp(-bias))


def cdb_class_weights(class_accuracy: torch.Tensor, tau: float = 1.5) -> torch.Tensor:
    r"""Class-wise difficulty-balanced weights from per-class (validation) accuracy.

    .. math::
        d_k = 1 - A_k, \qquad w_k = \frac{K\, d_k^{\tau}}{\sum_j d_j^{\tau}}

    i.e. normalised to mean 1 over the classes (hitachi-rd-cv/CDB-loss ``cdb_loss.py``). A class at
    100% accuracy gets weight 0, as in the reference. If every class is at 100% (all ``d_k = 0``)
    the weights fall back to all ones instead of the reference's 0/0.

    Example:
        >>> cdb_class_weights(torch.tensor([0.5, 0.5]))
        tensor([1., 1.])
        >>> cdb_class_weights(torch.tensor([0.0, 0.75]), tau=1.0)
        tensor([1.6000, 0.4000])
    """
    difficulty = (1.0 - class_accuracy.to(torch.float64)).clamp(0.0, 1.0)
    raw = difficulty.pow(tau)
    total = raw.sum()
    if float(total) <= 0.0:
        return torch.ones_like(difficulty, dtype=torch.float32)
    return (raw / total * raw.numel()).to(torch.float32)
