"""Make a training script of your own tune-ready: the flags, a fixed validation split, the predictions.

``mr2 tune --command 'python train.py --loss-json {loss} --seed {seed} --out {out}'`` runs your script
once per trial and reads ``{out}/val.npz`` and ``{out}/test.npz``. Three helpers cover what the script
needs besides its own training loop (docs/tune-ready.md walks through a complete script):

- :func:`add_trial_arguments` adds ``--loss-json`` (checked, parsed to the specification
  :func:`mr2.tune.loss_from_spec` takes), ``--seed`` and ``--out`` to your ``argparse`` parser.
- :func:`fixed_split` draws the validation split from a generator of its own: the same samples in every
  trial whatever the trial's seed, and the global random state is left untouched. (Every trial must
  predict the same validation samples in the same order; a ``random_split`` after
  ``torch.manual_seed(seed)`` differs per seed, and tune refuses the second trial.) With
  ``eval_data=`` (the same samples under the evaluation transform) the validation split is taken from
  it, so that augmentation (random crops, flips) trains but never reaches the validation predictions.
- :func:`write_predictions` runs the model in eval mode without gradients over a validation and a test
  loader and writes both files (``y_true`` and ``logits``, the format ``mr2 report --predictions``
  reads), atomically, once they pass the one check of predictions that every reader of them applies
  (:func:`mr2.report.predictions.predictions_problem`).

Each problem is a :class:`mr2.tune.TuneInputError` with a one-line message (``argparse``'s own error
for a bad flag). This module imports torch, NumPy and light parts of mr2 only (no sweep, engine or
report module), because a script imports it in every trial; :func:`write_predictions` loads the
report's predictions module when it runs.
"""

from __future__ import annotations

import argparse
import io
import math
import os
import warnings
from collections.abc import Callable, Iterable, Mapping, Sized
from pathlib import Path
from typing import Any, TypeVar, overload

import numpy as np
import torch
from torch import nn
from torch.utils.data import (
    BatchSampler,
    Dataset,
    DistributedSampler,
    RandomSampler,
    SequentialSampler,
    Subset,
)

from mr2.io import atomic_write_bytes
from mr2.losses.collapse import write_collapse_record
from mr2.memory import allocatable_bytes
from mr2.methods.spec import LossSpecError, LossSpecJSONError, parse_loss_spec
from mr2.tune.errors import TuneInputError
from mr2.tune.trials import SPLITS
from mr2.value_types import is_int, is_number

__all__ = ["add_trial_arguments", "fixed_split", "write_predictions"]

T = TypeVar("T")

#: The loss ``--loss-json`` defaults to (plain cross-entropy), so the script also runs on its own.
DEFAULT_LOSS_JSON = '{"method": "erm", "options": {}}'

# fixed_split
SPLIT_SIZE = "fixed_split takes a number of samples >= 2 or a dataset with a length; got {value}"
SPLIT_FRACTION = "val_fraction must be a number between 0 and 1 (e.g. 0.1); got {value!r}"
SPLIT_EMPTY = (
    "val_fraction {fraction!r} of {n} samples leaves {val} validation and {train} training samples; "
    "both need at least one"
)
SPLIT_SEED = (
    "fixed_split's seed must be an integer from 0 to 2**64 - 1 (the split's own, not the trial's); got "
    "{value}"
)
SPLIT_MEMORY = (
    "fixed_split of {n} samples needs about {need} of memory for its index lists, and this process can get "
    "{free}; split a smaller dataset (or a subsample of its indices)"
)
SPLIT_EVAL_LENGTH = (
    "eval_data has {eval_n} samples but data has {n}; give the same samples twice, once with the training "
    "transform (data) and once with the evaluation transform (eval_data)"
)
SPLIT_EVAL_WITH_COUNT = (
    "eval_data takes a dataset; fixed_split(n, ...) returns index lists: index both of your datasets with "
    "them"
)
RANDOM_TRANSFORM = (
    "fixed_split: the dataset's transform looks random ({names}); its validation split would be predicted "
    "augmented, differently in every trial. Pass eval_data= (the same samples under your evaluation "
    "transform): fixed_split(train_view, {fraction!r}, eval_data=eval_view)"
)
#: Peak bytes per sample of :func:`fixed_split` (a permutation, sorted copies, two Python lists of
#: ints: 55 measured at 10^7 samples), with a margin.
SPLIT_BYTES_PER_SAMPLE = 64
#: The memory :func:`fixed_split` assumes it may use where the available memory cannot be read.
UNKNOWN_MEMORY_LIMIT = 2**40
#: The split's seed seeds ``torch.Generator``, which takes 64 bits.
MAX_SPLIT_SEED = 2**64 - 1
#: Parts of a transform's name that mark it random (torchvision's RandomCrop, RandAugment, ColorJitter, ...).
_RANDOM_NAMES = ("Random", "RandAugment", "AutoAugment", "TrivialAugment", "AugMix", "ColorJitter")

