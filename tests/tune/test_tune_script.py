"""``mr2.tune.script``: the helpers that make a training script tune-ready, each against an obvious oracle,
and docs/tune-ready.md's complete script, written with them only, through a real ``mr2 tune --command``."""

from __future__ import annotations

import argparse
import json
import math
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

from mr2.tune.errors import TuneInputError
from mr2.tune.script import (
    FLAG_TAKEN,
    LABELS_NOT_IDS,
    LOADER_EMPTY,
    LOADER_SHUFFLES,
    NOT_FINITE,
    NOT_PAIRS,
    OUT_IS_FILE,
    OUT_NOT_DIRECTORY,
    OUT_UNUSABLE,
    OUTPUT_NOT_LOGITS,
    PREDICTIONS_REFUSED,
    QUOTED_HINT,
    ROWS_DIFFER,
    SPLIT_EMPTY,
    SPLIT_FRACTION,
    SPLIT_SIZE,
    WIDTH_CHANGES,
    add_trial_arguments,
    fixed_split,
    write_predictions,
)

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "tune-ready.md"
HEADING = "## A complete script"


# ------------------------------------------------------------------------------------------ fixed_split


@pytest.mark.parametrize(("n", "fraction", "n_val"), [(10, 0.3, 3), (1000, 0.2, 200), (7, 0.5, 4), (2, 0.5, 1)])
def test_fixed_split_is_disjoint_complete_sorted_and_the_same_whatever_the_global_seed(n, fraction, n_val):
    splits = []
    for global_seed in (0, 1, 12345):
        torch.manual_seed(global_seed)
        state = torch.get_rng_state()
        splits.append(fixed_split(n, fraction))
        assert torch.equal(torch.get_rng_state(), state)  # the global random state is left untouched
    train, val = splits[0]
    assert all(split == splits[0] for split in splits)
    assert len(val) == n_val and len(train) == n - n_val
    assert set(train).isdisjoint(val) and sorted(train + val) == list(range(n))
    assert train == sorted(train) and val == sorted(val)


def test_fixed_split_of_a_dataset_gives_subsets_of_the_same_indices_and_its_own_seed_changes_it():
    dataset = TensorDataset(torch.arange(100.0), torch.arange(100) % 4)
    train, val = fixed_split(dataset, 0.25)
    assert (train.indices, val.indices) == fixed_split(100, 0.25)
    assert [int(val[i][1]) for i in range(len(val))] == [i % 4 for i in val.indices]
    assert fixed_split(100, 0.25, seed=1) != fixed_split(100, 0.25)  # the split's seed, not the trial's
    assert fixed_split(100, 0.25, seed=1) == fixed_split(100, 0.25, seed=1)


class _NoLength(Dataset):
    def __getitem__(self, index):
        return index


@pytest.mark.parametrize(
    ("data", "fraction", "message"),
    [
        (1, 0.5, SPLIT_SIZE.format(value=1)),
        (_NoLength(), 0.5, SPLIT_SIZE.format(value="_NoLength (no len())")),
        (10, 0.0, SPLIT_FRACTION.format(value=0.0)),
        (10, 1.0, SPLIT_FRACTION.format(value=1.0)),
        (10, math.nan, SPLIT_FRACTION.format(value=math.nan)),
        (10, "0.1", SPLIT_FRACTION.format(value="0.1")),
        (10, 0.01, SPLIT_EMPTY.format(fraction=0.01, n=10, val=0, train=10)),
        (10, 0.99, SPLIT_EMPTY.format(fraction=0.99, n=10, val=10, train=0)),
    ],
    ids=["one-sample", "no-len", "zero", "one", "nan", "string", "no-val", "no-train"],
)
def test_fixed_split_refuses_bad_input_with_one_line(data, fraction, message):
    with pytest.raises(TuneInputError) as caught:
        fixed_split(data, fraction)
    assert str(caught.value) == message and "\n" not in message


# ------------------------------------------------------------------------------------ write_predictions


