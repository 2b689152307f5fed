"""Integers of more digits than Python converts (4,300) in a configuration file or a ``--set`` value
are one-line errors naming the file and line (or the override), not the ValueError of ``int()``."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from helpers import base_config
from mr2.cli.main import main
from mr2.config import ConfigError, apply_overrides, load_yaml, loading

HUGE = "9" * 5000


def test_a_huge_integer_in_a_config_file_is_refused_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text(f"name: run\nseed: {HUGE}\n")
    with pytest.raises(ConfigError) as caught:
        load_yaml(path)
    assert str(caught.value) == loading._AT_LINE.format(
        path=path, line=2, problem=loading.INTEGER_TOO_LONG.format(digits=5000, limit=loading.MAX_INTEGER_DIGITS)
    )
    for text in (f"seed: -{HUGE}", f"seed: +{HUGE}", "seed: " + "1_" * 5000 + "1", f"a: [1, {HUGE}]"):
        path.write_text(text + "\n")
        with pytest.raises(ConfigError, match="digits"):
            load_yaml(path)
    # A long string, and the longest integer Python converts, are fine.
    path.write_text(f"name: '{HUGE}'\nseed: {'9' * 4300}\n")
    assert load_yaml(path)["seed"] == int("9" * 4300)


def test_a_huge_integer_in_an_override_is_refused_in_one_short_line() -> None:
    with pytest.raises(ConfigError) as caught:
        apply_overrides({}, [f"seed={HUGE}"])
    message = str(caught.value)
    assert "\n" not in message and len(message) < 300
    assert message.endswith(loading.INTEGER_TOO_LONG.format(digits=5000, limit=loading.MAX_INTEGER_DIGITS))


def test_the_cli_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], spread_npz: Path) -> None:
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(base_config(spread_npz, tmp_path / "runs")))
    assert main(["train", "--config", str(config), "--set", f"seed={HUGE}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mr2 train: error: ") and err.count("\n") == 1 and "digits" in err
    config.write_text(config.read_text().replace("seed: 0", f"seed: {HUGE}"))
    assert main(["train", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("mr2 train: error: ") and err.count("\n") == 1 and "digits" in err
    assert not (tmp_path / "runs").exists()