# add_trial_arguments
FLAG_TAKEN = (
    "your parser already has {flag}; add_trial_arguments adds --loss-json, --seed and --out (remove yours, "
    "or read mr2's: args.loss_json, args.seed, args.out)"
)
QUOTED_HINT = (
    " (if mr2 tune ran this, write the placeholder {loss} unquoted in --command: mr2 quotes it itself)"
)
_SEED_FLAG = "--seed must be an integer >= 0; got {value!r}"
OUT_UNUSABLE = (
    "--out {path} cannot be used as a directory: {reason}; give the directory mr2 tune's {{out}} names"
)
OUT_IS_FILE = "--out {path} is a file; give a directory for val.npz and test.npz (mr2 tune's {{out}})"

# write_predictions
OUT_NOT_DIRECTORY = (
    "out {path} is a file, not a directory; write_predictions writes val.npz and test.npz into it"
)
_OUT_NOT_CREATED = "out {path} cannot be created: {error}"
LOADER_SHUFFLES = (
    "the {split} loader shuffles (shuffle=True); every trial must predict the same {split} samples in the "
    "same order: build it with shuffle=False"
)
#: A sampler other than a sequential one: its order may change between calls or trials.
LOADER_SAMPLER = (
    "the {split} loader's {attribute} is {kind}, whose order may differ between trials; every trial must "
    "predict the same {split} samples in the same order: build it with shuffle=False and no sampler (or "
    "a list of indices)"
)
LOADER_EMPTY = "the {split} loader yielded no sample; it must yield (inputs, labels) pairs, at least one"
NOT_PAIRS = (
    "the {split} loader's batch {index} is {kind}; write_predictions needs (inputs, labels) pairs, as a "
    "DataLoader over a dataset of (input, class id) yields"
)
LABELS_NOT_IDS = (
    "the {split} loader's labels (batch {index}) are not class ids [B]: {problem}; the labels must be "
    "[B] class ids 0 .. K-1"
)
OUTPUT_NOT_LOGITS = (
    "the model returned {kind} for the {split} loader's batch {index}; write_predictions needs logits "
    "[B, K] or a tuple (logits, features): pass logits_of= to pick the logits from the model's output"
)
ROWS_DIFFER = (
    "the model returned {rows} rows of logits for the {labels} labels of the {split} loader's batch {index}; "
    "it must return one row per sample"
)
WIDTH_CHANGES = (
    "the model's logits have {width} columns in the {split} loader's batch {index} but {first} before; one "
    "column per class, the same in every batch"
)
#: What :func:`mr2.report.predictions.predictions_problem` found wrong with a split's predictions.
PREDICTIONS_REFUSED = (
    "the {split} predictions (y_true: the {split} loader's labels; logits: the model's outputs) are "
    "refused: {problem}"
)
NOT_FINITE = (
    "the model's logits on the {split} loader hold NaN or infinite values: the model diverged; tune cannot "
    "score this trial"
)
_NUM_CLASSES = "num_classes must be an integer >= 2 or None; got {value!r}"
_SHOWN = 80


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN else text[:_SHOWN] + "..."


