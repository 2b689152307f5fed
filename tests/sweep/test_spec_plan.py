"""Sweep specification validation, plan expansion and run names, and the shipped presets."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from mr2.config import config_to_dict
from mr2.sweep import SweepSpecError, load_spec, plan_sweep, spec_from_dict
from mr2.sweep.plan import format_value
from mr2.sweep.presets import load_preset, preset_descriptions, preset_names, preset_path
from mr2.sweep.spec import ReportOptions

BASE = {"data": {"name": "synthetic"}, "model": {"name": "mlp"}}


def spec(**changes):
    data = {"base": BASE, "methods": {"erm": {}, "mr2": {}}, "seeds": [0], "reference": "erm"}
    data.update(changes)
    return spec_from_dict(data)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"seed": [0]}, "unknown sweep key 'seed'; valid keys here: name, "),
        ({"report": {"tier": 3}}, "unknown sweep key 'report.tier'; valid keys here: tiers, "),
        ({"base": {"optim": {"lrr": 0.1}}},
         "the base run configuration is invalid: unknown config key 'optim.lrr'"),
        ({"methods": {"erm": {"seed": [1, 2]}}}, "sweep key 'methods.erm.seed' sets 'seed'"),
        ({"methods": {"erm": {}, "mr2": {"method.options.c_bar": []}}},
         "grid axis 'methods.mr2.method.options.c_bar' has no values"),
        ({"methods": {"erm": {}, "mr2": {"method.options.cbar": [1, 2]}}},
         "method entry 'mr2': unknown option 'cbar' for method 'mr2'; valid options: ["),
        ({"base": {**BASE, "method": {"options": {"c_bar": 2}}}},
         "method entry 'erm': unknown option 'c_bar' for method 'erm'; valid options: ['label_smoothing']."),
        ({"grid": {"method.options.gamma": [1, 2]}}, "method entry 'erm': unknown option 'gamma' for method 'erm'"),
        ({"methods": {"erm": {}, "centred": {}}},
         "method entry 'centred': unknown method 'centred'; valid methods: cdb, center_loss, erm, "),
        ({"methods": {"erm": {}, "a/b": {}}}, "method entry label 'a/b' must be a non-empty name"),
        ({"methods": {}}, "sweep key 'methods' must map at least one entry label"),
        ({"reference": "lff"}, "reference 'lff' is not a method entry of the sweep; entries: erm, mr2."),
        ({"seeds": [0, 1, 0]}, "sweep key 'seeds' lists a seed twice: 0."),
        ({"seeds": []}, "sweep key 'seeds' must be a non-empty list of integers or a count"),
        ({"select_by": "test_accuracy"},
         "sweep key 'select_by' must be one of 'val_accuracy', 'val_worst_class'; got 'test_accuracy' (str)."),
        ({"workers": 0}, "sweep key 'workers' must be an integer in [1, 1024]; got 0."),
        ({"base_config": "x.yaml"}, "give either 'base' (a run configuration mapping) or 'base_config'"),
        ({"grid": {"optim.lr": 0.1}}, "sweep key 'grid.optim.lr' must be a list of values (a grid axis)"),
        ({"required": ["data.root"]},
         "this sweep needs data.root set in its base configuration; pass --set data.root=..."),
        ({"devices": [0], "workers": 2}, "sweep key 'devices' lists 1 device(s) but 2 worker(s) x 1 device(s)"),
        ({"report": {"tier_source": "train"}},
         "sweep key 'report.tier_source' must be one of 'test', 'validation'; got 'train' (str)."),
        ({"workers": "2"}, "sweep key 'workers' must be int; got '2' (str)."),
        ({"report": {"alpha": 1.5}}, "sweep key 'report.alpha' must be a number in (0, 1); got 1.5."),
        ({"report": 3}, "sweep section 'report' must be a mapping of keys to values; got 3."),
        ({"required": "data.root"}, "sweep key 'required' must be a list of dotted keys"),
        ({"seeds": [0, -1]}, "sweep key 'seeds[1]' must be an integer in [0, 4294967295]; got -1."),
        ({"launcher": {"name": "slurm", "partitoin": "gpu"}}, "unknown sweep key 'launcher.partitoin'"),
    ],
)
def test_invalid_specs_name_the_key(changes, message):
    with pytest.raises(SweepSpecError) as error:
        spec(**changes)
    assert message in str(error.value)


def test_missing_methods_and_bad_point_config():
    with pytest.raises(SweepSpecError, match=r"the sweep specification needs 'methods'"):
        spec_from_dict({"base": BASE})
    bad = spec(methods={"erm": {"optim.lrr": [0.1, 0.2]}})
    with pytest.raises(SweepSpecError) as error:
        plan_sweep(bad)
    assert str(error.value).startswith(
        "run 'erm__lrr=0.1__seed=0' of the sweep has an invalid configuration: unknown config key 'optim.lrr'"
    )


def test_defaults_and_report_options():
    result = spec_from_dict({"base": BASE, "methods": {"mr2": {}, "erm": {}}})
    assert result.seeds == [0] and result.reference == "mr2" and result.workers == 1
    assert result.select_by == "val_accuracy" and result.report == ReportOptions()
    assert result.name == "sweep" and result.sweep_dir == Path("runs") / "sweep"
    counted = spec(seeds=3, report={"tiers": 2, "bootstrap": 0, "plots": False, "alpha": 0.01})
    assert counted.seeds == [0, 1, 2]
    assert (counted.report.tiers, counted.report.bootstrap, counted.report.plots) == (2, 0, False)
    assert counted.report.alpha == 0.01


def test_plan_names_order_and_configs(tmp_path):
    result = spec_from_dict({
        "name": "grid", "output_dir": str(tmp_path), "base": BASE,
        "methods": {
            "erm": {"optim.lr": 0.2},
            "mr2": {"method.options.c_bar": [0.5, 1.0, 2], "method.options.lambda_rep": [0.1, 0.3],
                    "method.options.momentum": [0.99]},
            "mr2_centered": {"method.name": "mr2", "method.options.center_features": True},
        },
        "grid": {"optim.weight_decay": [0.0005]},
        "seeds": [3, 7],
    })
    points = plan_sweep(result)
    names = [p.name for p in points]
    assert len(names) == len(set(names)) == 2 * (1 + 6 + 1)
    assert names[:8] == [
        "erm__seed=3",
        "mr2__c_bar=0.5__lambda_rep=0.1__seed=3",
        "mr2__c_bar=0.5__lambda_rep=0.3__seed=3",
        "mr2__c_bar=1__lambda_rep=0.1__seed=3",
        "mr2__c_bar=1__lambda_rep=0.3__seed=3",
        "mr2__c_bar=2__lambda_rep=0.1__seed=3",
        "mr2__c_bar=2__lambda_rep=0.3__seed=3",
        "mr2_centered__seed=3",
    ]
    assert all(p.seed == 7 for p in points[8:])
    point = points[5]
    assert (point.label, point.method, point.seed) == ("mr2", "mr2", 3)
    assert point.setting == (("method.options.c_bar", 2), ("method.options.lambda_rep", 0.1))
    assert point.setting_name == "c_bar=2__lambda_rep=0.1" and point.group == ("mr2", "c_bar=2__lambda_rep=0.1")
    config = point.config
    assert config.name == point.name and config.seed == 3 and config.output_dir == str(tmp_path / "grid")
    assert config.method.options == {"c_bar": 2, "lambda_rep": 0.1, "momentum": 0.99}
    assert config.optim.weight_decay == 0.0005 and config.optim.lr == 0.05
    assert points[0].config.optim.lr == 0.2 and points[0].config.method.name == "erm"
    centered = points[7].config
    assert centered.method.name == "mr2" and centered.method.options == {"center_features": True}
    assert point.run_dir == tmp_path / "grid" / point.name


def test_ambiguous_axis_keys_keep_more_of_the_path_and_lists_as_fixed_values():
    result = spec(methods={"erm": {"optim.lr": [0.1, 0.2], "data.options.lr": [1, 2],
                                   "model.options.hidden_dims": [[32, 16]]}})
    points = plan_sweep(result)
    assert points[0].name == "erm__optim.lr=0.1__options.lr=1__seed=0"
    assert points[0].config.model.options == {"hidden_dims": [32, 16]}


def test_colliding_names_are_refused():
    with pytest.raises(SweepSpecError, match=r"get the same directory name 'erm__lr=0\.1__seed=0'"):
        plan_sweep(spec(methods={"erm": {"optim.lr": [0.1, 0.1]}}))


@pytest.mark.parametrize(
    ("value", "text"),
    [(2, "2"), (2.0, "2"), (0.1, "0.1"), (1e-5, "1e-05"), (-0.5, "-0.5"), (True, "true"), (None, "none"),
     ("a b/c", "a_b_c"), ("..", ".."), ([1, 2.5], "1-2.5"), ({"p": 5}, "p_5"), ("", "empty")],
)
def test_format_value_is_filesystem_safe(value, text):
    assert format_value(value) == text
    assert "/" not in format_value(value)


def test_long_names_are_shortened_with_a_hash():
    values = ["x" * 200, "y" * 200]
    names = [p.name for p in plan_sweep(spec(methods={"erm": {"data.options.tag": values}}))]
    assert all(len(n) <= 150 for n in names) and len(set(names)) == 2


def test_load_spec_resolves_base_config_relative_to_the_file(tmp_path):
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "base.yaml").write_text(yaml.safe_dump(BASE))
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(
        {"base_config": "configs/base.yaml", "methods": {"erm": {}}}
    ))
    loaded = load_spec(tmp_path / "sweep.yaml")
    assert loaded.name == "sweep" and loaded.base == BASE and loaded.source == tmp_path / "sweep.yaml"
    (tmp_path / "bad.yaml").write_text("methods: [erm\n")
    with pytest.raises(SweepSpecError, match="is not valid YAML"):
        load_spec(tmp_path / "bad.yaml")
    with pytest.raises(SweepSpecError, match="does not exist"):
        load_spec(tmp_path / "missing.yaml")


def test_presets_are_listed_and_valid(tmp_path):
    names = preset_names()
    expected = {"demo", "fashion-mnist", "cifar100-resnet32", "cifar100-wrn28-10",
                "imagenet-clip-linear-probe", "imagenet-mae-finetune", "pets-moco-finetune"}
    assert expected <= set(names)
    descriptions = preset_descriptions()
    assert all(descriptions[name] for name in names)
    with pytest.raises(SweepSpecError, match="unknown preset 'nope'; available presets: "):
        preset_path("nope")
    for name in names:
        raw = yaml.safe_load(preset_path(name).read_text())
        base = raw["base"]
        for key in raw.get("required", []):  # the keys a user must pass with --set
            section, field = key.split(".")
            base[section][field] = str(tmp_path / field)
        points = plan_sweep(spec_from_dict(raw, source=preset_path(name), default_name=name))
        assert points, name
        for point in points:
            assert config_to_dict(point.config)["seed"] == point.seed


def test_cpu_presets_share_the_protocol():
    demo, reference = load_preset("demo"), load_preset("fashion-mnist")
    assert [m.label for m in demo.methods] == ["erm", "mr2", "mr2_paper"] and demo.seeds == [0]
    assert [m.label for m in reference.methods] == [
        "erm", "mr2", "lff", "jtt", "group_dro", "focal", "logit_adjustment", "ldam", "cdb"
    ]
    assert len(reference.seeds) >= 3 and reference.reference == "erm" == demo.reference
    assert demo.base == reference.base  # the demo's runs are the protocol's seed-0 ERM and MR2 runs


def test_study_presets_use_the_protocol_and_label_their_variants():
    reference = load_preset("fashion-mnist")
    for name in ("fashion-mnist-tuning", "fashion-mnist-variants"):
        study = load_preset(name)
        assert study.base == reference.base, name  # same data split, model and schedule
        assert study.reference == "erm" and study.methods[0].label == "erm"
    variants = load_preset("fashion-mnist-variants")
    assert len(variants.seeds) >= 5
    points = {p.label: p for p in plan_sweep(variants) if p.seed == 0}
    options = {label: config_to_dict(p.config)["method"]["options"] for label, p in points.items()}
    # The paper's form by name (issue 39: MR2Loss's default is no longer the paper's T = 1).
    assert options["mr2"] == {"variant": "paper"} and points["mr2"].method == "mr2"
    assert options["mr2_logit"] == {"lambda_rep": 0.0}
    assert options["mr2_centered"] == {"variant": "paper", "center_features": True}
    assert options["mr2_variance"] == {"variant": "paper", "allocation": "spread"}
    assert options["mr2_T10d"] == {"distance_temperature": "10d"}
    assert all(points[label].method == "mr2" for label in options if label != "erm")


def test_readmes_run_config_is_a_sweep_base(tmp_path):
    # README's run configuration (it names the run, its seed and an MR2 method with
    # options) was refused as a sweep's base ('base.name' sets 'name'), and MR2's options then made the
    # ERM entry invalid. The sweep sets name, seed and output_dir per run; the base's method options
    # are its method's, given to the entries of that method only.
    import re

    text = (Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")
    start = text.index("A run configuration (every key is optional")
    match = re.compile(r"```yaml\n(.*?)```", re.DOTALL).search(text, start)
    assert match is not None
    (tmp_path / "run.yaml").write_text(match.group(1))
    (tmp_path / "sweep.yaml").write_text(
        "base_config: run.yaml\nmethods: {erm: {}, mr2: {method.options.c_bar: [0.5, 2]}, focal: {}}\n"
        "seeds: [1, 2]\n"
    )
    points = plan_sweep(load_spec(tmp_path / "sweep.yaml"))
    assert len(points) == 8
    by_name = {point.name: point.config for point in points}
    assert by_name["erm__seed=2"].method.options == {}
    assert by_name["focal__seed=1"].method.options == {}
    assert by_name["mr2__c_bar=2__seed=1"].method.options == {"c_bar": 2, "lambda_rep": 0.1}
    for point in points:
        assert point.config.name == point.name and point.config.seed == point.seed
        assert point.config.data.batch_size == 128 and point.config.optim.lr == 0.05
    # The same file inline, and through `mr2 sweep --set` (which reads base_config into base).
    base = yaml.safe_load(match.group(1))
    inline = spec(base=base, methods={"erm": {}, "mr2": {}})
    assert [p.config.method.options for p in plan_sweep(inline)] == [{}, {"c_bar": 1.0, "lambda_rep": 0.1}]
