"""One error family (mr2.errors): every exception of mr2 derives from MR2Error and keeps its builtin
base; choices and their messages come from one Literal; the CLI reports an MR2Error on one line."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from typing import Literal

import pytest

import mr2
from mr2.cli.main import main
from mr2.errors import MR2Error, check_choice, choices, either, listed

SRC = Path(mr2.__file__).resolve().parent

_BUILTIN = (ValueError, RuntimeError, OSError)


def _public_exception_classes() -> dict[str, type]:
    """``module.Class`` -> class, for every public class of src/mr2 whose name ends in ``Error``."""
    found: dict[str, type] = {}
    for path in sorted(SRC.rglob("*.py")):
        parts = path.relative_to(SRC.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        names = [
            node.name
            for node in ast.parse(path.read_text()).body
            if isinstance(node, ast.ClassDef) and node.name.endswith("Error") and not node.name.startswith("_")
        ]
        if names:
            loaded = importlib.import_module(module)
            found.update({f"{module}.{name}": getattr(loaded, name) for name in names})
    return found


def test_every_exception_of_mr2_is_an_mr2_error_and_keeps_its_builtin_base():
    classes = _public_exception_classes()
    assert classes.pop("mr2.errors.MR2Error") is MR2Error
    assert len(classes) >= 20  # the walk found them (25 when this test was written)
    outside = {cls.__name__ for cls in classes.values() if not issubclass(cls, MR2Error)}
    assert outside == set()
    assert "mr2.config.errors.ConfigError" in classes and "mr2.rundir.lock.RunLockedError" in classes
    for name, cls in classes.items():
        assert issubclass(cls, _BUILTIN), name  # `except ValueError` (RuntimeError, OSError) still works


def test_choices_come_from_the_literal_in_order():
    assert choices(Literal["mlp", "linear"]) == ("mlp", "linear")
    assert choices(Literal["a"] | Literal["b", "c"]) == ("a", "b", "c")
    assert listed(Literal["random", "none"]) == "['random', 'none']"
    assert either(Literal["x"]) == "'x'"
    assert either(Literal["a", "b", "c"], {"b": "note"}) == "'a', 'b' (note) or 'c'"
    with pytest.raises(TypeError, match="takes a Literal type"):
        choices(str)


def test_check_choice_refuses_what_the_literal_does_not_list_with_the_callers_error():
    kind = Literal["pooled", "batch"]
    message = f"estimator must be {either(kind)}; got {{value!r}}."
    check_choice("batch", kind, message, MR2Error)  # allowed: no error
    for bad in ("Batch", None, 1, ["pooled"]):
        with pytest.raises(MR2Error) as caught:
            check_choice(bad, kind, message, MR2Error)
        assert str(caught.value) == f"estimator must be 'pooled' or 'batch'; got {bad!r}."


@pytest.mark.parametrize(
    ("build", "message"),
    [
        ("mr2.statistics.class_features:ClassFeatureStatistics",
         "estimator must be 'pooled' (default) or 'batch' (released code); got 'x'."),
        ("mr2.methods.jtt:JTT", "error_source must be 'train_mode' (the reference) or 'eval_pass'; got 'x'."),
        ("mr2.methods.cdb:CDB", "update must be 'every_validation' or 'fixed'; got 'x'."),
        ("mr2.methods.lff:LfF", "gce_form must be 'reference' (alinlab/LfF) or 'paper'; got 'x'."),
    ],
)
def test_the_messages_derived_from_a_literal_read_as_before(build, message):
    """The texts are those written out by hand before the Literal derived them."""
    module, _, name = build.partition(":")
    cls = getattr(importlib.import_module(module), name)
    option = {"ClassFeatureStatistics": "estimator", "JTT": "error_source", "CDB": "update", "LfF": "gce_form"}
    with pytest.raises(MR2Error) as caught:
        cls(3, **{option[name]: "x"})
    assert str(caught.value) == message
    assert isinstance(caught.value, ValueError)


def test_the_resnet_shortcut_message_reads_as_before():
    from mr2.models.resnet_cifar import BAD_SHORTCUT, ResNetCifar

    assert BAD_SHORTCUT.format(shortcut="C") == (
        "shortcut must be 'A' (zero-padded identity) or 'B' (1x1 projection), got 'C'"
    )
    with pytest.raises(ValueError, match="got 'C'"):
        ResNetCifar(3, shortcut="C")  # type: ignore[arg-type]


def test_the_cli_reports_an_mr2_error_on_one_line_with_exit_2(tmp_path, capsys):
    config = tmp_path / "run.yaml"
    config.write_text("method:\n  name: jtt\n  options: {error_source: x}\n")
    code = main(["train", "--config", str(config), "--set", f"output_dir={tmp_path / 'runs'}",
                 "--set", "data.name=synthetic", "--set", "model.name=mlp", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2
    assert err == "mr2 train: error: error_source must be 'train_mode' (the reference) or 'eval_pass'; got 'x'.\n"
