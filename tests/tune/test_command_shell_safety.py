"""``mr2 tune --command`` is shell-safe by construction (issue 43 item 3): each placeholder becomes a
double-quoted reference to an environment variable set for the trial (``"$MR2_OUT"``), so no value is
ever parsed by a shell; a placeholder inside quotes of any kind (where that reference would not be one
word, or would reach a nested shell as text) is refused by a quote-aware scan; and an output directory
holding ``$``, a backtick or a control character is refused before anything is written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from mr2.cli.main import main
from mr2.tune.command import (
    ENVIRONMENT,
    QUOTED_PLACEHOLDER,
    UNSAFE_OUTPUT,
    check_command,
    command_source,
)
from mr2.tune.design import Request
from mr2.tune.request import make_request

SCRIPT = Path(__file__).with_name("command_script.py")
K = 6


@pytest.fixture
def marker():
    path = Path(f"/tmp/pwned_{uuid.uuid4().hex}")
    yield path
    assert not path.exists(), "a $(...) in the output directory ran"


@pytest.mark.parametrize(("template", "name"), [
    ('sh -c "python t.py --loss-json {loss} --seed {seed} --out {out} --epochs 3"', "loss"),
    ("bash -lc 'python t.py --loss-json {loss} --seed {seed} --out {out}'", "loss"),
    ("python t.py --loss-json {loss} --seed {seed} 'x --out {out} y'", "out"),
    ("sh -c \"sh -c 'python t.py {loss} {seed} {out}'\"", "loss"),
    ("bash -c \"python t.py \\\"{loss}\\\" {seed} {out}\"", "loss"),
    ("python t.py {loss} {seed} $'--out {out}'", "out"),
    ("python t.py {loss} {seed} --out `echo {out}`", "out"),
    ("python t.py {loss} {seed} --out \\{out}", "out"),
    ('python t.py {loss} {seed} --out "$(echo "x" ) {out}"', "out"),
    ("python t.py {seed} --out {out} --loss $(( {loss} ))", "loss"),
], ids=["sh-c-double", "bash-lc-single", "single-mid-word", "nested", "escaped-quotes-in-double", "ansi-c",
        "backticks", "backslash", "double-after-substitution", "loss-in-arithmetic"])
def test_a_placeholder_inside_quotes_is_refused_wherever_it_sits(tmp_path, capsys, template, name):
    """Today only a quote right next to the placeholder was seen: `sh -c "... --out {out} ..."` passed."""
    for dry in ((), ("--dry-run",)):
        code = main(["tune", "--command", template, "--num-classes", "6", "--output-dir", str(tmp_path / "o"),
                     *dry])
        assert (code, capsys.readouterr().err) == (2, f"mr2 tune: error: {QUOTED_PLACEHOLDER.format(name=name)}\n")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("template", [
    f"{sys.executable} -c \"import sys; print('a b')\" {{loss}} {{seed}} {{out}}",
    "python t.py --loss-json={loss} --seed {seed} --out {out}/sub",
    "cd \"$HOME\" && python t.py {loss} {seed} $(dirname {out})",
    "python t.py {loss} {seed} {out}  # don't quote the placeholders",
    "python t.py \"--a\"{loss} {seed} {out}x",
    "sh -c 'python t.py --loss-json \"$MR2_LOSS\" --seed \"$MR2_SEED\" --out \"$MR2_OUT\"'",
    "bash -lc 'python t.py --loss-json \"${{MR2_LOSS}}\" --seed \"${{MR2_SEED}}\" --out \"${{MR2_OUT}}\"'",
], ids=["quotes-closed-before", "joined", "command-substitution", "comment", "adjacent-closed", "env-sh-c",
        "env-braces"])
def test_placeholders_outside_quotes_and_the_environment_variables_are_accepted(template):
    assert check_command(template) == template


@pytest.mark.parametrize("shell", ["/bin/sh", "bash"])
def test_seed_in_arithmetic_is_a_number_and_braces_stay_literal(tmp_path, shell):
    request = make_request(num_classes=K, candidates="quick", output_dir=tmp_path, name="c")
    source = command_source("printf '%s\\n' $(( {seed} + 100 )) \"$(( ({seed}) * 2 ))\" {out} {loss} '{{x}}'", request)
    trial = request.trial(Request("selection", "erm", 7))
    env = {**os.environ, **source.environment(trial)}
    printed = subprocess.run([shell, "-c", source.shell_command(trial)], env=env, capture_output=True, text=True,
                             check=True).stdout.splitlines()
    assert printed[:2] == ["107", "14"] and printed[2] == str(source.store.path(trial) / "output")
    assert printed[4] == "{x}"


def _run(source, trial) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **source.environment(trial)}
    return subprocess.run(["/bin/sh", "-c", source.shell_command(trial)], env=env, capture_output=True, text=True,
                          check=True)


@pytest.mark.parametrize("dangerous", ["$(touch {marker})", "`touch {marker}`", "x'; touch {marker}; '",
                                       'x"; touch {marker}; "', "a b\\$(touch {marker})"])
def test_a_value_no_quoting_can_reopen_reaches_the_command_as_one_word(tmp_path, marker, dangerous):
    """By construction: whatever the output directory holds, the command gets it as one argument and
    nothing in it runs (the directory check is bypassed here to show the substitution alone is safe)."""
    output_dir = tmp_path / dangerous.format(marker=marker)
    request = make_request(num_classes=K, candidates="quick", output_dir=output_dir, name="c")
    source = command_source("printf '%s\\n' {out} {seed} {loss}", request, check_output=False)
    trial = request.trial(Request("selection", "mr2-paper-c1", 3))
    printed = _run(source, trial).stdout.splitlines()
    assert printed == [str(source.store.path(trial) / "output"), "3",
                       json.dumps(trial.candidate.loss_spec(), separators=(",", ":"))]
    # A nested shell reading the environment variables, in double quotes inside single quotes.
    nested = command_source("bash -c 'printf \"%s\\n\" \"$MR2_OUT\"' {loss} {seed} {out}", request, check_output=False)
    assert _run(nested, trial).stdout.splitlines() == [str(source.store.path(trial) / "output")]
    assert source.environment(trial) == {ENVIRONMENT["out"]: printed[0], ENVIRONMENT["seed"]: "3",
                                         ENVIRONMENT["loss"]: printed[2], "MR2_TUNE_TRIAL": trial.name}


@pytest.mark.parametrize(("output_dir", "name"), [
    ("$(touch {marker})", "c"), ("`touch {marker}`", "c"), ("a\nb", "c"), ("o", "x$(id)"), ("o", "x`id`"),
], ids=["dollar-dir", "backtick-dir", "newline-dir", "dollar-name", "backtick-name"])
def test_an_output_directory_that_could_run_as_code_is_refused_before_anything(tmp_path, capsys, marker, output_dir,
                                                                              name):
    directory = tmp_path / output_dir.format(marker=marker)
    for template in (f"{sys.executable} {SCRIPT} --loss-json {{loss}} --seed {{seed}} --out {{out}}",
                     f"sh -c '{sys.executable} {SCRIPT} --loss-json \"$MR2_LOSS\" --seed \"$MR2_SEED\" --out "
                     f"\"$MR2_OUT\"'"):
        for dry in ((), ("--dry-run",)):
            code = main(["tune", "--command", template, "--num-classes", "6", "--candidates", "quick",
                         "--output-dir", str(directory), "--name", name, *dry])
            err = capsys.readouterr().err
            assert code == 2 and err.count("\n") == 1 and UNSAFE_OUTPUT.split("{")[0] in err, err
    assert list(tmp_path.iterdir()) == []


def test_a_nested_shell_with_the_environment_variables_tunes_end_to_end(tmp_path, capsys):
    inner = f"{sys.executable} {SCRIPT} --loss-json \"$MR2_LOSS\" --seed \"$MR2_SEED\" --out \"$MR2_OUT\""
    template = f"bash -c '{inner}'"
    assert main(["tune", "--command", template, "--num-classes", "6", "--candidates", "erm,mr2-paper-c1",
                 "--seeds", "2", "--confirm-seeds", "2", "--output-dir", str(tmp_path / "o"), "--name", "c"]) == 0, \
        capsys.readouterr()
    log = (tmp_path / "o" / "c" / "trials" / "selection" / "erm" / "seed=0" / "train.log").read_text()
    assert "training erm seed 0" in log
