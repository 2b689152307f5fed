"""The objects a run trains: model, method, optimiser, schedule, loaders, and their checkpoint state.

A :class:`Trainer` is built from a config, a :class:`~mr2.engine.runtime.Runtime` and the run's
data; it knows nothing about run directories (see :mod:`mr2.rundir`) or the epoch loop (see
:mod:`mr2.engine.fit`), so tests and users can drive it directly.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, Subset

from mr2 import distributed
from mr2.config import RunConfig, config_to_dict
from mr2.engine.builders import FeatureDataset, RunData, build_model_for
from mr2.engine.checkpoint import rng_state, set_rng_state
from mr2.engine.loop import EvalResult, StepSetup, evaluate
from mr2.engine.optimization import build_optimizer, build_scheduler
from mr2.engine.runtime import RunError, Runtime
from mr2.engine.samplers import ShardedEpochSampler, shard_for_eval
from mr2.engine.streams import PositionedSampler, RandomStream, SeededItems, derive_seed, seed_model_noise
from mr2.methods.base import MethodContext, TrainingMethod
from mr2.methods.registry import build_method
from mr2.optim.sam import SAM

__all__ = ["Trainer"]

_FEATURE_DIM_UNKNOWN = "the model {name!r} exposes no feature_dim; it must return (logits, features)."


class Trainer:
    """Model, method, optimiser and schedule of one run, with loaders and checkpoint state.

    Args:
        config: the run's configuration.
        runtime: device, ranks and precision.
        data: the run's data sets (see :func:`~mr2.engine.builders.build_data`).
    """

    def __init__(self, config: RunConfig, runtime: Runtime, data: RunData) -> None:
        self.config = config
        self.runtime = runtime
        self.device = runtime.device
        self.data = data
        self.reset_epoch: int | None = None
        # Common random numbers (mr2.engine.streams): every model of the run starts from this state,
        # the method draws from its own stream, so a method never shifts ERM's draws.
        self._initial_rng_state = torch.get_rng_state()
        self.method_stream = RandomStream(derive_seed(config.seed, "method"))
        self.model: nn.Module = self.build_model()  # = initial_model(), advancing the global stream
        feature_dim = getattr(self.model, "feature_dim", None)
        if feature_dim is None:
            raise RunError(_FEATURE_DIM_UNKNOWN.format(name=config.model.name))
        with self.method_stream.active(self.device):
            self.method: TrainingMethod = build_method(
                config.method.name, data.num_classes, **config.method.options
            )
            self.method.setup(
                MethodContext(
                    num_classes=data.num_classes,
                    num_train_samples=len(data.train),  # type: ignore[arg-type]
                    class_counts=data.train_class_counts,
                    feature_dim=int(feature_dim),
                    device=self.device,
                    epochs=config.optim.epochs,
                    model_factory=self.build_model,
                    process_group=runtime.group,
                    predict_train_set=self.predict_train_set,
                )
            )
            self.model = self.method.adapt_model(self.model)
        self.method.to(self.device)
        self._build_optimizer()

    def build_model(self) -> nn.Module:
        """A freshly initialised model of the run's architecture (weights loaded as configured), on
        the device, drawn from torch's current random state (LfF's biased model: the method's stream)."""
        return build_model_for(self.config, self.data).to(self.device)

    def initial_model(self) -> nn.Module:
        """The run's initial model: the same weights for every method on the same seed, and for every
        model of the run (JTT's second stage), whatever was drawn before."""
        with torch.random.fork_rng(devices=[]):
            torch.set_rng_state(self._initial_rng_state)
            return self.build_model()

    @property
    def step_setup(self) -> StepSetup:
        """How :func:`~mr2.engine.loop.train_one_epoch` runs a step for this run."""
        optim = self.config.optim
        return StepSetup(
            self.device, self.runtime.amp_dtype, self.scaler, optim.grad_clip,
            self.config.log_every, self.runtime.group, self.sam,
            self.method_stream if getattr(self.method, "draws_in_step", False) else None,
        )

    def seed_model_noise(self, epoch: int) -> None:
        """Seed the model's dropout stream for ``epoch`` (:func:`~mr2.engine.streams.seed_model_noise`)."""
        seed_model_noise(self.config.seed, epoch)

    def _build_optimizer(self, first_epoch: int = 0) -> None:
        """Optimiser over the model's and the method's parameters; a schedule spanning the epochs
        ``first_epoch .. epochs - 1`` (all of them, or what remains after a model reset)."""
        config = self.config
        if config.model.sync_batchnorm and self.runtime.is_distributed:
            self.model = nn.SyncBatchNorm.convert_sync_batchnorm(self.model)
        self.train_model: nn.Module = self.model
        if self.runtime.is_distributed and any(p.requires_grad for p in self.model.parameters()):
            self.train_model = nn.parallel.DistributedDataParallel(
                self.model, device_ids=[self.device.index] if self.device.type == "cuda" else None
            )
        params = [p for p in self.model.parameters() if p.requires_grad]
        params += [p for p in self.method.parameters() if p.requires_grad]
        self.optimizer = build_optimizer(params, config.optim)
        steps = len(self.train_loader(first_epoch))
        self.scheduler = build_scheduler(self.optimizer, config.optim, steps, first_epoch)
        self.scaler = torch.amp.GradScaler("cuda") if self.runtime.amp_dtype == torch.float16 else None
        sam = config.optim.sam
        self.sam = SAM(self.optimizer, sam.rho, sam.adaptive) if sam is not None else None

    def reset_model(self, first_epoch: int) -> None:
        """Fresh model, optimiser and schedule from ``first_epoch`` on (JTT's second stage)."""
        model = self.initial_model()
        with self.method_stream.active(self.device):
            self.model = self.method.adapt_model(model)
        self._build_optimizer(first_epoch)
        self.reset_epoch = first_epoch

    # ----------------------------------------------------------------- loaders
    def train_loader(self, epoch: int) -> DataLoader[Any]:
        """The training loader of ``epoch``: the method's indices (or all), sharded over ranks.

        Its random numbers are the run's streams (:mod:`mr2.engine.streams`): the order is seeded
        ``seed + epoch``, the method's resampling has its own generator, and an item's augmentation is
        drawn from its own seed (a training set that is not a precomputed tensor).
        """
        seed = self.config.seed
        generator = torch.Generator().manual_seed(derive_seed(seed, "method", "epoch_indices", epoch))
        indices = self.method.epoch_indices(epoch, generator)
        if indices is None:
            indices = torch.arange(len(self.data.train))  # type: ignore[arg-type]
        sampler = ShardedEpochSampler(indices, self.runtime.world, self.runtime.rank, seed=seed)
        sampler.set_epoch(epoch)
        train = self.data.train
        if getattr(train, "precomputed", None) is None and not isinstance(train, FeatureDataset):
            train = SeededItems(train, derive_seed(seed, "augment", epoch))
            sampler = PositionedSampler(sampler)  # type: ignore[assignment]
        return DataLoader(
            train,
            batch_size=self.config.data.batch_size,
            sampler=sampler,
            num_workers=self.config.data.num_workers,
            pin_memory=self.device.type == "cuda",
            persistent_workers=False,
            generator=torch.Generator().manual_seed(derive_seed(seed, "loader", epoch)),
        )

    def eval_loader(self, dataset: Dataset[Any]) -> DataLoader[Any]:
        """This rank's disjoint shard of ``dataset`` (nothing padded, nothing counted twice)."""
        shard = Subset(dataset, shard_for_eval(len(dataset), self.runtime.world, self.runtime.rank))  # type: ignore[arg-type]
        return DataLoader(
            shard, batch_size=self.config.data.eval_batch_size, shuffle=False,
            num_workers=self.config.data.num_workers,
        )

    def _train_eval_view(self) -> Dataset[Any]:
        """The training set with the evaluation transform (no augmentation)."""
        train = self.data.train
        transform = getattr(train, "transform", None)
        if getattr(train, "precomputed", None) is not None or transform is None:
            return train
        view = copy.copy(train)
        view.transform = getattr(self.data.val or self.data.test, "transform", None)  # type: ignore[attr-defined]
        return view

    @torch.no_grad()
    def predict_train_set(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Eval-mode predictions of the current model on the whole training set, in index order,
        identical on every rank: ``(predicted [N], target [N])`` (JTT's ``eval_pass``)."""
        self.model.eval()
        preds, targets, indices = [], [], []
        for inputs, target, index in self.eval_loader(self._train_eval_view()):
            logits, _ = self.model(inputs.to(self.device))
            preds.append(logits.argmax(1))
            targets.append(target.to(self.device))
            indices.append(index.to(self.device))
        local = torch.stack([torch.cat(preds), torch.cat(targets), torch.cat(indices)], dim=1)
        gathered, _ = distributed.all_gather_variable(local, self.runtime.group)
        gathered = gathered.cpu()
        size = len(self.data.train)  # type: ignore[arg-type]
        predicted = torch.empty(size, dtype=torch.long)
        target_all = torch.empty(size, dtype=torch.long)
        predicted[gathered[:, 2]] = gathered[:, 0]
        target_all[gathered[:, 2]] = gathered[:, 1]
        return predicted, target_all

    def evaluate(self, dataset: Dataset[Any]) -> EvalResult:
        """Confusion matrix and logit margins of the model on ``dataset`` (method in eval mode)."""
        self.method.eval()
        return evaluate(
            self.model, self.eval_loader(dataset), self.data.num_classes, self.device,
            amp_dtype=self.runtime.amp_dtype, process_group=self.runtime.group,
        )

    @property
    def has_validation(self) -> bool:
        return self.data.val is not None and len(self.data.val) > 0  # type: ignore[arg-type]

    # ------------------------------------------------------------ checkpoints
    def state(self, epoch: int, best_val_accuracy: float) -> dict[str, Any]:
        """Everything needed to resume exactly after ``epoch`` (a weights-only-safe payload)."""
        return {
            "model": self.model.state_dict(),
            "method": self.method.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict() if self.scaler is not None else {},
            "sam": self.sam.state_dict() if self.sam is not None else {},
            "epoch": epoch,
            "best_val_accuracy": best_val_accuracy,
            "rng": {**rng_state(), "method_stream": self.method_stream.state_dict()},
            "config": config_to_dict(self.config),
            "reset_epoch": self.reset_epoch,
        }

    def load_state(self, payload: dict[str, Any]) -> tuple[int, float]:
        """Restore :meth:`state`; returns ``(epoch, best_val_accuracy)``."""
        self.method.load_state_dict(payload["method"])  # first: a reset may depend on its state
        if payload.get("reset_epoch") is not None:
            self.reset_model(int(payload["reset_epoch"]))
        self.model.load_state_dict(payload["model"])
        self.optimizer.load_state_dict(payload["optimizer"])
        self.scheduler.load_state_dict(payload["scheduler"])
        if self.scaler is not None and payload["scaler"]:
            self.scaler.load_state_dict(payload["scaler"])
        if self.sam is not None and payload.get("sam"):
            self.sam.load_state_dict(payload["sam"])
        set_rng_state(payload["rng"])
        if "method_stream" in payload["rng"]:
            self.method_stream.load_state_dict(payload["rng"]["method_stream"])
        return int(payload["epoch"]), float(payload["best_val_accuracy"])

    def load_model_weights(self, payload: dict[str, Any]) -> None:
        """Load the model (and, when present, the method state) of a checkpoint for evaluation."""
        if "method" in payload:
            self.method.load_state_dict(payload["method"])
            if payload.get("reset_epoch") is not None:
                self.reset_model(int(payload["reset_epoch"]))
        self.model.load_state_dict(payload["model"])