class TwoOutputs(nn.Module):
    """Returns (logits, features); dropout makes eval mode matter; records whether gradients were on."""

    def __init__(self, width: int = 3) -> None:
        super().__init__()
        self.body = nn.Linear(5, 8)
        self.dropout = nn.Dropout(0.5)
        self.head = nn.Linear(8, width)
        self.grad_enabled: list[bool] = []

    def forward(self, x):
        self.grad_enabled.append(torch.is_grad_enabled())
        features = self.dropout(torch.relu(self.body(x)))
        return self.head(features), features


def _oracle_logits(model: TwoOutputs, x: torch.Tensor) -> np.ndarray:
    """One sample at a time, in float64, without dropout (eval mode)."""
    w1, b1 = model.body.weight.detach().double(), model.body.bias.detach().double()
    w2, b2 = model.head.weight.detach().double(), model.head.bias.detach().double()
    return np.stack([(w2 @ torch.relu(w1 @ row.double() + b1) + b2).numpy() for row in x])


def _data(n: int, k: int = 3, seed: int = 0) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    return TensorDataset(torch.randn(n, 5, generator=generator), torch.randint(0, k, (n,), generator=generator))


def test_the_files_hold_exactly_the_loaders_labels_and_the_models_eval_mode_logits(tmp_path):
    model = TwoOutputs()
    model.train()
    val, test = _data(20, seed=1), _data(13, seed=2)
    files = write_predictions(tmp_path / "out", model, DataLoader(val, batch_size=7), DataLoader(test, batch_size=5),
                              num_classes=3)
    assert files == {"val": tmp_path / "out" / "val.npz", "test": tmp_path / "out" / "test.npz"}
    for split, dataset in (("val", val), ("test", test)):
        with np.load(files[split]) as data:
            assert sorted(data.files) == ["logits", "y_true"]
            assert data["y_true"].dtype == np.int64 and data["logits"].dtype == np.float32
            assert data["y_true"].tolist() == dataset.tensors[1].tolist()
            np.testing.assert_allclose(data["logits"], _oracle_logits(model, dataset.tensors[0]), atol=1e-5)
    assert model.training  # its mode is restored
    assert model.grad_enabled and not any(model.grad_enabled)  # predicted under no_grad


def test_the_files_are_what_mr2_report_reads(tmp_path):
    from mr2.report.predictions import read_predictions

    model = TwoOutputs()
    loader = DataLoader(_data(12), batch_size=5)
    files = write_predictions(tmp_path, model, loader, loader)
    item = read_predictions(files["test"])
    assert item.y_true.tolist() == _data(12).tensors[1].tolist()
    assert item.logits is not None and item.logits.shape == (12, 3)
    assert item.y_pred.tolist() == item.logits.argmax(1).tolist()


def test_a_model_returning_logits_only_and_logits_of_for_any_other_output(tmp_path):
    plain = nn.Linear(5, 3)
    loader = DataLoader(_data(9), batch_size=4)
    write_predictions(tmp_path / "plain", plain, loader, loader)

    class Wrapped(nn.Module):
        def forward(self, x):
            return {"scores": plain(x)}

    with pytest.raises(TuneInputError, match="the model returned a dict"):
        write_predictions(tmp_path / "wrapped", Wrapped(), loader, loader)
    write_predictions(tmp_path / "wrapped", Wrapped(), loader, loader, logits_of=lambda output: output["scores"])
    for split in ("val", "test"):
        with np.load(tmp_path / "plain" / f"{split}.npz") as first, \
                np.load(tmp_path / "wrapped" / f"{split}.npz") as second:
            assert np.array_equal(first["logits"], second["logits"])
            assert np.array_equal(first["logits"], plain(_data(9).tensors[0]).detach().numpy())


class _Pairs(Dataset):
    def __init__(self, items):
        self.items = items

    def __len__(self):
        return len(self.items)

    def __getitem__(self, index):
        return self.items[index]


def _refused(tmp_path, model, val, test=None, **options):
    test = val if test is None else test
    with pytest.raises(TuneInputError) as caught:
        write_predictions(tmp_path / "out", model, val, test, **options)
    assert not (tmp_path / "out" / "val.npz").exists()  # nothing is written unless both splits pass
    assert "\n" not in str(caught.value)
    return str(caught.value)


