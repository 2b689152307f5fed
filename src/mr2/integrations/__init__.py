"""MR2 inside the training stacks users already have (each module needs its library's extra).

- :mod:`mr2.integrations.lightning`: a PyTorch Lightning callback that applies accumulated class
  statistics once per optimiser step, and helpers that log the loss's parts and the disparity metric
  through ``LightningModule.log_dict`` (``pip install 'mr2[lightning]'``).
- :mod:`mr2.integrations.transformers`: a Hugging Face ``Trainer`` model wrapper that keeps the
  statistics in every checkpoint, a ``compute_loss_func``, a callback for gradient accumulation and a
  ``compute_metrics`` returning the disparity summary (``pip install 'mr2[transformers]'``).
- timm needs no module: see docs/integrations.md (``forward_features`` / ``forward_head``).

Nothing here is imported by ``import mr2``.
"""
