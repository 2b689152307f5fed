"""The two MR2 loss terms as pure functions (no state, no I/O)."""

from __future__ import annotations

import warnings
from typing import Any, Literal

import torch
import torch.nn.functional as F

from mr2.checks import MR2InputError, check_features, check_logits, check_target
from mr2.functional.reduction import Reduction, reduce_loss, working_dtype

__all__ = [
    "additive_margin_loss",
    "logit_margin_loss",
    "pairwise_sq_distances",
    "representation_margin_loss",
]


TEMPERATURES_SHAPE = "temperatures must have shape [num_classes]={expected}; got {shape}."
MARGINS_SHAPE = "margins must have shape [num_classes]={expected}; got {shape}."
BAD_DISTANCE_TEMPERATURE = "temperature must be a positive number; got {value!r}."
BAD_PAIR_MODE = "pair_mode must be 'auto', 'dense' or 'sparse'; got {value!r}."

PairMode = Literal["auto", "dense", "sparse"]






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
    check_logits(logits, target, None)
    check_target(target, logits.shape[1], logits.shape[0])
    if temperatures.shape != (logits.shape[1],):
        raise MR2InputError(
            TEMPERATURES_SHAPE.format(expected=logits.shape[1], shape=tuple(temperatures.shape))
        )
    dtype = working_dtype(logits)
    scale = temperatures.detach().to(dtype)[target].unsqueeze(1)
    if logits.device.type == "cpu" and logits.requires_grad and not torch.compiler.is_compiling():
        per_sample = _ScaledCrossEntropy.apply(logits.to(dtype), target, scale)
    else:
        per_sample = F.cross_entropy(logits.to(dtype) / scale, target, reduction="none")
    return reduce_loss(per_sample, reduction)


class _ScaledCrossEntropy(torch.autograd.Function):
    """Per-sample ``-log softmax(z_i / s_i)_{y_i}`` with a fused backward (CPU path).

    The gradient ``(softmax(z_i / s_i) - e_{y_i}) g_i / s_i`` is formed in ONE [B, K] buffer from the
    saved log-probabilities (autograd's chain of division, log-softmax and NLL backward makes three,
    one of them zero-filled). Same values as ``F.cross_entropy(z / s, y, reduction="none")`` to
    float32 rounding; first derivatives only.
    """

    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, target: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        log_probs = logits / scale
        log_probs.sub_(torch.logsumexp(log_probs, dim=1, keepdim=True))  # log-softmax in place
        ctx.save_for_backward(log_probs, target, scale)
        return -log_probs.gather(1, target.unsqueeze(1)).squeeze(1)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        log_probs, target, scale = ctx.saved_tensors
        grad_logits = log_probs.exp()
        picked = target.unsqueeze(1)
        grad_logits.scatter_(1, picked, grad_logits.gather(1, picked) - 1.0)  # one entry per row
        grad_logits.mul_(grad.unsqueeze(1) / scale)
        return grad_logits, None, None


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
    check_logits(logits, target, None)
    check_target(target, logits.shape[1], logits.shape[0])
    if margins.shape != (logits.shape[1],):
        raise MR2InputError(
            MARGINS_SHAPE.format(expected=logits.shape[1], shape=tuple(margins.shape))
        )
    dtype = working_dtype(logits)
    shift = margins.detach().to(dtype)[target]
    shifted = logits.to(dtype).scatter_add(1, target.unsqueeze(1), -shift.unsqueeze(1))
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


def _csr(
    crow: torch.Tensor, cols: torch.Tensor, values: torch.Tensor, shape: tuple[int, int]
) -> torch.Tensor:
    """A CSR matrix (its invariants hold by construction: rows sorted, columns in range)."""
    return torch.sparse_csr_tensor(crow, cols, values, shape, check_invariants=False)


def _crow(rows: torch.Tensor, num_rows: int) -> torch.Tensor:
    crow = torch.zeros(num_rows + 1, dtype=torch.long, device=rows.device)
    crow[1:] = torch.bincount(rows, minlength=num_rows).cumsum(0)
    return crow


_CSR_BETA = "Sparse CSR tensor support is in beta"


def _sparse_times_dense(sparse: torch.Tensor, dense: torch.Tensor) -> torch.Tensor:
    """``sparse @ dense`` written straight into its result: ``sparse @ dense`` alone allocates a
    second [rows, d] buffer and copies it (the benchmark's page-fault table shows what fresh
    buffers cost)."""
    out = dense.new_empty(sparse.shape[0], dense.shape[1])
    return torch.addmm(out, sparse, dense, beta=0.0, out=out)


