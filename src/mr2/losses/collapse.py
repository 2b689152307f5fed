"""A guard against collapsed penultimate features: one warning, from the loss, without a host sync per step.

When a loss pulls the penultimate features together faster than the logit term separates the classes,
the features collapse: their mean squared norm and their class spreads fall by an order of magnitude or
more within the first steps while the logits stay constant, so the logit term stays near ``log K`` (the
cross-entropy of a uniform guess) and the model learns nothing. This happened with the paper's MR2
formula (distance temperature ``T = 1``) in pytorch/examples' MNIST script (docs/mr2.md, "Collapse
guard": at steps 5-20 the mean squared norm of the features was 0.0002-0.16 of its first step's value
with Adadelta, SGD and Adam, and the logit term stayed at 0.97-1.0 ``log K``; with the script's own
loss both grew and the logit term fell to 0.40-0.59 ``log K`` by step 20).

:class:`CollapseGuard` watches for it. It reads the batch every :data:`CHECK_EVERY` training steps
(and at the first, which is its reference): the mean squared norm of the features, their mean squared
deviation from their class's mean in the batch, and the logit term. The rule (:func:`is_collapsed`):

    (m_t <= r m_1  or  s_t <= r s_1)  and  logit_t >= f log K,        r = 0.1, f = 0.9

with ``m`` the mean squared feature norm, ``s`` the mean within-class squared deviation of the batch,
step 1 the first training step the guard saw. When it holds, it warns once with
:class:`FeatureCollapseWarning` (the cause and the fix) and stops checking. On CPU the check reads three
numbers at the check steps, the logit term first (when it is below ``f log K`` the rule cannot hold and
the batch's class sums are skipped); on CUDA they are copied to pinned memory without blocking and read at a
later step once the copy has finished (``torch.cuda.Event.query``), so the guard never waits for the
device. Under ``torch.compile`` tracing it does nothing.
"""

from __future__ import annotations

import math
import os
import threading
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from mr2.io import atomic_write_json

__all__ = [
    "CHECK_EVERY",
    "COLLAPSE_RATIO",
    "COLLAPSE_RECORD",
    "LOGIT_FRACTION",
    "CollapseGuard",
    "FeatureCollapseWarning",
    "batch_feature_scale",
    "collapse_recorded",
    "collapse_warnings",
    "is_collapsed",
    "reset_collapse_warnings",
    "write_collapse_record",
]

#: Check the batch every this many training steps (and at the first).
CHECK_EVERY = 5
#: Collapsed: the mean squared feature norm or the mean class spread at most this fraction of step 1's.
COLLAPSE_RATIO = 0.1
#: ... while the logit term is at least this fraction of ``log K`` (a uniform guess).
LOGIT_FRACTION = 0.9

#: The warning's text; ``{advice}`` is the loss's (:meth:`mr2.MR2Loss.collapse_advice`).
COLLAPSE_MESSAGE = (
    "mr2: the penultimate features collapsed by training step {step}: their mean squared norm went from "
    "{first_norm:.3g} (step 1) to {norm:.3g} and their mean class spread from {first_spread:.3g} to "
    "{spread:.3g}, "
    "while the logit term stayed at {logit:.3g} (log K = {log_k:.3g}), so the model is not learning. {advice}"
)


# The steps at which a guard of this thread warned since the last reset: what a trial reports to
# ``mr2 tune`` (issue 44: a contender with a collapsed run is not adopted). Per thread, so that trials
# trained in threads of one process do not see each other's.
_warnings_here = threading.local()


def collapse_warnings() -> tuple[int, ...]:
    """The training steps at which a :class:`CollapseGuard` of this thread warned since
    :func:`reset_collapse_warnings` (or since the thread started), oldest first.

    What a tune trial reports: :func:`mr2.tune.write_predictions` writes ``collapse.json`` beside the
    predictions when it is not empty, the engine does the same for its run, and :func:`mr2.tune.tune`
    reads it after each ``train_fn`` call. A guard whose warning is filtered out (``warnings.simplefilter
    ("ignore")``) still counts.

    Example:
        >>> reset_collapse_warnings()
        >>> collapse_warnings()
        ()
    """
    return tuple(getattr(_warnings_here, "steps", ()))


def reset_collapse_warnings() -> None:
    """Forget this thread's collapse warnings (:func:`collapse_warnings`): called before each trial."""
    _warnings_here.steps = []


#: The file beside a trial's predictions that says a collapse guard warned while it trained.
COLLAPSE_RECORD = "collapse.json"


