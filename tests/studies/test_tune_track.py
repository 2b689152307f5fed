"""studies/tune_track/track.py: the rule that picks tune's default candidate set (as
docs/benchmarks/tune-track-record.md states it), the regime-map row it reads, and the sweep that puts
a chosen configuration outside the row on the row's seeds."""

from __future__ import annotations

import csv
import itertools
from pathlib import Path

import pytest
import yaml

from helpers import load_script
from mr2.tune.candidates import candidates

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def track():
    return load_script(ROOT / "studies" / "tune_track" / "track.py", "track")


def _rows(track, regret: dict[str, float], harmed: dict[str, int]) -> list[dict]:
    """One finished row per (cell, set): every cell of a set has the set's regret; the first
    ``harmed[set]`` cells of a set harmed the hard tier."""
    rows = []
    for candidate_set in track.SETS:
        for index, cell in enumerate(track.CELLS):
            rows.append({"cell": cell, "set": candidate_set, "regret": regret[candidate_set],
                         "harm": index < harmed.get(candidate_set, 0)})
    return rows


@pytest.mark.parametrize(("regret", "harmed", "default"), [
    ({"quick": 1.00, "full": 0.80}, {}, "quick"),              # within 0.25 of the lowest: the cheaper
    ({"quick": 1.00, "full": 0.74}, {}, "full"),               # full lower by more than 0.25
    ({"quick": 0.50, "full": 0.90}, {}, "quick"),              # quick is the lowest itself
    ({"quick": 1.00, "full": 0.10}, {"full": 1}, "quick"),     # full harms once: only quick qualifies
    ({"quick": 0.10, "full": 1.00}, {"quick": 1}, "full"),     # quick harms: full is the only one left
])
def test_the_rule_takes_the_cheapest_qualifying_set_within_a_quarter_point(track, regret, harmed, default):
    assert track.apply_rule(_rows(track, regret, harmed)).endswith(f"default: {default}")


def test_the_rule_keeps_quick_when_no_set_qualifies_and_waits_for_every_result(track):
    outcome = track.apply_rule(_rows(track, {"quick": 0.1, "full": 0.2}, {"quick": 2, "full": 1}))
    assert outcome.endswith("no set qualifies: the default stays quick")
    assert "quick: mean regret 0.10, harm count 2" in outcome
    rows = _rows(track, {"quick": 0.1, "full": 0.2}, {})
    rows[-1]["regret"] = None  # a chosen configuration not yet in its row
    assert track.apply_rule(rows) == "rule not applied: 1 of 20 (cell, set) results missing"


