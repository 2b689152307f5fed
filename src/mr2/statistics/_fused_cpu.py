"""The steady CPU step of the class statistics and the logit temperatures as one compiled call.

Private: :meth:`ClassFeatureStatistics._fused_steady_step
<mr2.statistics.class_features.ClassFeatureStatistics._fused_steady_step>` calls it; used only where
`numba <https://numba.pydata.org>`_ is installed (``pip install "mr2[fast]"``) and
:attr:`ClassFeatureStatistics.fused_step` allows it.

Why (issue 47): at a few classes a linear-probe step's MR2 work was some 30 operations on ``[K]``-sized
tensors beside its two passes over the batch (the features' norms, the class sums), each operation
costing a few microseconds of dispatch however small its tensor. One compiled call
(:mod:`mr2.statistics._fused_cpu_numba`) does the ``[K]`` arithmetic: the batch's second moments, the
moving count and second moment, the finiteness guard, the ``[K, d]`` moving class sums of the present
classes, the samples seen, and ``gamma_k`` from ``a_k = Q_k / n_k``; :func:`one_pass_step` also makes
the pass over the batch (each row's squared norm and class sum together, serially), :func:`split_step`
takes that pass from tensor operations (which use every thread), as :func:`use_one_pass` decides.

Its values are those of the eager steady step (:meth:`ClassFeatureStatistics._steady_step` and
``MR2Loss._steady_update``) up to floating-point rounding (the compiled loops may fuse a product and a
sum into one rounding and take sums in another order than the tensor kernels; the one-pass call sums
the squared values rather than squaring the norms), so the results differ from the eager ones in the last bits
(tests/core/test_fused_step.py holds them to the eager path and to float64). NaN and Inf keep their
meaning (no "fast math" that assumes finite values). It writes nothing unless the whole update is known
to be valid: a class id outside ``[0, K)`` or a non-finite guard returns a code, and the caller falls
back to the eager step, which raises the library's error or, for finite inputs whose float32 sum
overflowed, goes on.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import torch

__all__ = [
    "BAD_CLASS",
    "ENVIRONMENT_SWITCH",
    "NOT_FINITE",
    "OK",
    "ONE_PASS_MAX_ELEMENTS",
    "available",
    "one_pass_step",
    "split_step",
    "use_one_pass",
]

#: Return codes of the compiled functions: written / a class id outside ``[0, K)`` / a non-finite
#: guard (nothing written for the last two); :mod:`mr2.statistics._fused_cpu_numba` defines the same.
OK, BAD_CLASS, NOT_FINITE = 0, 1, 2

#: Set to ``0`` to never use the compiled step (the eager one, bit for bit the general path's values).
ENVIRONMENT_SWITCH = "MR2_FUSED_CPU"

#: With more than two threads, the largest batch (B x d) whose pass the compiled function makes alone,
#: serially (about 40 microseconds on the development machine, less than the tensor operations it
#: replaces); larger batches keep their passes as threaded tensor operations (:func:`use_one_pass`).
ONE_PASS_MAX_ELEMENTS = 2**17

_kernels: Any = None
_tried = False


def available() -> bool:
    """Whether numba can be imported (tried once, on the first call) and ``MR2_FUSED_CPU`` is not ``0``."""
    global _kernels, _tried
    if not _tried:
        _tried = True
        if os.environ.get(ENVIRONMENT_SWITCH, "1").strip() != "0":
            try:
                from mr2.statistics import _fused_cpu_numba
            except ModuleNotFoundError as error:  # numba is not installed: the eager step
                if error.name not in ("numba", "llvmlite"):
                    raise
                _fused_cpu_numba = None  # type: ignore[assignment]
            except Exception as error:  # an installed numba that fails to load (e.g. a numpy it predates)
                warnings.warn(
                    f"numba is installed but could not be loaded ({type(error).__name__}: {error}); "
                    f"MR2Loss uses its eager CPU step. Set {ENVIRONMENT_SWITCH}=0 to silence this.",
                    RuntimeWarning,
                    stacklevel=2,
                )
                _fused_cpu_numba = None  # type: ignore[assignment]
            _kernels = _fused_cpu_numba
    return _kernels is not None


def use_one_pass(batch: int, dim: int) -> bool:
    """Whether :func:`one_pass_step` (one serial pass over the batch) rather than :func:`split_step`
    (the passes as threaded tensor operations) takes a batch of ``batch x dim`` features: with at most
    two threads always (measured faster at every size tried, B x d from 0.4 to 8.4 million: docs/mr2.md,
    "The fused CPU step"), with more up to :data:`ONE_PASS_MAX_ELEMENTS`."""
    return batch * dim <= ONE_PASS_MAX_ELEMENTS or torch.get_num_threads() <= 2


def one_pass_step(*args: Any) -> int:
    """:func:`mr2.statistics._fused_cpu_numba.one_pass_step` (:func:`available` must be True)."""
    return int(_kernels.one_pass_step(*args))


def split_step(*args: Any) -> int:
    """:func:`mr2.statistics._fused_cpu_numba.split_step` (:func:`available` must be True)."""
    return int(_kernels.split_step(*args))
