"""Size limits of the disparity report, checked before anything of that size is allocated.

Every figure comes from a K x K int64 confusion matrix, ``8 K^2`` bytes per run: 800 MB at K = 10,000,
80 GB at K = 100,000. A predictions file fixes K from what it names (class names, the logits' width)
or else from its largest class id, so one stray id (30,000, 1e9, the int64 maximum) in a 60-row file
would otherwise ask for gigabytes to exabytes. The readers refuse a K above the limit, naming the file
and the label, before allocating.
"""

from __future__ import annotations

__all__ = ["DEFAULT_MAX_CLASSES", "confusion_bytes", "format_bytes"]

#: The largest K a predictions file may make (``mr2 report --max-classes`` raises it): 800 MB per
#: run's confusion matrix. iNaturalist 2021 has 10,000 classes; ImageNet-21k needs the flag.
DEFAULT_MAX_CLASSES = 10_000


def confusion_bytes(num_classes: int) -> int:
    """Bytes of a K x K int64 confusion matrix."""
    return 8 * num_classes * num_classes


def format_bytes(size: int) -> str:
    """A byte count in decimal units, one decimal.

    >>> format_bytes(999), format_bytes(7_200_480_008), format_bytes(8 * 10**12), format_bytes(10**40)
    ('999.0 B', '7.2 GB', '8.0 TB', 'about 1e+22 EB')
    """
    if size >= 10**21:  # exact for any int (a float would overflow past 1e308)
        return f"about 1e+{len(str(size)) - 19} EB"
    value = float(size)
    for unit in ("B", "kB", "MB", "GB", "TB", "PB"):
        if value < 1000:
            return f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.1f} EB"
