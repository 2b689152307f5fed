"""studies/glyphs/gpu_cell.py: the rule that sizes the ResNet-32 glyph cell to a GPU lease (fixed
before any run), its agreement with the cell's sweep file, and the packing that returns what finished."""

from __future__ import annotations

import math
import tarfile
from pathlib import Path

import pytest
import yaml

from helpers import load_script

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "studies" / "glyphs" / "regimes" / "resnet32-gpu-n100.yaml"


@pytest.fixture(scope="module")
def cell():
    return load_script(ROOT / "studies" / "glyphs" / "gpu_cell.py", "gpu_cell")


def _prediction(runs: int, rate: float) -> float:
    # the docstring's formula, written out: 1.3 x runs x 71 steps x 200 epochs / R + 45 s
    return 1.3 * runs * 71 * 200 / rate + 45


@pytest.mark.parametrize(("rate", "budget", "expected"), [
    (800.0, 420.0, ("erm,mr2,mr2_distance_1d", "0,1,2,3,4")),  # 15 runs: 391.1 s
    (700.0, 420.0, ("erm,mr2", "0,1,2,3,4")),                   # 15: 440.6 s; 10: 308.7 s
    (450.0, 420.0, ("erm,mr2", "0,1,2,3")),                     # 10: 455.2 s; 8: 373.2 s
    (400.0, 420.0, ("erm,mr2", "0,1,2,3")),                     # 10: 506.5 s; 8: 414.2 s, not over 420
    (300.0, 420.0, ("erm,mr2", "0,1,2")),                       # 8: 537.3 s; 6: 414.2 s
    (200.0, 420.0, ("erm,mr2", "0,1")),                         # nothing fits (4: 414.2 s; 6: 598.8 s)
])
def test_the_first_plan_whose_prediction_fits_the_budget_is_chosen(cell, rate, budget, expected):
    plans = [(m, s) for m, s in cell.PLANS]
    runs = [len(m.split(",")) * len(s.split(",")) for m, s in plans]
    fitting = [p for p, r in zip(plans[:-1], runs[:-1]) if _prediction(r, rate) <= budget]
    oracle = fitting[0] if fitting else plans[-1]
    assert oracle == expected
    assert cell.choose_plan(rate, budget) == expected
    for plan, r in zip(plans, runs):
        assert cell.predicted_seconds(cell.runs_of(plan), rate) == pytest.approx(_prediction(r, rate), rel=1e-12)


def test_plans_shrink_and_only_name_the_sweep_files_methods_and_seeds(cell):
    spec = yaml.safe_load(SPEC.read_text())
    sizes = [cell.runs_of(plan) for plan in cell.PLANS]
    assert sizes == sorted(sizes, reverse=True) and sizes == [15, 10, 8, 6, 4]
    for methods, seeds in cell.PLANS:
        assert set(methods.split(",")) <= set(spec["methods"]) and methods.split(",")[0] == spec["reference"]
        assert {int(s) for s in seeds.split(",")} <= set(spec["seeds"])


def test_the_step_count_matches_the_cells_data_and_schedule(cell):
    base = yaml.safe_load(SPEC.read_text())["base"]
    classes = 100
    train_images = round(classes * base["data"]["train_per_class"] * (1 - base["data"]["val_fraction"]))
    assert math.ceil(train_images / base["data"]["batch_size"]) == cell.STEPS_PER_EPOCH
    assert cell.EPOCHS == base["optim"]["epochs"] == 200
    assert base["model"]["name"] == "resnet32" and base["optim"]["lr"] == 0.1


def test_pack_leaves_out_checkpoints_and_tensorboard_and_replaces_the_archive(cell, tmp_path):
    sweep = tmp_path / "glyphs-resnet32-n100"
    run = sweep / "erm__seed=0"
    for name in ("final.json", "metrics.jsonl", "checkpoints/last.pt", "tensorboard/events.out"):
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_text(name)
    out = tmp_path / "out"
    out.mkdir()
    cell.pack(sweep, out)
    (run / "predictions.npz").write_text("later")
    cell.pack(sweep, out)
    with tarfile.open(out / "cell.tgz") as archive:
        names = sorted(m.name for m in archive.getmembers() if m.isfile())
    assert names == ["glyphs-resnet32-n100/erm__seed=0/final.json", "glyphs-resnet32-n100/erm__seed=0/metrics.jsonl",
                     "glyphs-resnet32-n100/erm__seed=0/predictions.npz"]
    assert sorted(p.name for p in out.iterdir()) == ["cell.tgz"]