# --------------------------------------------------------------------------------------------- split


_allocatable_bytes = allocatable_bytes  # module attribute: tests replace it


def _gigabytes(count: float) -> str:
    return f"{count / 1e9:.3g} GB" if count < 1e15 else f"{count:.2g} bytes"


def _memory_error(n: str, need: int, free: int | None = None) -> TuneInputError:
    free = _allocatable_bytes() if free is None else free
    shown = (_gigabytes(free) if free is not None else
             f"{_gigabytes(UNKNOWN_MEMORY_LIMIT)} at most (assumed: the available memory is unknown here)")
    return TuneInputError(SPLIT_MEMORY.format(n=n, need=_gigabytes(need), free=shown))


def _random_transforms(data: Any) -> list[str]:
    """Names of the random-looking transforms a dataset applies (torchvision's ``transform`` /
    ``transforms`` attribute, or a Subset's dataset's), [] when none."""
    for _ in range(4):  # a Subset of a Subset of a dataset: look through a few wrappers
        found = []
        for attribute in ("transform", "transforms"):
            text = repr(getattr(data, attribute, None) or "")
            found += [word.split("(")[0] for word in text.replace(",", " ").split()
                      if any(word.startswith(name) for name in _RANDOM_NAMES)]
        if found:
            return list(dict.fromkeys(found))
        inner = getattr(data, "dataset", None)
        if inner is None:
            return []
        data = inner
    return []


@overload
def fixed_split(data: int, val_fraction: float, *, seed: int = 0) -> tuple[list[int], list[int]]: ...


@overload
def fixed_split(data: Dataset[T], val_fraction: float, *, seed: int = 0, eval_data: Dataset[T] | None = None
                ) -> tuple[Subset[T], Subset[T]]: ...


