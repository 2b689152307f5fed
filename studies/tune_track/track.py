"""`mr2 tune`'s track record (issue 25 item 3): run tune on a regime-map cell's configuration.

The protocol, the seeds and the rule that picks the default candidate set are fixed in
docs/benchmarks/tune-track-record.md (committed before the runs). This script only runs it:

    python studies/tune_track/track.py run CELL --candidates quick|full --out runs/tune-track \
        [--glyphs glyphs.npz]

CELL is a regime-map cell: ``cnn-n100`` ... ``mlp-n1000`` (Fashion-MNIST, studies/regimes/) or
``glyphs-cnn-n100`` ... ``glyphs-mlp-n300`` (the glyph benchmark, studies/glyphs/regimes/; give the
glyph file with --glyphs). The cell's sweep ``base`` becomes the tune's run configuration
(``<out>/configs/<CELL>.yaml``); the tune goes to ``<out>/<CELL>-<SET>/`` and its wall time (one entry per
invocation) to ``<out>/<CELL>-<SET>/wall_time.json``. A finished tune is resumed (nothing reruns), as with any
``mr2 tune``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
SELECTION_SEEDS = "5,6,7"
CONFIRMATION_SEEDS = "8,9,10"
SETS = ("quick", "full")


def cell_spec(cell: str) -> Path:
    """The regime-map sweep file of CELL."""
    if cell.startswith("glyphs-"):
        path = ROOT / "studies" / "glyphs" / "regimes" / f"{cell.removeprefix('glyphs-')}.yaml"
    else:
        path = ROOT / "studies" / "regimes" / f"{cell}.yaml"
    if not path.is_file():
        raise SystemExit(f"track.py: unknown cell {cell!r} (no {path.relative_to(ROOT)})")
    return path


def run_config(cell: str, out: Path, glyphs: Path | None) -> Path:
    """Write the cell's base configuration as a run configuration; return its path."""
    base = yaml.safe_load(cell_spec(cell).read_text())["base"]
    if cell.startswith("glyphs-"):
        if glyphs is None:
            raise SystemExit("track.py: a glyph cell needs --glyphs FILE (studies/glyphs/make_glyphs.py)")
        base["data"]["root"] = str(glyphs.resolve())
    config = {"name": cell, "output_dir": str(out), **base}
    path = out / "configs" / f"{cell}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run mr2 tune on one cell with one candidate set")
    run.add_argument("cell")
    run.add_argument("--candidates", choices=SETS, required=True)
    run.add_argument("--out", type=Path, required=True)
    run.add_argument("--glyphs", type=Path)
    run.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)

    config = run_config(args.cell, args.out, args.glyphs)
    name = f"{args.cell}-{args.candidates}"
    command = [sys.executable, "-m", "mr2", "tune", "--config", str(config), "--candidates", args.candidates,
               "--seeds", SELECTION_SEEDS, "--confirm-seeds", CONFIRMATION_SEEDS, "--criterion", "hard_tier",
               "--workers", str(args.workers), "--threads-per-run", "1", "--output-dir", str(args.out),
               "--name", name]
    print(" ".join(command), flush=True)
    start = time.monotonic()
    code = subprocess.call(command, env=os.environ.copy())
    wall = time.monotonic() - start
    record = args.out / name / "wall_time.json"
    if record.parent.is_dir():  # one entry per invocation (a resumed tune has several)
        entries = json.loads(record.read_text()) if record.is_file() else []
        entries.append({"wall_s": round(wall, 1), "exit_code": code, "command": command[1:],
                        "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
        record.write_text(json.dumps(entries, indent=2) + "\n")
    print(f"{name}: exit {code}, {wall / 60:.1f} min", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
