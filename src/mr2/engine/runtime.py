"""Where and how a run executes: device, torch.distributed, seeds and autocast precision."""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import torch
import torch.distributed as dist

from mr2 import distributed
from mr2.config import RunConfig
from mr2.errors import MR2Error

__all__ = ["RunError", "Runtime", "seed_everything"]

_NO_CUDA = "device 'cuda' was requested but CUDA is not available; use device: cpu or auto."
_FP16_NEEDS_CUDA = "optim.amp 'fp16' needs a CUDA device; use 'bf16' (CPU or GPU) or 'none'."

T = TypeVar("T")


class RunError(MR2Error, RuntimeError):
    """A run that cannot start or resume; the message says why and what to do."""


def _device(name: str) -> torch.device:
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        return torch.device("cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RunError(_NO_CUDA)
    return device


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


def _amp_dtype(amp: str, device: torch.device) -> torch.dtype | None:
    if amp == "bf16":
        return torch.bfloat16
    if amp == "fp16":
        if device.type != "cuda":
            raise RunError(_FP16_NEEDS_CUDA)
        return torch.float16
    return None


def seed_everything(seed: int, deterministic: bool) -> None:
    """Seed Python, NumPy and torch; optionally switch torch to deterministic algorithms."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if deterministic:
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.benchmark = False
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")


@dataclass
class Runtime:
    """The process's place in a run.

    Attributes:
        device: where tensors live.
        is_distributed: launched by torchrun with more than one process.
        rank: this process's rank (0 alone).
        world: number of processes.
        group: the process group (None: the default group, or not distributed).
        amp_dtype: autocast precision (None: float32).
    """

    device: torch.device
    is_distributed: bool
    rank: int
    world: int
    group: Any
    amp_dtype: torch.dtype | None

    @classmethod
    def start(cls, config: RunConfig) -> Runtime:
        """Pick the device, join the torchrun process group if launched by torchrun, check AMP."""
        device = _device(config.device)
        is_distributed = _init_distributed(device)
        return cls(
            device=device,
            is_distributed=is_distributed,
            rank=distributed.rank(),
            world=distributed.world_size(),
            group=None,
            amp_dtype=_amp_dtype(config.optim.amp, device),
        )

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.is_distributed:
            dist.barrier(group=self.group)

    def on_main_first(self, action: Callable[[], T], errors: tuple[type[BaseException], ...]) -> T | None:
        """Run ``action`` on rank 0 only; if it raises one of ``errors``, every rank raises a
        :class:`RunError` with the same message (instead of the others waiting forever)."""
        result: T | None = None
        message = ""
        if self.is_main:
            try:
                result = action()
            except errors as error:
                if not self.is_distributed:
                    raise
                message = str(error) or type(error).__name__
        if self.is_distributed:
            box = [message]
            dist.broadcast_object_list(box, src=0, group=self.group)
            message = box[0]
        if message:
            raise RunError(message)
        return result
