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
from mr2.sweep.progress import format_duration
from mr2.tune import trial_tune
from mr2.tune.candidates import CANDIDATE_SETS, DEFAULT_CANDIDATE_SET, candidates
from mr2.tune.estimate import NO_ESTIMATE_COMMAND, measure_step
from mr2.tune.run import make_request, selection_spec


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
    """``mr2 tune`` (both sources), run_tune's request and mr2.tune.tune share one default set."""
    import inspect

    from mr2.cli.main import build_parser

    assert DEFAULT_CANDIDATE_SET in CANDIDATE_SETS
    assert DEFAULT_CANDIDATES == DEFAULT_CANDIDATE_SET
    args = build_parser().parse_args(["tune", "--config", "x.yaml"])
    assert args.candidates == DEFAULT_CANDIDATE_SET
    assert inspect.signature(make_request).parameters["candidate_set"].default == DEFAULT_CANDIDATE_SET
    for function in (trial_tune.tune, trial_tune.make_trial_request):
        assert inspect.signature(function).parameters["candidates"].default == DEFAULT_CANDIDATE_SET


def test_tune_defaults_to_one_worker_per_core_with_one_thread_each(tmp_path: Path) -> None:
    config = load_config(_config(tmp_path))
    request = make_request(config, name="t", seeds=3)  # the default set's candidates x 3 seeds
    runs = len(candidates(DEFAULT_CANDIDATE_SET)) * 3
    cores = len(os.sched_getaffinity(0))
    assert request.workers == min(cores, runs)
    assert selection_spec(request).workers == request.workers
    if "OMP_NUM_THREADS" not in os.environ:
        assert default_threads(request.workers) == max(1, cores // min(cores, runs))
    assert make_request(config, name="t", workers=3).workers == 3  # a given count is kept


def test_dry_run_prints_a_measured_time_estimate_and_writes_nothing(tmp_path: Path, capsys) -> None:
    config = _config(tmp_path)
    out = tmp_path / "out"
    assert main(["tune", "--config", str(config), "--candidates", "quick", "--workers", "2", "--threads-per-run", "1",
                 "--output-dir", str(out), "--dry-run"]) == 0
    printed = capsys.readouterr().out
    lines = [line for line in printed.splitlines() if line.startswith("time estimate: ")]
    assert len(lines) == 1
    match = re.fullmatch(
        r"time estimate: about (.+) for the selection and up to (.+) for the confirmation \(12 and 6 runs, "
        r"2 at a time, each 3 epochs x (\d+) steps x ([0-9.]+) s per step, measured: 5 steps of ERM with "
        r"this configuration's model and data on cpu, 1 thread; not included: evaluation, start-up and "
        r"the candidates' extra cost per step over ERM\)",
        lines[0],
    )
    assert match is not None, lines[0]
    steps, seconds = int(match[3]), float(match[4])
    assert steps == math.ceil(120 / 16)  # 160 training samples less the 25% validation split, batch 16
    assert seconds > 0
    assert match[1] == format_duration(6 * 3 * steps * seconds)  # 12 runs, 2 at a time
    assert match[2] == format_duration(3 * 3 * steps * seconds)
    assert not out.exists()


def test_measure_step_times_the_configured_steps_and_restores_the_threads(tmp_path: Path) -> None:
    import torch

    config = load_config(_config(tmp_path))
    before = torch.get_num_threads()
    timing = measure_step(config, threads=1, steps=3)
    assert torch.get_num_threads() == before
    assert (timing.steps, timing.steps_per_epoch, timing.threads, timing.device) == (3, 8, 1, "cpu")
    assert timing.seconds_per_step > 0
    assert not (Path(config.output_dir) / config.name).exists()


def test_command_dry_run_says_there_is_no_estimate(tmp_path: Path, capsys) -> None:
    command = "python train.py --loss-json {loss} --seed {seed} --out {out}"
    assert main(["tune", "--command", command, "--num-classes", "4", "--output-dir", str(tmp_path / "o"),
                 "--dry-run"]) == 0
    assert NO_ESTIMATE_COMMAND in capsys.readouterr().out.splitlines()
