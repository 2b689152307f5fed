"""One rule for run and sweep names (:func:`mr2.config.names.check_name`): a name is one directory
entry of ``output_dir``, never ``.``, ``..``, a path or something a terminal or shell mangles."""

from __future__ import annotations

import pytest
import yaml

from helpers import base_config
from mr2.cli.main import main
from mr2.config import ConfigError, config_from_dict
from mr2.config.names import BAD_NAME, MAX_NAME_LENGTH, check_name

BAD = [
    ("", "it is empty"),
    (".", "'.' and '..' name directories, not runs"),
    ("..", "'.' and '..' name directories, not runs"),
    ("a/b", "it contains a path separator"),
    ("../other", "it contains a path separator"),
    ("a\\b", "it contains a path separator"),
    ("run\n", "it contains a control character"),
    ("a\tb", "it contains a control character"),
    ("a\x00b", "it contains a control character"),
    ("a\x7fb", "it contains a control character"),
    (" run", "it begins or ends with whitespace"),
    ("run ", "it begins or ends with whitespace"),
    ("x" * (MAX_NAME_LENGTH + 1), f"it is longer than {MAX_NAME_LENGTH} bytes in UTF-8"),
    ("\U0001F600" * 51, f"it is longer than {MAX_NAME_LENGTH} bytes in UTF-8"),  # 204 bytes
]


@pytest.mark.parametrize(("name", "problem"), BAD)
def test_bad_names_are_refused_with_the_problem(name, problem):
    with pytest.raises(ConfigError) as caught:
        check_name(name, "config key 'name'")
    shown = repr(name) if len(name) <= 60 else repr(name[:60]) + "..."
    assert str(caught.value) == BAD_NAME.format(what="config key 'name'", value=shown, problem=problem)
    assert "\n" not in str(caught.value)  # one line, even for a name holding a newline


@pytest.mark.parametrize("name", ["run", "erm-seed0", "mr2.c_bar=0.5", "a b", "x" * MAX_NAME_LENGTH, "\U0001F600" * 50, "...", "é"])
def test_good_names_pass_unchanged(name):
    assert check_name(name, "name") == name


def test_a_name_that_is_not_a_string_is_refused():
    with pytest.raises(ConfigError, match="it is not a string"):
        check_name(3, "--name")


def test_another_error_type_for_other_callers():
    class SpecError(ValueError):
        pass

    with pytest.raises(SpecError, match=r"^sweep key 'name' '\.\.' is not a usable name"):
        check_name("..", "sweep key 'name'", SpecError)


@pytest.mark.parametrize("name", [".", "..", "a/b", "x\n"])
def test_the_run_config_refuses_them(name, tmp_path):
    with pytest.raises(ConfigError, match=r"^config key 'name' .* is not a usable name"):
        config_from_dict({"name": name, "output_dir": str(tmp_path)})


@pytest.mark.parametrize("name", [".", ".."])
def test_overwrite_with_dot_names_touches_no_sibling(name, spread_npz, tmp_path, capsys):
    """``name=.`` used to stage and delete every sibling run; ``name=..`` moved the parent's files."""
    out = tmp_path / "project" / "runs"
    sibling = out / "other"
    sibling.mkdir(parents=True)
    (sibling / "final.json").write_text("{}")
    (tmp_path / "project" / "notes.txt").write_text("keep me")
    config_file = tmp_path / "run.yaml"
    config_file.write_text(yaml.safe_dump(base_config(spread_npz, out, name=name)))
    code = main(["train", "--config", str(config_file), "--quiet", "--overwrite"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "is not a usable name" in err
    assert sorted(p.name for p in out.iterdir()) == ["other"]
    assert (sibling / "final.json").read_text() == "{}"
    assert sorted(p.name for p in (tmp_path / "project").iterdir()) == ["notes.txt", "runs"]
