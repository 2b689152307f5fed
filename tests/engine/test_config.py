"""Typed config: defaults, overrides, and clear errors before any work starts."""

from __future__ import annotations

import re

import pytest

from mr2.config import ConfigError, apply_overrides, config_from_dict, config_to_dict, load_config


def test_defaults_and_round_trip():
    config = config_from_dict({})
    assert config.method.name == "erm" and config.optim.epochs == 10
    assert config_from_dict(config_to_dict(config)) == config


def test_yaml_file_and_overrides(tmp_path):
    path = tmp_path / "run.yaml"
    path.write_text("name: a\nmethod:\n  name: mr2\n  options: {c_bar: 2.0}\noptim: {lr: 0.1}\n")
    config = load_config(path, ["optim.lr=0.5", "method.options.lambda_rep=0", "data.root=/x"])
    assert config.name == "a" and config.optim.lr == 0.5
    assert config.method.options == {"c_bar": 2.0, "lambda_rep": 0}
    assert config.data.root == "/x"


def test_integer_accepted_for_float_and_converted():
    config = config_from_dict({"optim": {"lr": 1}})
    assert isinstance(config.optim.lr, float)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"optim": {"lrr": 0.1}}, "unknown config key 'optim.lrr'; valid keys here: name, lr"),
        ({"optim": {"epochs": "ten"}}, "config key 'optim.epochs' must be int; got 'ten'"),
        ({"optim": {"epochs": True}}, "config key 'optim.epochs' must be int"),
        ({"optim": {"amp": "fp8"}}, "must be one of 'none', 'bf16', 'fp16'"),
        ({"data": 3}, "config section 'data' must be a mapping"),
        ({"data": {"val_fraction": 1.5}}, "config key 'data.val_fraction': must be in [0, 1)"),
        ({"optim": {"epochs": 0}}, "config key 'optim.epochs': must be >= 1"),
        ({"optim": {"epochs": 2, "warmup_epochs": 3}}, "optim.warmup_epochs"),
        ({"name": "a/b"}, "config key 'name'"),
        ({"regime": "finetune"}, "'finetune' starts from pre-trained weights"),
    ],
)
def test_bad_configs_name_the_key(data, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        config_from_dict(data)


def test_bad_override_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match=re.escape("must look like key.subkey=value")):
        apply_overrides({}, ["optim.lr"])
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "absent.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("a: [1, 2\n")
    with pytest.raises(ConfigError, match="is not valid YAML"):
        load_config(broken)
