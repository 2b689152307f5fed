"""A run's random streams, each derived from its seed: common random numbers across methods.

Two runs with the same seed and different methods (ERM and a candidate) draw the same random numbers
for what they share, so their difference is the method's and not the luck of the draw. The streams:

* **model initialisation**: torch's generator as :func:`~mr2.engine.runtime.seed_everything` and the
  data left it; the model is built from it first, and every later model of the run (JTT's second
  stage) is built from that same state, so it starts from ERM's initial weights.
* **batch order**: :class:`~mr2.engine.samplers.ShardedEpochSampler` (``seed + epoch``).
* **augmentation**: each training item's random transform is drawn from its own seed,
  ``derive_seed(seed, "augment", epoch)`` mixed with the item's position in the epoch's global order
  (:class:`SeededItems`): independent of the method, of dropout, of the number of ranks and of
  DataLoader workers.
* **dropout and other noise of the model**: torch's global generators, seeded
  ``derive_seed(seed, "model", epoch)`` at the start of every epoch (:func:`seed_model_noise`), so a
  method's extra draws (an evaluation pass, a second model) cannot shift a later epoch's draws.
* **the method's own**: its construction, :meth:`~mr2.methods.base.TrainingMethod.setup`,
  :meth:`~mr2.methods.base.TrainingMethod.adapt_model` (LDAM's cosine head, LfF's biased model) and, for
  a method with ``draws_in_step``, its calls in each step run on :class:`RandomStream` ``"method"``;
  its :meth:`~mr2.methods.base.TrainingMethod.epoch_indices` (JTT's and HBR's resampling) get a
  generator seeded ``derive_seed(seed, "method", "epoch_indices", epoch)``.

Checkpoints keep the method stream's state (:meth:`RandomStream.state_dict`); the other streams are
functions of the seed and the epoch, so a resumed run draws what an uninterrupted one does.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch.utils.data import Dataset, Sampler

__all__ = ["PositionedSampler", "RandomStream", "SeededItems", "derive_seed", "seed_model_noise"]

_MASK = (1 << 64) - 1


def derive_seed(seed: int, *names: str | int) -> int:
    """A 63-bit seed for the stream ``names`` of the run seeded ``seed`` (SHA-256 of both).

    Example:
        >>> derive_seed(0, "augment", 3) == derive_seed(0, "augment", 3) != derive_seed(1, "augment", 3)
        True
    """
    text = "/".join(str(part) for part in (int(seed), *names))
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") >> 1


def _item_seed(base: int, position: int) -> int:
    """SplitMix64 of ``base + position``: well-spread seeds for neighbouring positions (63 bits)."""
    x = (base + 0x9E3779B97F4A7C15 * (position + 1)) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return (x ^ (x >> 31)) >> 1


def seed_model_noise(seed: int, epoch: int) -> None:
    """Seed torch's global generators (CPU and CUDA: dropout, stochastic depth) for ``epoch``."""
    torch.manual_seed(derive_seed(seed, "model", epoch))


class RandomStream:
    """A named stream of torch's CPU (and CUDA) random numbers that lives beside the global one.

    While :meth:`active`, torch's default generators hold this stream's state; on exit the stream keeps
    where it got to and the global generators are back where they were.

    Args:
        seed: the stream's seed (e.g. ``derive_seed(run_seed, "method")``).
    """

    def __init__(self, seed: int) -> None:
        self.seed = int(seed)
        self._cpu = torch.Generator().manual_seed(self.seed).get_state()
        self._cuda: dict[int, torch.Tensor] = {}

    @contextlib.contextmanager
    def active(self, device: torch.device | None = None) -> Iterator[None]:
        """Draw from this stream inside the block (``device``: also its CUDA generator)."""
        cuda = device is not None and device.type == "cuda"
        index = -1
        if device is not None and cuda:
            index = device.index if device.index is not None else torch.cuda.current_device()
        with torch.random.fork_rng(devices=[index] if cuda else []):
            torch.set_rng_state(self._cpu)
            if cuda:
                if index in self._cuda:
                    torch.cuda.set_rng_state(self._cuda[index], index)
                else:
                    with torch.cuda.device(index):
                        torch.cuda.manual_seed(self.seed)
            try:
                yield
            finally:
                self._cpu = torch.get_rng_state()
                if cuda:
                    self._cuda[index] = torch.cuda.get_rng_state(index)

    def state_dict(self) -> dict[str, Any]:
        """The stream's state (weights-only-safe tensors)."""
        return {"seed": self.seed, "cpu": self._cpu.clone(),
                "cuda": {str(k): v.clone() for k, v in self._cuda.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        self.seed = int(state["seed"])
        self._cpu = state["cpu"].clone()
        self._cuda = {int(k): v.clone() for k, v in state.get("cuda", {}).items()}


class PositionedSampler(Sampler[tuple[int, int]]):
    """``(position, index)`` pairs of a :class:`~mr2.engine.samplers.ShardedEpochSampler`'s shard:
    ``position`` is the item's place in the epoch's global order (rank r takes r, r + R, ...)."""

    def __init__(self, sampler: Any) -> None:
        self.sampler = sampler

    def __iter__(self) -> Iterator[tuple[int, int]]:
        s = self.sampler
        positions = range(s.rank, s.num_samples * s.num_replicas, s.num_replicas)
        return iter(zip(positions, iter(s), strict=True))

    def __len__(self) -> int:
        return len(self.sampler)


class SeededItems(Dataset[Any]):
    """The training set with each item's random transform drawn from the item's own seed.

    Keys are ``(position, index)`` (:class:`PositionedSampler`); the item is ``dataset[index]`` with
    torch's CPU generator seeded from ``base_seed`` and ``position`` while the transform runs (the
    generator is restored afterwards). Two runs with the same seed see the same augmented inputs at
    the same positions of an epoch, whatever else draws random numbers.

    Args:
        dataset: the training set (items ``(input, target, index)``).
        base_seed: the epoch's augmentation seed, ``derive_seed(seed, "augment", epoch)``.
    """

    def __init__(self, dataset: Dataset[Any], base_seed: int) -> None:
        self.dataset = dataset
        self.base_seed = int(base_seed)

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, key: tuple[int, int]) -> Any:
        return self.__getitems__([key])[0]

    def __getitems__(self, keys: Sequence[tuple[int, int]]) -> list[Any]:
        generator = torch.default_generator
        items = []
        with torch.random.fork_rng(devices=[]):
            for position, index in keys:
                generator.manual_seed(_item_seed(self.base_seed, int(position)))
                items.append(self.dataset[int(index)])
        return items
