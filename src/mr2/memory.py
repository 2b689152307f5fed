"""What memory this process can still get, read before a large allocation is made.

One home for the rule, used by the report's size limits (:mod:`mr2.report.limits`), the loss
specifications' size checks and tune's script helpers; standard library only, so a user's training
process that imports :mod:`mr2.tune.script` pays nothing for it.
"""

from __future__ import annotations

import resource
from pathlib import Path

__all__ = ["allocatable_bytes"]


def _meminfo_bytes(field: str) -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _address_space_left() -> int | None:
    """What ``RLIMIT_AS`` (``ulimit -v``) leaves above this process's current address space."""
    try:
        limit, _ = resource.getrlimit(resource.RLIMIT_AS)
        if limit == resource.RLIM_INFINITY:
            return None
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmSize:"):
                return max(limit - int(line.split()[1]) * 1024, 0)
    except (OSError, ValueError, IndexError):
        return None
    return None


def _cgroup_left() -> int | None:
    """What the container's memory limit (cgroup v2 ``memory.max``) leaves above its current use."""
    try:
        root = Path("/sys/fs/cgroup")
        limit = (root / "memory.max").read_text().strip()
        if limit == "max":
            return None
        return max(int(limit) - int((root / "memory.current").read_text()), 0)
    except (OSError, ValueError):
        return None


def allocatable_bytes() -> int | None:
    """The memory this process can still allocate: the smaller of the system's available memory
    (``MemAvailable``), the container's headroom (cgroup ``memory.max``) and the address-space limit's
    (``RLIMIT_AS``); None where none of them is known (not Linux).

    >>> free = allocatable_bytes()
    >>> free is None or free >= 0
    True
    """
    known = [
        value
        for value in (_meminfo_bytes("MemAvailable"), _cgroup_left(), _address_space_left())
        if value is not None
    ]
    return min(known) if known else None
