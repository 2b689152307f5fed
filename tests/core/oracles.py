"""Slow, obvious float64 loop implementations used as test oracles (never used by the library)."""

from __future__ import annotations

import math


def logit_margin_loss(logits, target, temperatures):
    logits = logits.detach()
    total = 0.0
    for i in range(logits.shape[0]):
        y = int(target[i])
        z = [float(v) / float(temperatures[y]) for v in logits[i]]
        top = max(z)
        log_norm = top + math.log(sum(math.exp(v - top) for v in z))
        total += log_norm - z[y]
    return total / logits.shape[0]


def representation_terms(features, target, margin, temperature=1.0):
    """Per-sample log(1 + sum_{j != i, same class} exp((||x_i - x_j||^2 - margin) / T))."""
    features = features.detach()
    out = []
    for i in range(features.shape[0]):
        exponents = []
        for j in range(features.shape[0]):
            if j != i and int(target[j]) == int(target[i]):
                dist = sum((float(a) - float(b)) ** 2 for a, b in zip(features[i], features[j]))
                exponents.append((dist - float(margin)) / temperature)
        if not exponents:
            out.append(0.0)
            continue
        top = max([0.0, *exponents])
        out.append(top + math.log(math.exp(-top) + sum(math.exp(e - top) for e in exponents)))
    return out


def gamma_allocation(second_moments, c_bar):
    roots = [float(a) ** (1.0 / 3.0) for a in second_moments]
    return [c_bar * len(roots) * r / sum(roots) for r in roots]


def pooled_statistics(batches, num_classes, momentum, norm_p=2.0):
    """Class statistics as explicitly weighted samples.

    A class's first batch gets weight m^(L-1) and its t-th later batch (1-based, t >= 2, among the L
    batches holding the class) weight (1 - m) m^(L - t); every sample of a batch carries its batch's
    weight. Returns (means, mean_sq_norm, spread) as float64 lists of lists.
    """
    batches = [(x.detach(), y) for x, y in batches]
    feature_dim = batches[0][0].shape[1]
    means, msq, spread = [], [], []
    for k in range(num_classes):
        holding = [(x[y == k].double()) for x, y in batches if int((y == k).sum()) > 0]
        if not holding:
            means.append([0.0] * feature_dim)
            msq.append(0.0)
            spread.append(0.0)
            continue
        count = len(holding)
        weights = [momentum ** (count - 1)] + [
            (1 - momentum) * momentum ** (count - t) for t in range(2, count + 1)
        ]
        total_weight = sum(w * len(xs) for w, xs in zip(weights, holding))
        mean = [
            sum(w * float(xs[:, c].sum()) for w, xs in zip(weights, holding)) / total_weight
            for c in range(feature_dim)
        ]
        deviation = 0.0
        for w, xs in zip(weights, holding):
            for row in xs:
                diffs = [abs(float(v) - m) for v, m in zip(row, mean)]
                deviation += w * sum(d**norm_p for d in diffs) ** (2.0 / norm_p)
        means.append(mean)
        msq.append(sum(abs(m) ** norm_p for m in mean) ** (2.0 / norm_p))
        spread.append(deviation / total_weight)
    return means, msq, spread


class ReleasedArithmetic:
    """The released research code's loss arithmetic, re-derived from its description, in float64.

    Per class present in the batch: EMA of ||batch mean||_p^2 and of mean ||x - batch mean||_p^2
    (first observation initialises); gamma = K a^(1/3) / sum a^(1/3); logit term = CE(z / gamma_y);
    representation: per class with >= 2 samples, mean over its samples of
    log1p(sum_{j != i} exp((||x_i - x_j||^2 - 2 s_bar) / (10 d))), summed over classes, times d / 10 / K;
    s_bar = mean over all K classes of the spread EMA.
    """

    def __init__(self, num_classes, momentum, lambda_rep, p=5.0):
        self.k, self.m, self.lam, self.p = num_classes, momentum, lambda_rep, p
        self.msq = [0.0] * num_classes
        self.var = [0.0] * num_classes

    def _norm_sq(self, values):
        return sum(abs(float(v)) ** self.p for v in values) ** (2.0 / self.p)

    def __call__(self, logits, features, target):
        logits, features = logits.detach(), features.detach()
        d = features.shape[1]
        for k in range(self.k):
            xs = features[target == k].double()
            if xs.shape[0] == 0:
                continue
            mean = xs.mean(0)
            msq = self._norm_sq(mean)
            var = sum(self._norm_sq(row - mean) for row in xs) / xs.shape[0]
            if self.msq[k] == 0:
                self.msq[k], self.var[k] = msq, var
            else:
                self.msq[k] = self.m * self.msq[k] + (1 - self.m) * msq
                self.var[k] = self.m * self.var[k] + (1 - self.m) * var
        roots = [(a + s) ** (1 / 3) for a, s in zip(self.msq, self.var)]
        gamma = [self.k * r / sum(roots) for r in roots]
        ce = logit_margin_loss(logits.double(), target, gamma)
        s_bar = sum(self.var) / self.k
        rep = 0.0
        for k in range(self.k):
            idx = [i for i in range(len(target)) if int(target[i]) == k]
            if len(idx) < 2:
                continue
            terms = representation_terms(
                features[idx].double(), target[idx], 2 * s_bar, temperature=10.0 * d
            )
            rep += sum(terms) / len(terms)
        rep = rep * d / 10.0 / self.k
        return ce + self.lam * rep, gamma


def additive_margin_loss(logits, target, margins):
    """Mean over samples of -log softmax(z - Delta_y e_y)_y, in float64 Python."""
    total = 0.0
    for i in range(logits.shape[0]):
        y = int(target[i])
        z = [float(v) for v in logits[i]]
        z[y] -= float(margins[y])
        top = max(z)
        total += top + math.log(sum(math.exp(v - top) for v in z)) - z[y]
    return total / logits.shape[0]
