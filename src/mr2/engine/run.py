"""Run a whole training job from a :class:`~mr2.config.RunConfig`: ``mr2 train`` and ``mr2 eval``."""

from __future__ import annotations

import copy
import math
import os
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import yaml
from torch import nn
from torch.utils.data import DataLoader, Dataset, Subset

from mr2 import distributed
from mr2.config import RunConfig, config_from_dict, config_to_dict
from mr2.engine.checkpoint import load_checkpoint, rng_state, save_checkpoint, set_rng_state
from mr2.engine.loop import EvalResult, StepSetup, evaluate, train_one_epoch
from mr2.engine.samplers import ShardedEpochSampler, shard_for_eval
from mr2.io import append_jsonl, atomic_write_json, atomic_write_text
from mr2.methods.base import MethodContext, TrainingMethod
from mr2.methods.registry import build_method
from mr2.optim.sam import SAM

__all__ = ["RunError", "TrainingSession", "evaluate_run", "train"]

RUN_EXISTS = (
    "run directory {path} holds a finished run (final.json). Choose another name, delete it, or "
    "pass --overwrite."
)
CONFIG_CHANGED = (
    "run directory {path} holds a checkpoint of a run with a different configuration "
    "(differs in: {keys}). Use another run name or --overwrite."
)
NO_RUN = "{path} is not a run directory (no config.yaml / checkpoints/last.pt)."
NO_CUDA = "device 'cuda' was requested but CUDA is not available; use device: cpu or auto."
FP16_NEEDS_CUDA = "optim.amp 'fp16' needs a CUDA device; use 'bf16' (CPU or GPU) or 'none'."
FEATURE_DIM_UNKNOWN = "the model {name!r} exposes no feature_dim; it must return (logits, features)."


class RunError(RuntimeError):
    """A run that cannot start or resume; the message says why and what to do."""


