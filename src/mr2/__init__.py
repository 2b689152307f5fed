"""mr2: measure and reduce class-wise accuracy disparity in classifiers (MR2, ICLR 2026)."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
