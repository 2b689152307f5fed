"""Issue 45 item 7: what a new user reads first is true and in the order they need it. README's first
screen says how to add MR2 and how to find out whether it helps, before the measured tables; the
stated seed counts, verdict names and the default tune's shape agree with the code."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from mr2.sweep import load_preset
from mr2.tune.design import DEFAULT_DESIGN
from mr2.tune.request import make_request

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
#: What fits on a first screen.
FIRST_SCREEN_LINES = 30


def _heading_line(prefix: str) -> int:
    lines = README.splitlines()
    return next(i for i, line in enumerate(lines) if line.startswith(prefix))


def test_readme_says_how_to_add_mr2_and_how_to_find_out_before_the_measurements() -> None:
    add = _heading_line("## Add MR2 to your script")
    tune = _heading_line("## Find out whether it helps you")
    measured = _heading_line("## What the measurements say")
    two_commands = _heading_line("## Two commands")
    assert two_commands < add < tune < measured
    # Every line with a measured figure (a signed number of points, a percentage) comes after both.
    for number, line in enumerate(README.splitlines()):
        if re.search(r"[+-]\d+\.\d+ (points|on the)|\d+\.\d+ %? ?points", line):
            assert number > tune, line
    first = "\n".join(README.splitlines()[:FIRST_SCREEN_LINES])
    assert "(#add-mr2-to-your-script)" in first and "(#find-out-whether-it-helps-you-mr2-tune)" in first
    assert "make demo" in first and "make test" in first


def test_readmes_reference_protocol_states_the_seeds_it_runs() -> None:
    preset_seeds = load_preset("fashion-mnist").seeds
    found = re.findall(r"`mr2 sweep --preset fashion-mnist(?P<args>[^`]*)`:[^)]*?(?P<n>\d+) seeds", README)
    assert found
    for args, count in found:
        seeds = re.search(r"--seeds ([\d,]+)", args)
        ran = len(seeds.group(1).split(",")) if seeds else len(preset_seeds)
        assert int(count) == ran, (args, count)
    assert f"the preset alone runs seeds 0-{len(preset_seeds) - 1}" in README


def test_readme_names_no_retired_verdict_as_current() -> None:
    assert "(verdict `supported`)" not in README
    for match in re.finditer(r"`supported`", README):
        assert "retired" in README[max(0, match.start() - 120):match.end() + 120]


def test_tune_ready_states_the_default_tunes_shape() -> None:
    page = " ".join((ROOT / "docs" / "tune-ready.md").read_text(encoding="utf-8").split())
    assert "16 losses" not in page and "x 3 seeds, then the confirmation on 3 fresh seeds" not in page
    match = re.search(
        r"the `full` set, ERM and (?P<n>\d+) candidates with your own code: every candidate is ranked on "
        r"(?P<first>\d+) validation seed, ERM on (?P<erm>\d+); the (?P<contenders>\d+) best are screened "
        r"against ERM on the test predictions of the selection seed they ran on and (?P<screen>\d+) fresh "
        r"test seed; the finalist of the screen is confirmed against "
        r"ERM on fresh test seeds after the screen, (?P<step>\d+) at a time up to (?P<most>\d+)", page)
    assert match is not None
    request = make_request(num_classes=10, output_dir="unused", name="x")
    first_round = Counter(item.label for item in request.plan().next_round())
    assert int(match["n"]) == len(first_round) - 1  # every candidate but ERM
    assert int(match["first"]) == max(n for label, n in first_round.items() if label != "erm")
    assert int(match["erm"]) == first_round["erm"]
    assert request.design == DEFAULT_DESIGN
    assert (int(match["first"]),) == DEFAULT_DESIGN.selection_looks and DEFAULT_DESIGN.keep == ()
    assert int(match["contenders"]) == DEFAULT_DESIGN.contenders and int(match["screen"]) == DEFAULT_DESIGN.screen
    assert DEFAULT_DESIGN.screen_reuse
    looks = DEFAULT_DESIGN.confirmation_looks
    assert looks is not None and int(match["most"]) == looks[-1]
    assert all(b - a == int(match["step"]) for a, b in zip((0, *looks), looks, strict=False))
