"""Benchmark: start-up of the ``mr2`` command line against the bare interpreter (issue 26 item 1).

Runs ``python -c pass``, ``mr2 --version`` and ``mr2 --help`` (the console script installed beside
the interpreter; ``python -m mr2`` when there is none) as fresh processes, interleaved (pass,
--version, --help, pass, ...), and prints each command's median and best wall time, and the median
difference and ratio against ``python -c pass`` (target: ``mr2 --version`` under 0.3 s above it).
Wall times include process creation; the load average is printed beside them, because on a busy
machine every figure grows.

Usage::

    python benchmarks/bench_cli_startup.py                 # 15 repeats, about 10 s on an idle machine
    python benchmarks/bench_cli_startup.py --repeats 31
    python benchmarks/bench_cli_startup.py --quick         # smoke test: 2 repeats
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

TARGET_S = 0.3


def mr2_command() -> list[str]:
    """The ``mr2`` console script beside this interpreter (a venv's bin/), else on PATH, else
    ``python -m mr2``."""
    beside = Path(sys.executable).with_name("mr2")
    if beside.is_file():
        return [str(beside)]
    found = shutil.which("mr2")
    return [found] if found else [sys.executable, "-m", "mr2"]


def time_once(command: Sequence[str]) -> float:
    """Wall time of one run of ``command`` in seconds (it must exit 0)."""
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def measure(commands: dict[str, list[str]], repeats: int) -> dict[str, list[float]]:
    """Interleaved timings: one run of each command per round, ``repeats`` rounds, after one
    untimed warm-up round (file-system caches)."""
    for command in commands.values():
        time_once(command)
    times: dict[str, list[float]] = {label: [] for label in commands}
    for _ in range(repeats):
        for label, command in commands.items():
            times[label].append(time_once(command))
    return times


def git_commit() -> str:
    try:
        done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).resolve().parent, check=True)
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return done.stdout.strip()


def main(argv: Sequence[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15, help="interleaved rounds (default 15)")
    parser.add_argument("--quick", action="store_true", help="2 rounds: a smoke test")
    args = parser.parse_args(argv)
    repeats = 2 if args.quick else args.repeats

    mr2 = mr2_command()
    commands = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "mr2 --version": [*mr2, "--version"],
        "mr2 --help": [*mr2, "--help"],
    }
    load_before = os.getloadavg()
    times = measure(commands, repeats)
    load_after = os.getloadavg()

    print(f"machine: {platform.node()}, {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} CPUs, Python {platform.python_version()}, commit {git_commit()}")
    print(f"mr2: {' '.join(mr2)}; {repeats} interleaved rounds; load average (1 min) "
          f"{load_before[0]:.2f} before, {load_after[0]:.2f} after")
    print()
    print("| command | median (s) | best (s) | median - python -c pass (s) | ratio |")
    print("| --- | --- | --- | --- | --- |")
    base = statistics.median(times["python -c pass"])
    result: dict[str, float] = {}
    for label, values in times.items():
        median = statistics.median(values)
        result[label] = median
        print(f"| `{label}` | {median:.3f} | {min(values):.3f} | {median - base:+.3f} | "
              f"{median / base:.2f} |")
    difference = result["mr2 --version"] - base
    verdict = "within" if difference < TARGET_S else "ABOVE"
    print(f"\nmr2 --version: {difference:+.3f} s above the bare interpreter ({verdict} the {TARGET_S} s "
          "target)")
    result["difference"] = difference
    return result


if __name__ == "__main__":
    main()
