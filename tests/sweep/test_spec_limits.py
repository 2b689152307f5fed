"""Stated maxima of a sweep (seeds, planned runs, workers, threads, bootstrap), checked before
anything is expanded or written; one-line errors, exit code 2 on the command line."""

from __future__ import annotations

import re

import pytest
import yaml

from mr2.cli.main import main
from mr2.config.schema import MAX_SEED
from mr2.sweep import SweepSpecError, spec_from_dict
from mr2.sweep.spec import MAX_RUNS, MAX_SEEDS

BASE = {"data": {"name": "synthetic"}, "model": {"name": "mlp"}}


def _spec(**changes):
    data = {"base": BASE, "methods": {"erm": {}}, "seeds": [0], "reference": "erm"}
    data.update(changes)
    return spec_from_dict(data)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"seeds": 100_000_000},
         f"sweep key 'seeds' asks for 100000000 seeds; a sweep has at most {MAX_SEEDS}"),
        ({"seeds": 10**30}, f"sweep key 'seeds' asks for {10**30} seeds; a sweep has at most {MAX_SEEDS}"),
        ({"seeds": list(range(MAX_SEEDS + 1))},
         f"sweep key 'seeds' asks for {MAX_SEEDS + 1} seeds; a sweep has at most {MAX_SEEDS}"),
        ({"seeds": [0, 2**32]}, f"sweep key 'seeds[1]' must be an integer in [0, {MAX_SEED}]; got 4294967296."),
        ({"seeds": [0, 1, 0, 1, *range(2, 100)]}, "sweep key 'seeds' lists a seed twice: 0, 1."),
        ({"methods": {"erm": {"optim.lr": [0.1] * 1000, "optim.momentum": [0.9] * 1000}}},
         f"the sweep would plan 1000000 runs (1000000 settings x 1 seed(s)); at most {MAX_RUNS}"),
        ({"grid": {"optim.lr": list(range(1, 11))}, "seeds": 10_000,
          "methods": {"erm": {}, "mr2": {"method.options.c_bar": [1, 2]}}},
         f"the sweep would plan 300000 runs (30 settings x 10000 seed(s)); at most {MAX_RUNS}"),
        ({"workers": 10**9}, "sweep key 'workers' must be an integer in [1, 1024]; got 1000000000."),
        ({"threads_per_run": 10**6}, "sweep key 'threads_per_run' must be an integer in [1, 1024] or null"),
        ({"nproc_per_node": 5000}, "sweep key 'nproc_per_node' must be an integer in [1, 1024] or null"),
        ({"report": {"bootstrap": 10**9}}, "sweep key 'report.bootstrap' must be an integer in [0, 100000]"),
        ({"workers": 10**9, "devices": list(range(100_000))},
         "sweep key 'workers' must be an integer in [1, 1024]; got 1000000000."),
        ({"grid": {"optim.lr": 0.1}, "methods": {"erm": {"optim.lr": "x" * 100_000}}},
         "sweep key 'grid.optim.lr' must be a list of values (a grid axis); got 0.1."),
        ({"seeds": ["x" * 100_000]}, "sweep key 'seeds[0]' must be an integer in [0, 4294967295]; got 'xxxxxx"),
    ],
)
def test_limits_are_checked_before_expanding(changes, message):
    with pytest.raises(SweepSpecError) as caught:
        _spec(**changes)
    assert message in str(caught.value)
    assert len(str(caught.value)) < 400


def test_the_largest_allowed_sweep_is_accepted():
    spec = _spec(seeds=MAX_SEEDS, methods={"erm": {"optim.lr": list(range(1, 11))}})
    assert len(spec.seeds) == MAX_SEEDS and spec.seeds[-1] == MAX_SEEDS - 1
    assert _spec(seeds=[MAX_SEED]).seeds == [MAX_SEED]


def test_the_cli_refuses_a_huge_sweep_with_one_line_and_writes_nothing(tmp_path, capsys):
    file = tmp_path / "sweep.yaml"
    data = {"name": "big", "output_dir": str(tmp_path / "runs"), "base": BASE, "methods": {"erm": {}},
            "seeds": 100_000_000}
    file.write_text(yaml.safe_dump(data))
    assert main(["sweep", str(file), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and re.match(r"mr2 sweep: error: sweep key 'seeds' asks for 100000000", err)
    assert main(["sweep", str(file), "--seeds", f"0,{2**40}"]) == 2
    assert f"got {2**40}" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        (".", "'.' and '..' name directories, not runs"),
        ("..", "'.' and '..' name directories, not runs"),
        ("my\nsweep", "it contains a control character"),
        ("a/b", "it contains a path separator"),
        (" padded", "it begins or ends with whitespace"),
    ],
)
def test_sweep_names_follow_the_shared_name_rule(name, problem):
    # One rule for run, sweep and tune names (mr2.config.names); the spec used its own '/' check.
    from mr2.config.names import BAD_NAME

    with pytest.raises(SweepSpecError) as caught:
        _spec(name=name)
    assert str(caught.value) == BAD_NAME.format(what="sweep key 'name'", value=repr(name), problem=problem)
