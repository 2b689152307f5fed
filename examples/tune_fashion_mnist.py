"""A plain PyTorch training script that mr2 did not write, tuned by ``mr2 tune`` two ways.

Its own data loading (Fashion-MNIST's idx files read with gzip and NumPy; a small fixed subset), its own
model class (an MLP that returns logits and its penultimate features) and its own training loop. The
mr2 calls are the ones a tune needs: the candidate's loss, and the helpers of ``mr2.tune.script``
(docs/tune-ready.md): the flags, a validation split fixed whatever the seed, the predictions writer.

Command line (``mr2 tune --command``; from the repository root, with ``.venv`` activated, or
``.venv/bin/mr2`` and ``.venv/bin/python`` instead of ``mr2`` and ``python``)::

    mr2 tune --command 'python examples/tune_fashion_mnist.py --loss-json {loss} --seed {seed} --out {out}' \\
        --num-classes 10 --output-dir runs --name fmnist

    Each trial runs this file in a fresh process, which writes ``{out}/val.npz`` and ``{out}/test.npz``
    (y_true and logits). With the default candidate set (``full``: its 16 losses x 3 seeds, then up to
    6 confirmation trials) that is up to 54 trials, one at a time without ``--workers``. One trial
    took 6 to 10 s on a 2-core CPU at a load average of about 6 (other jobs running; about 4 s of it
    importing torch and mr2), so expect several minutes for the whole tune (54 x that: 5 to 9 minutes
    at that load, an estimate; the whole tune was not re-timed). The output goes to ``runs/``
    (ignored by git).

Python (``mr2.tune.tune``)::

    import mr2.tune
    from tune_fashion_mnist import train_fn          # this file, on sys.path
    mr2.tune.tune(train_fn, num_classes=10, output_dir="runs", name="fmnist")

Settings (environment): ``FMNIST_ROOT`` (default /usr/share/datasets/fashion-mnist), ``FMNIST_PER_CLASS``
(training images per class, on average; default 100), ``FMNIST_EPOCHS`` (default 1). The validation
split is a fixed random 60 per class on average of the training file's first images of each class
(:func:`mr2.tune.script.fixed_split`), the test split the test file's first 60 images of each class. The
defaults make a trial's training take well under a second on a CPU: a demonstration, not a benchmark
(train longer on more data for a real answer).
"""

from __future__ import annotations

import argparse
import gzip
import os
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import mr2.tune
from mr2.tune.script import add_trial_arguments, fixed_split, write_predictions

NUM_CLASSES = 10
FEATURES = 64
EVAL_PER_CLASS = 60
EVAL_BATCH = 500
_CACHE: dict[tuple[str, int], tuple[TensorDataset, TensorDataset, TensorDataset]] = {}


def _read_idx(path: Path) -> np.ndarray:
    with gzip.open(path, "rb") as handle:
        data = handle.read()
    dims = data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(dims))
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def _first_per_class(labels: np.ndarray, count: int) -> np.ndarray:
    """Indices of the first ``count`` samples of each class, in file order (fixed)."""
    chosen = [np.flatnonzero(labels == k)[:count] for k in range(NUM_CLASSES)]
    return np.sort(np.concatenate(chosen))


def _tensors(images: np.ndarray, labels: np.ndarray, index: np.ndarray) -> TensorDataset:
    x = torch.from_numpy(images[index].reshape(len(index), -1).astype(np.float32) / 255.0)
    return TensorDataset(x, torch.from_numpy(labels[index].astype(np.int64)))


def load_data() -> tuple[TensorDataset, TensorDataset, TensorDataset]:
    """``(train, val, test)``: fixed subsets, the same in every trial whatever its seed."""
    root = os.environ.get("FMNIST_ROOT", "/usr/share/datasets/fashion-mnist")
    per_class = int(os.environ.get("FMNIST_PER_CLASS", "100"))
    key = (root, per_class)
    if key not in _CACHE:
        images = _read_idx(Path(root) / "train-images-idx3-ubyte.gz")
        labels = _read_idx(Path(root) / "train-labels-idx1-ubyte.gz")
        test_images = _read_idx(Path(root) / "t10k-images-idx3-ubyte.gz")
        test_labels = _read_idx(Path(root) / "t10k-labels-idx1-ubyte.gz")
        pool = _first_per_class(labels, per_class + EVAL_PER_CLASS)
        train, val = fixed_split(len(pool), EVAL_PER_CLASS / (per_class + EVAL_PER_CLASS))  # held out, fixed
        _CACHE[key] = (_tensors(images, labels, pool[train]), _tensors(images, labels, pool[val]),
                       _tensors(test_images, test_labels, _first_per_class(test_labels, EVAL_PER_CLASS)))
    return _CACHE[key]


class SmallMLP(nn.Module):
    """784 -> 128 -> 64 (features) -> 10 (logits)."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, FEATURES), nn.ReLU())
        self.head = nn.Linear(FEATURES, NUM_CLASSES)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = self.body(x)
        return self.head(features), features


def train(loss: nn.Module, seed: int) -> SmallMLP:
    """Train ``SmallMLP`` with ``loss`` (called as ``loss(logits, features, target)``) on the training split;
    the batch order follows ``seed``."""
    train_set, _, _ = load_data()
    epochs = int(os.environ.get("FMNIST_EPOCHS", "1"))
    model = SmallMLP()
    optimizer = torch.optim.SGD([*model.parameters(), *loss.parameters()], lr=0.1, momentum=0.9)
    order = torch.Generator().manual_seed(seed)
    batches = DataLoader(train_set, batch_size=50, shuffle=True, generator=order)
    model.train()
    loss.train()
    for _ in range(epochs):
        for inputs, target in batches:
            logits, features = model(inputs)
            value = loss(logits, features, target)
            optimizer.zero_grad()
            value.backward()
            optimizer.step()
    loss.eval()
    return model


def eval_loaders() -> tuple[DataLoader, DataLoader]:
    """The validation and the test split, in a fixed order (no shuffling)."""
    _, val_set, test_set = load_data()
    return DataLoader(val_set, batch_size=EVAL_BATCH), DataLoader(test_set, batch_size=EVAL_BATCH)


def train_fn(candidate: mr2.tune.Candidate, seed: int) -> mr2.tune.TrialPredictions:
    """One trial for ``mr2.tune.tune``: seed, build the candidate's loss, train, predict."""
    candidate.seed_everything(seed)
    model = train(candidate.make_loss(feature_dim=FEATURES), seed)
    model.eval()
    predictions = {}
    with torch.no_grad():
        for split, loader in zip(("val", "test"), eval_loaders(), strict=True):
            pairs = [(target, model(inputs)[0]) for inputs, target in loader]
            predictions[split] = {"y_true": torch.cat([y for y, _ in pairs]),
                                  "logits": torch.cat([z for _, z in pairs])}
    return mr2.tune.TrialPredictions(val=predictions["val"], test=predictions["test"])


def main() -> None:
    """One trial for ``mr2 tune --command``: the loss from ``--loss-json``, predictions to ``--out``."""
    parser = add_trial_arguments(argparse.ArgumentParser(description=__doc__.splitlines()[0]))
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    loss = mr2.tune.loss_from_spec(args.loss_json, num_classes=NUM_CLASSES, feature_dim=FEATURES)
    model = train(loss, args.seed)
    write_predictions(args.out, model, *eval_loaders(), num_classes=NUM_CLASSES)
    print(f"trained seed {args.seed} with {args.loss_json}; predictions in {args.out}")


if __name__ == "__main__":
    main()
