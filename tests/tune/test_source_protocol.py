"""The trial source is one protocol (issue 46, item 1): what differs between the ways in is a field or
a method of the source, the driver, the runtime and the text never ask which source they have, and
the command source owns the processes it runs (no module-global registry)."""

from __future__ import annotations

import json
import pickle
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from mr2.tune.candidates import candidates
from mr2.tune.command import CommandSource, RunningCommands
from mr2.tune.engine_source import EngineSource
from mr2.tune.errors import TrialError
from mr2.tune.source import FunctionSource
from mr2.tune.trials import Trial

SRC = Path(__file__).resolve().parents[2] / "src" / "mr2" / "tune"
ERM, MR2 = candidates("quick")[:2]


@pytest.mark.parametrize("module", ["driver.py", "runtime.py", "text.py", "estimate.py", "api.py"])
def test_no_module_outside_the_sources_asks_which_source_it_has(module):
    text = (SRC / module).read_text()
    assert re.findall(r"\.kind\b|source_kind|getattr\([^)]*source|stop_commands|allow_commands", text) == []


def test_each_source_says_what_differs_by_itself():
    assert (EngineSource.two_stage, CommandSource.two_stage, FunctionSource.two_stage) == (True, False, False)
    assert CommandSource.stop_signals == (signal.SIGTERM, signal.SIGHUP)
    assert EngineSource.stop_signals == () and FunctionSource.stop_signals == ()
    assert EngineSource.who_trains == "mr2's engine runs every candidate, two-stage procedures included"
    assert CommandSource.who_trains == "your command runs the losses"
    assert FunctionSource.who_trains == "your train_fn runs the losses"
    source = FunctionSource(lambda trial: None, store=None)  # type: ignore[arg-type]
    where, block = source.paste(MR2)
    assert where == "in your train_fn, result.recommended.make_loss() builds the loss; the same as a spec"
    assert block.startswith("loss_spec: {") and json.loads(block.removeprefix("loss_spec: ")) == MR2.loss_spec()
    assert source.class_names() is None


def test_the_engine_pastes_the_method_block():
    where, block = EngineSource.paste(None, MR2)  # type: ignore[arg-type]
    assert where == "paste into your run configuration"
    assert yaml.safe_load(block) == {"method": MR2.method_block()}


def test_a_command_source_owns_its_commands_and_its_stop(tmp_path):
    """Stopping one source's commands leaves another's alone; after its stop no command of it starts."""
    trial = Trial("selection", ERM, 0)
    first, second = RunningCommands(), RunningCommands()
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    kept = second.start(trial, sleeper, stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    stopped = first.start(trial, sleeper, stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    try:
        assert first.stop(grace=0.5) == 1
        assert stopped.wait(10) != 0
        assert kept.poll() is None  # the other source's command still runs
        with pytest.raises(TrialError, match=r"^trial selection/erm@0 was not started: tune is stopping$"):
            first.start(trial, sleeper)
    finally:
        assert second.stop(grace=0.5) == 1
    assert kept.wait(10) != 0


def test_a_copy_sent_to_a_job_starts_empty_and_not_stopped():
    """A submitit job unpickles the source: its registry is its own (no lock or process crosses)."""
    commands = RunningCommands()
    commands.stop()
    copy = pickle.loads(pickle.dumps(commands))
    process = copy.start(Trial("selection", ERM, 0), [sys.executable, "-c", "pass"])
    assert process.wait(30) == 0
    copy.done(process)
    assert copy.stop() == 0


def test_the_stored_sources_share_the_store_s_answers(tmp_path):
    from mr2.tune.source import StoredTrialSource
    from mr2.tune.trials import TrialStore

    store = TrialStore(tmp_path, 4)
    for source in (FunctionSource(lambda trial: None, store), CommandSource("x {loss} {seed} {out}", store)):
        assert isinstance(source, StoredTrialSource)
        assert (source.num_classes(), source.class_names()) == (4, None)
        assert source.is_finished(Trial("selection", ERM, 0)) is False