def test_write_predictions_refuses_each_bad_input_with_one_line(tmp_path):
    model = TwoOutputs()
    good = DataLoader(_data(8), batch_size=4)
    assert _refused(tmp_path, model, DataLoader(_data(8), batch_size=4, shuffle=True)) == LOADER_SHUFFLES.format(
        split="val")
    assert _refused(tmp_path, model, good, []) == LOADER_EMPTY.format(split="test")
    inputs_only = DataLoader(_Pairs([torch.randn(5) for _ in range(4)]), batch_size=2)
    assert _refused(tmp_path, model, inputs_only) == NOT_PAIRS.format(split="val", index=0, kind="a Tensor")
    float_labels = DataLoader(TensorDataset(torch.randn(4, 5), torch.tensor([0.0, 1.0, 2.0, 1.0])), batch_size=2)
    assert _refused(tmp_path, model, good, float_labels) == PREDICTIONS_REFUSED.format(
        split="test", problem="y_true must hold integer class ids; got dtype float32")
    one_hot = DataLoader(TensorDataset(torch.randn(4, 5), torch.eye(3, dtype=torch.int64)[[0, 1, 2, 1]]), batch_size=4)
    assert _refused(tmp_path, model, one_hot) == LABELS_NOT_IDS.format(
        split="val", index=0, problem="shape [4, 3] (one-hot? give the class ids)")
    assert _refused(tmp_path, TwoOutputs(width=4), good, num_classes=3) == PREDICTIONS_REFUSED.format(
        split="val", problem="logits have 4 columns but num_classes is 3 (wrong K: one column per class)")
    too_high = DataLoader(TensorDataset(torch.randn(4, 5), torch.tensor([0, 1, 2, 3])), batch_size=4)
    assert _refused(tmp_path, model, good, too_high) == PREDICTIONS_REFUSED.format(
        split="test", problem="y_true holds class ids from 0 to 3, outside [0, 3) (wrong K?)")
    negative = DataLoader(TensorDataset(torch.randn(4, 5), torch.tensor([0, -1, 2, 1])), batch_size=4)
    assert _refused(tmp_path, model, negative) == PREDICTIONS_REFUSED.format(
        split="val", problem="y_true holds class ids from -1 to 2, outside [0, 3) (wrong K?)")

    class Growing(nn.Module):
        def forward(self, x):
            return torch.zeros(len(x), 3 if x[0, 0] < 100 else 4)

    changing = DataLoader(TensorDataset(torch.tensor([[0.0] * 5, [200.0] * 5]), torch.tensor([0, 1])), batch_size=1)
    assert _refused(tmp_path, Growing(), changing) == WIDTH_CHANGES.format(width=4, split="val", index=1, first=3)

    class Diverged(nn.Module):
        def forward(self, x):
            return torch.full((len(x), 3), math.nan)

    assert _refused(tmp_path, Diverged(), good) == NOT_FINITE.format(split="val")

    class OneRow(nn.Module):
        def forward(self, x):
            return torch.zeros(1, 3)

    assert _refused(tmp_path, OneRow(), good) == ROWS_DIFFER.format(rows=1, labels=4, split="val", index=0)

    class ClassIds(nn.Module):
        def forward(self, x):
            return torch.zeros(len(x), dtype=torch.int64)

    assert _refused(tmp_path, ClassIds(), good) == OUTPUT_NOT_LOGITS.format(
        kind="a tensor of shape [4] and dtype torch.int64", split="val", index=0)


