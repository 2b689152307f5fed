"""Sharpness-aware minimisation (SAM, Foret et al., ICLR 2021) and its adaptive form (ASAM, Kwon et
al., ICML 2021) around any base optimiser, usable with any training method (``optim.sam``).

One SAM step on a batch::

    loss = method(*model(x), y); loss.backward()        # first pass (under DDP: no_sync, forward too)
    e = sam_perturbation(w, grad, rho, adaptive); w += e  # climb to w + e(w)
    method(*model(x), y).backward()                       # second pass: the gradients used (synced)
    w -= e (restore w); base_optimizer.step()             # the sharpness-aware update

:class:`SAM` keeps the base optimiser as it is (the engine's schedule, gradient scaler and
checkpoint of the optimiser work unchanged) and implements the middle part:
:meth:`SAM.sharpness_aware_gradients`. Batch-norm running statistics and the method's state are
updated by the first pass only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from mr2.checks import is_number

__all__ = ["BAD_RHO", "SAM", "SAM_STATE_MISMATCH", "frozen_batchnorm_statistics", "sam_perturbation"]

BAD_RHO = "optim.sam.rho must be a number >= 0 (0.05 is the reference's default); got {value!r}."
SAM_STATE_MISMATCH = (
    "the checkpoint's SAM state {saved} does not match this run's optim.sam {current}; resume with the "
    "same optim.sam or start a new run."
)

#: Guard of the reference against a zero gradient.
EPSILON = 1e-12


def sam_perturbation(
    params: Sequence[torch.Tensor], grads: Sequence[torch.Tensor], rho: float, adaptive: bool = False
) -> list[torch.Tensor]:
    r"""The ascent step ``e(w)`` of SAM / ASAM for every parameter (no_grad, nothing modified).

    .. math::
        e(w) = \rho \frac{T_w^2 \nabla L(w)}{\|T_w \nabla L(w)\|_2 + 10^{-12}}, \qquad
        T_w = I \ (\text{SAM}), \quad T_w = \mathrm{diag}(|w|) \ (\text{ASAM})

    with the norm over ALL parameters together (davda54/sam's ``_grad_norm``). The direction and
    size do not depend on a uniform scaling of the gradients (a GradScaler's factor cancels, up to
    the 1e-12 guard). A non-finite gradient (an fp16 overflow under a GradScaler) gives ``e = 0``:
    the second pass then runs at ``w`` and the scaler skips the step as it would without SAM.

    Args:
        params: the parameters ``w`` that have gradients.
        grads: their gradients, in the same order.
        rho: neighbourhood size (0.05; ASAM's authors use about 10x larger).
        adaptive: ASAM's element-wise scaling.

    Example:
        >>> e = sam_perturbation([torch.zeros(2)], [torch.tensor([3.0, 4.0])], rho=0.5)
        >>> e[0]
        tensor([0.3000, 0.4000])
    """
    with torch.no_grad():
        if not params:
            return []
        scaled = [(p.abs() * g if adaptive else g) for p, g in zip(params, grads, strict=True)]
        norms = [torch.linalg.vector_norm(s.to(torch.promote_types(s.dtype, torch.float32))) for s in scaled]
        norm = torch.linalg.vector_norm(torch.stack([n.to(norms[0].dtype) for n in norms]))
        finite = torch.isfinite(norm)
        factor = torch.where(finite, rho / (norm + EPSILON), torch.zeros_like(norm))
        out = []
        for p, g in zip(params, grads, strict=True):
            e = (p * p if adaptive else 1.0) * g * factor.to(g.dtype)
            out.append(torch.where(finite, e, torch.zeros_like(e)).to(p.dtype))
        return out


@contextlib.contextmanager
def frozen_batchnorm_statistics(model: nn.Module) -> Iterator[None]:
    """Batch-norm layers of ``model`` normalise with the batch but leave their running statistics.

    As davda54/sam's ``disable_running_stats``: ``momentum = 0`` for the duration (so running mean
    and variance stay), and, beyond it, ``num_batches_tracked`` is put back as well (it would count
    the second pass; it matters for ``momentum=None`` layers, which average over that count).
    """
    layers = [m for m in model.modules() if isinstance(m, _BatchNorm) and m.track_running_stats]
    saved = [(m, m.momentum, None if m.num_batches_tracked is None else m.num_batches_tracked.clone())
             for m in layers]
    for m in layers:
        m.momentum = 0.0
    try:
        yield
    finally:
        for m, momentum, tracked in saved:
            m.momentum = momentum
            if tracked is not None and m.num_batches_tracked is not None:
                m.num_batches_tracked.copy_(tracked)


def _no_sync(model: nn.Module) -> contextlib.AbstractContextManager[Any]:
    no_sync = getattr(model, "no_sync", None)
    return no_sync() if callable(no_sync) else contextlib.nullcontext()


class SAM:
    """The SAM / ASAM step around a base optimiser (whose ``param_groups`` define the parameters).

    Args:
        optimizer: the base optimiser (SGD, AdamW, ...); it takes the final step as usual.
        rho: neighbourhood size (>= 0).
        adaptive: ASAM.

    Example:
        >>> w = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
        >>> sgd = torch.optim.SGD([w], lr=0.1)
        >>> sam = SAM(sgd, rho=0.05)
        >>> seen = []
        >>> def second_pass():
        ...     seen.append(w.detach().clone())
        ...     (w ** 2).sum().backward()
        >>> (w ** 2).sum().backward()  # the first pass
        >>> sam.sharpness_aware_gradients(nn.Identity(), nn.Identity(), second_pass)
        >>> climbed = torch.allclose(seen[0], w * (1 + 0.05 / w.norm()))  # e = rho g / ||g||, g = 2 w
        >>> climbed, w.tolist(), torch.equal(w.grad, 2 * seen[0])  # back at w, gradient at w + e
        (True, [1.0, -2.0], True)
    """

    def __init__(self, optimizer: torch.optim.Optimizer, rho: float = 0.05, adaptive: bool = False) -> None:
        if not is_number(rho) or not rho >= 0:
            raise ValueError(BAD_RHO.format(value=rho))
        self.optimizer = optimizer
        self.rho = float(rho)
        self.adaptive = bool(adaptive)
        self.steps = 0
        self._saved: list[tuple[torch.Tensor, torch.Tensor]] = []

    def _params_with_grads(self) -> list[torch.Tensor]:
        return [p for group in self.optimizer.param_groups for p in group["params"] if p.grad is not None]

    @torch.no_grad()
    def first_step(self) -> None:
        """Save ``w`` and move to ``w + e(w)`` (the reference's ``first_step``, without zero_grad)."""
        params = self._params_with_grads()
        grads = [p.grad for p in params]
        shifts = sam_perturbation(params, grads, self.rho, self.adaptive)  # type: ignore[arg-type]
        self._saved = [(p, p.detach().clone()) for p in params]
        for p, e in zip(params, shifts, strict=True):
            p.add_(e)

    @torch.no_grad()
    def restore(self) -> None:
        """Back to ``w`` (the reference's ``second_step`` before the base optimiser's step)."""
        for p, saved in self._saved:
            p.copy_(saved)
        self._saved = []

    @staticmethod
    def snapshot(method: nn.Module) -> dict[str, torch.Tensor]:
        """Copies of the method's buffers (all of them, persistent or not) by name, taken before the
        first pass's forward and handed to :meth:`sharpness_aware_gradients`."""
        return {name: b.detach().clone() for name, b in method.named_buffers()}

    @staticmethod
    @torch.no_grad()
    def _load_buffers(method: nn.Module, saved: dict[str, torch.Tensor]) -> None:
        for name, b in method.named_buffers():
            b.copy_(saved[name])

    @staticmethod
    def first_pass(sam: SAM | None, model: nn.Module) -> contextlib.AbstractContextManager[Any]:
        """Context of the first pass's forward AND backward: ``model.no_sync()`` when ``sam`` is set
        and ``model`` is DistributedDataParallel (each rank perturbs with its own gradient, as the SAM
        paper and the reference's DDP note say; PyTorch's ``no_sync`` documentation requires the
        forward inside too), else a no-op."""
        return _no_sync(model) if sam is not None else contextlib.nullcontext()

    def sharpness_aware_gradients(
        self,
        model: nn.Module,
        method: nn.Module,
        second_pass: Callable[[], None],
        method_state: dict[str, torch.Tensor] | None = None,
    ) -> None:
        """Replace the first pass's gradients in ``.grad`` by those at ``w + e(w)``; the parameters
        end back at ``w``.

        Called after the first pass's backward (in :meth:`first_pass`, on ``w``, with the
        method's state updated). ``second_pass`` runs forward and backward again (synchronised) at
        ``w + e(w)`` with the batch-norm running statistics frozen
        (:func:`frozen_batchnorm_statistics`). The method's buffers are set back to
        ``method_state`` (:meth:`snapshot` before the first pass) for the second pass, so it
        evaluates the same objective as the first, and afterwards to their first-pass values: a
        method's state (MR2's statistics, center-loss centres, group DRO's q, JTT's records) is
        updated once per step, by the first pass, as the running statistics are. The caller
        zeroes the gradients before, and unscales, clips and steps the base optimiser after.
        """
        self.first_step()
        self.optimizer.zero_grad(set_to_none=True)
        after_first = self.snapshot(method)
        try:
            if method_state is not None:
                self._load_buffers(method, method_state)
            with frozen_batchnorm_statistics(model):
                second_pass()
        finally:
            self._load_buffers(method, after_first)
            self.restore()
        self.steps += 1

    def state_dict(self) -> dict[str, Any]:
        """``rho``, ``adaptive`` and the number of SAM steps taken (``w`` is never left perturbed)."""
        return {"rho": self.rho, "adaptive": self.adaptive, "steps": self.steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume the step count; a checkpoint of another ``rho`` / ``adaptive`` is refused."""
        saved = {"rho": float(state["rho"]), "adaptive": bool(state["adaptive"])}
        current = {"rho": self.rho, "adaptive": self.adaptive}
        if saved != current:
            raise ValueError(SAM_STATE_MISMATCH.format(saved=saved, current=current))
        self.steps = int(state["steps"])
