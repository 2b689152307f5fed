"""Moving per-class feature statistics: class means mu_k, spreads s_k and second moments a_k."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Literal, NamedTuple

import torch
from torch import nn

from mr2 import distributed
from mr2.checks import (
    FEATURE_DIM_MISMATCH,
    CheckValues,
    MR2InputError,
    _sum_of,
    check_features,
    check_num_classes,
    check_statistics_finite,
    check_target,
    wants_values,
)
from mr2.errors import check_choice, either
from mr2.functional.class_sums import class_sums
from mr2.statistics import _fused_cpu

__all__ = ["ClassFeatureStatistics", "Estimator", "PendingUpdate"]

Estimator = Literal["pooled", "batch"]

_BAD_MOMENTUM = "momentum (the moving-average decay) must be in [0, 1); got {value!r}."
_BAD_NORM_P = "norm_p must be a number >= 1; got {value!r}."
_ESTIMATOR_NOTES = {"pooled": "default", "batch": "released code"}
_BAD_ESTIMATOR = f"estimator must be {either(Estimator, _ESTIMATOR_NOTES)}; got {{value!r}}."
_CENTER_NEEDS_POOLED = "center=True needs estimator='pooled' (the class means it centres on)."
DEFER_NEEDS_POOLED_L2 = (
    "accumulating statistics over micro-batches needs estimator='pooled' and norm_p=2 (their updates "
    "are sums, so k micro-batches add up to one batch); got estimator={estimator!r}, norm_p={norm_p}. "
    "Leave deferral off (every micro-batch then updates the statistics) or use the default statistics."
)


#: The dtypes of the compiled steady step (:meth:`ClassFeatureStatistics._fused_steady_step`).
_FUSED_DTYPES = (torch.float32, torch.float64)
_NOTHING = contextlib.nullcontext()  # reusable: one object instead of one per call


def _float32_region(device_type: str) -> contextlib.AbstractContextManager[Any]:
    """Autocast off for the statistics' arithmetic; nothing to enter when autocast is not on (the
    context manager costs more than some of the small updates it wraps)."""
    if torch.is_autocast_enabled(device_type):
        return torch.autocast(device_type=device_type, enabled=False)
    return _NOTHING


def _as_dtype(tensor: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``tensor.to(dtype)`` without a dispatch when it already has that dtype."""
    return tensor if tensor.dtype == dtype else tensor.to(dtype)


class PendingUpdate(NamedTuple):
    """One batch's update of :class:`ClassFeatureStatistics`, computed but not yet applied.

    Attributes:
        x: [B, d] float32 features. target: [B] class ids.
        batch_count: [K] (global) batch counts. feature_sum: [K, d] batch feature sums (None on the
            single-process pooled path, which folds ``x`` in row by row).
        sq_norm_sum: [K] batch sums of ``||x||^2``. weight: [K] weight of the batch per class.
        new_count, new_sq_norm_sum: [K] the moving ``n_k`` and ``Q_k`` after the update.
        guard: 0-dim, finite exactly when the updated statistics are (see ``prepare``).
        deferred: a micro-batch to add to the pending sums (deferral on): ``feature_sum`` holds its
            [K, d] local sums, ``weight``/``new_*`` are unused, ``guard`` bounds the pending sums.
        seen_count: [K] ``batch_count`` as integers when they were counted as such (the CPU path),
            else None.
    """

    x: torch.Tensor
    target: torch.Tensor
    batch_count: torch.Tensor
    feature_sum: torch.Tensor | None
    sq_norm_sum: torch.Tensor
    weight: torch.Tensor
    new_count: torch.Tensor
    new_sq_norm_sum: torch.Tensor
    guard: torch.Tensor
    deferred: bool = False
    seen_count: torch.Tensor | None = None


