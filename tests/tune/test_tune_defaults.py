"""``mr2 tune``'s defaults: workers follow the sweep's rule (one run per CPU core, one thread each, at
most one per run), and ``--dry-run`` prints a time estimate measured on this machine, saying what it is
based on (none with ``--command``, which mr2 cannot time)."""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

import yaml

from helpers import write_spread_npz
from mr2.cli.main import main
from mr2.cli.tune import DEFAULT_CANDIDATES
from mr2.config import load_config
from mr2.sweep.processes import default_threads, default_workers
from mr2.tune import api
from mr2.tune.candidates import CANDIDATE_SETS, DEFAULT_CANDIDATE_SET, candidates
from mr2.tune.engine_source import engine_source, phase_spec
from mr2.tune.estimate import NO_ESTIMATE_COMMAND, measure_step
from mr2.tune.request import make_request


def _config(tmp: Path) -> Path:
    npz = write_spread_npz(tmp / "data.npz", num_classes=4, dim=8, train_per_class=40, test_per_class=10)
    config = {
        "data": {"name": "arrays", "root": str(npz), "val_fraction": 0.25, "batch_size": 16},
        "model": {"name": "mlp", "options": {"hidden_dims": [16]}},
        "optim": {"name": "sgd", "lr": 0.05, "epochs": 3},
        "device": "cpu",
    }
    file = tmp / "run.yaml"
    file.write_text(yaml.safe_dump(config))
    return file


def test_the_rule_is_one_worker_per_core_or_gpu_never_more_than_the_runs() -> None:
    assert [default_workers(12, cores=c) for c in (1, 2, 16)] == [1, 2, 12]
    assert default_workers(3, gpus=8, cores=64) == 3
    assert default_workers(12, gpus=4, cores=64) == 4
    assert default_workers(0, cores=4) == 1


def test_every_entry_point_defaults_to_the_one_candidate_set() -> None:
    """``mr2 tune`` (both sources), make_request and mr2.tune.tune share one default set."""
    import inspect

    from mr2.cli.main import build_parser

    assert DEFAULT_CANDIDATE_SET in CANDIDATE_SETS
    assert DEFAULT_CANDIDATES == DEFAULT_CANDIDATE_SET
    for source in (["--config", "x.yaml"], ["--command", "python train.py"]):
        args = build_parser().parse_args(["tune", *source])
        assert args.candidates == DEFAULT_CANDIDATE_SET
    for function in (make_request, api.tune):
        assert inspect.signature(function).parameters["candidates"].default == DEFAULT_CANDIDATE_SET


