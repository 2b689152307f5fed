"""A plain PyTorch training script that mr2 did not write, tuned by ``mr2 tune`` two ways.

Its own data loading (Fashion-MNIST's idx files read with gzip and NumPy; a small fixed subset), its own
model class (an MLP that returns logits and its penultimate features) and its own training loop. The
only mr2 calls are the ones a tune needs: the candidate's loss and seeding.

Command line (``mr2 tune --command``)::

    mr2 tune --command 'python examples/tune_fashion_mnist.py --loss-json {loss} --seed {seed} --out {out}' \\
        --num-classes 10 --output-dir runs --name fmnist

    The script writes ``{out}/val.npz`` and ``{out}/test.npz`` (y_true and logits). With the default
    candidate set (``full``: its 16 losses x 3 seeds, then up to 6 confirmation trials) this command
    took 3 min 9 s on a 2-core CPU (one trial at a time, about 3.4 s each).

Python (``mr2.tune.tune``)::

    import mr2.tune
    from tune_fashion_mnist import train_fn          # this file, on sys.path
    mr2.tune.tune(train_fn, num_classes=10, output_dir="runs", name="fmnist")

Settings (environment): ``FMNIST_ROOT`` (default /usr/share/datasets/fashion-mnist), ``FMNIST_PER_CLASS``
(training images per class, default 100; validation and test take 60 per class), ``FMNIST_EPOCHS``
(default 1). The defaults make a trial take well under a second on a CPU: a demonstration, not a
benchmark (train longer on more data for a real answer).
"""

from __future__ import annotations

import argparse
import gzip
import os
from pathlib import Path

import numpy as np
import torch
from torch import nn

import mr2.tune

NUM_CLASSES = 10
FEATURES = 64
EVAL_PER_CLASS = 60
_CACHE: dict[tuple[str, int], tuple[np.ndarray, ...]] = {}


def _read_idx(path: Path) -> np.ndarray:
    with gzip.open(path, "rb") as handle:
        data = handle.read()
    dims = data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(dims))
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def _first_per_class(labels: np.ndarray, start: int, count: int) -> np.ndarray:
    """Indices of the samples ``start .. start + count - 1`` of each class, in file order (fixed)."""
    chosen = [np.flatnonzero(labels == k)[start:start + count] for k in range(NUM_CLASSES)]
    return np.sort(np.concatenate(chosen))


def load_data() -> tuple[np.ndarray, ...]:
    """``(x_train, y_train, x_val, y_val, x_test, y_test)``: fixed subsets, the same in every trial."""
    root = os.environ.get("FMNIST_ROOT", "/usr/share/datasets/fashion-mnist")
    per_class = int(os.environ.get("FMNIST_PER_CLASS", "100"))
    key = (root, per_class)
    if key not in _CACHE:
        images = _read_idx(Path(root) / "train-images-idx3-ubyte.gz")
        labels = _read_idx(Path(root) / "train-labels-idx1-ubyte.gz")
        test_images = _read_idx(Path(root) / "t10k-images-idx3-ubyte.gz")
        test_labels = _read_idx(Path(root) / "t10k-labels-idx1-ubyte.gz")
        train = _first_per_class(labels, 0, per_class)
        val = _first_per_class(labels, per_class, EVAL_PER_CLASS)  # held out from training
        test = _first_per_class(test_labels, 0, EVAL_PER_CLASS)

        def x(source: np.ndarray, index: np.ndarray) -> np.ndarray:
            return source[index].reshape(len(index), -1).astype(np.float32) / 255.0

        _CACHE[key] = (x(images, train), labels[train].astype(np.int64), x(images, val),
                       labels[val].astype(np.int64), x(test_images, test), test_labels[test].astype(np.int64))
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


def train(loss: nn.Module, seed: int) -> dict[str, dict[str, np.ndarray]]:
    """Train ``SmallMLP`` with ``loss`` (called as ``loss(logits, features, target)``); the validation and
    test split's ``y_true`` and ``logits``."""
    x_train, y_train, x_val, y_val, x_test, y_test = load_data()
    epochs = int(os.environ.get("FMNIST_EPOCHS", "1"))
    model = SmallMLP()
    optimizer = torch.optim.SGD([*model.parameters(), *loss.parameters()], lr=0.1, momentum=0.9)
    generator = torch.Generator().manual_seed(seed)
    inputs, targets = torch.from_numpy(x_train), torch.from_numpy(y_train)
    for _ in range(epochs):
        model.train()
        loss.train()
        for batch in torch.randperm(len(targets), generator=generator).split(50):
            logits, features = model(inputs[batch])
            value = loss(logits, features, targets[batch])
            optimizer.zero_grad()
            value.backward()
            optimizer.step()
    model.eval()
    loss.eval()
    with torch.no_grad():
        return {split: {"y_true": y, "logits": model(torch.from_numpy(x))[0].numpy()}
                for split, x, y in (("val", x_val, y_val), ("test", x_test, y_test))}


def train_fn(candidate: mr2.tune.Candidate, seed: int) -> mr2.tune.TrialPredictions:
    """One trial for ``mr2.tune.tune``: seed, build the candidate's loss, train, predict."""
    candidate.seed_everything(seed)
    loss = candidate.make_loss(feature_dim=FEATURES)
    result = train(loss, seed)
    return mr2.tune.TrialPredictions(val=result["val"], test=result["test"])


def main() -> None:
    """One trial for ``mr2 tune --command``: the loss from its JSON specification, predictions to --out."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loss-json", required=True, help="the candidate's loss specification (JSON)")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--out", required=True, help="directory for val.npz and test.npz")
    args = parser.parse_args()
    mr2.tune.Candidate.seed_everything(args.seed)
    loss = mr2.tune.loss_from_spec(args.loss_json, num_classes=NUM_CLASSES, feature_dim=FEATURES)
    result = train(loss, args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for split, arrays in result.items():
        np.savez(out / f"{split}.npz", **arrays)
    print(f"trained seed {args.seed} with {args.loss_json}; predictions in {out}")


if __name__ == "__main__":
    main()
