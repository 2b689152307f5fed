"""What the command line says about itself agrees with what was measured and with its own page:
the `fashion-mnist` preset's stated duration, `mr2 demo --help`."""

from __future__ import annotations

import argparse
import math
import re
from pathlib import Path

from mr2.cli import demo
from mr2.sweep.presets import preset_descriptions

ROOT = Path(__file__).resolve().parents[2]


def _measured_minutes() -> list[float]:
    """Wall clocks of `mr2 sweep --preset fashion-mnist` in docs/sweeps.md's table of measurements."""
    text = (ROOT / "docs" / "sweeps.md").read_text(encoding="utf-8")
    rows = [line for line in text.splitlines() if line.startswith("| `mr2 sweep --preset fashion-mnist`")]
    minutes = []
    for row in rows:
        wall_clock = row.split("|")[2]
        match = re.search(r"(\d+) min (\d+) s", wall_clock)
        assert match is not None, row
        minutes.append(int(match.group(1)) + int(match.group(2)) / 60)
    assert len(minutes) >= 2
    return minutes


def test_fashion_mnist_duration_is_the_measured_range() -> None:
    minutes = _measured_minutes()
    stated = f"{math.floor(min(minutes))}-{math.ceil(max(minutes))} min"
    description = preset_descriptions()["fashion-mnist"]
    assert f"({stated} on 2 cores, measured)" in description
    assert "< 30 min" not in description
    presets_row = next(line for line in (ROOT / "docs" / "sweeps.md").read_text(encoding="utf-8").splitlines()
                       if line.startswith("| `fashion-mnist` |"))
    assert presets_row.rstrip().endswith(f"| {stated} (measured, below) |")


def test_demo_points_to_the_full_protocol_with_the_preset_description() -> None:
    line = demo.full_protocol_line()
    assert preset_descriptions()["fashion-mnist"] in line and "mr2 sweep --preset fashion-mnist" in line


def test_demo_help_says_where_the_data_is_looked_for() -> None:
    parser = argparse.ArgumentParser(prog="mr2 demo")
    demo.add_arguments(parser)
    text = parser.format_help()
    assert "see above" not in text
    assert "/usr/share/datasets/fashion-mnist" in " ".join(text.split())
    assert str(demo.LOCAL_DATA_ROOT) in text


def test_demo_spells_the_debian_location_of_the_data_layer() -> None:
    from mr2.data.fashion_mnist import DEFAULT_FASHION_MNIST_ROOT

    assert demo.DEBIAN_DATA_ROOT == DEFAULT_FASHION_MNIST_ROOT


def _presets_rows() -> dict[str, list[str]]:
    """docs/sweeps.md's presets table: name -> [what, runs, duration]."""
    text = (ROOT / "docs" / "sweeps.md").read_text(encoding="utf-8")
    rows = {}
    for line in text.splitlines():
        match = re.match(r"\| `([a-z0-9-]+)` \| (.*) \|$", line)
        if match and not match.group(1).startswith("mr2"):
            rows[match.group(1)] = [cell.strip() for cell in match.group(2).split(" | ")]
    return rows


def test_presets_table_counts_the_runs_each_cpu_preset_plans() -> None:
    from mr2.sweep.plan import plan_sweep
    from mr2.sweep.presets import load_preset

    rows = _presets_rows()
    for name in ("demo", "fashion-mnist", "fashion-mnist-tuning", "fashion-mnist-variants",
                 "fashion-mnist-baselines"):
        assert rows[name][1] == str(len(plan_sweep(load_preset(name)))), name
    assert "(30 runs;" in preset_descriptions()["fashion-mnist-baselines"]


def test_variants_duration_is_the_sum_of_its_measured_rounds() -> None:
    duration = _presets_rows()["fashion-mnist-variants"][2]
    match = re.fullmatch(r"(\d+) min \(measured in three rounds: ([\d.]+) \+ ([\d.]+) \+ ([\d.]+) min\)", duration)
    assert match is not None, duration
    total = sum(float(match.group(i)) for i in (2, 3, 4))
    assert int(match.group(1)) == round(total)
    assert f"({match.group(1)} min on 2 cores, measured in three rounds)" in preset_descriptions()[
        "fashion-mnist-variants"
    ]


def test_baselines_duration_is_the_benchmarked_one() -> None:
    benchmarks = (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")
    command = "mr2 sweep --preset fashion-mnist-baselines --workers 2 --threads-per-run 1"
    assert command in benchmarks and "**7 min 2 s**" in benchmarks
    description = preset_descriptions()["fashion-mnist-baselines"]
    assert "7 min on 2 cores with --workers 2 --threads-per-run 1, measured" in description
    assert _presets_rows()["fashion-mnist-baselines"][2] == (
        "7 min with `--workers 2 --threads-per-run 1` (measured, BENCHMARKS.md section 6)"
    )