def _device(name: str) -> torch.device:
    if name == "auto":
        if torch.cuda.is_available():
            rank = int(os.environ.get("LOCAL_RANK", 0))
            return torch.device("cuda", rank)
        return torch.device("cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RunError(NO_CUDA)
    return device


def _seed_everything(seed: int, deterministic: bool) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if deterministic:
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.benchmark = False
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")


def _init_distributed(device: torch.device) -> bool:
    """Initialise torch.distributed when launched by torchrun (WORLD_SIZE > 1)."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return False
    if not dist.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        if device.type == "cuda":
            torch.cuda.set_device(device)
        dist.init_process_group(backend)
    return True


def _amp_dtype(config: RunConfig, device: torch.device) -> torch.dtype | None:
    if config.optim.amp == "bf16":
        return torch.bfloat16
    if config.optim.amp == "fp16":
        if device.type != "cuda":
            raise RunError(FP16_NEEDS_CUDA)
        return torch.float16
    return None


def _lr_lambda(total_steps: int, warmup_steps: int, scheduler: str) -> Any:
    def factor(step: int) -> float:
        if warmup_steps and step < warmup_steps:
            return (step + 1) / warmup_steps
        if scheduler == "constant":
            return 1.0
        progress = (step - warmup_steps) / max(1, total_steps - warmup_steps)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

    return factor


def _differs(a: dict[str, Any], b: dict[str, Any], prefix: str = "") -> list[str]:
    keys = []
    for key in sorted(set(a) | set(b)):
        path = f"{prefix}{key}"
        if isinstance(a.get(key), dict) and isinstance(b.get(key), dict):
            keys += _differs(a[key], b[key], path + ".")
        elif a.get(key) != b.get(key):
            keys.append(path)
    return keys


@dataclass
class DataParts:
    """Data sets of a run after the regime is applied (features for a linear probe)."""

    train: Dataset[Any]
    val: Dataset[Any] | None
    test: Dataset[Any]
    num_classes: int
    class_names: list[str]
    train_class_counts: torch.Tensor
    input_shape: tuple[int, ...]
    dataset_name: str


class TrainingSession:
    """Everything a run is made of, built from its config (data, model, method, optimiser).

    ``mr2 train`` is ``TrainingSession(config).fit()``; the pieces stay accessible for tests and for
    users who want to drive the loop themselves.
    """

    def __init__(self, config: RunConfig, *, overwrite: bool = False, quiet: bool = False) -> None:
        self.config = config
        self.quiet = quiet
        self.device = _device(config.device)
        self.is_distributed = _init_distributed(self.device)
        self.group: Any = None
        self.rank = distributed.rank()
        self.world = distributed.world_size()
        self.run_dir = Path(config.output_dir) / config.name
        self._prepare_run_dir(overwrite)
        _seed_everything(config.seed, config.deterministic)
        self.amp_dtype = _amp_dtype(config, self.device)
        from mr2.engine.builders import build_data, build_model_for

        self.data: DataParts = build_data(config, self.device, self.rank)
        self.model_factory = lambda: build_model_for(config, self.data).to(self.device)
        self._build_training_objects()

    # ----------------------------------------------------------------- set-up
    def _log(self, message: str) -> None:
        if self.rank == 0 and not self.quiet:
            print(message, file=sys.stderr, flush=True)

    def _prepare_run_dir(self, overwrite: bool) -> None:
        if self.rank == 0:
            final = self.run_dir / "final.json"
            if final.exists() and not overwrite:
                raise RunError(RUN_EXISTS.format(path=self.run_dir))
            if overwrite:
                for name in ("final.json", "metrics.jsonl", "checkpoints/last.pt", "checkpoints/best.pt"):
                    (self.run_dir / name).unlink(missing_ok=True)
            self.run_dir.mkdir(parents=True, exist_ok=True)
            config_file = self.run_dir / "config.yaml"
            checkpoint = self.run_dir / "checkpoints" / "last.pt"
            if config_file.exists() and checkpoint.exists():
                previous = yaml.safe_load(config_file.read_text()) or {}
                changed = _differs(previous, config_to_dict(self.config))
                changed = [k for k in changed if k not in ("optim.epochs",)]
                if changed:
                    raise RunError(CONFIG_CHANGED.format(path=self.run_dir, keys=", ".join(changed)))
            atomic_write_text(config_file, yaml.safe_dump(config_to_dict(self.config), sort_keys=False))
        if self.is_distributed:
            dist.barrier()

    def _build_training_objects(self) -> None:
        config = self.config
        self.model: nn.Module = self.model_factory()
        feature_dim = getattr(self.model, "feature_dim", None)
        if feature_dim is None:
            raise RunError(FEATURE_DIM_UNKNOWN.format(name=config.model.name))
        self.method: TrainingMethod = build_method(
            config.method.name, self.data.num_classes, **config.method.options
        )
        self.method.setup(
            MethodContext(
                num_classes=self.data.num_classes,
                num_train_samples=len(self.data.train),  # type: ignore[arg-type]
                class_counts=self.data.train_class_counts,
                feature_dim=int(feature_dim),
                device=self.device,
                epochs=config.optim.epochs,
                model_factory=self.model_factory,
                process_group=self.group,
                extra=dict(config.method.options),
                predict_train_set=self.predict_train_set,
            )
        )
        self.model = self.method.adapt_model(self.model)
        self.method.to(self.device)
        self.reset_epoch: int | None = None
        self._build_optimizer()

    def _build_optimizer(self, first_epoch: int = 0) -> None:
        """Optimiser over the model's and the method's parameters; a schedule spanning the epochs
        ``first_epoch .. epochs - 1`` (all of them, or what remains after a model reset)."""
        config = self.config
        if config.model.sync_batchnorm and self.is_distributed:
            self.model = nn.SyncBatchNorm.convert_sync_batchnorm(self.model)
        self.train_model: nn.Module = self.model
        if self.is_distributed and any(p.requires_grad for p in self.model.parameters()):
            self.train_model = nn.parallel.DistributedDataParallel(
                self.model, device_ids=[self.device.index] if self.device.type == "cuda" else None
            )
        params = [p for p in self.model.parameters() if p.requires_grad]
        params += [p for p in self.method.parameters() if p.requires_grad]
        optim = config.optim
        if optim.name == "sgd":
            self.optimizer: torch.optim.Optimizer = torch.optim.SGD(
                params, lr=optim.lr, momentum=optim.momentum, nesterov=optim.nesterov,
                weight_decay=optim.weight_decay,
            )
        else:
            self.optimizer = torch.optim.AdamW(params, lr=optim.lr, weight_decay=optim.weight_decay)
        self.sam = SAM(self.optimizer, optim.sam.rho, optim.sam.adaptive) if optim.sam is not None else None
        steps = len(self._train_loader(first_epoch))
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer,
            _lr_lambda(
                steps * (optim.epochs - first_epoch),
                round(steps * optim.warmup_epochs),
                optim.scheduler,
            ),
        )
        self.scaler = torch.amp.GradScaler("cuda") if self.amp_dtype == torch.float16 else None

    # ----------------------------------------------------------------- loaders
    def _train_loader(self, epoch: int) -> DataLoader[Any]:
        generator = torch.Generator().manual_seed(self.config.seed + epoch)
        indices = self.method.epoch_indices(epoch, generator)
        if indices is None:
            indices = torch.arange(len(self.data.train))  # type: ignore[arg-type]
        sampler = ShardedEpochSampler(indices, self.world, self.rank, seed=self.config.seed)
        sampler.set_epoch(epoch)
        return DataLoader(
            self.data.train,
            batch_size=self.config.data.batch_size,
            sampler=sampler,
            num_workers=self.config.data.num_workers,
            pin_memory=self.device.type == "cuda",
            persistent_workers=False,
        )

    def _eval_loader(self, dataset: Dataset[Any]) -> DataLoader[Any]:
        shard = Subset(dataset, shard_for_eval(len(dataset), self.world, self.rank))  # type: ignore[arg-type]
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
        for inputs, target, index in self._eval_loader(self._train_eval_view()):
            logits, _ = self.model(inputs.to(self.device))
            preds.append(logits.argmax(1))
            targets.append(target.to(self.device))
            indices.append(index.to(self.device))
        local = torch.stack([torch.cat(preds), torch.cat(targets), torch.cat(indices)], dim=1)
        gathered, _ = distributed.all_gather_variable(local, self.group)
        gathered = gathered.cpu()
        size = len(self.data.train)  # type: ignore[arg-type]
        predicted = torch.empty(size, dtype=torch.long)
        target_all = torch.empty(size, dtype=torch.long)
        predicted[gathered[:, 2]] = gathered[:, 0]
        target_all[gathered[:, 2]] = gathered[:, 1]
        return predicted, target_all

    def evaluate(self, dataset: Dataset[Any]) -> EvalResult:
        return evaluate(
            self.model, self._eval_loader(dataset), self.data.num_classes, self.device,
            amp_dtype=self.amp_dtype, process_group=self.group,
        )

    # ------------------------------------------------------------ checkpoints
    def _checkpoint_payload(self, epoch: int, best: float) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "method": self.method.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict() if self.scaler is not None else {},
            "sam": self.sam.state_dict() if self.sam is not None else {},
            "epoch": epoch,
            "best_val_accuracy": best,
            "rng": rng_state(),
            "config": config_to_dict(self.config),
            "reset_epoch": self.reset_epoch,
        }

    def _resume(self) -> tuple[int, float]:
        path = self.run_dir / "checkpoints" / "last.pt"
        if not path.exists():
            return 0, -1.0
        payload = load_checkpoint(path)
        self.method.load_state_dict(payload["method"])  # first: a reset may depend on its state
        if payload.get("reset_epoch") is not None:
            self._reset_model(int(payload["reset_epoch"]))
        self.model.load_state_dict(payload["model"])
        self.optimizer.load_state_dict(payload["optimizer"])
        self.scheduler.load_state_dict(payload["scheduler"])
        if self.scaler is not None and payload["scaler"]:
            self.scaler.load_state_dict(payload["scaler"])
        if self.sam is not None and payload.get("sam"):
            self.sam.load_state_dict(payload["sam"])
        set_rng_state(payload["rng"])
        self._log(f"resumed {self.run_dir} after epoch {payload['epoch']}")
        return int(payload["epoch"]), float(payload["best_val_accuracy"])

    def _reset_model(self, first_epoch: int) -> None:
        """Fresh model, optimiser and schedule from ``first_epoch`` on (JTT's second stage)."""
        self.model = self.method.adapt_model(self.model_factory())
        self._build_optimizer(first_epoch)
        self.reset_epoch = first_epoch

    # -------------------------------------------------------------------- fit
    def fit(self, stop_after_epoch: int | None = None) -> dict[str, Any] | None:
        """Train (resuming from ``checkpoints/last.pt`` if present), evaluate, write final.json.

        ``stop_after_epoch`` ends the session after that epoch with a checkpoint and no final
        evaluation (returns None): a later ``fit()`` resumes exactly where it stopped.
        """
        config = self.config
        start_epoch, best = self._resume()
        writer = self._tensorboard()
        total_epochs = config.optim.epochs
        run_start = time.perf_counter()
        for epoch in range(start_epoch, total_epochs):
            self.method.on_epoch_start(epoch)
            loader = self._train_loader(epoch)
            result = train_one_epoch(
                self.train_model, self.method, self._progress(loader, epoch), self.optimizer,
                self.scheduler,
                StepSetup(self.device, self.amp_dtype, self.scaler, config.optim.grad_clip,
                          config.log_every, self.group, self.sam),
            )
            self.method.on_epoch_end(epoch)
            record: dict[str, Any] = {
                "epoch": epoch + 1,
                "train_loss": result.loss,
                "train_accuracy": result.accuracy,
                "lr": self.optimizer.param_groups[0]["lr"],
                "epoch_seconds": result.seconds,
                "samples_per_second": result.samples / max(result.seconds, 1e-9),
                **result.values,
            }
            if self.data.val is not None and len(self.data.val) > 0:  # type: ignore[arg-type]
                val = self.evaluate(self.data.val)
                record["val_accuracy"] = val.overall_accuracy
                record["val_per_class_accuracy"] = val.per_class_accuracy().tolist()
                self.method.on_validation(epoch, val.per_class_accuracy().float())
            class_stats = self.method.class_statistics()
            if class_stats is not None:
                record.update({k: v.tolist() for k, v in class_stats.items()})
            improved = record.get("val_accuracy", -1.0) > best
            best = max(best, record.get("val_accuracy", -1.0))
            if self.method.wants_model_reset() and self.reset_epoch is None and epoch + 1 < total_epochs:
                self._log(f"epoch {epoch + 1}: {config.method.name} starts again from a fresh model")
                self._reset_model(epoch + 1)
                best = -1.0
            stopping = stop_after_epoch is not None and epoch + 1 >= stop_after_epoch
            if self.rank == 0:
                append_jsonl(self.run_dir / "metrics.jsonl", record)
                self._write_tensorboard(writer, record)
                if config.select == "best_val" and improved:
                    best_path = self.run_dir / "checkpoints" / "best.pt"
                    save_checkpoint(best_path, {"model": self.model.state_dict()})
                if stopping or (epoch + 1) % config.checkpoint_every == 0 or epoch + 1 == total_epochs:
                    payload = self._checkpoint_payload(epoch + 1, best)
                    save_checkpoint(self.run_dir / "checkpoints" / "last.pt", payload)
            elapsed = time.perf_counter() - run_start
            remaining = elapsed / (epoch + 1 - start_epoch) * (total_epochs - epoch - 1)
            self._log(
                f"[{config.name}] epoch {epoch + 1}/{total_epochs} loss {result.loss:.4f} "
                f"train acc {result.accuracy:.4f} val acc {record.get('val_accuracy', float('nan')):.4f} "
                f"{record['samples_per_second']:.0f} samples/s, ETA {remaining:.0f} s"
            )
            if stopping and epoch + 1 < total_epochs:
                if writer is not None:
                    writer.close()
                return None
        if writer is not None:
            writer.close()
        if config.select == "best_val" and (self.run_dir / "checkpoints" / "best.pt").exists():
            self.model.load_state_dict(load_checkpoint(self.run_dir / "checkpoints" / "best.pt")["model"])
        final = self.final_report()
        if self.is_distributed:
            dist.barrier()
        return final

    def final_report(self, split: str = "test", filename: str = "final.json") -> dict[str, Any]:
        """Evaluate on ``split`` and write ``filename`` in the run directory (rank 0)."""
        dataset = self.data.test if split == "test" else self.data.val
        assert dataset is not None
        result = self.evaluate(dataset)
        final: dict[str, Any] = {
            "format_version": 1,
            "run_name": self.config.name,
            "method": self.config.method.name,
            "seed": self.config.seed,
            "dataset": {
                "name": self.data.dataset_name,
                "num_classes": self.data.num_classes,
                "class_names": self.data.class_names,
            },
            "split": split,
            "num_samples": result.num_samples,
            "confusion_matrix": result.confusion.tolist(),
            "overall_accuracy": result.overall_accuracy,
            "per_class_accuracy": result.per_class_accuracy().tolist(),
            "class_statistics": None,
            "logit_margins": result.margin_summary(self.data.num_classes),
        }
        class_stats = self.method.class_statistics()
        if class_stats is not None:
            final["class_statistics"] = {k: v.tolist() for k, v in class_stats.items()}
        if split == "test" and self.data.val is not None and len(self.data.val) > 0:  # type: ignore[arg-type]
            val = self.evaluate(self.data.val)
            final["validation"] = {
                "overall_accuracy": val.overall_accuracy,
                "per_class_accuracy": val.per_class_accuracy().tolist(),
                "confusion_matrix": val.confusion.tolist(),
            }
        if self.rank == 0:
            atomic_write_json(self.run_dir / filename, final)
            self._log(
                f"[{self.config.name}] {split} accuracy {result.overall_accuracy:.4f} "
                f"-> {self.run_dir / filename}"
            )
        return final

    # ---------------------------------------------------------------- logging
    def _progress(self, loader: DataLoader[Any], epoch: int) -> Any:
        if self.rank != 0 or self.quiet or not sys.stderr.isatty():
            return loader
        from tqdm import tqdm

        return tqdm(loader, desc=f"epoch {epoch + 1}/{self.config.optim.epochs}", leave=False)

    def _tensorboard(self) -> Any:
        if self.rank != 0:
            return None
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:  # pragma: no cover - tensorboard is an optional extra
            return None
        return SummaryWriter(log_dir=str(self.run_dir / "tensorboard"))

    @staticmethod
    def _write_tensorboard(writer: Any, record: dict[str, Any]) -> None:
        if writer is None:
            return
        for key, value in record.items():
            if isinstance(value, (int, float)) and key != "epoch":
                writer.add_scalar(key, value, record["epoch"])
        writer.flush()


def train(config: RunConfig, *, overwrite: bool = False, quiet: bool = False) -> dict[str, Any]:
    """Train one run as configured and return its final evaluation (also written to final.json)."""
    final = TrainingSession(config, overwrite=overwrite, quiet=quiet).fit()
    assert final is not None
    return final


def evaluate_run(run_dir: str | os.PathLike[str], split: str = "test") -> dict[str, Any]:
    """Re-evaluate a run's last checkpoint on ``split`` ("test" or "val"); writes eval_<split>.json."""
    path = Path(run_dir)
    checkpoint = path / "checkpoints" / "last.pt"
    if not (path / "config.yaml").exists() or not checkpoint.exists():
        raise RunError(NO_RUN.format(path=path))
    config = config_from_dict(yaml.safe_load((path / "config.yaml").read_text()))
    config.output_dir, config.name = str(path.parent), path.name
    session = TrainingSession.__new__(TrainingSession)
    session.config, session.quiet = config, False
    session.device = _device(config.device)
    session.is_distributed = _init_distributed(session.device)
    session.group, session.rank, session.world = None, distributed.rank(), distributed.world_size()
    session.run_dir = path
    session.amp_dtype = _amp_dtype(config, session.device)
    from mr2.engine.builders import build_data, build_model_for

    session.data = build_data(config, session.device, session.rank)
    session.model_factory = lambda: build_model_for(config, session.data).to(session.device)
    session._build_training_objects()
    session._resume()
    return session.final_report(split, filename=f"eval_{split}.json")
