"""The maths of the representation and resampling baselines as pure tensor functions.

Center loss (Wen et al., ECCV 2016), the supervised contrastive loss (Khosla et al., NeurIPS 2020)
and hardness-based resampling (HBR, arXiv 2504.07031). The stateful methods in
:mod:`mr2.methods.center_loss`, :mod:`mr2.methods.supcon` and :mod:`mr2.methods.hbr` are thin
wrappers over these functions. No function loops over classes or samples; every one works in the
dtype of its inputs promoted to at least float32 (float64 stays float64: the test oracles).
"""

from __future__ import annotations

from typing import Literal

import torch

from mr2.checks import MR2InputError, check_features, check_target
from mr2.functional.reduction import working_dtype

__all__ = [
    "CenterUpdate",
    "center_distances",
    "center_update",
    "hardness_resampling_counts",
    "hbr_class_sample_counts",
    "supervised_contrastive_loss",
]

CenterUpdate = Literal["paper", "reference"]

_BAD_CENTERS = "centers must have shape [num_classes, feature_dim]; got {shape} for features {features}."
_BAD_UPDATE = "center update rule must be 'paper' or 'reference'; got {value!r}."
_BAD_TEMPERATURE = "temperature and base_temperature must be > 0; got {t!r} and {base!r}."
_BAD_EMBEDDINGS = "embeddings of shape {shape} and targets of shape {target} do not match."
_BAD_OFFSET = "anchor_offset {offset} with {anchors} anchors does not fit in {contrasts} contrasts."
_BAD_HARDNESS = "class_hardness must be a finite [K] vector; got shape {shape}."


# --------------------------------------------------------------------------------------------------
# Center loss
# --------------------------------------------------------------------------------------------------


