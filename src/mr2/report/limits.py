"""Size limits of the disparity report, checked before anything of that size is allocated.

Every figure comes from a K x K int64 confusion matrix, ``8 K^2`` bytes per run: 800 MB at K = 10,000,
80 GB at K = 100,000. A predictions file fixes K from what it names (class names, the logits' width)
or else from its largest class id, so one stray id (30,000, 1e9, the int64 maximum) in a 60-row file
would otherwise ask for gigabytes to exabytes. The readers refuse a K above the limit, naming the file
and the label, before allocating.

A predictions file is read whole, so what it declares is bounded too: the arrays of one file may take
at most :data:`DEFAULT_MAX_ARRAY_BYTES` once read (uncompressed; ``mr2 report --max-array-bytes``
raises it), checked from the archive's headers before any array is loaded, whatever the compression.

What a metric will allocate is compared with :func:`allocatable_bytes`, the memory this process can
still get (the system's available memory, the container's and the address-space limit's headroom).
"""

from __future__ import annotations

from mr2.memory import allocatable_bytes

__all__ = [
    "DEFAULT_MAX_ARRAY_BYTES",
    "DEFAULT_MAX_CLASSES",
    "allocatable_bytes",
    "confusion_bytes",
    "format_bytes",
]

#: The largest K a predictions file may make (``mr2 report --max-classes`` raises it): 800 MB per
#: run's confusion matrix. iNaturalist 2021 has 10,000 classes; ImageNet-21k needs the flag.
DEFAULT_MAX_CLASSES = 10_000

#: The most bytes the arrays of one predictions file may take once read (uncompressed, counted as
#: the reader holds them: class ids as int64, scores as float64, so a narrow dtype does not slip 8x
#: past it): 62 million samples of y_true and y_pred, or 50,000 x 2,500 logits. The reader's peak is
#: at most about 2.5 times this count (measured with 120-240 MB files: 2.1x for int64 and int32 class
#: ids, 1.6x for float32 logits, 1.2x for float64 logits).
DEFAULT_MAX_ARRAY_BYTES = 10**9


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
