"""What the command line says about itself agrees with what was measured and with its own page
(issue 26, item 10): the `fashion-mnist` preset's stated duration, `mr2 demo --help`."""

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