@pytest.mark.parametrize("case", ["class id out of range", "wrong K", "bool labels", "diverged"])
def test_write_predictions_checks_each_split_with_the_one_predictions_checker(tmp_path, case):
    """What the readers of the files refuse (mr2.report.predictions.predictions_problem on the same
    arrays, whole) is refused before anything is written: the val split is good (but for a wrong K,
    which is the model's), the test split is not, and no val.npz appears."""
    from mr2.report.predictions import NonFinitePredictions, predictions_problem

    torch.manual_seed(0)
    x = torch.randn(6, 5)
    y = torch.tensor([0, 1, 2, 0, 1, 2])
    model, num_classes = TwoOutputs(), None
    if case == "class id out of range":
        y = torch.tensor([0, 1, 2, 0, 1, 5])
    elif case == "wrong K":
        num_classes = 4
    elif case == "bool labels":
        y = torch.tensor([True, False, True, False, True, False])
    else:
        x[4, 0] = math.inf
        model = nn.Linear(5, 3)
    good = DataLoader(_data(6), batch_size=4)
    bad = DataLoader(TensorDataset(x, y), batch_size=4)
    message = _refused(tmp_path, model, good, bad, num_classes=num_classes)
    split = "val" if case == "wrong K" else "test"
    model.eval()
    with torch.no_grad():
        logits = model(x)
        logits = (logits[0] if isinstance(logits, tuple) else logits).numpy()
    if case == "diverged":
        with pytest.raises(NonFinitePredictions):
            predictions_problem(y.numpy(), None, logits, 3)
        assert message == NOT_FINITE.format(split=split)
    else:
        problem = predictions_problem(y.numpy(), None, logits, num_classes or 3)
        assert problem and message == PREDICTIONS_REFUSED.format(split=split, problem=problem)


def test_write_predictions_refuses_an_out_that_is_a_file(tmp_path):
    loader = DataLoader(_data(4), batch_size=4)
    (tmp_path / "file").write_text("")
    with pytest.raises(TuneInputError) as caught:
        write_predictions(tmp_path / "file", TwoOutputs(), loader, loader)
    assert str(caught.value) == OUT_NOT_DIRECTORY.format(path=tmp_path / "file")
    with pytest.raises(TuneInputError, match=r"^out .*/file/sub cannot be created: Not a directory$"):
        write_predictions(tmp_path / "file" / "sub", TwoOutputs(), loader, loader)


# ---------------------------------------------------------------------------------- add_trial_arguments


def _parse(argv, capsys):
    parser = argparse.ArgumentParser(prog="train.py")
    parser.add_argument("--epochs", type=int, default=3)
    with pytest.raises(SystemExit) as caught:
        add_trial_arguments(parser).parse_args(argv)
    assert caught.value.code == 2
    return capsys.readouterr().err.splitlines()[-1]


def test_the_flags_parse_the_loss_specification_the_seed_and_out(tmp_path):
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    spec = json.dumps({"method": "mr2", "options": {"variant": "logit_only", "c_bar": 1.0}}, separators=(",", ":"))
    args = add_trial_arguments(parser).parse_args(["--loss-json", spec, "--seed", "4", "--out", str(tmp_path)])
    assert args.loss_json == {"method": "mr2", "options": {"variant": "logit_only", "c_bar": 1.0}}
    assert (args.seed, args.out, args.epochs) == (4, tmp_path, 3)
    defaults = add_trial_arguments(argparse.ArgumentParser()).parse_args(["--out", "o"])
    assert (defaults.loss_json, defaults.seed, defaults.out) == ({"method": "erm", "options": {}}, 0, Path("o"))


def test_the_flags_refuse_bad_values_at_once(tmp_path, capsys):
    assert _parse([], capsys) == "train.py: error: the following arguments are required: --out"
    assert _parse(["--out", "o", "--seed", "-1"], capsys) == (
        "train.py: error: argument --seed: --seed must be an integer >= 0; got '-1'")
    (tmp_path / "file").write_text("")
    assert _parse(["--out", str(tmp_path / "file")], capsys) == (
        f"train.py: error: argument --out: {OUT_IS_FILE.format(path=tmp_path / 'file')}")
    long = "x" * 5000  # a path the system cannot look up: shown cut at 80 characters, with the reason
    assert _parse(["--out", long], capsys) == (
        f"train.py: error: argument --out: {OUT_UNUSABLE.format(path=repr(long)[:80] + '...', reason='File name too long')}")
    line = _parse(["--out", "o", "--loss-json", '{"method": "mr3", "options": {}}'], capsys)
    assert line.startswith("train.py: error: argument --loss-json: loss specification names method 'mr3'")
    assert QUOTED_HINT not in line