def fixed_split(data: int | Dataset[T], val_fraction: float, *, seed: int = 0,
                eval_data: Dataset[T] | None = None
                ) -> tuple[list[int], list[int]] | tuple[Subset[T], Subset[T]]:
    """A train / validation split that is the same in every trial, whatever the trial's seed.

    The ``round(n * val_fraction)`` validation indices are drawn by a permutation from a generator of
    its own, seeded with ``seed`` (not the trial's seed), so the split depends on ``n``,
    ``val_fraction`` and ``seed`` only; the global random state (``torch.manual_seed``) is neither read
    nor changed. Both index lists are sorted.

    Augmentation: a dataset whose transform is random (random crops, flips) would give validation
    inputs that differ in every trial, though ``y_true`` is the same, so tune could not notice and would
    compare the candidates on noise of the augmentation. Give ``eval_data``, the same samples under the
    evaluation transform (e.g. ``FashionMNIST(root, train=True, transform=to_tensor)`` beside the
    training view with ``RandomCrop``): the validation Subset is taken from it. Without it, a dataset
    whose transform looks random (a torchvision ``Random*``, ``ColorJitter``, ``*Augment*``) is warned
    about.

    Args:
        data: the number of samples ``n``, or a dataset with a length (``len(data)``): the training view.
        val_fraction: the share of samples in the validation split, in (0, 1).
        seed: the split's own seed, an integer from 0 to 2**64 - 1; keep it fixed across the trials of a
            tune.
        eval_data: the same ``n`` samples, in the same order, under the evaluation transform (datasets
            only); the validation Subset indexes it.

    Returns:
        ``(train_indices, val_indices)`` for a number, ``(Subset(data, train_indices),
        Subset(eval_data or data, val_indices))`` for a dataset.

    Raises:
        TuneInputError: ``n`` below 2 or a dataset without a length, ``val_fraction`` outside (0, 1), a
            split that leaves either side empty, a bad ``seed``, ``eval_data`` of another length (or
            with a number), or index lists larger than the memory this process can get.

    Warns:
        UserWarning: ``data``'s transform looks random and no ``eval_data`` was given.

    Example:
        >>> train, val = fixed_split(10, 0.3)
        >>> len(train), len(val), sorted(train + val) == list(range(10))
        (7, 3, True)
        >>> _ = torch.manual_seed(1); first = fixed_split(10, 0.3)
        >>> _ = torch.manual_seed(2); first == fixed_split(10, 0.3)
        True
    """
    if is_int(data):
        n = data
    elif isinstance(data, Sized):
        try:
            n = len(data)
        except OverflowError:  # a __len__ beyond sys.maxsize: no memory holds its index lists
            raise _memory_error("more than 2**63", 2**63 * SPLIT_BYTES_PER_SAMPLE) from None
    else:
        raise TuneInputError(SPLIT_SIZE.format(value=f"{type(data).__name__} (no len())"))
    if n < 2:
        raise TuneInputError(SPLIT_SIZE.format(value=n))
    if not is_number(val_fraction) or not 0 < val_fraction < 1:
        raise TuneInputError(SPLIT_FRACTION.format(value=val_fraction))
    if not is_int(seed) or not 0 <= seed <= MAX_SPLIT_SEED:
        shown = f"an integer of {seed.bit_length()} bits" if is_int(seed) and seed > 10**30 else _short(seed)
        raise TuneInputError(SPLIT_SEED.format(value=shown))
    n_val = math.floor(n * val_fraction + 0.5)
    if not 0 < n_val < n:
        raise TuneInputError(SPLIT_EMPTY.format(fraction=val_fraction, n=n, val=n_val, train=n - n_val))
    if eval_data is not None:
        if is_int(data):
            raise TuneInputError(SPLIT_EVAL_WITH_COUNT)
        eval_n = len(eval_data) if isinstance(eval_data, Sized) else None
        if eval_n != n:
            raise TuneInputError(SPLIT_EVAL_LENGTH.format(eval_n="no len()" if eval_n is None else eval_n,
                                                          n=n))
    free = _allocatable_bytes()
    if SPLIT_BYTES_PER_SAMPLE * n > (free if free is not None else UNKNOWN_MEMORY_LIMIT):
        raise _memory_error(str(n), SPLIT_BYTES_PER_SAMPLE * n, free)
    if eval_data is None and not is_int(data):
        names = _random_transforms(data)
        if names:
            message = RANDOM_TRANSFORM.format(names=", ".join(names[:4]), fraction=val_fraction)
            warnings.warn(message, UserWarning, stacklevel=2)
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    val = order[:n_val].sort().values.tolist()
    train = order[n_val:].sort().values.tolist()
    del order
    if is_int(data):
        return train, val
    return Subset(data, train), Subset(eval_data if eval_data is not None else data, val)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------- flags


def _loss_json(text: str) -> dict[str, Any]:
    try:
        return parse_loss_spec(text)
    except LossSpecError as error:
        hint = QUOTED_HINT if isinstance(error, LossSpecJSONError) else ""
        raise argparse.ArgumentTypeError(f"{error}{hint}") from None


def _seed(text: str) -> int:
    try:
        seed = int(text)
    except ValueError:
        seed = -1
    if seed < 0:
        raise argparse.ArgumentTypeError(_SEED_FLAG.format(value=text))
    return seed


def _out(text: str) -> Path:
    path = Path(text)
    try:
        is_file = path.exists() and not path.is_dir()
    except (OSError, ValueError) as error:  # a name too long, a NUL byte
        reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        raise argparse.ArgumentTypeError(OUT_UNUSABLE.format(path=_short(text), reason=reason)) from None
    if is_file:
        raise argparse.ArgumentTypeError(OUT_IS_FILE.format(path=path))
    return path