def center_distances(features: torch.Tensor, centers: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    r"""Squared distance of every feature to the centre of its class, shape [B].

    .. math::
        d_i = \|\phi(x_i) - c_{y_i}\|_2^2

    Center loss is ``lambda / 2 * mean(d)`` (:class:`~mr2.methods.center_loss.CenterLoss`). The
    gradient reaches ``features`` only if ``centers`` is a buffer (it is not a parameter here).

    Args:
        features: [B, d].
        centers: [K, d].
        target: [B] class ids.

    Example:
        >>> f, c = torch.tensor([[1.0, 1.0]]), torch.tensor([[0.0, 0.0], [1.0, 0.0]])
        >>> center_distances(f, c, torch.tensor([0])), center_distances(f, c, torch.tensor([1]))
        (tensor([2.]), tensor([1.]))
    """
    check_features(features, target)
    if centers.dim() != 2 or centers.shape[1] != features.shape[1]:
        raise MR2InputError(_BAD_CENTERS.format(shape=tuple(centers.shape), features=tuple(features.shape)))
    check_target(target, centers.shape[0], features.shape[0])
    dtype = torch.promote_types(working_dtype(features), centers.dtype)
    diff = features.to(dtype) - centers.to(dtype)[target]
    return diff.pow(2).sum(dim=1)


def center_update(
    centers: torch.Tensor,
    class_counts: torch.Tensor,
    class_feature_sums: torch.Tensor,
    alpha: float,
    rule: CenterUpdate = "paper",
    batch_size: int | None = None,
) -> torch.Tensor:
    r"""New class centres after one mini-batch (the per-class sums may be summed over ranks first).

    With ``n_j`` samples of class j in the batch and ``S_j`` the sum of their features,

    - ``"paper"`` (Wen et al. 2016, eq. 4 and Algorithm 1):
      :math:`\Delta c_j = (n_j c_j - S_j) / (1 + n_j)`, :math:`c_j \leftarrow c_j - \alpha \Delta c_j`;
    - ``"reference"`` (KaiyangZhou/pytorch-center-loss: an SGD step of rate alpha on the centres of
      ``mean_i ||phi_i - c_{y_i}||^2``, whose gradient is ``2 (n_j c_j - S_j) / B``):
      :math:`c_j \leftarrow c_j - \alpha \cdot 2 (n_j c_j - S_j) / B`.

    A class absent from the batch (``n_j = 0``) keeps its centre under both rules.

    Args:
        centers: [K, d] current centres.
        class_counts: [K] samples per class in the batch.
        class_feature_sums: [K, d] sum of those samples' features.
        alpha: the centres' learning rate.
        rule: ``"paper"`` or ``"reference"``.
        batch_size: B (``"reference"`` only; default: ``class_counts.sum()``).

    Example:
        >>> c = torch.zeros(2, 1)
        >>> center_update(c, torch.tensor([1.0, 0.0]), torch.tensor([[4.0], [0.0]]), 0.5)
        tensor([[1.],
                [0.]])
    """
    if rule not in ("paper", "reference"):
        raise MR2InputError(_BAD_UPDATE.format(value=rule))
    dtype = torch.promote_types(working_dtype(centers), class_feature_sums.dtype)
    counts = class_counts.to(dtype).unsqueeze(1)
    delta = counts * centers.to(dtype) - class_feature_sums.to(dtype)
    if rule == "paper":
        step = delta / (1.0 + counts)
    else:
        b = float(batch_size) if batch_size is not None else class_counts.sum().to(dtype).clamp_min(1.0)
        step = 2.0 * delta / b
    return (centers.to(dtype) - alpha * step).to(centers.dtype)


# --------------------------------------------------------------------------------------------------
# Supervised contrastive loss
# --------------------------------------------------------------------------------------------------


def supervised_contrastive_loss(
    anchors: torch.Tensor,
    anchor_target: torch.Tensor,
    contrasts: torch.Tensor | None = None,
    contrast_target: torch.Tensor | None = None,
    *,
    anchor_offset: int = 0,
    temperature: float = 0.1,
    base_temperature: float = 0.07,
) -> torch.Tensor:
    r"""SupCon loss ("L_out", Khosla et al. 2020, eq. 2) of each anchor, shape [B_a].

    .. math::
        \ell_i = -\frac{\tau}{\tau_b} \frac{1}{|P(i)|} \sum_{p \in P(i)}
            \log \frac{\exp(v_i \cdot v_p / \tau)}{\sum_{a \ne i} \exp(v_i \cdot v_a / \tau)}

    over the contrast set (every contrast but the anchor itself), with ``P(i)`` the contrasts of the
    anchor's class other than itself. The embeddings ``v`` are used as given (the method
    L2-normalises them). An anchor without a positive contributes 0 (as HobbitLong/SupContrast
    does since it handles that case), ``tau / tau_b`` is its ``temperature / base_temperature``
    scaling. Anchor ``i`` is contrast ``anchor_offset + i`` (its own row, left out): with the
    global batch under data parallelism the contrasts are all ranks' embeddings and the anchors this
    rank's slice of them. The denominator is a log-sum-exp over the off-diagonal contrasts.

    Args:
        anchors: [B_a, p] embeddings of the anchors.
        anchor_target: [B_a] their classes.
        contrasts: [B_c, p] (default: the anchors).
        contrast_target: [B_c] (default: ``anchor_target``).
        anchor_offset: row of the first anchor among the contrasts.
        temperature: tau (0.1).
        base_temperature: tau_b (0.07, the reference's).

    Example:
        >>> v = torch.nn.functional.normalize(torch.tensor([[1.0, 0.0], [1.0, 0.1], [0.0, 1.0]]), dim=1)
        >>> loss = supervised_contrastive_loss(v, torch.tensor([0, 0, 1]))
        >>> bool(loss[0] < 1e-3), loss[2].item() == 0.0  # close positive: ~0; no positive: 0
        (True, True)
    """
    if not (temperature > 0 and base_temperature > 0):
        raise MR2InputError(_BAD_TEMPERATURE.format(t=temperature, base=base_temperature))
    if contrasts is None or contrast_target is None:
        contrasts, contrast_target = anchors, anchor_target
    for emb, tgt in ((anchors, anchor_target), (contrasts, contrast_target)):
        if emb.dim() != 2 or tgt.shape != (emb.shape[0],):
            raise MR2InputError(_BAD_EMBEDDINGS.format(shape=tuple(emb.shape), target=tuple(tgt.shape)))
    n_anchor, n_contrast = anchors.shape[0], contrasts.shape[0]
    if anchor_offset < 0 or anchor_offset + n_anchor > n_contrast:
        raise MR2InputError(_BAD_OFFSET.format(offset=anchor_offset, anchors=n_anchor, contrasts=n_contrast))
    dtype = torch.promote_types(working_dtype(anchors), contrasts.dtype)
    similarity = anchors.to(dtype) @ contrasts.to(dtype).T / temperature  # [B_a, B_c]
    rows = torch.arange(n_anchor, device=anchors.device)
    is_self = torch.zeros(n_anchor, n_contrast, dtype=torch.bool, device=anchors.device)
    is_self[rows, rows + anchor_offset] = True
    log_denominator = torch.logsumexp(similarity.masked_fill(is_self, float("-inf")), dim=1)
    positive = (anchor_target[:, None] == contrast_target[None, :]) & ~is_self
    log_prob = similarity - log_denominator[:, None]
    n_positive = positive.sum(dim=1)
    sum_log_prob = torch.where(positive, log_prob, torch.zeros_like(log_prob)).sum(dim=1)
    mean_log_prob = sum_log_prob / n_positive.clamp_min(1).to(dtype)
    return -(temperature / base_temperature) * mean_log_prob


# --------------------------------------------------------------------------------------------------
# Hardness-based resampling
# --------------------------------------------------------------------------------------------------


def hbr_class_sample_counts(
    class_hardness: torch.Tensor, num_samples: int, alpha: float = 1.0, *, high_is_hard: bool = False
) -> torch.Tensor:
    r"""Samples per class after hardness-based resampling (PawPuk/ClassHardnessImportance).

    ``class_hardness`` is the mean per-sample hardness of each class (the reference's default
    estimator is AUM, where LOW is hard: ``high_is_hard=False``). If some value is <= 0, every value
    is shifted by ``-min + 1e-4``; then

    .. math::
        r_k = \frac{h_k^{-1}}{\sum_j h_j^{-1}} \ (\text{AUM}), \qquad n_k = \mathrm{round}(r_k N)

    (``r_k = h_k / sum_j h_j`` when high is hard). For ``alpha > 1`` the deviations from
    ``m = floor(mean n)`` are amplified: ``n_k = m +- floor(alpha |n_k - m|)``. Counts are clamped
    at >= 1 (a class never vanishes).

    Args:
        class_hardness: [K] mean hardness per class.
        num_samples: N, the training-set size.
        alpha: imbalance amplification (1: none).
        high_is_hard: True for estimators where a high value means hard (loss, forgetting).

    Returns:
        [K] int64 sample counts.

    Example:
        >>> hbr_class_sample_counts(torch.tensor([1.0, 3.0]), 8)  # class 0 has the smaller AUM: harder
        tensor([6, 2])
    """
    h = class_hardness.to(torch.float64)
    if h.dim() != 1 or not bool(torch.isfinite(h).all()):
        raise MR2InputError(_BAD_HARDNESS.format(shape=tuple(class_hardness.shape)))
    low = h.min()
    if low <= 0:
        h = h - low + 1e-4
    weight = h if high_is_hard else 1.0 / h
    counts = torch.round(weight / weight.sum() * num_samples).to(torch.int64)
    if alpha > 1:
        mean = int(counts.double().mean().floor())
        spread = torch.floor(alpha * (counts - mean).abs().double()).to(torch.int64)
        counts = torch.where(counts > mean, mean + spread, mean - spread)
    return counts.clamp_min(1)


def hardness_resampling_counts(
    hardness: torch.Tensor,
    target: torch.Tensor,
    class_counts: torch.Tensor,
    generator: torch.Generator,
    *,
    undersample: bool = True,
    oversample: bool = True,
    high_is_hard: bool = False,
) -> torch.Tensor:
    """How many times each training sample appears in the resampled set, shape [N] (int64).

    For a class with more samples than its target count ``class_counts[k]`` (undersampling ``easy``
    of the reference): keep the hardest ``class_counts[k]`` (lowest AUM; ties by index). For a class
    with fewer (oversampling ``random``): keep every sample and add ``class_counts[k] - n_k`` draws
    from the class, uniformly with replacement. ``undersample`` / ``oversample`` False keeps such a
    class as it is (the reference's ``none``).

    Args:
        hardness: [N] per-sample hardness (AUM: low is hard).
        target: [N] classes.
        class_counts: [K] desired counts (:func:`hbr_class_sample_counts`).
        generator: CPU generator of the oversampling draws.
        undersample, oversample: as above.
        high_is_hard: the sense of ``hardness``.

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> hardness_resampling_counts(torch.tensor([0.5, 0.1, 0.9, 2.0]), torch.tensor([0, 0, 0, 1]),
        ...                            torch.tensor([2, 2]), g)
        tensor([1, 1, 0, 2])
    """
    n, k = target.numel(), class_counts.numel()
    device = target.device
    score = hardness.to(torch.float64)
    score = -score if high_is_hard else score  # ascending score = hardest first
    by_score = torch.sort(score, stable=True).indices
    order = by_score[torch.sort(target[by_score], stable=True).indices]  # class-major, hardest first
    have = torch.bincount(target, minlength=k)
    start = torch.cumsum(have, 0) - have
    rank_in_class = torch.empty(n, dtype=torch.int64, device=device)
    rank_in_class[order] = torch.arange(n, device=device) - start[target[order]]
    want = torch.where(have > 0, class_counts.to(device=device, dtype=torch.int64), 0)  # nothing to draw from
    limit = torch.where(want < have, want if undersample else have, have)
    counts = (rank_in_class < limit[target]).to(torch.int64)
    extra = (want - have).clamp_min(0) if oversample else torch.zeros_like(want)
    if int(extra.sum()) > 0:
        draw_class = torch.repeat_interleave(torch.arange(k, device=device), extra)
        u = torch.rand(draw_class.numel(), generator=generator, dtype=torch.float64).to(device)
        pick = (u * have[draw_class].to(torch.float64)).floor().to(torch.int64)
        pick = torch.minimum(pick, have[draw_class] - 1)
        counts.index_add_(0, order[start[draw_class] + pick], torch.ones_like(pick))
    return counts
