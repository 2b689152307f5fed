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
        ({"optim": {"epochs": 0}}, "config key 'optim.epochs' must be an integer in [1, 100000]; got 0."),
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


# Stated ranges (leftovers found by tests/sweep/test_fuzz_loaders.py): finite floats, seeds
# numpy accepts, sane maxima for epochs and batch sizes; one-line ConfigErrors, never a traceback.
@pytest.mark.parametrize(
    ("text", "path", "expected"),
    [
        ("optim: {lr: " + "9" * 400 + "}", "optim.lr", "a finite number"),  # was OverflowError
        ("optim: {lr: 1.0e+999}", "optim.lr", "a finite number"),
        ("optim: {lr: .nan}", "optim.lr", "a finite number"),
        ("optim: {weight_decay: -.inf}", "optim.weight_decay", "a finite number"),
        ("optim: {grad_clip: .inf}", "optim.grad_clip", "a finite number or null"),
        ("data: {val_fraction: " + "9" * 400 + "}", "data.val_fraction", "a finite number"),
        ("seed: -" + "9" * 50, "seed", "an integer in [0, 4294967295]"),
        ("seed: -1", "seed", "an integer in [0, 4294967295]"),
        ("seed: 4294967296", "seed", "an integer in [0, 4294967295]"),
        ("data: {split_seed: -1}", "data.split_seed", "an integer in [0, 4294967295]"),
        ("optim: {epochs: " + "9" * 400 + "}", "optim.epochs", "an integer in [1, 100000]"),
        ("data: {batch_size: 99999999999999999999}", "data.batch_size", "an integer in [1, 1048576]"),
        ("data: {eval_batch_size: 0}", "data.eval_batch_size", "an integer in [1, 1048576]"),
        ("data: {num_workers: 100000}", "data.num_workers", "an integer in [0, 1024]"),
    ],
)
def test_out_of_range_values_are_one_line_errors(tmp_path, text, path, expected):
    from mr2.config.schema import OUT_OF_RANGE

    config = tmp_path / "run.yaml"
    config.write_text(text + "\n")
    with pytest.raises(ConfigError) as caught:
        load_config(config)
    message = str(caught.value)
    prefix = OUT_OF_RANGE.format(path=path, expected=expected, value="VALUE").partition("'VALUE'")[0]
    assert message.startswith(prefix), message
    assert "\n" not in message and len(message) < 250


def test_the_range_limits_themselves_are_accepted():
    from mr2.config.schema import MAX_BATCH_SIZE, MAX_EPOCHS, MAX_SEED

    config = config_from_dict({"seed": MAX_SEED, "data": {"split_seed": 0, "batch_size": MAX_BATCH_SIZE},
                               "optim": {"epochs": MAX_EPOCHS, "lr": 1e300}})
    assert (config.seed, config.data.batch_size, config.optim.epochs) == (MAX_SEED, MAX_BATCH_SIZE, MAX_EPOCHS)


@pytest.mark.parametrize(
    ("data", "start"),
    [
        ({"name": ["x" * 200_000]}, "config key 'name' must be str; got ['xxxxxxxx"),
        ({"optim": {"lr": "9" * 200_000}}, "config key 'optim.lr' must be float; got '99999999"),
        ({"data": "d" * 200_000}, "config section 'data' must be a mapping of keys to values; got 'dddd"),
        ({"optim": {"epochs": list(range(100_000))}}, "config key 'optim.epochs' must be int; got [0, 1, 2"),
    ],
)
def test_wrong_type_messages_shorten_huge_values(data, start):
    with pytest.raises(ConfigError) as caught:
        config_from_dict(data)
    message = str(caught.value)
    assert message.startswith(start) and "..." in message and len(message) < 250


def _readme_run_config() -> str:
    """README.md's run configuration block, as written."""
    from pathlib import Path

    text = (Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")
    start = text.index("A run configuration (every key is optional")
    match = re.compile(r"```yaml\n(.*?)```", re.DOTALL).search(text, start)
    assert match is not None
    return match.group(1)


def test_set_method_name_drops_the_files_options_for_another_method(tmp_path):
    # `--set method.name=erm` on README's config failed on MR2's leftover options.
    from mr2.config.loading import OPTIONS_DROPPED

    path = tmp_path / "run.yaml"
    path.write_text(_readme_run_config())
    notes: list[str] = []
    config = load_config(path, ["method.name=erm"], notes=notes)
    assert config.method.name == "erm" and config.method.options == {}
    assert notes == [OPTIONS_DROPPED.format(section="method", new="erm", old="mr2", keys="c_bar, lambda_rep")]
    # Options given with --set are kept, before or after the name; the same method keeps its options.
    config = load_config(path, ["method.options.gamma=2", "method.name=focal"], notes=notes)
    assert config.method.options == {"gamma": 2}
    config = load_config(path, ["method.name=mr2", "method.options.c_bar=2"], notes=(kept := []))
    assert config.method.options == {"c_bar": 2, "lambda_rep": 0.1} and kept == []
    path.write_text("model: {name: resnet32, options: {shortcut: B}}\n")
    config = load_config(path, ["model.name=mlp"], notes=(dropped := []))
    assert config.model.options == {} and "model.options (shortcut)" in dropped[0]


def test_set_method_name_on_the_command_line_says_what_it_dropped(tmp_path, capsys):
    from mr2.cli.main import main

    path = tmp_path / "run.yaml"
    path.write_text(_readme_run_config())
    code = main(["train", "--config", str(path), "--set", "method.name=erm", "--set", "data.name=synthetic",
                 "--set", "model.name=mlp", "--set", "optim.epochs=1", "--set", "optim.warmup_epochs=0",
                 "--set", f"output_dir={tmp_path / 'runs'}", "--quiet"])
    err = capsys.readouterr().err
    assert code == 0, err
    assert err.startswith("mr2 train: note: --set method.name=erm replaces 'mr2'") and err.count("\n") == 1