def write_collapse_record(directory: str | os.PathLike[str]) -> Path | None:
    """Write ``{directory}/collapse.json`` (``{"warned_at_steps": [...]}``, atomically) when a guard of
    this thread warned since the last :func:`reset_collapse_warnings`, else remove one that a previous
    attempt left there; returns the path written, or None."""
    path = Path(directory) / COLLAPSE_RECORD
    steps = collapse_warnings()
    if steps:
        atomic_write_json(path, {"warned_at_steps": list(steps)})
        return path
    if os.path.lexists(path):
        path.unlink()
    return None


def collapse_recorded(directory: str | os.PathLike[str]) -> bool:
    """Whether ``directory`` holds a collapse record (:func:`write_collapse_record`); anything under
    that name counts (it is not opened)."""
    return os.path.lexists(Path(directory) / COLLAPSE_RECORD)


def _note_warning(step: int) -> None:
    steps = getattr(_warnings_here, "steps", None)
    if steps is None:
        steps = _warnings_here.steps = []
    steps.append(int(step))


class FeatureCollapseWarning(UserWarning):
    """The penultimate features collapsed early in training (see :mod:`mr2.losses.collapse`).

    Example:
        >>> issubclass(FeatureCollapseWarning, UserWarning)
        True
    """


def batch_feature_scale(features: torch.Tensor, target: torch.Tensor, num_classes: int) -> torch.Tensor:
    r"""[2] the batch's mean squared feature norm and mean within-class squared deviation.

    .. math::
        m = \frac{1}{B}\sum_i \|\phi_i\|^2, \qquad
        s = \frac{1}{B}\sum_i \|\phi_i - \bar\phi_{y_i}\|^2
          = \frac{1}{B}\sum_k \Big(Q_k - \frac{\|S_k\|^2}{n_k}\Big)

    with ``\bar\phi_k`` the mean of class k's samples in the batch and ``n_k``, ``S_k``, ``Q_k`` its
    count, feature sum and sum of squared norms (one ``index_add_`` pass, no loop over classes; with
    more classes than samples, over the batch's own classes only).
    Computed in float32 (float64 inputs stay float64), detached; no host sync.

    Example:
        >>> x = torch.tensor([[1.0, 0.0], [3.0, 0.0], [0.0, 2.0]])
        >>> m, s = batch_feature_scale(x, torch.tensor([0, 0, 1]), 2).tolist()
        >>> round(m, 5), round(s, 5)  # m = (1 + 9 + 4) / 3, s = (1 + 1 + 0) / 3
        (4.66667, 0.66667)
    """
    x = features.detach()
    if x.dtype != torch.float64:
        x = x.float()
    # Row norms in one pass each, without a [B, d] or [K, d] temporary of squares (at K = 1,000,
    # d = 2048 a fresh 8 MB buffer of squares cost more than the rest of a check step).
    sq_norms = torch.linalg.vector_norm(x, dim=1).square()
    rows, groups = target, num_classes
    if num_classes > x.shape[0]:
        # More classes than samples (K = 1,000, B = 512): the sums of the batch's own classes only,
        # [U, d] with U <= B, instead of a mostly-zero [K, d] buffer filled and normed (absent classes
        # add 0 to the sum below). Each row's sum adds the same samples in the same order.
        classes, rows = torch.unique(target, return_inverse=True)
        groups = classes.shape[0]
    count = x.new_zeros(groups).index_add_(0, rows, x.new_ones(target.shape))
    feature_sum = x.new_zeros(groups, x.shape[1]).index_add_(0, rows, x)
    between = (torch.linalg.vector_norm(feature_sum, dim=1).square() / count.clamp_min(1.0)).sum()
    total = sq_norms.sum()
    size = max(x.shape[0], 1)
    return torch.stack([total / size, (total - between).clamp_min(0.0) / size])


def is_collapsed(
    first: tuple[float, float], now: tuple[float, float], logit: float, num_classes: int
) -> bool:
    """The rule of the module docstring: ``first`` and ``now`` are ``(m, s)`` of step 1 and of now.

    A reference that is 0 or not finite (features all zero at step 1) cannot show a fall: False.

    Example:
        >>> is_collapsed((3.0, 2.0), (0.2, 1.5), logit=2.29, num_classes=10)  # m fell 15-fold, logit ~ log 10
        True
        >>> is_collapsed((3.0, 2.0), (0.2, 1.5), logit=1.2, num_classes=10)   # the model learns
        False
    """
    values = (*first, *now, logit)
    if not all(math.isfinite(value) for value in values):
        return False
    (first_norm, first_spread), (norm, spread) = first, now
    fell = (first_norm > 0 and norm <= COLLAPSE_RATIO * first_norm) or (
        first_spread > 0 and spread <= COLLAPSE_RATIO * first_spread
    )
    return fell and logit >= LOGIT_FRACTION * math.log(num_classes)


