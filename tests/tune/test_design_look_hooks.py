"""The shipped rule's answers to the two questions a Plan asks its design (Design.look_levels,
Design.look_level), the research options of issue 44 refused with a pointer to where they went
(benchmarks/tune_research_design.py), and old records that carry them still read as written."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest

from mr2.tune.design import DEFAULT_DESIGN, Design, Plan, nominal_levels
from mr2.tune.record import TuneRecord
from mr2.tune.text import design_text
from mr2.tune.verdict import SeedFigures, judge_figures

ROOT = Path(__file__).resolve().parents[2]
OLD_RECORD = ROOT / "docs" / "benchmarks" / "tune-track" / "cnn-n100-full-v2" / "recommendation.json"


@pytest.mark.parametrize("options", [{"boundaries": "binding"}, {"variance": "pooled", "multiplicity": "max_t"},
                                     {"boundaries": "union"}])
def test_the_research_options_are_refused_with_where_they_went(options):
    with pytest.raises(TypeError, match=r"^Design has no options? 'boundaries|variance'.*not shipped.*"
                                        r"benchmarks/tune_research_design\.py \(ResearchDesign\)$"):
        Design(contenders=2, **options)
    with pytest.raises(TypeError, match=r"benchmarks/tune_research_design\.py"):
        dataclasses.replace(DEFAULT_DESIGN, **options)


def test_an_unknown_option_is_still_the_plain_error_and_the_shipped_fields_are_what_the_record_holds():
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        Design(bogus=1)  # type: ignore[call-arg]
    names = {f.name for f in dataclasses.fields(Design)}
    assert not names & {"boundaries", "variance", "multiplicity"}
    assert list(DEFAULT_DESIGN.to_dict()) == [f.name for f in dataclasses.fields(Design)]
    # the printed rule names no option that is gone
    for design in (DEFAULT_DESIGN, Design(contenders=2, confirmation_looks=(3, 6), futility=0.5)):
        text = design_text(design)
        assert "exact levels" not in text and "binding" not in text and "pooled" not in text


def test_an_old_record_with_the_research_fields_reads_as_written():
    """Nothing rebuilds a Design from a record (a resumed tune reuses its trials and writes the record
    afresh): a record written before the move keeps its ``design`` verbatim and round-trips."""
    data = json.loads(OLD_RECORD.read_text())
    assert data["design"]["boundaries"] == "union"  # written when Design had the field
    record = TuneRecord.from_dict(data)
    assert record.design == data["design"]
    assert TuneRecord.from_dict(record.to_dict()).to_dict() == record.to_dict()
    old = {**data, "design": {**data["design"], "boundaries": "binding", "variance": "pooled",
                              "multiplicity": "max_t"}}
    assert TuneRecord.from_dict(old).to_dict()["design"] == old["design"]


@pytest.mark.parametrize(("spending", "looks", "contenders"), [("obrien_fleming", (4, 8, 12, 16), 1),
                                                               ("pocock", (3, 6, 9), 4),
                                                               ("bonferroni", (2, 5), 3)])
def test_the_shipped_look_levels_are_the_union_levels_of_alpha_over_the_contenders(spending, looks, contenders):
    design = Design(alpha=0.05, contenders=contenders, confirmation_looks=looks, spending=spending)
    expected = nominal_levels([n / looks[-1] for n in looks], 0.05 / contenders, spending)
    assert design.look_levels(looks, contenders) == expected
    assert sum(expected) == pytest.approx(0.05 / contenders, rel=1e-12)  # the union bound spends it all
    plan = Plan(["erm", "a"], selection_seeds=[1, 2], confirmation_seeds=[3, 4], design=design)
    assert design.look_level(plan, 0.0123) == (0.0123, None)  # the look's level, each contender's own SD


def test_a_pooled_spread_is_used_only_when_larger_and_then_with_its_df():
    """judge_figures' ``spread`` (what Design.look_level may offer): a larger spread replaces the
    contender's own paired SD, with its degrees of freedom; a smaller one changes nothing."""
    from scipy import stats

    erm = {s: SeedFigures(0.70 + 0.001 * (s % 2), 0.9) for s in range(3)}
    new = {s: SeedFigures(0.72 + 0.002 * (s % 3), 0.9) for s in range(3)}
    own = judge_figures(erm, new, chosen_label="a", alpha=0.01)
    d = np.array([new[s].hard_tier - erm[s].hard_tier for s in range(3)])
    # A larger pooled SD: its df.
    wide = judge_figures(erm, new, chosen_label="a", alpha=0.01, spread=(0.01, 14))
    assert (wide.sd_used, wide.df) == (0.01, 14)
    assert wide.p_greater == pytest.approx(stats.t.sf(d.mean() / (0.01 / math.sqrt(3)), 14), rel=1e-12)
    # A smaller one: the own test, unchanged.
    narrow = judge_figures(erm, new, chosen_label="a", alpha=0.01, spread=(1e-4, 14))
    assert (narrow.df, narrow.p_greater) == (2, own.p_greater)
    assert narrow.sd_used == pytest.approx(d.std(ddof=1))
