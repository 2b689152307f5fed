"""Slow, obvious float64 loop implementations of the baselines (test oracles only)."""

from __future__ import annotations

import math


def log_softmax_row(z):
    top = max(z)
    norm = top + math.log(sum(math.exp(v - top) for v in z))
    return [v - norm for v in z]


def cross_entropy(logits, target, label_smoothing=0.0):
    """Per-sample cross-entropy (list of floats), PyTorch's label-smoothing convention."""
    out = []
    for row, y in zip(logits.tolist(), target.tolist()):
        log_p = log_softmax_row(row)
        k = len(row)
        smooth = -sum(log_p) / k
        out.append((1 - label_smoothing) * (-log_p[y]) + label_smoothing * smooth)
    return out


def true_class_prob(logits, target):
    return [math.exp(log_softmax_row(row)[y]) for row, y in zip(logits.tolist(), target.tolist())]


def gce(logits, target, q):
    return [(1 - p**q) / q for p in true_class_prob(logits, target)]


def gce_surrogate(logits, target, q):
    return [q * p**q * -math.log(p) for p in true_class_prob(logits, target)]


def focal(logits, target, gamma):
    return [-((1 - p) ** gamma) * math.log(p) for p in true_class_prob(logits, target)]


def logit_adjusted(logits, target, counts, tau):
    total = sum(counts)
    out = []
    for row, y in zip(logits.tolist(), target.tolist()):
        z = [v + tau * math.log(c / total) for v, c in zip(row, counts)]
        out.append(-log_softmax_row(z)[y])
    return out


def ldam_loss(cosine, target, counts, max_margin, scale, weights):
    raw = [c ** (-0.25) for c in counts]
    margins = [r * max_margin / max(raw) for r in raw]
    num = den = 0.0
    for row, y in zip(cosine.tolist(), target.tolist()):
        z = [scale * (v - (margins[y] if k == y else 0.0)) for k, v in enumerate(row)]
        num += weights[y] * -log_softmax_row(z)[y]
        den += weights[y]
    return num / den


def drw_weights(counts, beta):
    raw = [(1 - beta) / (1 - beta**c) for c in counts]
    return [r / sum(raw) * len(raw) for r in raw]


def cdb_weights(accuracy, tau):
    raw = [(1 - a) ** tau for a in accuracy]
    return [r / sum(raw) * len(raw) for r in raw]


def group_dro(steps, num_classes, eta, adjustment=None):
    """q after each step and the robust loss of each step; steps = [(per-sample losses, target)]."""
    q = [1.0 / num_classes] * num_classes
    adj = adjustment or [0.0] * num_classes
    qs, losses = [], []
    for sample_losses, target in steps:
        sums = [0.0] * num_classes
        counts = [0] * num_classes
        for loss, y in zip(sample_losses, target):
            sums[y] += loss
            counts[y] += 1
        present = [k for k in range(num_classes) if counts[k] > 0]
        mean = {k: sums[k] / counts[k] for k in present}
        tilted = {k: q[k] * math.exp(eta * (mean[k] + adj[k])) for k in present}
        old_mass = sum(q[k] for k in present)
        new_mass = sum(tilted.values())
        for k in present:
            q[k] = tilted[k] * old_mass / new_mass
        qs.append(list(q))
        losses.append(sum(q[k] * mean[k] for k in present))
    return qs, losses


def lff_step(state, index, target, ce_biased, ce_debiased, decay, num_classes):
    """One LfF step on per-sample state dicts {i: (ema_b, ema_d, label)}; returns the weights W."""
    groups = {}
    for i, y, lb, ld in zip(index, target, ce_biased, ce_debiased):
        groups.setdefault(i, []).append((y, lb, ld))
    for i, rows in groups.items():
        mean_b = sum(r[1] for r in rows) / len(rows)
        mean_d = sum(r[2] for r in rows) / len(rows)
        if i in state:
            old_b, old_d, _ = state[i]
            state[i] = (
                decay * old_b + (1 - decay) * mean_b,
                decay * old_d + (1 - decay) * mean_d,
                rows[0][0],
            )
        else:
            state[i] = (mean_b, mean_d, rows[0][0])
    max_b = [0.0] * num_classes
    max_d = [0.0] * num_classes
    for ema_b, ema_d, label in state.values():
        max_b[label] = max(max_b[label], ema_b)
        max_d[label] = max(max_d[label], ema_d)
    weights = []
    for i, y in zip(index, target):
        nb = state[i][0] / max_b[y]
        nd = state[i][1] / max_d[y]
        weights.append(nb / (nb + nd + 1e-8))
    return weights