class CollapseGuard:
    """Checks the rule of :mod:`mr2.losses.collapse` every :data:`CHECK_EVERY` training steps; warns once.

    Held by :class:`~mr2.MR2Loss` (``loss.collapse_guard``; set it to None to switch the guard off) and
    fed by its ``forward`` in training mode. Not part of the ``state_dict``: after a resume the first
    step seen is the new reference.

    Args:
        num_classes: K (for ``log K``).
        every: check every this many steps (>= 1).

    Example:
        >>> guard = CollapseGuard(num_classes=2, every=1)
        >>> target = torch.tensor([0, 1, 0, 1])
        >>> guard.observe(torch.ones(4, 3) * 2, target, torch.tensor(0.69), lambda d: "")  # step 1
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     guard.observe(torch.ones(4, 3) * 0.1, target, torch.tensor(0.69), lambda d: "Fix it.")
        >>> [w.category.__name__ for w in caught], guard.warned_at
        (['FeatureCollapseWarning'], 2)
    """

    def __init__(self, num_classes: int, every: int = CHECK_EVERY) -> None:
        self.num_classes = int(num_classes)
        self.every = max(int(every), 1)
        #: Training steps observed so far.
        self.steps = 0
        #: The step whose values triggered the warning (None: not warned).
        self.warned_at: int | None = None
        self._first: torch.Tensor | None = None
        # A check whose values are still being copied from the device: (host values, event, step).
        self._in_flight: tuple[torch.Tensor, Any, int] | None = None

    def observe(
        self,
        features: torch.Tensor,
        target: torch.Tensor,
        logit_term: torch.Tensor,
        advice: Callable[[int], str],
    ) -> None:
        """Count one training step; on a check step read the batch (module docstring).

        Args:
            features: [B, d] the step's features. target: [B] class ids.
            logit_term: 0-dim logit term of the step.
            advice: the loss's advice for the warning, given the feature dimension d.
        """
        if self.warned_at is not None or torch.compiler.is_compiling():
            return
        self.steps += 1
        if self._in_flight is not None:
            values, event, step = self._in_flight
            if event.query():
                self._in_flight = None
                self._judge(values.tolist(), step, features.shape[1], advice)
                if self.warned_at is not None:
                    return
        if self.steps != 1 and self.steps % self.every != 0:
            return
        if self._first is not None and features.device.type == "cpu":
            # On CPU the logit term is read first (no device to wait for): below LOGIT_FRACTION log K
            # (or not finite) the rule is False whatever the features are, so the batch's class sums
            # (at K = 1,000, d = 2048 about a quarter of a training step) are not computed.
            logit = float(logit_term.detach())
            if not (math.isfinite(logit) and logit >= LOGIT_FRACTION * math.log(self.num_classes)):
                return
        with torch.no_grad():
            scale = batch_feature_scale(features, target, self.num_classes)
            if self._first is None:
                self._first = scale
                return
            values = torch.cat([self._first, scale, logit_term.detach().reshape(1).to(scale.dtype)])
        if values.device.type == "cuda":
            if self._in_flight is None:  # at most one copy in flight
                host = torch.empty(values.shape, dtype=values.dtype, pin_memory=True)
                host.copy_(values, non_blocking=True)
                event = torch.cuda.Event()
                event.record()
                self._in_flight = (host, event, self.steps)
            return
        self._judge(values.tolist(), self.steps, features.shape[1], advice)

    def _judge(self, values: list[float], step: int, feature_dim: int, advice: Callable[[int], str]) -> None:
        first_norm, first_spread, norm, spread, logit = values
        if not is_collapsed((first_norm, first_spread), (norm, spread), logit, self.num_classes):
            return
        self.warned_at = step
        _note_warning(step)
        message = COLLAPSE_MESSAGE.format(
            step=step, first_norm=first_norm, norm=norm, first_spread=first_spread, spread=spread,
            logit=logit, log_k=math.log(self.num_classes), advice=advice(feature_dim),
        )
        warnings.warn(message, FeatureCollapseWarning, stacklevel=3)