def test_regime_row_is_the_mean_paired_hard_tier_change_and_reads_the_track_folder(track, tmp_path, monkeypatch):
    """The row of a cell: per method, the mean over 5 seeds of (method - ERM) on the hard tier, in
    points, from the cell's report and its ``-track`` report; another cell's folder is not read."""
    hard = {"erm": [0.50, 0.60, 0.55, 0.40, 0.45], "mr2": [0.52, 0.58, 0.60, 0.41, 0.40],
            "mr2-distance_1d-c2": [0.55, 0.61, 0.55, 0.45, 0.50]}
    tiers = ("easy", "medium", "hard")
    for folder, methods in (("mlp-n100", ("erm", "mr2")), ("mlp-n100-track", ("erm", "mr2-distance_1d-c2")),
                            ("mlp-n1000", ("erm", "mr2-distance_1d-c2"))):
        (tmp_path / folder).mkdir()
        with open(tmp_path / folder / "runs.csv", "w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["run", "method", "seed", "overall", *(f"tier:{t}" for t in tiers)])
            for method, seed in itertools.product(methods, range(5)):
                value = hard[method][seed] if folder != "mlp-n1000" else 0.0
                writer.writerow([f"{method}__seed={seed}", method, seed, 0.7, 0.9, 0.7, value])
    monkeypatch.setattr(track, "REGIMES", tmp_path)
    row = track.regime_row("mlp-n100")
    expected = {m: sum(100 * (a - b) for a, b in zip(hard[m], hard["erm"], strict=True)) / 5 for m in hard}
    assert row.keys() == expected.keys()
    for method, value in expected.items():
        assert row[method] == pytest.approx(value, abs=1e-9)


def test_track_spec_trains_the_chosen_candidates_with_erm_on_the_rows_seeds(track, tmp_path):
    spec = track.track_spec("mlp-n100", ["mr2-distance_1d-c2", "mr2-additive_margin-m0.25"], tmp_path, None)
    cell = yaml.safe_load((ROOT / "studies" / "regimes" / "mlp-n100.yaml").read_text())
    pool = {c.label: c for c in candidates("full")}
    assert spec["base"] == cell["base"]
    assert spec["seeds"] == [0, 1, 2, 3, 4] and spec["reference"] == "erm"
    assert spec["methods"] == {"erm": {}, "mr2-distance_1d-c2": pool["mr2-distance_1d-c2"].entry(),
                               "mr2-additive_margin-m0.25": pool["mr2-additive_margin-m0.25"].entry()}
    assert spec["methods"]["mr2-distance_1d-c2"]["method.options.c_bar"] == 2.0
    assert spec["name"] == "mlp-n100-track" and spec["output_dir"] == str(tmp_path / "extend")
    glyphs = tmp_path / "glyphs.npz"
    glyph_spec = track.track_spec("glyphs-cnn-n100", ["supcon"], tmp_path, glyphs)
    assert glyph_spec["base"]["data"]["root"] == str(glyphs.resolve())


@pytest.mark.parametrize(("cell", "labels", "glyphs", "message"), [
    ("mlp-n100", ["erm"], None, "erm: give labels of full's non-ERM candidates"),
    ("mlp-n100", ["mr2-paper-c3"], None, "mr2-paper-c3: give labels"),
    ("mlp-n100", [], None, "no label: give labels"),
    ("mlp-n7", ["supcon"], None, "unknown cell 'mlp-n7'"),
    ("glyphs-mlp-n100", ["supcon"], None, "a glyph cell needs --glyphs FILE"),
])
def test_track_spec_refuses_what_it_cannot_train(track, tmp_path, cell, labels, glyphs, message):
    with pytest.raises(SystemExit, match=message):
        track.track_spec(cell, labels, tmp_path, glyphs)


def test_a_cell_without_its_regime_map_row_has_no_regret_even_when_tune_kept_erm(track, tmp_path, monkeypatch):
    """Before the cell's sweep is collected there is no row: no best in hindsight, no regret (not a
    regret of 0 for an ERM choice), and the rule waits."""
    monkeypatch.setattr(track, "REGIMES_K100", tmp_path / "rows")
    assert track.regime_row("glyphs-mlp-n300") == {}
    tune = tmp_path / "tunes" / "glyphs-mlp-n300-quick"
    tune.mkdir(parents=True)
    (tune / "recommendation.json").write_text('{"recommendation_is_erm": true, "label": "erm"}')
    (row,) = track.summary(tmp_path / "tunes")
    assert row["cell"] == "glyphs-mlp-n300" and row["choice"] == "erm"
    assert row["regret"] is None and row["best_in_hindsight"] is None and row["chosen_change"] is None
    assert "results missing" in track.apply_rule([row])


def test_compare_puts_the_old_and_new_tunes_side_by_side_from_the_committed_records(track):
    """mlp-n1000: the old tune's confirmed center loss is adopted under today's gate, the re-run keeps
    ERM; regrets are the row's best minus the change of what each advice uses (ERM: 0)."""
    text = track.compare(ROOT / "docs" / "benchmarks" / "tune-track")
    row = track.regime_row("mlp-n1000")
    best = max(row, key=row.get)
    side = next(line for line in text.splitlines() if line.startswith("| mlp-n1000 | center_loss (confirmed)"))
    cells = [c.strip() for c in side.strip("|").split("|")]
    assert cells[3] == "ADOPT center_loss" and cells[7] == "keep ERM"
    assert float(cells[6]) == pytest.approx(row[best] - row["center_loss"], abs=0.006)
    assert float(cells[10]) == pytest.approx(row[best], abs=0.006)
    per_cell = next(line for line in text.splitlines() if line.startswith("| mlp-n1000 | KEEP ERM |"))
    assert "+0.04 on seeds 8-16" in per_cell and f"{best} ({row[best]:+.2f})" in per_cell


def test_the_issue_44_rerun_has_the_designs_confirmation_pool_and_its_own_name(track, tmp_path):
    """``run --v3``: selection seeds 5-7 as before and the 17 fresh seeds DEFAULT_DESIGN can use (8-24),
    into ``<cell>-full-v3``; the issue-37 re-run and the first runs keep their seeds."""
    from mr2.tune.design import DEFAULT_DESIGN

    config = tmp_path / "c.yaml"
    name, command = track.tune_command("mlp-n100", "full", "v3", config, tmp_path, 2)
    assert name == "mlp-n100-full-v3"
    args = dict(zip(command[4::2], command[5::2], strict=True))
    confirm = [int(s) for s in args["--confirm-seeds"].split(",")]
    assert confirm == list(range(8, 25)) and len(confirm) == DEFAULT_DESIGN.confirmation_seeds
    assert args["--seeds"] == "5,6,7" and len(args["--seeds"].split(",")) >= DEFAULT_DESIGN.selection_seeds
    assert not set(confirm) & {0, 1, 2, 3, 4, 5, 6, 7}  # no regime-map or selection seed
    assert command[command.index("--name") + 1] == name and command[command.index("--config") + 1] == str(config)
    assert track.tune_command("mlp-n100", "full", "v2", config, tmp_path, 2)[1][
        command.index("--confirm-seeds") + 1] == ",".join(str(s) for s in range(8, 17))
    first = track.tune_command("mlp-n100", "quick", None, config, tmp_path, 2)
    assert first[0] == "mlp-n100-quick" and first[1][command.index("--confirm-seeds") + 1] == "8,9,10"


def test_compare_sets_two_reruns_side_by_side_and_counts_a_screens_contenders(track, tmp_path):
    """``compare --old full-v2 --new full-v3``: the v3 tune's row (16 contenders counted, not listed) and
    the pair row, from records laid out as the tunes write them."""
    import json
    import shutil

    source = ROOT / "docs" / "benchmarks" / "tune-track" / "mlp-n1000-full-v2"
    shutil.copytree(source, tmp_path / "mlp-n1000-full-v2")
    shutil.copytree(source, tmp_path / "mlp-n1000-full-v3")
    record = tmp_path / "mlp-n1000-full-v3" / "recommendation.json"
    data = json.loads(record.read_text())
    data["advice"]["contenders"] = [f"c{i}" for i in range(16)]
    record.write_text(json.dumps(data))
    text = track.compare(tmp_path, "full-v2", "full-v3")
    row = next(line for line in text.splitlines() if line.startswith("| mlp-n1000 | KEEP ERM |"))
    assert "| 16, screened |" in row
    pair = next(line for line in text.splitlines() if line.startswith("| mlp-n1000 | center_loss ("))
    cells = [c.strip() for c in pair.strip("|").split("|")]
    assert cells[7] == "keep ERM" and cells[4] == cells[8]  # the same trainings on both sides (a copy)
    assert "| mean over 1 |" in text
