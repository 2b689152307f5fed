"""The engine source's sweeps are sweeps like any other: ``phase_spec`` builds each phase's sweep as
the mapping a sweep file holds and validates it with the sweep's own constructor
(:func:`mr2.sweep.spec_from_dict`), because that mapping is what ``sweep.json`` keeps and what
``mr2 sweep status|report <tune>/<phase>`` rebuilds the sweep from (docs/tune.md's Slurm section)."""

from __future__ import annotations

import dataclasses

from helpers.tune_trials import engine_config
from mr2.cli.main import main
from mr2.config import load_config
from mr2.sweep.run import prepare_sweep
from mr2.sweep.status import load_sweep
from mr2.tune.design import PHASES
from mr2.tune.engine_source import phase_spec
from mr2.tune.request import make_request


def test_each_phase_sweep_is_rebuilt_from_its_sweep_json_as_mr2_sweep_status_reads_it(tmp_path, capsys) -> None:
    config = load_config(engine_config(tmp_path))
    request = make_request(output_dir=tmp_path / "out", name="t", candidates="erm,mr2-paper-c1", losses_only=False,
                           seeds=2, confirm_seeds=3)
    for phase, seeds in zip(PHASES, ([0, 1], [2, 3, 4]), strict=True):
        spec = phase_spec(request, config, phase, workers=2)
        points = prepare_sweep(spec)
        assert spec.sweep_dir == request.directory / phase
        assert sorted((p.label, p.seed) for p in points) == sorted(
            (label, seed) for label in ("erm", "mr2-paper-c1") for seed in seeds)
        rebuilt = load_sweep(spec.sweep_dir)
        assert dataclasses.replace(rebuilt, source=None) == dataclasses.replace(spec, source=None)
        capsys.readouterr()
        assert main(["sweep", "status", str(spec.sweep_dir)]) == 0
        shown = capsys.readouterr().out
        assert all(point.name in shown for point in points)
