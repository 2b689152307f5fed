"""The compiled functions of :mod:`mr2.statistics._fused_cpu` (imported only where numba is installed).

Plain loops compiled by numba with ``fastmath={"reassoc", "contract"}``: a sum may be taken in any order
(so that the loops over the feature dimension use the vector unit) and a product and a sum may fuse;
not numba's "fast" set, which would assume that no value is NaN or Inf (the guard reads them).
"""

from __future__ import annotations

import math
from typing import Any

import numba
import numpy as np

__all__ = ["BAD_CLASS", "NOT_FINITE", "OK", "one_pass_step", "split_step"]

#: Return codes (the same numbers as :mod:`mr2.statistics._fused_cpu`'s, which does not import this
#: module before it is needed: tests/core/test_fused_step.py checks that they agree).
OK, BAD_CLASS, NOT_FINITE = 0, 1, 2

_jit = numba.njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})


@_jit
def one_pass_step(
    x: Any, target: Any, logits: Any, state: Any, count_buf: Any, sq_buf: Any, seen_buf: Any,
    keep: float, scale: float, min_temperature: float, out: Any,
) -> int:
    """The whole steady step from the features ``x`` [B, d]: ONE pass over the batch (each row's
    squared norm and, when ``2 K <= B``, its class sum), then :func:`_finish` (which, for more
    classes, adds the rows into the state after the checks)."""
    batch, dim = x.shape
    k_classes = count_buf.shape[0]
    dtype = count_buf.dtype
    zero = dtype.type(0)
    counts = np.zeros(k_classes, np.int64)
    for i in range(batch):
        k = target[i]
        if k < 0 or k >= k_classes:
            return BAD_CLASS
        counts[k] += 1
    few = 2 * k_classes <= batch
    sums = np.zeros((k_classes if few else 0, dim), dtype)
    second = np.zeros(k_classes, dtype)
    for i in range(batch):
        row = x[i]
        total = zero
        if few:
            acc = sums[target[i]]
            for j in range(dim):
                v = row[j]
                total += v * v
                acc[j] += v
        else:
            for j in range(dim):
                v = row[j]
                total += v * v
        second[target[i]] += total
    return _finish(second, counts, logits, sums, few, x, target, not few, state, count_buf, sq_buf,
                   seen_buf, keep, scale, min_temperature, out)


@_jit
def split_step(
    norms: Any, target: Any, counts: Any, logits: Any, sums: Any, state: Any, count_buf: Any,
    sq_buf: Any, seen_buf: Any, keep: float, scale: float, min_temperature: float, out: Any,
) -> int:
    """The steady step from the passes over the batch made by tensor operations (threaded): the
    features' L2 ``norms`` [B], the class ``counts`` [K] and, when ``2 K <= B``, the batch's class
    ``sums`` [K, d] (else a [0, d] array: the caller adds the rows into the state afterwards)."""
    k_classes = count_buf.shape[0]
    second = np.zeros(k_classes, count_buf.dtype)
    for i in range(norms.shape[0]):
        k = target[i]
        if k < 0 or k >= k_classes:
            return BAD_CLASS
        second[k] += norms[i] * norms[i]
    few = sums.shape[0] == k_classes
    return _finish(second, counts, logits, sums, few, sums, target, False, state, count_buf, sq_buf,
                   seen_buf, keep, scale, min_temperature, out)


@_jit
def _finish(
    second: Any, counts: Any, logits: Any, sums: Any, few: bool, x: Any, target: Any, add_rows: bool,
    state: Any, count_buf: Any, sq_buf: Any, seen_buf: Any, keep: float, scale: float,
    min_temperature: float, out: Any,
) -> int:
    """The ``[K]`` arithmetic and the writes, given the batch's second moments ``second`` and
    ``counts``: the moving count and second moment (``torch.lerp``'s formula, weight ``1 - m`` for a
    present class, 0 for an absent one), the guard (the logits' sum and ``4 sum_k n_k Q_k`` finite, or
    nothing is written), the state (few classes: lerped toward ``sums``; else the present rows
    scaled by ``m`` and, with ``add_rows``, the rows of ``x`` added times ``1 - m``), the samples seen,
    and ``out`` = (count clamped at 1e-12, second moment, gamma)."""
    k_classes = count_buf.shape[0]
    dtype = count_buf.dtype
    zero, one, half = dtype.type(0), dtype.type(1), dtype.type(0.5)
    logit_sum = 0.0
    for i in range(logits.shape[0]):
        for j in range(logits.shape[1]):
            logit_sum += logits[i, j]
    keep_ = dtype.type(keep)
    weight = np.zeros(k_classes, dtype)
    new_count = np.empty(k_classes, dtype)
    new_second = np.empty(k_classes, dtype)
    guard = zero
    for k in range(k_classes):
        if counts[k] > 0:
            weight[k] = keep_
        w, c = weight[k], dtype.type(counts[k])
        if w < half:
            new_count[k] = count_buf[k] + w * (c - count_buf[k])
            new_second[k] = sq_buf[k] + w * (second[k] - sq_buf[k])
        else:
            new_count[k] = c - (c - count_buf[k]) * (one - w)
            new_second[k] = second[k] - (second[k] - sq_buf[k]) * (one - w)
        guard += new_count[k] * new_second[k]
    # As the eager step's check: the logits' sum (here in float64: finite exactly when every logit
    # is) and 4 n.Q in the statistics' dtype, where the eager step refuses it when it overflows.
    if not (math.isfinite(logit_sum) and math.isfinite(guard * dtype.type(4))):
        return NOT_FINITE
    # Valid: the writes.
    dim = state.shape[1]
    for k in range(k_classes):
        w = weight[k]
        if w == zero:
            continue
        row_state = state[k]
        if not few:
            factor = one - w
            for j in range(dim):
                row_state[j] *= factor
        elif w < half:
            acc = sums[k]
            for j in range(dim):
                row_state[j] += w * (acc[j] - row_state[j])
        else:
            acc = sums[k]
            for j in range(dim):
                row_state[j] = acc[j] - (acc[j] - row_state[j]) * (one - w)
    if add_rows:
        for i in range(x.shape[0]):
            row = x[i]
            row_state = state[target[i]]
            for j in range(dim):
                row_state[j] += keep_ * row[j]
    tiny, third = dtype.type(1e-12), dtype.type(1.0 / 3.0)
    root_sum = zero
    for k in range(k_classes):
        count_buf[k] = new_count[k]
        sq_buf[k] = new_second[k]
        seen_buf[k] += counts[k]
        n = new_count[k] if new_count[k] >= tiny else tiny
        out[0, k] = n
        out[1, k] = new_second[k]
        root = (new_second[k] / n) ** third
        out[2, k] = root
        root_sum += root
    scale_, floor = dtype.type(scale), dtype.type(min_temperature)
    for k in range(k_classes):
        gamma = out[2, k] * scale_ / root_sum
        if gamma < floor:  # NaN stays NaN, as torch.clamp_min
            gamma = floor
        out[2, k] = gamma if math.isfinite(gamma) else one
    return OK