def test_a_quoted_loss_placeholder_is_named_in_the_error(tmp_path, capsys):
    # What a shell hands the script when --command writes '{loss}' in quotes (mr2 quotes it already).
    spec = json.dumps({"method": "mr2", "options": {"variant": "logit_only"}}, separators=(",", ":"))
    template = "printf %s '{loss}'"  # as mr2 tune formats --command: {loss} shell-quoted
    received = subprocess.run(["/bin/sh", "-c", template.format(loss=shlex.quote(spec))], capture_output=True, text=True, check=True).stdout
    assert received == "{method:mr2,options:{variant:logit_only}}"
    message = _parse(["--out", "o", "--loss-json", received], capsys)
    assert "not valid JSON" in message and message.endswith(QUOTED_HINT)


def test_a_parser_that_has_one_of_the_flags_is_refused():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int)
    with pytest.raises(TuneInputError) as caught:
        add_trial_arguments(parser)
    assert str(caught.value) == FLAG_TAKEN.format(flag="--seed")


# --------------------------------------------------------------------------------------- import weight


def test_the_module_imports_no_sweep_engine_or_report_module():
    # A user's script imports it in every trial.
    code = "import sys, mr2.tune.script; print(' '.join(sorted(m for m in sys.modules if m.startswith('mr2'))))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert "mr2.tune.script" in loaded
    heavy = [m for m in loaded if m.split(".")[1:2] in (["sweep"], ["engine"], ["report"], ["cli"])]
    assert heavy == []


# ------------------------------------------------------------------------ the docs' script, tuned for real


def docs_script() -> str:
    """The python block under docs/tune-ready.md's "A complete script"."""
    lines = PAGE.read_text(encoding="utf-8").splitlines()
    start = lines.index(HEADING)
    opening = next(i for i in range(start, len(lines)) if lines[i].strip() == "```python")
    closing = next(i for i in range(opening + 1, len(lines)) if lines[i].strip() == "```")
    return "\n".join(lines[opening + 1:closing]) + "\n"


def test_the_docs_script_uses_the_helpers_and_nothing_else_of_mr2():
    script = docs_script()
    mr2_imports = sorted(line for line in script.splitlines() if "mr2" in line and "import" in line)
    assert mr2_imports == ["from mr2.tune import loss_from_spec",
                           "from mr2.tune.script import add_trial_arguments, fixed_split, write_predictions"]


@pytest.mark.slow
def test_the_docs_script_tunes_through_the_command_line(tmp_path, capsys):
    from mr2.cli.main import main

    script = tmp_path / "train.py"
    script.write_text(docs_script(), encoding="utf-8")
    command = f"{shlex.quote(sys.executable)} {shlex.quote(str(script))} --loss-json {{loss}} --seed {{seed}} --out {{out}}"
    code = main(["tune", "--command", command, "--num-classes", "4", "--candidates", "erm,mr2-logit_only-c1",
                 "--seeds", "2", "--confirm-seeds", "2", "--output-dir", str(tmp_path / "runs"), "--name", "doc"])
    assert code == 0, capsys.readouterr()
    record = json.loads((tmp_path / "runs" / "doc" / "recommendation.json").read_text())
    assert record["source"] == {"kind": "command", "command": command}
    assert record["label"] in ("erm", "mr2-logit_only-c1")
    assert [len(c["runs"]) for c in record["selection"]["candidates"]] == [2, 1]  # ERM on 2 seeds
    # Every trial predicted the same 400 validation samples (the fixed split), whatever its seed.
    trials = sorted((tmp_path / "runs" / "doc" / "trials" / "selection").glob("*/seed=*/val.npz"))
    assert len(trials) == 3
    labels = []
    for path in trials:
        with np.load(path) as data:
            labels.append(data["y_true"])
            accuracy = float((data["logits"].argmax(1) == data["y_true"]).mean())
        assert accuracy > 0.5, (path, accuracy)  # it trained (4 classes: chance is 0.25)
    assert all(np.array_equal(first, labels[0]) for first in labels) and labels[0].shape == (400,)
