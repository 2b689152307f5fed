"""Slow, obvious float64 loop oracles of center loss, SupCon, HBR and SAM (tests only)."""

from __future__ import annotations

import math

import torch


def center_loss_oracle(logits, features, centers, target, lam):
    """CE + lambda/2 * ||f - c_y||^2, averaged over the batch, one sample at a time."""
    total = 0.0
    for i in range(len(target)):
        z = [float(v) for v in logits[i]]
        m = max(z)
        log_sum = m + math.log(sum(math.exp(v - m) for v in z))
        ce = log_sum - z[int(target[i])]
        c = centers[int(target[i])]
        dist = sum((float(features[i, j]) - float(c[j])) ** 2 for j in range(features.shape[1]))
        total += ce + lam / 2 * dist
    return total / len(target)


def center_update_oracle(centers, features, target, alpha, rule):
    """Wen et al.'s Algorithm 1 (``paper``) or an SGD step on mean ||f - c_y||^2 (``reference``)."""
    new = centers.clone().double()
    batch = len(target)
    for j in range(centers.shape[0]):
        members = [i for i in range(batch) if int(target[i]) == j]
        delta = torch.zeros(centers.shape[1], dtype=torch.float64)
        for i in members:
            delta += centers[j].double() - features[i].double()
        if rule == "paper":
            new[j] = centers[j].double() - alpha * delta / (1 + len(members))
        else:
            new[j] = centers[j].double() - alpha * 2 * delta / batch
    return new


def supcon_oracle(embeddings, target, temperature, base_temperature):
    """HobbitLong/SupContrast's loss (one view, contrast_mode 'all'), anchor by anchor, max-subtracted."""
    n = len(target)
    losses = []
    for i in range(n):
        sims = [float(embeddings[i] @ embeddings[a]) / temperature for a in range(n)]
        top = max(sims)
        denominator = sum(math.exp(sims[a] - top) for a in range(n) if a != i)
        positives = [p for p in range(n) if p != i and int(target[p]) == int(target[i])]
        if not positives:
            losses.append(0.0)
            continue
        mean_log_prob = sum((sims[p] - top) - math.log(denominator) for p in positives) / len(positives)
        losses.append(-(temperature / base_temperature) * mean_log_prob)
    return losses


def hbr_counts_oracle(class_hardness, num_samples, alpha):
    """The reference's compute_sample_allocation_after_resampling for AUM, with plain Python."""
    h = [float(v) for v in class_hardness]
    if min(h) <= 0:
        offset = -min(h)
        h = [v + offset + 0.0001 for v in h]
    inverse = [1 / v for v in h]
    counts = [round(v / sum(inverse) * num_samples) for v in inverse]
    if alpha > 1:
        mean = int(sum(counts) / len(counts))
        counts = [mean + int(alpha * abs(c - mean)) if c > mean else mean - int(alpha * abs(c - mean))
                  for c in counts]
    return [max(1, c) for c in counts]


def hbr_resample_oracle(hardness, target, wanted):
    """Keep the hardest (lowest AUM, ties by index) of an over-full class; returns (multiplicity of
    the kept originals, per-class number of extra draws) -- the draws themselves are random."""
    n = len(target)
    keep = [0] * n
    extra = []
    for k, want in enumerate(wanted):
        members = sorted((i for i in range(n) if int(target[i]) == k), key=lambda i: (float(hardness[i]), i))
        if want < len(members):
            for i in members[:want]:
                keep[i] = 1
            extra.append(0)
        else:
            for i in members:
                keep[i] = 1
            extra.append(want - len(members))
    return keep, extra


def sam_perturbation_oracle(params, grads, rho, adaptive):
    """e(w) of Foret et al. (and ASAM with T_w = |w|), parameter by parameter, element by element."""
    sq = 0.0
    for p, g in zip(params, grads, strict=True):
        for w, gw in zip(p.reshape(-1).tolist(), g.reshape(-1).tolist(), strict=True):
            sq += ((abs(w) if adaptive else 1.0) * gw) ** 2
    norm = math.sqrt(sq)
    out = []
    for p, g in zip(params, grads, strict=True):
        values = [
            (w * w if adaptive else 1.0) * gw * rho / (norm + 1e-12)
            for w, gw in zip(p.reshape(-1).tolist(), g.reshape(-1).tolist(), strict=True)
        ]
        out.append(torch.tensor(values, dtype=torch.float64).view_as(p))
    return out