def test_tune_defaults_to_one_worker_per_core_with_one_thread_each(tmp_path: Path) -> None:
    config = load_config(_config(tmp_path))
    # The default set's candidates x 3 selection seeds.
    request = make_request(output_dir=tmp_path / "out", name="t", losses_only=False, seeds=3)
    source = engine_source(config, request)
    runs = len(candidates(DEFAULT_CANDIDATE_SET, losses_only=False)) * 3
    assert len(request.candidates) * len(request.seeds) == runs
    cores = len(os.sched_getaffinity(0))
    assert source.workers == min(cores, runs)
    for phase in ("selection", "confirmation"):
        assert phase_spec(request, config, phase, workers=source.workers).workers == source.workers
        assert source.spec(phase).workers == source.workers
    if "OMP_NUM_THREADS" not in os.environ:
        assert default_threads(source.workers) == max(1, cores // min(cores, runs))
    assert engine_source(config, request, workers=3).workers == 3  # a given count is kept
    assert not (tmp_path / "out").exists()


def test_dry_run_prints_a_measured_time_estimate_and_writes_nothing(tmp_path: Path, capsys) -> None:
    config = _config(tmp_path)
    out = tmp_path / "out"
    assert main(["tune", "--config", str(config), "--candidates", "quick", "--workers", "2", "--threads-per-run", "1",
                 "--output-dir", str(out), "--dry-run"]) == 0
    printed = capsys.readouterr().out
    # The trainings the plan may run: expected and at most (the design decides the confirmation's).
    plan = make_request(output_dir=out, name="t", candidates="quick", losses_only=False).plan()
    expected, most = plan.expected_trainings(), plan.max_trainings()
    assert most > len(plan.next_round()) >= 4 and expected <= most  # a first round of every candidate, and more
    assert f"trainings: {expected:.1f} expected (by simulation), at most {most}; " in printed
    first = plan.trainings  # the first round's trials, every one still to run
    assert f"first round ({first} trials):" in printed and printed.count(" to run\n") == first
    lines = [line for line in printed.splitlines() if line.startswith("time estimate: ")]
    assert len(lines) == 1
    match = re.fullmatch(
        rf"time estimate: about (.+) for the {expected:.1f} trainings expected and at most (.+) for the {most} "
        r"the plan may run \(2 at a time, each (.+): start-up (.+), 3 epochs x \((\d+) steps x ([0-9.]+) s \+ a "
        r"validation pass (.+)\), a test pass (.+); measured with ERM, this configuration's model and data on "
        r"cpu, 1 thread: 5 steps, the start-up and up to 10 evaluation batches; not included: the "
        r"candidates' extra cost per step over ERM\)",
        lines[0],
    )
    assert match is not None, lines[0]
    steps, seconds = int(match[5]), float(match[6])
    assert steps == math.ceil(120 / 16)  # 160 training samples less the 25% validation split, batch 16
    assert seconds > 0
    # Issue 39: the estimate counts each run's start-up (a fresh Python importing the engine, the
    # data and model built) and its evaluation passes, which the old line left out (16 s announced,
    # 67 s taken on docs/tune.md's example).
    start_up = _seconds(match[4])
    assert start_up > 0.2
    per_run = _seconds(match[3])
    assert per_run >= start_up + 3 * steps * seconds - 0.1  # both shown to 0.1 s
    # 2 at a time; the line shows the run and its parts rounded to 0.1 s and the total to the second,
    # so the total may differ from the rounded run times the rounds by those roundings.
    rounds = math.ceil(expected / 2)
    assert abs(_seconds(match[1]) - rounds * per_run) <= rounds * 0.1 + 1
    assert not out.exists()


def _seconds(text: str) -> float:
    """``"4.2 s"`` or ``"3 min 05 s"`` back to seconds (mr2.tune.source.format_seconds)."""
    if text.endswith(" s") and " min " not in text:
        return float(text[:-2])
    minutes, rest = text.split(" min ")
    return 60 * int(minutes) + int(rest.rstrip(" s"))


def test_measure_step_times_the_configured_steps_and_restores_the_threads(tmp_path: Path) -> None:
    import torch

    config = load_config(_config(tmp_path))
    before = torch.get_num_threads()
    timing = measure_step(config, threads=1, steps=3)
    assert torch.get_num_threads() == before
    assert (timing.steps, timing.steps_per_epoch, timing.threads, timing.device) == (3, 8, 1, "cpu")
    assert timing.seconds_per_step > 0
    # The start-up and the evaluation passes are measured too (the validation split is 25% of 160).
    assert timing.startup_seconds > 0 and timing.validation_seconds > 0 and timing.test_seconds > 0
    assert timing.run_seconds(3) > 3 * timing.steps_per_epoch * timing.seconds_per_step
    assert not (Path(config.output_dir) / config.name).exists()


def test_command_dry_run_says_there_is_no_estimate(tmp_path: Path, capsys) -> None:
    command = "python train.py --loss-json {loss} --seed {seed} --out {out}"
    assert main(["tune", "--command", command, "--num-classes", "4", "--output-dir", str(tmp_path / "o"),
                 "--dry-run"]) == 0
    assert NO_ESTIMATE_COMMAND in capsys.readouterr().out.splitlines()
