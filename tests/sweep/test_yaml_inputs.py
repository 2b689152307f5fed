"""User YAML (run configurations, sweep files, ``--set`` values): aliases, duplicate keys, nesting,
size and encoding are refused with one-line errors naming the file and the line."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import yaml

from mr2.config import ConfigError, apply_overrides, load_config, load_yaml
from mr2.config.loading import MAX_CONFIG_BYTES, MAX_NESTING
from mr2.sweep.spec import SweepSpecError, load_spec

#: The "billion laughs" value: 9 levels of 9 aliases, 9**9 (387 million) strings once expanded.
BOMB = "[&a [" + ", ".join(["lol"] * 9) + "], " + ", ".join(
    f"&{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]" for i in range(8)
) + "]"


def _sweep_text(extra: str = "") -> str:
    return textwrap.dedent("""\
        name: s
        base: {data: {name: synthetic}, model: {name: mlp}}
        methods: {erm: {}}
    """) + extra


def test_an_alias_bomb_is_refused_naming_the_file_and_line_under_a_memory_bound(tmp_path):
    """In a subprocess with 1 GiB of address space above what the imports need: the old code
    expanded the bomb when writing sweep.json (5.4 GB) or formatting an error (3.6 GB)."""
    run_bomb = tmp_path / "run.yaml"
    run_bomb.write_text(f"optim:\n  lr: 0.1\nmethod:\n  name: mr2\n  options: {{c_bar: {BOMB}}}\n")
    sweep_bomb = tmp_path / "sweep.yaml"
    sweep_bomb.write_text(_sweep_text(f"grid:\n  optim.lr: {BOMB}\noutput_dir: {tmp_path / 'runs'}\n"))
    script = textwrap.dedent(f"""
        import resource, sys
        from mr2.cli.main import main
        import mr2.engine.run  # what `mr2 train` imports (torch), before the limit
        size = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmSize"))
        limit = size * 1024 + 2**30
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        codes = [main(["train", "--config", {str(run_bomb)!r}]),
                 main(["sweep", {str(sweep_bomb)!r}, "--dry-run"])]
        sys.exit(0 if codes == [2, 2] else 1)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 2, done.stderr
    assert lines[0].startswith(f"mr2 train: error: config file {run_bomb}, line 5: YAML anchors and aliases")
    assert lines[1].startswith(f"mr2 sweep: error: config file {sweep_bomb}, line 5: YAML anchors and aliases")
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    ("text", "line", "what"),
    [
        ("optim: {lr: 0.1}\nbase: &b {x: 1}\n", 2, "&b"),
        ("a: 1\nb:\n  - 1\n  - *a\n", 4, "*a"),
        ("a: &x 1\n", 1, "&x"),
    ],
)
def test_anchors_and_aliases_are_refused(tmp_path, text, line, what):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_yaml(path)
    message = str(caught.value)
    assert message.startswith(f"config file {path}, line {line}: YAML anchors and aliases ({what}) are not "
                              "supported")
    assert "\n" not in message


def test_aliases_in_set_values_are_refused():
    with pytest.raises(ConfigError, match=r"override 'method.options=\[&a 1, \*a\]': YAML anchors"):
        apply_overrides({}, ["method.options=[&a 1, *a]"])


@pytest.mark.parametrize(
    ("text", "key", "line"),
    [
        ("name: a\noptim: {lr: 0.1}\nname: b\n", "name", 3),
        ("optim:\n  lr: 0.1\n  epochs: 2\n  lr: 0.5\n", "lr", 4),
        ("methods:\n  erm: {}\n  mr2: {a: 1, a: 2}\n", "a", 3),
    ],
)
def test_duplicate_keys_are_refused_at_any_level(tmp_path, text, key, line):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_yaml(path)
    assert str(caught.value) == (f"config file {path}, line {line}: key {key!r} is given twice in the same "
                                 "mapping (the first value would be ignored); keep one")


def test_a_duplicate_key_in_a_sweep_file_is_a_sweep_error(tmp_path):
    path = tmp_path / "sweep.yaml"
    path.write_text(_sweep_text("seeds: [0]\nseeds: [1, 2]\n"))
    with pytest.raises(SweepSpecError, match=r"line 5: key 'seeds' is given twice"):
        load_spec(path)


def test_deep_nesting_size_encoding_and_non_mappings(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("a: " + "[" * (MAX_NESTING + 5) + "]" * (MAX_NESTING + 5) + "\n")
    with pytest.raises(ConfigError, match=rf"line 1: nested deeper than {MAX_NESTING} levels"):
        load_yaml(path)
    path.write_text("a: " + "[" * 100_000)  # a recursive composer would overflow (libyaml stops at 1,000)
    with pytest.raises(ConfigError, match=r"nested deeper than|exceeded maximum nesting depth"):
        load_yaml(path)
    path.write_bytes(b"a: 1\n" + b"#" * MAX_CONFIG_BYTES)
    with pytest.raises(ConfigError, match=rf"is larger than {MAX_CONFIG_BYTES} bytes"):
        load_yaml(path)
    path.write_bytes(b"name: caf\xe9\n")
    with pytest.raises(ConfigError, match=r"is not UTF-8 text \(byte 9\)"):
        load_yaml(path)
    for text, kind in (("0\n", "int"), ("[]\n", "list"), ("just text\n", "str"), ("false\n", "bool")):
        path.write_text(text)
        with pytest.raises(ConfigError, match=f"the top level must be a mapping of keys; got {kind}"):
            load_yaml(path)
    path.write_text("# only a comment\n")
    assert load_yaml(path) == {}
    with pytest.raises(ConfigError, match="is not a file"):
        load_yaml(tmp_path)
    path.write_text("a: !!python/object:os.system {}\n")
    with pytest.raises(ConfigError) as caught:
        load_yaml(path)
    assert "\n" not in str(caught.value) and "line 1" in str(caught.value)


def test_valid_yaml_still_loads(tmp_path):
    path = tmp_path / "run.yaml"
    text = "name: a\nmethod: {name: mr2, options: {c_bar: 2.0}}\noptim:\n  lr: 0.1\n  epochs: 2\n"
    path.write_text("\ufeff" + text)  # a byte-order mark is fine
    assert load_yaml(path) == yaml.safe_load(text)
    assert load_config(path).method.options == {"c_bar": 2.0}
    assert apply_overrides({}, ["method.options={a: 1, b: [1, 2]}"]) == {"method": {"options": {"a": 1,
                                                                                                "b": [1, 2]}}}
