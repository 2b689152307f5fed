"""Fuzz-style test of the sweep spec loader and the run configuration loader: a few hundred generated
bad inputs (wrong types at every key, unknown keys, non-mapping documents, binary garbage, non-UTF-8,
deep nesting, huge numbers and lists, aliases and the billion laughs, tags such as
``!!python/object``, duplicate keys, empty and oversized files), deterministic (seeded).

They run in a child process (tests/sweep/fuzz_loaders_worker.py) under ``RLIMIT_AS`` = its address
space after importing torch and the CLI (about 3.3 GB of mappings, little of it resident) plus
1 GiB, with an alarm per case against hangs. Each must end in the loader's user error
(:class:`~mr2.config.ConfigError` / :class:`~mr2.sweep.SweepSpecError`): one line, never longer
than the file it describes (no expanded value is formatted); a subset goes through ``mr2 train
--config`` / ``mr2 sweep --dry-run`` and must exit 2 with one ``error:`` line and write nothing.
Never a traceback, a hang or a runaway allocation.

The run configuration's schema (``mr2.config.schema``) states its ranges: an infinite learning
rate, a seed of -10^50, out-of-range epoch or batch-size counts (category ``schema-range``) and an
integer too large for a float key (``schema-overflow``, once an ``OverflowError`` traceback) are
user errors like the rest.
"""

from __future__ import annotations

import collections
import json
import subprocess
import sys
from pathlib import Path

SEED = 2208
HEADROOM = 1 << 30  # bytes of address space above the child's after its imports
WORKER = Path(__file__).with_name("fuzz_loaders_worker.py")
#: Categories whose inputs the loaders must refuse, and the fewest cases generated for each.
CATEGORIES = {
    "wrong-type": 80, "wrong-type-base": 40, "wrong-type-sweep": 50, "unknown-key": 40, "not-a-mapping": 18,
    "binary": 24, "not-utf8": 8, "deep": 12, "huge-number": 6, "alias": 9, "tag": 20, "duplicate": 7,
    "huge-list": 5, "empty": 5, "too-large": 1, "schema-range": 4, "schema-overflow": 1,
}


def test_bad_sweep_files_and_run_configs_get_one_line_user_errors(tmp_path):
    done = subprocess.run([sys.executable, str(WORKER), str(tmp_path), str(SEED), str(HEADROOM)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout)["results"]
    counts = collections.Counter(r["category"] for r in results)
    for category, fewest in CATEGORIES.items():
        assert counts[category] >= fewest, (category, counts)
    assert len(results) >= 300
    wrong = [r for r in results if r["outcome"] != "error"]
    assert not wrong, wrong[:5]
    for r in results:
        if r["outcome"] != "error":
            continue
        size = (tmp_path / f"case{r['index']:04d}.yaml").stat().st_size
        message = r["message"]
        assert "\n" not in message and "Traceback" not in message, r
        assert len(message) <= size + 400, (r["index"], r["category"], len(message), size)
    cli = [r for r in results if r["cli"] is not None]
    assert len(cli) >= 60 and {r["kind"] for r in cli} == {"config", "sweep"}
    for r in cli:
        code, out, err = r["cli"]
        command = "train" if r["kind"] == "config" else "sweep"
        assert code == 2 and out == "", r
        assert err.startswith(f"mr2 {command}: error: ") and err.count("\n") == 1, r
    assert not (tmp_path / "out").exists()  # no sweep wrote anything