class ClassFeatureStatistics(nn.Module):
    r"""Per-class moving feature statistics held as registered buffers.

    For each class k the module tracks the mean feature ``mu_k``, the mean squared deviation
    ``s_k = E ||phi(x) - mu_k||^2`` and the second moment ``a_k = ||mu_k||^2 + s_k`` of MR2.

    Default estimator (``"pooled"``): exponential moving averages of per-class SUFFICIENT statistics
    of each batch (count ``n_k``, feature sum ``S_k``, sum of squared norms ``Q_k``)::

        n_k <- m n_k + (1 - m) n_k^batch      S_k <- m S_k + (1 - m) S_k^batch  (same for Q_k)
        mu_k = S_k / n_k      a_k = Q_k / n_k      s_k = a_k - ||mu_k||^2

    Ratios of moving sums weight every SAMPLE of a batch equally (the weights decay across batches),
    so the estimates do not depend on how a class's samples are split into batches; averaging
    per-batch means and variances (the released code) biases ``s_k`` low by ``(n - 1)/n`` for n
    samples of the class per batch. The pooled ``s_k`` is not exactly unbiased either: for i.i.d.
    samples with normalised moving-average weights ``w_i`` (summing to 1),
    ``E[s_k] = s_k^true (1 - sum_i w_i^2)``, i.e. low by the factor ``1 - 1/n_eff`` with ``n_eff``
    the effective sample size. At steady state with ``n`` samples of the class in every batch,
    ``sum_i w_i^2 = (1 - m) / ((1 + m) n)``: 0.5% low for ``m = 0.9, n = 10``, 5e-5 for
    ``m = 0.999`` (n = 10); after the first (initialising) batch alone it is the ``(n - 1)/n`` of one
    batch. A class absent from a batch keeps its values; the first batch that holds a class
    initialises it. ``m`` is the decay (``momentum=0.9`` keeps 90% of the old value;
    note that this is the opposite of BatchNorm's convention).

    Variants (not the paper's default; each labelled in the docs):

    - ``norm_p != 2``: ``||mu_k||_p^2`` and ``s_k = E ||phi(x) - mu_k||_p^2``, the deviation taken from
      the running mean (the released code uses ``p = 5`` so that L2-normalised features such as
      CLIP's still get class-sensitive margins).
    - ``center=True``: ``||mu_k - g||^2`` with ``g`` the average of the class means; centring all
      features by a constant leaves a linear classifier with bias unchanged.
    - ``estimator="batch"``: the released code's arithmetic, moving averages of the per-batch scalars
      ``||batch mean||_p^2`` and ``mean ||x - batch mean||_p^2``.

    Under torch.distributed the per-class batch sums are all-reduced over ``process_group`` BEFORE
    the moving-average step, so every rank holds identical statistics and ``R`` ranks with batch ``B``
    give the statistics of one process with batch ``R * B``. Updates run under ``no_grad`` in float32
    (also under autocast) and only in training mode. Every buffer is updated in place (DDP's buffer
    broadcast keeps a reference to each buffer, pytorch issue 63916).

    Gradient accumulation: by default every call of :meth:`update` (every micro-batch) is one
    moving-average step, so ``k`` micro-batches of size ``B / k`` per optimiser step give the
    statistics of a run WITHOUT accumulation at batch ``B / k`` (decay ``m`` per micro-batch, ``m^k``
    per optimiser step), not those of batch ``B``. With deferral on (:meth:`accumulate`, or
    :attr:`deferred` plus :meth:`apply_accumulated` at each optimiser step) the micro-batches'
    per-class sums are added up and applied as ONE moving-average step, equal to the update of the
    batch of size ``B`` to float32 rounding;
    meanwhile the statistics keep the values of the last applied step (the loss of every
    micro-batch uses them). Deferral needs the default ``estimator="pooled"`` and ``norm_p=2``. The
    pending sums are plain tensors, not buffers: not in the ``state_dict`` (apply them before saving
    or moving the module),
    and never overwritten by DDP's buffer broadcast (each rank adds up its own micro-batches; the
    sums are all-reduced once, in :meth:`apply_accumulated`).

    Args:
        num_classes: K >= 2.
        feature_dim: d; None to take it from the first update (or from a loaded state dict).
        momentum: moving-average decay m in [0, 1).
        norm_p: the Lp norm of the statistics (2 = the paper).
        center: compute ``||mu_k||`` on globally centred features.
        estimator: ``"pooled"`` (default) or ``"batch"`` (released code).
        process_group: torch.distributed group to synchronise over (None: the default group).
        check_values: validate target range and finiteness ("auto": for CPU tensors only).

    Example:
        >>> stats = ClassFeatureStatistics(num_classes=3, feature_dim=2, momentum=0.5)
        >>> stats.update(torch.tensor([[1.0, 1.0], [3.0, 1.0], [0.0, 2.0]]), torch.tensor([0, 0, 1]))
        >>> stats.means()[0].tolist(), stats.spread().tolist(), stats.seen().tolist()
        ([2.0, 1.0], [1.0, 0.0, 0.0], [True, True, False])
    """

    count: torch.Tensor
    feature_sum: torch.Tensor
    sq_norm_sum: torch.Tensor
    deviation_sum: torch.Tensor
    batch_mean_sq_norm: torch.Tensor
    batch_spread: torch.Tensor
    samples_seen: torch.Tensor
    feature_sum_norm_sq: torch.Tensor

    def __init__(
        self,
        num_classes: int,
        feature_dim: int | None = None,
        *,
        momentum: float = 0.9,
        norm_p: float = 2.0,
        center: bool = False,
        estimator: Estimator = "pooled",
        process_group: Any = None,
        check_values: CheckValues = "auto",
    ) -> None:
        super().__init__()
        self.num_classes = check_num_classes(num_classes)
        if not (isinstance(momentum, (int, float)) and 0.0 <= momentum < 1.0):
            raise MR2InputError(_BAD_MOMENTUM.format(value=momentum))
        if not (isinstance(norm_p, (int, float)) and norm_p >= 1.0):
            raise MR2InputError(_BAD_NORM_P.format(value=norm_p))
        check_choice(estimator, Estimator, _BAD_ESTIMATOR, MR2InputError)
        if center and estimator != "pooled":
            raise MR2InputError(_CENTER_NEEDS_POOLED)
        self.momentum = float(momentum)
        self.norm_p = float(norm_p)
        self.center = bool(center)
        self.estimator: Estimator = estimator
        self.process_group = process_group
        self.check_values: CheckValues = check_values
        k = self.num_classes
        self.register_buffer("count", torch.zeros(k))
        self.register_buffer("feature_sum", torch.zeros(k, feature_dim or 0))
        self.register_buffer("sq_norm_sum", torch.zeros(k))
        self.register_buffer("deviation_sum", torch.zeros(k))
        self.register_buffer("batch_mean_sq_norm", torch.zeros(k))
        self.register_buffer("batch_spread", torch.zeros(k))
        self.register_buffer("samples_seen", torch.zeros(k, dtype=torch.long))
        # Derived cache of ||S_k||_p^2 (not saved: rebuilt from feature_sum after loading), updated
        # for the rows a batch touches so that moments() needs no [K, d] pass per step.
        self.register_buffer("feature_sum_norm_sq", torch.zeros(k), persistent=False)
        self._norm_cache_valid = True
        #: Add micro-batches' sums up instead of updating (see :meth:`apply_accumulated`); default off.
        self.deferred = False
        # Pending (count, feature sum, sum of squared norms) of the deferred micro-batches: plain
        # tensors (see the class docstring), None when nothing is pending.
        self._pending_sums: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
        # (samples_seen, its version counter) when every class was known to have been seen at that
        # version (see :meth:`all_seen_known`), else None.
        self._all_seen_at: tuple[torch.Tensor, int] | None = None
        #: Called once (then cleared) before the next update or load changes the state: a reader of
        #: the state as it is now (e.g. :class:`mr2.MR2Loss`'s deferred parts) sets it. None: nothing.
        self.before_write: Callable[[], None] | None = None
        #: Whether the steady step (:meth:`_fused_steady_step`) may run as one compiled function where
        #: numba is installed (``pip install "mr2[fast]"``; docs/mr2.md, "The fused CPU step"): the
        #: eager step's values up to floating-point rounding. False: always the eager step, whose
        #: values are the general path's bit for bit (``MR2_FUSED_CPU=0`` turns it off everywhere).
        self.fused_step = True
        # 0-dim tensors of the constants of a step, by (value, dtype, device) (see _scalar).
        self._constants: dict[tuple[float, torch.dtype, torch.device], torch.Tensor] = {}

    def __setstate__(self, state: dict[str, Any]) -> None:
        # A copy or an unpickled module: its samples_seen is a new tensor (its version counter starts
        # again), so whether every class was seen is read again now, as after a load (CPU: one host
        # read); the copy's next step then takes the path the original's would.
        super().__setstate__(state)
        self.__dict__.setdefault("fused_step", True)  # pickled before the attribute existed
        self.__dict__["_all_seen_at"] = None
        if self._buffers.get("samples_seen") is not None:
            self.note_all_seen()

    # ------------------------------------------------------------------ state
    @property
    def feature_dim(self) -> int | None:
        """d, or None before the first update."""
        return self.feature_sum.shape[1] or None

    def _materialise(self, feature_dim: int) -> None:
        if self._buffers["feature_sum"].shape[1] == feature_dim:  # type: ignore[union-attr]
            return  # the usual call: nothing to do (read without nn.Module's __getattr__)
        if self.feature_sum.shape[1] == 0:
            self.feature_sum = self.feature_sum.new_zeros(self.num_classes, feature_dim)
            self._norm_cache_valid = False
        elif self.feature_sum.shape[1] != feature_dim:
            raise MR2InputError(
                FEATURE_DIM_MISMATCH.format(got=feature_dim, expected=self.feature_sum.shape[1])
            )

    def _load_from_state_dict(
        self, state_dict: dict[str, Any], prefix: str, *args: Any, **kwargs: Any
    ) -> None:
        self._before_write()
        incoming = state_dict.get(prefix + "feature_sum")
        if incoming is not None and self.feature_sum.shape[1] == 0:
            self._materialise(incoming.shape[1])
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
        self._norm_cache_valid = False
        # Whether every class has been seen, read now (CPU: one host read per load): a resumed run's
        # first step then takes the path the uninterrupted run takes (the steady step, possibly the
        # compiled one, whose values differ from the general path's in the last bits).
        self.note_all_seen()

    def extra_repr(self) -> str:
        return (
            f"num_classes={self.num_classes}, feature_dim={self.feature_dim}, "
            f"momentum={self.momentum}, norm_p={self.norm_p}, center={self.center}, "
            f"estimator={self.estimator!r}"
        )

    # ----------------------------------------------------------------- update
    def _ema_weights(self, count: torch.Tensor) -> torch.Tensor:
        """[K] weight of the new batch, from its [K] counts (whole numbers >= 0): 1 - m (present), 1
        (first observation), 0 (absent). Four operations: ``present`` is ``min(count, 1)``, 0 or 1;
        two once every class is known to have been seen (:meth:`all_seen_known`: no first
        observation is possible, so the weight is ``present * (1 - m)`` everywhere)."""
        present = _as_dtype(count, self._buffer("count").dtype).clamp_max(1.0)
        decay = present * self._scalar(1.0 - self.momentum, present)
        if self.all_seen_known():
            return decay
        return torch.where(self.samples_seen > 0, decay, present)

    def _scalar(self, value: float, like: torch.Tensor) -> torch.Tensor | float:
        """``value`` as a 0-dim tensor of ``like``'s dtype and device, made once and kept: a Python
        number in an arithmetic operation is first wrapped into a tensor (about 1.5 microseconds a
        step on CPU). The product is the same: the number is rounded to the tensor's dtype either
        way. The number itself under ``torch.compile``."""
        if torch.compiler.is_compiling():
            return value
        key = (value, like.dtype, like.device)
        constant = self._constants.get(key)
        if constant is None:
            constant = self._constants[key] = torch.tensor(value, dtype=like.dtype, device=like.device)
        return constant

    def _buffer(self, name: str) -> torch.Tensor:
        """The buffer ``name`` without nn.Module's ``__getattr__`` (about 0.7 microseconds a read; a
        step reads a few dozen)."""
        return self._buffers[name]  # type: ignore[return-value]

    def all_seen_known(self) -> bool:
        """Whether every class is known to have been seen, without reading a tensor.

        True only after :meth:`note_all_seen` found (or :meth:`commit` kept) every class seen and
        ``samples_seen`` has not been changed since by anything else (its version counter and identity
        are those recorded: a reset with ``samples_seen.zero_()`` or a move to another device makes it
        False until the next check; loading a state dict checks at once, one host read on CPU).
        Always False under ``torch.compile``.
        The hot path uses it to skip the operations a first observation needs (the weights' ``where``,
        the seen mask, the logit temperatures' readiness test): the values are those of the full path.
        """
        at = self._all_seen_at
        if at is None or torch.compiler.is_compiling():
            return False
        seen_count = self._buffers["samples_seen"]
        return at[0] is seen_count and at[1] == seen_count._version

    def note_all_seen(self) -> bool:
        """:meth:`all_seen_known`, reading ``samples_seen`` once on the host when not known (CPU
        only; on an accelerator, under ``torch.compile`` or for inference tensors nothing is read and
        the answer is False until known)."""
        if self.all_seen_known():
            return True
        seen_count = self.samples_seen
        if (
            seen_count.device.type != "cpu"
            or torch.compiler.is_compiling()
            or seen_count.is_inference()
            or not bool(seen_count.all())
        ):
            return False
        self.__dict__["_all_seen_at"] = (seen_count, seen_count._version)
        return True

    @staticmethod
    def _ema_(state: torch.Tensor, new: torch.Tensor, weight: torch.Tensor) -> None:
        """In place ``state += weight * (new - state)`` row-wise: one pass over the buffer.

        A weight of 0 leaves the row bit-for-bit unchanged, a weight of 1 replaces it by ``new``.
        """
        state.lerp_(new, weight.view((-1,) + (1,) * (state.dim() - 1)))

    def _norm_sq(self, vectors: torch.Tensor) -> torch.Tensor:
        """Row-wise squared Lp norm ``||v||_p^2``."""
        return torch.linalg.vector_norm(vectors, ord=self.norm_p, dim=-1).square()

    def _deviation_sums(
        self, features: torch.Tensor, target: torch.Tensor, sums: torch.Tensor, counts: torch.Tensor
    ) -> torch.Tensor:
        """[K] sums over the (global) batch of ``||x - c_y||_p^2`` with class centres
        ``c_k = sums_k / counts_k`` (gathered for the B samples only, not divided for all K)."""
        centers = sums.index_select(0, target) / counts.index_select(0, target).unsqueeze(1)
        deviation = self._norm_sq(features - centers)
        sums = torch.zeros(self.num_classes, dtype=features.dtype, device=features.device)
        sums.index_add_(0, target, deviation)
        return distributed.all_reduce_sum_(sums, self.process_group)

    def _refresh_norm_cache(self) -> None:
        """Recompute the cached ``||S_k||_p^2`` of every class (one [K, d] pass)."""
        cache = self._buffer("feature_sum_norm_sq")
        torch.linalg.vector_norm(self._buffer("feature_sum"), ord=self.norm_p, dim=-1, out=cache).square_()
        self.__dict__["_norm_cache_valid"] = True  # a plain flag: without nn.Module's __setattr__

    @torch.no_grad()
    def prepare(self, features: torch.Tensor, target: torch.Tensor) -> PendingUpdate | None:
        """Compute one batch's update without applying it (None in eval mode).

        The returned :class:`PendingUpdate` holds a 0-dim ``guard`` that is finite exactly when the
        statistics after the update (and everything derived from them) stay finite; check it (e.g.
        with :func:`~mr2.checks.check_statistics_finite`, in the same host sync as the inputs), then
        :meth:`commit`. The caller validates ``features`` and ``target`` first.
        """
        return self._prepare(features, target)

    def counts_check_range(self, features: torch.Tensor) -> bool:
        """Whether :meth:`prepare` counts the batch's classes with ``bincount`` on the host (training,
        single process, pooled statistics, no deferral, CPU, not under ``torch.compile``).

        Its count then checks the target's range as it counts (a class id ``>= K`` lengthens the
        result, a negative one is refused by ``bincount``), and a bad id raises the error of
        :func:`~mr2.checks.check_target`, so a caller on this path need not read the range itself.
        """
        return (
            self.training
            and not self.deferred
            and self.estimator == "pooled"
            and features.device.type == "cpu"
            and not torch.compiler.is_compiling()
            and not distributed.is_distributed(self.process_group)
        )

    def _host_counts(self, target: torch.Tensor) -> torch.Tensor:
        """[K] int64 counts of the class ids by ``bincount`` (CPU), refusing an id outside ``[0, K)``
        with :func:`~mr2.checks.check_target`'s error."""
        k = self.num_classes
        try:
            counts = torch.bincount(target, minlength=k)
        except RuntimeError as error:  # a negative class id (or an unsupported dtype)
            check_target(target, k, None, True)
            raise error
        if counts.shape[0] != k:  # a class id >= K
            check_target(target, k, None, True)
        return counts

    def _prepare(self, features: torch.Tensor, target: torch.Tensor) -> PendingUpdate | None:
        """:meth:`prepare` for a caller already under ``torch.no_grad()`` (one context per step)."""
        if not self.training:
            return None
        self._materialise(features.shape[1])
        if self.deferred:
            return self._prepare_deferred(features, target)
        device_type = features.device.type
        if torch.is_autocast_enabled(device_type):
            with torch.autocast(device_type=device_type, enabled=False):
                return self._prepare_update(features, target, device_type)
        return self._prepare_update(features, target, device_type)

    def _prepare_update(
        self, features: torch.Tensor, target: torch.Tensor, device_type: str
    ) -> PendingUpdate:
        """The arithmetic of :meth:`prepare` (autocast off)."""
        x = features.detach() if features.requires_grad else features
        x = _as_dtype(x, self._buffer("feature_sum").dtype)
        feature_sum: torch.Tensor | None = None
        seen_count: torch.Tensor | None = None
        if distributed.is_distributed(self.process_group) or self.estimator == "batch":
            count, feature_sum, sq_norm_sum = class_sums(x, target, self.num_classes)
            if distributed.is_distributed(self.process_group):
                # One all-reduce for all first-phase sums: [K, 1 + d + 1].
                packed = torch.cat(
                    [count.unsqueeze(1), feature_sum, sq_norm_sum.unsqueeze(1)], dim=1
                )
                distributed.all_reduce_sum_(packed, self.process_group)
                count, feature_sum, sq_norm_sum = packed[:, 0], packed[:, 1:-1], packed[:, -1]
        else:
            # Single process: only [K] sums here; commit() folds the [K, d] feature sums in.
            sq_norms = torch.linalg.vector_norm(x, dim=1).square()  # inf when it overflows
            if device_type == "cpu" and not torch.compiler.is_compiling():
                # Counts as integers (also samples_seen's increment) and the squared norms' sums,
                # each in one operation (on an accelerator bincount sizes its result on the host);
                # the count checks the target's range (counts_check_range).
                seen_count = self._host_counts(target)
                count = _as_dtype(seen_count, x.dtype)
                sq_norm_sum = torch.bincount(target, weights=sq_norms, minlength=self.num_classes)
            else:
                count = x.new_zeros(self.num_classes).index_add_(0, target, x.new_ones(target.shape))
                sq_norm_sum = x.new_zeros(self.num_classes).index_add_(0, target, sq_norms)
        weight = self._ema_weights(count)
        new_count = self._buffer("count").lerp(count, weight)
        new_sq_norm_sum = self._buffer("sq_norm_sum").lerp(sq_norm_sum, weight)
        # ||S_k||^2 <= n_k Q_k (Cauchy-Schwarz) bounds every intermediate of the derived values
        # (the factor 4 covers the deviations ||x - mu||^2 <= 2||x||^2 + 2||mu||^2). Only its
        # finiteness is read: a dot product is one operation where a product and a sum are two.
        guard = torch.dot(new_count, new_sq_norm_sum) * self._scalar(4.0, new_count)
        return PendingUpdate(x, target, count, feature_sum, sq_norm_sum, weight, new_count,
                             new_sq_norm_sum, guard, False, seen_count)

    @torch.no_grad()
    def commit(self, pending: PendingUpdate | None, *, only_if_finite: bool = False) -> None:
        """Apply an update computed by :meth:`prepare`.

        Args:
            pending: the update (None: nothing to do).
            only_if_finite: keep the old values when the update's guard is not finite, without a
                host sync (for callers that did not check the guard on the host).
        """
        self._commit(pending, only_if_finite=only_if_finite)

    def _commit(self, pending: PendingUpdate | None, *, only_if_finite: bool = False) -> None:
        """:meth:`commit` for a caller already under ``torch.no_grad()``."""
        if pending is None:
            return
        if pending.deferred:  # a micro-batch to add up (see _prepare_deferred)
            self._add_pending(pending, only_if_finite)
            return
        self._before_write()
        x, target, weight = pending.x, pending.target, pending.weight
        ok = torch.isfinite(pending.guard) if only_if_finite else None

        def ema(state: torch.Tensor, new: torch.Tensor) -> None:
            if ok is None:
                self._ema_(state, new, weight)
            else:
                view = weight.view((-1,) + (1,) * (state.dim() - 1))
                state.copy_(torch.where(ok, state.lerp(new, view), state))

        with _float32_region(x.device.type):
            if self.estimator == "batch":
                assert pending.feature_sum is not None
                safe_count = pending.batch_count.clamp_min(1.0)
                spread = self._deviation_sums(x, target, pending.feature_sum, safe_count) / safe_count
                mean_sq_norm = self._norm_sq(pending.feature_sum) / safe_count.square()
                ema(self.batch_mean_sq_norm, mean_sq_norm)
                ema(self.batch_spread, spread)
            if pending.feature_sum is not None:
                ema(self._buffer("feature_sum"), pending.feature_sum)
                self.__dict__["_norm_cache_valid"] = False
            elif 2 * self.num_classes <= target.shape[0] and ok is None:
                # Few classes (K <= B / 2): the passes over the [K, d] buffer (zeros, lerp_, and the
                # norms moments() then recomputes) cost less than gathering the batch's rows
                # (1-thread timings, B = 512, d = 768 and 2048: this path is faster up to K = 100,
                # even at K = 300, slower at K = 1,000). The batch's [K, d] sums (one index_add_ of
                # the B rows), then S_k += w_k (sum_{i: y_i = k} x_i - S_k) as ONE in-place lerp_:
                # four operations, no host read, the same form on every device. An absent class
                # (w = 0) keeps its row bit for bit; a first observation (w = 1) takes the sums.
                sums = x.new_zeros(self._buffer("feature_sum").shape).index_add_(0, target, x)
                self._ema_(self._buffer("feature_sum"), sums, weight)
                self.__dict__["_norm_cache_valid"] = False
            elif (
                ok is None
                and x.device.type == "cpu"
                and not torch.compiler.is_compiling()
                and not self._first_observation(pending)
            ):
                # Many classes, on CPU, no class seen for the first time (a host read; the usual
                # step): every present class has w_k = 1 - m, so S_k <- (1 - w_k) S_k + w_k sum_k is
                # ONE in-place scaling of the [K, d] buffer (absent classes: by 1, bit for bit) and
                # ONE index_add_ of the batch's rows with alpha = 1 - m: fewer passes than gathering
                # and scattering the rows (B = 512, d = 2048, 1 thread, with the norms moments()
                # then recomputes: 1.36 against 1.74 ms at K = 1,000, 0.66 against 1.20 ms at K = 300).
                self._buffer("feature_sum").mul_((1.0 - weight).unsqueeze(1))
                self._buffer("feature_sum").index_add_(0, target, x, alpha=1.0 - self.momentum)
                self.__dict__["_norm_cache_valid"] = False
            else:
                # Many classes: S_k <- S_k + w_k (sum_{i: y_i = k} x_i - S_k) as ONE index_add_ of
                # the B rows w_k (x_i - S_k / n_k): only the rows of the classes in the batch are
                # touched (no pass over [K, d]), so an absent class keeps its values bit for bit.
                per_row = (weight / pending.batch_count.clamp_min(1.0)).index_select(0, target)
                rows = self._buffer("feature_sum").index_select(0, target).mul_(-per_row.unsqueeze(1))
                rows.addcmul_(x, weight.index_select(0, target).unsqueeze(1))
                if ok is not None:
                    rows = torch.where(ok, rows, 0.0)
                self._buffer("feature_sum").index_add_(0, target, rows)
                if self._norm_cache_valid:  # the updated rows, gathered into the same buffer
                    torch.index_select(self._buffer("feature_sum"), 0, target, out=rows)
                    self._buffer("feature_sum_norm_sq").index_copy_(0, target, self._norm_sq(rows))
            if ok is None:
                self._buffer("count").copy_(pending.new_count)
                self._buffer("sq_norm_sum").copy_(pending.new_sq_norm_sum)
            else:
                self.count.copy_(torch.where(ok, pending.new_count, self.count))
                self.sq_norm_sum.copy_(torch.where(ok, pending.new_sq_norm_sum, self.sq_norm_sum))
            if self.estimator == "pooled" and self.norm_p != 2.0:
                deviation = self._deviation_sums(
                    x, target, self._buffer("feature_sum"), self._buffer("count").clamp_min(1e-12)
                )
                ema(self.deviation_sum, deviation)
            # Counts are sums of ones (exact integers in float32 below 2^24): no rounding needed.
            seen = pending.batch_count.long() if pending.seen_count is None else pending.seen_count
            all_seen = self.all_seen_known()
            seen_count = self._buffer("samples_seen")
            seen_count.add_(seen if ok is None else seen * ok)
            if all_seen:  # adding counts >= 0 keeps every class seen (set without nn.Module's
                # __setattr__, which costs a microsecond per step: a plain attribute either way)
                self.__dict__["_all_seen_at"] = (seen_count, seen_count._version)
            else:  # on CPU one read per step until every class has been seen, then none
                self.note_all_seen()

    def steady_step_applies(self, features: torch.Tensor) -> bool:
        """Whether :meth:`_steady_step` may update these statistics from ``features`` [B, d].

        The usual training step on CPU once every class is known to have been seen
        (:meth:`all_seen_known`: CPU, not under ``torch.compile``): training, single process, the
        default statistics (pooled, L2, not centred), no deferral, features of the state's dtype and
        width, autocast off. Python reads only.
        """
        state = self._buffers["feature_sum"]
        assert state is not None
        return (
            self.training
            and self.all_seen_known()
            and not self.deferred
            and self.estimator == "pooled"
            and self.norm_p == 2.0
            and not self.center
            and features.dtype == state.dtype
            and features.device.type == "cpu"
            and features.dim() == 2
            and features.shape[1] == state.shape[1]
            and not torch.is_autocast_enabled("cpu")
            and not distributed.is_distributed(self.process_group)
        )

    def _steady_step(
        self, features: torch.Tensor, target: torch.Tensor, logits: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One batch's update where :meth:`steady_step_applies` (``logits``: floating point); returns
        the updated ``(n_k, Q_k)`` as tensors that nothing writes to later (the buffers hold copies).

        The operations and values of :meth:`prepare`, the finiteness check of ``logits`` and of the
        update in one host read, and :meth:`commit`, as straight-line code (issue 47: at K = 10 the
        general path spent about as much time in Python as in its small operations), except that the
        weights take one operation (``min(n_k^batch, 1 - m)``: 0 or ``1 - m``, the values of
        ``min(n_k^batch, 1) (1 - m)``) and the cached ``||S_k||^2`` are left to be recomputed when
        read (:meth:`moments`). For a caller already under ``torch.no_grad()`` that has checked the
        shapes of ``features``, ``logits`` and ``target``; a class id outside ``[0, K)``, a NaN/Inf
        input or an update that would overflow raises before anything is written.
        """
        buffers = self._buffers
        state, count_buf, sq_buf = buffers["feature_sum"], buffers["count"], buffers["sq_norm_sum"]
        assert state is not None and count_buf is not None and sq_buf is not None
        x = features.detach() if features.requires_grad else features
        sq_norms = torch.linalg.vector_norm(x, dim=1).square_()
        seen_count = self._host_counts(target)  # checks the range as it counts
        count = seen_count.to(x.dtype)
        sq_norm_sum = torch.bincount(target, weights=sq_norms, minlength=self.num_classes)
        # _ema_weights with every class seen: 1 - m where present (a count >= 1), 0 where absent.
        weight = count.clamp_max(1.0 - self.momentum)
        new_count = count_buf.lerp(count, weight)
        new_sq_norm_sum = sq_buf.lerp(sq_norm_sum, weight)
        # prepare()'s guard, 4 n.Q, added to the logits' sum in one operation: finite only when both
        # are (a finite sum may still overflow: the exact check then decides).
        dot = torch.dot(new_count, new_sq_norm_sum)
        if not math.isfinite(float(_sum_of(logits).add_(dot, alpha=4.0))):
            guard = dot * self._scalar(4.0, dot)
            check_statistics_finite({"logits": logits}, guard, also_count={"features": x})
        self._before_write()
        if 2 * self.num_classes <= x.shape[0]:  # as _commit's few-classes path
            sums = x.new_zeros(state.shape).index_add_(0, target, x)
            state.lerp_(sums, weight.view(-1, 1))
        else:  # as _commit's many-classes path without a first observation
            state.mul_((1.0 - weight).unsqueeze(1))
            state.index_add_(0, target, x, alpha=1.0 - self.momentum)
        self.__dict__["_norm_cache_valid"] = False
        count_buf.copy_(new_count)
        sq_buf.copy_(new_sq_norm_sum)
        seen_buf = buffers["samples_seen"]
        assert seen_buf is not None
        seen_buf.add_(seen_count)
        # Adding counts >= 0 keeps every class seen.
        self.__dict__["_all_seen_at"] = (seen_buf, seen_buf._version)
        return new_count, new_sq_norm_sum

    def _fused_steady_step(
        self,
        features: torch.Tensor,
        target: torch.Tensor,
        logits: torch.Tensor,
        scale: float,
        min_temperature: float,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
        """:meth:`_steady_step` and the logit temperatures
        ``gamma_k = max(scale a_k^(1/3) / sum_j a_j^(1/3), min_temperature)`` (NaN or Inf: 1) in one
        compiled call (:mod:`mr2.statistics._fused_cpu`; the pass over the batch in it, or as tensor
        operations for a large batch with more than two threads:
        :func:`~mr2.statistics._fused_cpu.use_one_pass`). Returns the fresh
        ``(n_k clamped at 1e-12, Q_k, gamma)``, or None, having written nothing, where it does not
        apply (:attr:`fused_step` False, numba not installed, a dtype other than float32 / float64, an
        empty batch) or the batch needs the eager step's checks (a class id outside ``[0, K)``, a
        NaN/Inf input or an overflowing update: the eager step then raises, or goes on where the
        values were finite). Same preconditions as :meth:`_steady_step`; ``logits`` of the features'
        dtype."""
        if not (self.fused_step and _fused_cpu.available()):
            return None
        buffers = self._buffers
        state, count_buf, sq_buf, seen_buf = (
            buffers["feature_sum"], buffers["count"], buffers["sq_norm_sum"], buffers["samples_seen"]
        )
        assert state is not None and count_buf is not None and sq_buf is not None and seen_buf is not None
        dtype = state.dtype
        if (
            dtype not in _FUSED_DTYPES
            or count_buf.dtype != dtype
            or sq_buf.dtype != dtype
            or features.shape[0] == 0
            or features.shape[1] == 0
            or type(features) is not torch.Tensor
            or type(logits) is not torch.Tensor
            or type(target) is not torch.Tensor
        ):
            return None
        x = features.detach() if features.requires_grad else features
        out = state.new_empty(3, self.num_classes)
        keep = 1.0 - self.momentum
        buffers_and_constants = (state.numpy(), count_buf.numpy(), sq_buf.numpy(), seen_buf.numpy(), keep,
                                 scale, min_temperature, out.numpy())
        one_pass = _fused_cpu.use_one_pass(x.shape[0], x.shape[1])
        few = 2 * self.num_classes <= x.shape[0]
        if one_pass:
            kernel = _fused_cpu.one_pass_step
            inputs: tuple[Any, ...] = (x.numpy(), target.numpy(), logits.detach().numpy())
        else:
            # The passes over the batch as the eager step's threaded tensor operations: the norms, the
            # counts (they refuse a class id outside [0, K) with the library's error, before anything
            # is written) and, for few classes, the [K, d] class sums; the rest in one call.
            seen_count = self._host_counts(target)
            sums = x.new_zeros(state.shape).index_add_(0, target, x) if few else x.new_empty(0, x.shape[1])
            kernel = _fused_cpu.split_step
            inputs = (torch.linalg.vector_norm(x, dim=1).numpy(), target.numpy(), seen_count.numpy(),
                      logits.detach().numpy(), sums.numpy())
        hook = self.__dict__.get("before_write")
        self._before_write()
        if kernel(*inputs, *buffers_and_constants) != _fused_cpu.OK:
            # Nothing was written: the hook is kept for the write that comes later (the eager step
            # raises for this batch; the last step's deferred parts are restored and still need it).
            self.__dict__["before_write"] = hook
            return None
        if not one_pass and not few:  # the present classes' rows were scaled by m: the rows times 1 - m
            state.index_add_(0, target, x, alpha=keep)
        # The buffers were written through numpy: their version counters as an in-place operation's.
        torch.autograd.graph.increment_version((state, count_buf, sq_buf, seen_buf))
        self.__dict__["_norm_cache_valid"] = False
        self.__dict__["_all_seen_at"] = (seen_buf, seen_buf._version)
        count, sq_norm_sum, gamma = out.unbind(0)
        return count, sq_norm_sum, gamma

    def _before_write(self) -> None:
        """Call and clear :attr:`before_write` (before the state changes)."""
        hook = self.__dict__.get("before_write")
        if hook is not None:
            self.__dict__["before_write"] = None
            hook()

    def _first_observation(self, pending: PendingUpdate) -> bool:
        """Whether the batch holds a class never seen before (a host read, unless every class is
        known to have been seen)."""
        if self.all_seen_known():
            return False
        return bool((pending.batch_count > 0).logical_and_(self.samples_seen == 0).any())

    # ------------------------------------------------------- deferred updates
    def check_deferrable(self) -> None:
        """Raise :class:`~mr2.checks.MR2InputError` unless these statistics can defer updates."""
        if self.estimator != "pooled" or self.norm_p != 2.0:
            raise MR2InputError(
                DEFER_NEEDS_POOLED_L2.format(estimator=self.estimator, norm_p=self.norm_p)
            )

    def _prepare_deferred(self, features: torch.Tensor, target: torch.Tensor) -> PendingUpdate:
        """A micro-batch's local per-class sums (no all-reduce here: once, in apply_accumulated)."""
        self.check_deferrable()
        with torch.autocast(device_type=features.device.type, enabled=False):
            x = features.detach().to(self.feature_sum.dtype)
            count, feature_sum, sq_norm_sum = class_sums(x, target, self.num_classes)
            total_count, total_sq = count, sq_norm_sum
            if self._pending_sums is not None:
                total_count = total_count + self._pending_sums[0]
                total_sq = total_sq + self._pending_sums[2]
            # Same bound as prepare()'s, on the sums apply_accumulated() will fold in.
            guard = 4.0 * (total_count * total_sq).sum()
        return PendingUpdate(x, target, count, feature_sum, sq_norm_sum, count, count, sq_norm_sum,
                             guard, deferred=True)

    def _add_pending(self, pending: PendingUpdate, only_if_finite: bool) -> None:
        assert pending.feature_sum is not None
        sums = [pending.batch_count, pending.feature_sum, pending.sq_norm_sum]
        if only_if_finite:  # a non-finite micro-batch is dropped, without a host sync
            ok = torch.isfinite(pending.guard)
            sums = [torch.where(ok, part, 0.0) for part in sums]
        if self._pending_sums is None:
            self._pending_sums = (sums[0], sums[1], sums[2])
        else:
            for total, part in zip(self._pending_sums, sums, strict=True):
                total.add_(part)

    @property
    def pending_samples(self) -> int:
        """Samples added up since the last :meth:`apply_accumulated` on this rank (a host read)."""
        return 0 if self._pending_sums is None else int(self._pending_sums[0].sum().item())

    @torch.no_grad()
    def apply_accumulated(self) -> None:
        """Fold the micro-batches added up since the last call into the statistics as ONE step.

        Call it once per optimiser step (after the last micro-batch's backward, before or after
        ``optimizer.step()``: the statistics are not parameters). Under torch.distributed EVERY rank
        must call it (one all-reduce of the pending sums). Equal, to float32 rounding, to
        :meth:`update` with the concatenation of the micro-batches. Nothing pending: no-op, except
        that with deferral on every rank still joins the all-reduce when distributed (another rank
        may have sums pending); with deferral off nothing pending ever, no communication.
        """
        pending, self._pending_sums = self._pending_sums, None
        distributed_run = distributed.is_distributed(self.process_group)
        if pending is None:
            if not (self.deferred and distributed_run) or self.feature_dim is None:
                return
            zeros = self.count.new_zeros(self.num_classes)
            pending = (zeros, self.feature_sum.new_zeros(self.feature_sum.shape), zeros.clone())
        count, feature_sum, sq_norm_sum = pending
        if distributed_run:
            packed = torch.cat([count.unsqueeze(1), feature_sum, sq_norm_sum.unsqueeze(1)], dim=1)
            distributed.all_reduce_sum_(packed, self.process_group)
            count, feature_sum, sq_norm_sum = packed[:, 0], packed[:, 1:-1], packed[:, -1]
        weight = self._ema_weights(count)
        new_count = self.count.lerp(count, weight)
        new_sq_norm_sum = self.sq_norm_sum.lerp(sq_norm_sum, weight)
        guard = 4.0 * (new_count * new_sq_norm_sum).sum()
        checked = wants_values(count, self.check_values)
        if checked:
            check_statistics_finite({}, guard)
        step = PendingUpdate(
            feature_sum.new_zeros(0, feature_sum.shape[1]), count.new_zeros(0, dtype=torch.long),
            count, feature_sum, sq_norm_sum, weight, new_count, new_sq_norm_sum, guard,
        )
        self.commit(step, only_if_finite=not checked)

    @contextmanager
    def accumulate(self) -> Iterator[None]:
        """Add up the updates of the block's micro-batches and apply them once when it exits.

        Example (``k`` micro-batches per optimiser step)::

            with criterion.statistics.accumulate():
                for images, target in micro_batches:
                    logits, features = model(images)
                    (criterion(logits, features, target) / k).backward()
            optimizer.step()

        On an exception the pending sums are dropped. Deferral stays on if it was on before.

        >>> stats = ClassFeatureStatistics(num_classes=2, feature_dim=1, momentum=0.5)
        >>> with stats.accumulate():
        ...     stats.update(torch.tensor([[1.0], [3.0]]), torch.tensor([0, 1]))
        ...     stats.update(torch.tensor([[5.0]]), torch.tensor([0]))
        ...     stats.seen().tolist()  # nothing applied inside the block
        [False, False]
        >>> stats.means().squeeze(1).tolist(), stats.samples_seen.tolist()  # as one batch of 3
        ([3.0, 3.0], [2, 1])
        """
        self.check_deferrable()
        was_deferred, self.deferred = self.deferred, True
        try:
            yield
        except BaseException:
            self._pending_sums = None
            self.deferred = was_deferred
            raise
        try:
            self.apply_accumulated()
        finally:
            self.deferred = was_deferred

    @torch.no_grad()
    def update(self, features: torch.Tensor, target: torch.Tensor, *, checked: bool = False) -> None:
        """Fold one batch into the moving statistics (does nothing in eval mode).

        An update that would make the statistics non-finite (e.g. finite features whose squares
        overflow float32) is refused with :class:`~mr2.checks.StatisticsOverflowError` when values
        are checked (``check_values``; one host sync, shared with the finiteness check of the
        features), and skipped without a host sync otherwise; either way the statistics keep their
        old values.

        Args:
            features: [B, d] features (detached and cast to float32 here).
            target: [B] class ids in ``[0, K)``.
            checked: the caller has already validated ``features`` and ``target``.
        """
        if not self.training:
            return
        if not checked:
            check_features(features, target)
            check_target(target, self.num_classes, features.shape[0], self.check_values)
        pending = self.prepare(features, target)
        if wants_values(features, self.check_values):
            assert pending is not None
            check_statistics_finite(
                {}, pending.guard, also_count={} if checked else {"features": features}
            )
            self.commit(pending)
        else:
            self.commit(pending, only_if_finite=True)

    # ---------------------------------------------------------- derived values
    def seen(self) -> torch.Tensor:
        """[K] bool: the class has been observed at least once."""
        return self.samples_seen > 0

    def means(self) -> torch.Tensor:
        """[K, d] class means mu_k (zeros for unseen classes)."""
        return self.feature_sum / self.count.clamp_min(1e-12).unsqueeze(1)

    def global_center(self) -> torch.Tensor:
        """[d] average of the class means over the seen classes (the centring vector)."""
        seen = self.seen().to(self.feature_sum.dtype)
        return (self.means() * seen.unsqueeze(1)).sum(0) / seen.sum().clamp_min(1.0)

    def moments(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(||mu_k||_p^2, s_k)``, each [K], from one pass over the class means.

        ``||mu_k||`` is of the centred means with ``center=True``; unseen classes get 0.
        """
        mean_sq_norm, spread, _ = self.moments_and_seen()
        return mean_sq_norm, spread

    def moments_and_seen(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(||mu_k||_p^2, s_k, seen_k)``: :meth:`moments` and :meth:`seen` from one evaluation (the
        loss's training step needs all three; computing ``seen`` once saves an operation)."""
        seen = self.seen()
        mean_sq_norm, spread, _ = self._moments(seen)
        return mean_sq_norm, spread, seen

    def _moments(
        self, seen: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """:meth:`moments` given :meth:`seen`, or None when every class is known to have been seen
        (:meth:`all_seen_known`; the mask is then all True and is not built), and the moving second
        moment ``Q_k / n_k`` where the L2 spread is computed from it (pooled, L2, not centred; else
        None)."""
        if self.estimator == "batch":
            return self.batch_mean_sq_norm.clone(), self.batch_spread.clone(), None
        count = self._buffer("count").clamp_min(1e-12)
        # ||sum_k / n_k||_p = ||sum_k||_p / n_k, from the cached ||S_k||_p^2: no [K, d] pass.
        if not self._norm_cache_valid:
            self._refresh_norm_cache()
        raw_norm = self._buffer("feature_sum_norm_sq") / count.square()
        second: torch.Tensor | None = None
        if self.norm_p != 2.0:
            spread = self.deviation_sum / self._buffer("count").clamp_min(1e-12)
        else:
            second = self._buffer("sq_norm_sum") / count
            spread = (second - raw_norm).clamp_min(0.0)
        if self.center:
            centred = self._norm_sq(self.means() - self.global_center())
            return (centred if seen is None else centred * seen), spread, None
        # An unseen class has S_k = 0, so raw_norm is 0 there already (no mask needed).
        return raw_norm, spread, second

    def mean_sq_norm(self) -> torch.Tensor:
        """[K] ``||mu_k||_p^2`` (of the centred means with ``center=True``)."""
        return self.moments()[0]

    def spread(self) -> torch.Tensor:
        """[K] mean squared deviation ``s_k = E ||phi(x) - mu_k||_p^2`` (0 for unseen classes)."""
        return self.moments()[1]

    def spread_l2(self) -> torch.Tensor:
        """[K] ``s_k`` in the L2 norm whatever ``norm_p`` is (from the pooled moving sums; the norm of
        MR2's pair distances). Equals :meth:`spread` for the default statistics."""
        count = self.count.clamp_min(1e-12)
        mean_sq = torch.linalg.vector_norm(self.feature_sum, dim=1).square() / count.square()
        return (self.sq_norm_sum / count - mean_sq).clamp_min(0.0) * self.seen()

    def second_moment(self) -> torch.Tensor:
        """[K] ``a_k = ||mu_k||^2 + s_k``."""
        mean_sq_norm, spread = self.moments()
        return mean_sq_norm + spread

    def mean_spread(
        self, spread: torch.Tensor | None = None, seen: torch.Tensor | None = None
    ) -> torch.Tensor:
        """0-dim ``s_bar``: the average of ``s_k`` over the seen classes (``seen``: :meth:`seen` if
        already computed)."""
        seen = self.seen() if seen is None else seen
        spread = self.spread() if spread is None else spread
        return (spread * seen).sum() / seen.sum().clamp_min(1)