def _same_class_entries(
    target: torch.Tensor, key_target: torch.Tensor, *, partnered_only: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(i, j)`` of every entry with ``target[i] == key_target[j]`` (own entries included), sorted
    by ``i`` then ``j``: the ``nonzero()`` of the [B, P] same-class mask, built from the keys sorted by
    class instead (``O(B + P + entries)``, no [B, P] mask). Reads the entry count on the host.

    ``partnered_only``: leave out the rows whose only same-class key is their own entry (every
    query has one among the keys): those rows have no pair.
    """
    batch = target.shape[0]
    num = int(torch.maximum(target.max(), key_target.max())) + 1
    members = torch.argsort(key_target, stable=True)  # keys grouped by class, ascending within
    counts = torch.bincount(key_target, minlength=num)
    starts = counts.cumsum(0) - counts
    per_row = counts.index_select(0, target)
    if partnered_only:
        per_row = per_row.masked_fill(per_row == 1, 0)
    total = int(per_row.sum())
    rows = torch.repeat_interleave(torch.arange(batch, device=target.device), per_row, output_size=total)
    row_start = per_row.cumsum(0) - per_row
    within = torch.arange(total, device=target.device) - row_start.index_select(0, rows)
    cols = members.index_select(0, starts.index_select(0, target).index_select(0, rows) + within)
    return rows, cols


def _flush_subnormal_(values: torch.Tensor) -> torch.Tensor:
    """Set the entries of ``values`` smaller in magnitude than the dtype's smallest normal number
    (float32: 1.2e-38) to 0, in place.

    Pair weights ``exp((d^2 - m) / T)`` of pairs well inside the margin (``d^2`` far below ``m``)
    land in the subnormal range (float32: exponents between about -87 and -104, common with T = 1
    and high-dimensional features), and CPU arithmetic on subnormal operands runs many times
    slower (each takes a microcode assist; see BENCHMARKS.md section 1 and docs/benchmarks/log.md
    section 1). Dropping them changes no sum that holds a normal term beyond float32 rounding (the
    log-sum-exp's denominator is >= 1), and a gradient only by the terms ``a_ij (q_i - k_j)`` whose
    ``|a_ij|`` is below the smallest normal number.
    """
    return values.masked_fill_(values.abs() < torch.finfo(values.dtype).tiny, 0.0)


class _SamePairLogSumExp(torch.autograd.Function):
    """``log(1 + sum_j exp((||q_i - k_j||^2 - m) / T))`` over listed pairs, with an analytic backward.

    The listed entries (row-sorted) are the same-class pairs PLUS each listed query's own row among
    the keys (``k_{i + offset} = q_i``); a query without a pair need not be listed (its value is
    exactly 0, its gradient 0: no read of its features). Forward: all their dot products as ONE
    sampled matrix product (``O(entries * d)``); the own-row entries give ``||q_i||^2``, the others
    ``||q_i - k_j||^2 = ||q_i||^2 + ||k_j||^2 - 2 q_i . k_j`` (clamped at 0); then a segmented
    log-sum-exp. Backward, with ``a_ij = g_i p_ij 2 / T`` (``p`` the softmax weight of the pair):
    ``dL/dq_i = sum_j a_ij (q_i - k_j)`` and ``dL/dk_j = sum_i a_ij (k_j - q_i)``. When the keys are
    the queries (local pairs, a symmetric pattern) the gradient is ONE sparse-times-dense product
    with the Laplacian ``diag(A 1 + A^T 1) - (A + A^T)`` on the same pattern: no [pairs, d] and no
    extra [B, d] temporary.
    """

    @staticmethod
    def forward(
        ctx: Any,
        queries: torch.Tensor,
        keys: torch.Tensor,
        query_index: torch.Tensor,
        key_index: torch.Tensor,
        self_offset: int,
        margin: torch.Tensor,
        temperature: float,
    ) -> torch.Tensor:
        batch, pool = queries.shape[0], keys.shape[0]
        crow = _crow(query_index, batch)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_CSR_BETA)
            pattern = _csr(crow, key_index, queries.new_zeros(key_index.numel()), (batch, pool))
            dots = torch.sparse.sampled_addmm(pattern, queries, keys.T, beta=0.0).values()
        is_own = key_index == query_index + self_offset
        own = is_own.nonzero().squeeze(1)  # one own entry per listed row, in row order
        pair = (~is_own).nonzero().squeeze(1)
        own_rows = query_index.index_select(0, own)
        q_sq = dots.new_zeros(batch).index_copy_(0, own_rows, dots.index_select(0, own))
        same = keys is queries
        k_sq = q_sq if same else torch.linalg.vector_norm(keys, dim=1).square()
        pair_q, pair_k = query_index.index_select(0, pair), key_index.index_select(0, pair)
        sq_dist = (q_sq[pair_q] + k_sq[pair_k] - 2.0 * dots.index_select(0, pair)).clamp_min(0.0)
        values = (sq_dist - margin) / temperature
        shift = values.new_zeros(batch).scatter_reduce(
            0, pair_q, values, reduce="amax", include_self=True
        )
        weights = _flush_subnormal_((values - shift[pair_q]).exp())
        denominator = torch.exp(-shift).index_add_(0, pair_q, weights)  # >= 1: its largest term is 1
        _flush_subnormal_(weights.div_(denominator[pair_q]))
        ctx.save_for_backward(queries, keys, crow, key_index, own, own_rows, pair, pair_q, pair_k, weights)
        ctx.temperature = temperature
        ctx.same = same
        return shift + torch.log(denominator)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        queries, keys, crow, key_index, own, own_rows, pair, pair_q, pair_k, weights = ctx.saved_tensors
        batch, pool = queries.shape[0], keys.shape[0]
        a = _flush_subnormal_(grad[pair_q] * weights * (2.0 / ctx.temperature))
        row_sum = a.new_zeros(batch).index_add_(0, pair_q, a)
        # A^T: the pairs ordered by (key, query).
        order = torch.argsort(pair_k * batch + pair_q)
        nones = (None,) * 5
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_CSR_BETA)
            if ctx.same:
                # Symmetric pattern: A^T has A's pattern with the values a[order].
                values = a.new_empty(key_index.numel())
                values.index_copy_(0, pair, -(a + a[order]))
                degree = (row_sum + a.new_zeros(batch).index_add_(0, pair_k, a)).index_select(0, own_rows)
                values.index_copy_(0, own, degree)
                laplacian = _csr(crow, key_index, values, (batch, batch))
                return (_sparse_times_dense(laplacian, queries), None, *nones)
            forward_a = _csr(_crow(pair_q, batch), pair_k, a, (batch, pool))
            backward_a = _csr(_crow(pair_k[order], pool), pair_q[order], a[order], (pool, batch))
            col_sum = a.new_zeros(pool).index_add_(0, pair_k, a)
            grad_q = queries * row_sum.unsqueeze(1) - _sparse_times_dense(forward_a, keys)
            grad_k = keys * col_sum.unsqueeze(1) - _sparse_times_dense(backward_a, queries)
        return (grad_q, grad_k, *nones)


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
        pair_mode: ``"dense"`` computes all [B, P] distances with one matrix product and masks
            them (no host sync; the accelerator path); ``"sparse"`` lists the same-class pairs and computes
            only their dot products with one sampled matrix product, with an analytic backward of
            two sparse-times-dense products (``O(pairs * d)`` instead of ``O(B P d)``, no
            [pairs, d] temporary; the pair count is read on the host; first derivatives only);
            ``"auto"`` (default) takes ``"sparse"`` for CPU tensors (outside ``torch.compile``)
            when under 1/16 of the [B, P] entries are same-class pairs (about K > 16 classes in
            the batch; a sparse product costs far more per entry than a dense one), else
            ``"dense"``. Both
            give the same values.

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
        raise MR2InputError(BAD_DISTANCE_TEMPERATURE.format(value=temperature))
    dtype = working_dtype(features)
    queries = features.to(dtype)
    if partner_features is None or partner_target is None:
        keys, key_target, self_offset = queries, target, 0
    else:
        keys, key_target = partner_features.to(dtype), partner_target
    batch = queries.shape[0]
    if pair_mode not in ("auto", "dense", "sparse"):
        raise MR2InputError(BAD_PAIR_MODE.format(value=pair_mode))
    margin_t = torch.as_tensor(margin, dtype=dtype, device=queries.device).detach()
    per_sample: torch.Tensor | None = None
    if batch and (
        pair_mode == "sparse"
        or (pair_mode == "auto" and queries.device.type == "cpu" and not torch.compiler.is_compiling())
    ):
        query_index, key_index = _same_class_entries(target, key_target, partnered_only=True)
        pairs = query_index.numel() - int(torch.unique_consecutive(query_index).numel())
        if pair_mode == "sparse" or 16 * pairs < batch * key_target.shape[0]:
            local = partner_features is None or partner_target is None
            per_sample = _SamePairLogSumExp.apply(
                queries,
                queries if local else keys,
                query_index,
                key_index,
                self_offset,
                margin_t,
                temperature,
            )
    if per_sample is None:
        same_class = target.unsqueeze(1) == key_target.unsqueeze(0)
        rows = torch.arange(batch, device=queries.device)
        same_class[rows, rows + self_offset] = False
        logits = (pairwise_sq_distances(queries, keys) - margin_t) / temperature
        logits = logits.masked_fill(~same_class, float("-inf"))
        with_one = torch.cat([logits.new_zeros(batch, 1), logits], dim=1)
        per_sample = torch.logsumexp(with_one, dim=1)
    return reduce_loss(per_sample, reduction)