def add_trial_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the flags ``mr2 tune --command`` passes to a trial; returns ``parser``.

    - ``--loss-json`` (default: ERM, ``{"method": "erm", "options": {}}``): the candidate's loss
      specification, checked and parsed to a dict (``args.loss_json``), ready for
      ``mr2.tune.loss_from_spec(args.loss_json, num_classes=K, feature_dim=d)``.
    - ``--seed`` (default 0): the trial's seed, an integer >= 0 (``args.seed``).
    - ``--out`` (required): the directory for ``val.npz`` and ``test.npz`` (``args.out``, a ``Path``;
      an existing file is refused).

    A bad value is ``argparse``'s error (usage and one line, exit 2), at once, before any training.

    Raises:
        TuneInputError: ``parser`` already has one of the three flags.

    Example:
        >>> args = add_trial_arguments(argparse.ArgumentParser()).parse_args(["--seed", "3", "--out", "o"])
        >>> args.loss_json, args.seed, str(args.out)
        ({'method': 'erm', 'options': {}}, 3, 'o')
    """
    for flag, options in (
        ("--loss-json", {"type": _loss_json, "default": DEFAULT_LOSS_JSON, "metavar": "JSON",
                         "help": "the loss specification (mr2 tune's {loss}; default: ERM, cross-entropy)"}),
        ("--seed", {"type": _seed, "default": 0, "help": "the trial's seed (mr2 tune's {seed}; default 0)"}),
        ("--out", {"type": _out, "required": True, "metavar": "DIR",
                   "help": "the directory for val.npz and test.npz (mr2 tune's {out})"}),
    ):
        try:
            parser.add_argument(flag, **options)  # type: ignore[arg-type]
        except argparse.ArgumentError:
            raise TuneInputError(FLAG_TAKEN.format(flag=flag)) from None
    return parser


# ---------------------------------------------------------------------------------------- predictions


def _model_device(model: nn.Module) -> torch.device:
    for tensor in (*model.parameters(), *model.buffers()):
        return tensor.device
    return torch.device("cpu")


def _to_device(value: Any, device: torch.device) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, Mapping):
        return {key: _to_device(item, device) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to_device(item, device) for item in value)
    return value


def _labels(value: Any, split: str, index: int) -> torch.Tensor:
    def bad(problem: str) -> TuneInputError:
        return TuneInputError(LABELS_NOT_IDS.format(split=split, index=index, problem=problem))

    try:
        labels = value if isinstance(value, torch.Tensor) else torch.as_tensor(np.asarray(value))
    except (TypeError, ValueError, RuntimeError) as error:
        raise bad(f"{type(value).__name__} is not an array ({error})") from None
    if labels.ndim != 1:  # one label per row of logits; what the labels hold is the contract's check
        hint = " (one-hot? give the class ids)" if labels.ndim == 2 else ""
        raise bad(f"shape {list(labels.shape)}{hint}")
    return labels.detach().to("cpu")


def _logits(output: Any, split: str, index: int) -> torch.Tensor:
    if isinstance(output, (tuple, list)) and output and isinstance(output[0], torch.Tensor):
        output = output[0]  # (logits, features)
    if not isinstance(output, torch.Tensor) or output.ndim != 2 or not output.is_floating_point():
        kind = (f"a tensor of shape {list(output.shape)} and dtype {output.dtype}"
                if isinstance(output, torch.Tensor) else f"a {type(output).__name__}")
        raise TuneInputError(OUTPUT_NOT_LOGITS.format(kind=kind, split=split, index=index))
    return output.detach().to("cpu")


def _sampler_problem(sampler: Any) -> str:
    """Why a loader's sampler may not give one fixed order ("" when it does): a SequentialSampler, a
    list, tuple or range of indices and an iterable dataset's sampler do; anything else may not
    (RandomSampler, SubsetRandomSampler, WeightedRandomSampler, a shuffling DistributedSampler, a
    sampler of your own)."""
    if sampler is None or isinstance(sampler, (SequentialSampler, list, tuple, range)):
        return ""
    if type(sampler).__name__ == "_InfiniteConstantSampler":  # an IterableDataset: its own order
        return ""
    if isinstance(sampler, DistributedSampler) and not sampler.shuffle:
        return ""
    if isinstance(sampler, BatchSampler):
        return _sampler_problem(sampler.sampler)
    return f"a {type(sampler).__name__}"


def _check_order(loader: Any, split: str) -> None:
    """Refuse a loader whose sampler or batch sampler may not give the same order every time."""
    if isinstance(getattr(loader, "sampler", None), RandomSampler):
        raise TuneInputError(LOADER_SHUFFLES.format(split=split))
    for attribute in ("sampler", "batch_sampler"):
        problem = _sampler_problem(getattr(loader, attribute, None))
        if problem:
            raise TuneInputError(LOADER_SAMPLER.format(split=split, kind=problem, attribute=attribute))


def _predict(model: nn.Module, loader: Iterable[Any], split: str, device: torch.device,
             logits_of: Callable[[Any], Any] | None, num_classes: int | None
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """One split's ``(y_true int64 [N], logits [N, K] float32 or float64)``, checked batch by batch for
    what joins them (pairs, logits, a label per row, one width) and then, whole, by the one check of
    predictions (:func:`mr2.report.predictions.predictions_problem`: sample ids, K, finiteness)."""
    from mr2.report.predictions import NonFinitePredictions, predictions_problem

    _check_order(loader, split)
    labels: list[torch.Tensor] = []
    scores: list[torch.Tensor] = []
    width: int | None = None
    for index, batch in enumerate(loader):
        if not isinstance(batch, (tuple, list)) or len(batch) < 2:
            size = f" of {len(batch)}" if isinstance(batch, (tuple, list)) else ""
            kind = f"a {type(batch).__name__}{size}"
            raise TuneInputError(NOT_PAIRS.format(split=split, index=index, kind=kind))
        target = _labels(batch[1], split, index)
        output = model(_to_device(batch[0], device))
        logits = _logits(output if logits_of is None else logits_of(output), split, index)
        if logits.shape[0] != target.shape[0]:
            raise TuneInputError(ROWS_DIFFER.format(rows=logits.shape[0], labels=target.shape[0], split=split,
                                                    index=index))
        if width is None:
            width = logits.shape[1]
        elif logits.shape[1] != width:
            raise TuneInputError(WIDTH_CHANGES.format(width=logits.shape[1], split=split, index=index,
                                                      first=width))
        labels.append(target)
        scores.append(logits)
    if not labels or not sum(t.numel() for t in labels):  # no batch, or only empty ones
        raise TuneInputError(LOADER_EMPTY.format(split=split))
    assert width is not None
    y_true, y_scores = torch.cat(labels), torch.cat(scores)
    if y_scores.dtype != torch.float64:
        y_scores = y_scores.float()  # what is written (NumPy has no bfloat16)
    try:
        problem = predictions_problem(y_true.numpy(), None, y_scores.numpy(),
                                      width if num_classes is None else num_classes)
    except NonFinitePredictions:
        raise TuneInputError(NOT_FINITE.format(split=split)) from None
    if problem:
        raise TuneInputError(PREDICTIONS_REFUSED.format(split=split, problem=problem))
    return y_true.to(torch.int64), y_scores


def write_predictions(
    out: str | os.PathLike[str],
    model: nn.Module,
    val_loader: Iterable[Any],
    test_loader: Iterable[Any],
    *,
    num_classes: int | None = None,
    device: torch.device | str | None = None,
    logits_of: Callable[[Any], Any] | None = None,
) -> dict[str, Path]:
    """Predict the validation and the test split and write ``{out}/val.npz`` and ``{out}/test.npz``.

    The model runs in eval mode under ``torch.no_grad()`` (its training mode is restored afterwards);
    each batch ``(inputs, labels, ...)`` of a loader is predicted as ``model(inputs)``, with ``inputs``
    (a tensor, or a tuple / list / dict of tensors) moved to ``device``. Each file holds ``y_true``
    ([N] int64, the loader's labels in its order) and ``logits`` ([N, K], float32 unless the model gives
    float64), written atomically: the files ``mr2 tune --command`` and ``mr2 report --predictions``
    read. The loaders must not shuffle: every trial predicts the same samples in the same order.
    When a feature-collapse guard (:class:`mr2.MR2Loss`'s) warned in this thread since it started (or
    since :func:`mr2.losses.collapse.reset_collapse_warnings`), ``{out}/collapse.json`` is written
    beside them (and an old one removed otherwise): ``mr2 tune`` then does not adopt the candidate
    (docs/tune.md, "What the 5 % does not cover").

    Args:
        out: the directory (created if missing), e.g. ``args.out`` of :func:`add_trial_arguments`.
        model: returns logits [B, K] or a tuple / list whose first item is the logits (``(logits,
            features)``).
        val_loader, test_loader: iterables of ``(inputs, labels)`` batches (e.g. ``DataLoader(...,
            shuffle=False)``); labels are integer class ids [B].
        num_classes: K; when given, the logits must have K columns.
        device: where ``inputs`` go; default: the device of the model's first parameter (CPU without one).
        logits_of: picks the logits out of the model's output when it is something else (e.g.
            ``lambda output: output.logits``).

    Returns:
        ``{"val": path, "test": path}`` of the files written.

    Raises:
        TuneInputError: ``out`` is a file or cannot be created; a loader that shuffles, is empty or does
            not yield pairs; labels that are not class ids [B]; a model output that is not logits [B, K]
            or has another number of rows than the labels or another width than the first batch;
            then, each split whole, what :func:`mr2.report.predictions.predictions_problem` refuses
            (labels that are not integer ids in [0, K), logits whose width is not ``num_classes``)
            and non-finite logits. Nothing is written unless both splits pass.

    Example:
        >>> import tempfile
        >>> from torch.utils.data import DataLoader, TensorDataset
        >>> model = nn.Linear(4, 3)
        >>> data = TensorDataset(torch.randn(6, 4), torch.tensor([0, 1, 2, 0, 1, 2]))
        >>> loader = DataLoader(data, batch_size=4)
        >>> with tempfile.TemporaryDirectory() as out:
        ...     files = write_predictions(out, model, loader, loader, num_classes=3)
        ...     with np.load(files["val"]) as data:
        ...         print(sorted(data.files), data["y_true"].tolist(), data["logits"].shape)
        ['logits', 'y_true'] [0, 1, 2, 0, 1, 2] (6, 3)
    """
    if num_classes is not None and (not is_int(num_classes) or num_classes < 2):
        raise TuneInputError(_NUM_CLASSES.format(value=_short(num_classes)))
    directory = Path(out)
    if directory.exists() and not directory.is_dir():
        raise TuneInputError(OUT_NOT_DIRECTORY.format(path=directory))
    target_device = _model_device(model) if device is None else torch.device(device)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            predicted = {split: _predict(model, loader, split, target_device, logits_of, num_classes)
                         for split, loader in zip(SPLITS, (val_loader, test_loader), strict=True)}
    finally:
        model.train(was_training)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise TuneInputError(_OUT_NOT_CREATED.format(path=directory, error=error.strerror or error)) from None
    files = {}
    for split, (y_true, logits) in predicted.items():
        buffer = io.BytesIO()
        np.savez(buffer, y_true=y_true.numpy(), logits=logits.numpy())
        files[split] = directory / f"{split}.npz"
        atomic_write_bytes(files[split], buffer.getvalue())
    # A collapse guard of this training warned (mr2.MR2Loss's): the tune does not adopt the candidate.
    write_collapse_record(directory)
    return files
