"""torchmetrics metrics of mr2 (optional extra ``mr2[metrics]``: ``pip install 'mr2[metrics]'``).

:class:`ClasswiseDisparity` accumulates the K x K confusion matrix of any classifier's evaluation
(summed across ranks by torchmetrics) and returns the :class:`mr2.report.DisparityReport`; its
:meth:`~ClasswiseDisparity.to_log_dict` flattens the per-class results for ``log_dict`` and
TensorBoard.
"""

from __future__ import annotations

from mr2.metrics.classwise_disparity import ClasswiseDisparity

__all__ = ["ClasswiseDisparity"]
