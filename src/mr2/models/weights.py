"""Read weights from a local file and check them against a module before loading.

A weights file is whatever people actually have on disk: a bare ``state_dict``, a training
checkpoint holding it under ``"state_dict"`` or ``"model"``, saved from a ``DataParallel`` /
``DistributedDataParallel`` (``module.``) or ``torch.compile`` (``_orig_mod.``) model, as a
``torch.save`` pickle (read with ``weights_only=True``, so no code runs) or as ``.safetensors``.
:func:`load_state_dict_file` turns all of these into one flat ``{name: tensor}`` dict;
:func:`check_state_dict` names every missing, unexpected and wrongly-shaped key before anything is
loaded.
"""

from __future__ import annotations

import os
import pickle
import re
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from mr2.errors import MR2Error

__all__ = [
    "WeightsFileError",
    "WeightsFileNotFoundError",
    "WeightsMismatchError",
    "check_state_dict",
    "load_state_dict_file",
    "select_prefix",
    "strip_wrapper_prefixes",
]

WEIGHTS_NOT_FOUND = (
    "weights file not found: {path}. Fix `model.weights` (an absolute path, or one relative to the "
    "directory mr2 runs in)"
)
WEIGHTS_REFUSED = (
    "{path}: refusing to load the weights file: it holds a Python object that is not a tensor or a "
    "plain container ({reason}), and unpickling it could run code (torch.load weights_only=True). "
    "Re-save only the tensors (torch.save(model.state_dict(), path)) or convert the file to .safetensors"
)
_WEIGHTS_UNREADABLE = (
    "{path}: cannot read the weights file ({reason}). It is truncated or not a torch.save / "
    ".safetensors file; re-download or re-export it"
)
WEIGHTS_AND_PRETRAINED = (
    "give either weights=<local file> or pretrained=True (download from the hub), not both"
)
NO_STATE_DICT = (
    "{path} holds no state_dict: expected a dict of tensors, or a checkpoint with a 'state_dict' or "
    "'model' entry; its top-level keys are: {keys}"
)
_SAFETENSORS_MISSING = "reading {path} needs the 'safetensors' package (pip install safetensors)"
_PREFIX_NOT_FOUND = "no key of {source} starts with {prefix!r}; its keys start with: {prefixes}"
_WEIGHTS_MISMATCH = (
    "the weights in {source} do not fit {target}:\n"
    "  missing keys ({num_missing}): {missing}\n"
    "  unexpected keys ({num_unexpected}): {unexpected}\n"
    "  shape mismatches ({num_shapes}): {shapes}"
)

#: Prefixes added by wrappers around a model: DataParallel/DDP and torch.compile.
WRAPPER_PREFIXES = ("module.", "_orig_mod.")
#: Entries of a training checkpoint that hold the model's state_dict, in order of preference.
CHECKPOINT_ENTRIES = ("state_dict", "model")
_SHOWN_KEYS = 10


class WeightsFileError(MR2Error, ValueError):
    """A weights file cannot be read: unreadable, or a pickle ``weights_only=True`` refuses."""


class WeightsFileNotFoundError(WeightsFileError, FileNotFoundError):
    """A weights file does not exist (also a ``FileNotFoundError``)."""


class WeightsMismatchError(MR2Error, RuntimeError):
    """A state_dict's keys or shapes do not match the module it is loaded into."""


def strip_wrapper_prefixes(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Remove the ``module.`` (DataParallel/DDP) and ``_orig_mod.`` (torch.compile) prefixes.

    Example:
        >>> sorted(strip_wrapper_prefixes({"module.fc.weight": torch.ones(1), "bn.bias": torch.ones(1)}))
        ['bn.bias', 'fc.weight']
    """
    cleaned: dict[str, torch.Tensor] = {}
    for key, value in state_dict.items():
        stripped = True
        while stripped:
            stripped = False
            for prefix in WRAPPER_PREFIXES:
                if key.startswith(prefix):
                    key = key[len(prefix) :]
                    stripped = True
        cleaned[key] = value
    return cleaned


def select_prefix(
    state_dict: Mapping[str, torch.Tensor], prefix: str, source: str = "the state_dict"
) -> dict[str, torch.Tensor]:
    """Keep the keys starting with ``prefix``, with the prefix removed.

    Selects one sub-model of a checkpoint, e.g. ``"encoder_q."`` (MoCo's query encoder) or
    ``"backbone."``.

    Raises:
        WeightsMismatchError: if no key starts with ``prefix``.

    Example:
        >>> select_prefix({"encoder_q.conv1.weight": torch.ones(1), "queue": torch.ones(1)}, "encoder_q.")
        {'conv1.weight': tensor([1.])}
    """
    selected = {key[len(prefix) :]: value for key, value in state_dict.items() if key.startswith(prefix)}
    if not selected:
        prefixes = sorted({key.split(".", 1)[0] + "." for key in state_dict})[:_SHOWN_KEYS]
        raise WeightsMismatchError(
            _PREFIX_NOT_FOUND.format(source=source, prefix=prefix, prefixes=", ".join(prefixes))
        )
    return selected


_BLOCKED_GLOBAL = re.compile(r"Unsupported global: GLOBAL (\S+)")
_UNPICKLER_DETAIL = re.compile(r"WeightsUnpickler error:\s*([^\n]+)")


def _one_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[0] if lines else ''}"


def _read(path: Path) -> Any:
    if path.suffix == ".safetensors":
        try:
            from safetensors import SafetensorError
            from safetensors.torch import load_file
        except ImportError as error:  # pragma: no cover - safetensors ships with timm
            raise ImportError(_SAFETENSORS_MISSING.format(path=path)) from error
        try:
            return load_file(str(path), device="cpu")
        except (SafetensorError, OSError) as error:
            raise WeightsFileError(_WEIGHTS_UNREADABLE.format(path=path, reason=_one_line(error))) from error
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        blocked = _BLOCKED_GLOBAL.search(str(error))
        if blocked is not None:  # a valid pickle that names a class or function: refused
            reason = f"{blocked.group(1)} is not allowed"
            raise WeightsFileError(WEIGHTS_REFUSED.format(path=path, reason=reason)) from error
        detail = _UNPICKLER_DETAIL.search(str(error))  # not a pickle at all
        reason = f"UnpicklingError: {detail.group(1)}" if detail else _one_line(error)
        raise WeightsFileError(_WEIGHTS_UNREADABLE.format(path=path, reason=reason)) from error
    except (RuntimeError, OSError, EOFError, KeyError, ValueError, zipfile.BadZipFile) as error:
        raise WeightsFileError(_WEIGHTS_UNREADABLE.format(path=path, reason=_one_line(error))) from error


def _is_state_dict(obj: Any) -> bool:
    return (
        isinstance(obj, Mapping)
        and bool(obj)
        and all(isinstance(key, str) and isinstance(value, torch.Tensor) for key, value in obj.items())
    )


def load_state_dict_file(
    path: str | os.PathLike[str], key_prefix: str | None = None
) -> dict[str, torch.Tensor]:
    """Read a state_dict from a local weights file.

    Args:
        path: a ``torch.save`` file (read with ``weights_only=True``) or a ``.safetensors`` file,
            holding a state_dict or a checkpoint with a ``"state_dict"`` or ``"model"`` entry.
        key_prefix: keep only the keys starting with it, prefix removed (applied after the
            ``module.`` / ``_orig_mod.`` wrapper prefixes are stripped); ``None`` keeps all.

    Returns:
        The flat ``{name: tensor}`` state_dict, on the CPU.

    Raises:
        WeightsFileNotFoundError: (a ``FileNotFoundError``) if ``path`` does not exist.
        WeightsFileError: if the file cannot be read, or holds Python objects that
            ``weights_only=True`` refuses to unpickle (no code runs).
        WeightsMismatchError: if the file holds no state_dict, or no key starts with
            ``key_prefix``.
    """
    file = Path(path)
    if not file.is_file():
        raise WeightsFileNotFoundError(WEIGHTS_NOT_FOUND.format(path=file))
    obj = _read(file)
    if not _is_state_dict(obj) and isinstance(obj, Mapping):
        for entry in CHECKPOINT_ENTRIES:
            if _is_state_dict(obj.get(entry)):
                obj = obj[entry]
                break
    if not _is_state_dict(obj):
        keys = sorted(map(str, obj))[:_SHOWN_KEYS] if isinstance(obj, Mapping) else []
        raise WeightsMismatchError(
            NO_STATE_DICT.format(path=file, keys=", ".join(keys) or f"<a {type(obj).__name__}>")
        )
    state_dict = strip_wrapper_prefixes(obj)
    if key_prefix:
        state_dict = select_prefix(state_dict, key_prefix, source=str(file))
    return state_dict


def _shown(keys: list[str]) -> str:
    if not keys:
        return "none"
    more = f", ... ({len(keys) - _SHOWN_KEYS} more)" if len(keys) > _SHOWN_KEYS else ""
    return ", ".join(keys[:_SHOWN_KEYS]) + more


def check_state_dict(
    module: nn.Module,
    state_dict: Mapping[str, torch.Tensor],
    source: str = "the state_dict",
    target: str | None = None,
) -> None:
    """Raise if ``state_dict`` does not fit ``module`` exactly (keys and shapes).

    Args:
        module: where the weights go.
        state_dict: the weights.
        source: where they come from (a file name), for the message.
        target: what they go into, for the message; default: the module's class name.

    Raises:
        WeightsMismatchError: listing the missing keys, the unexpected keys and the keys whose
            shapes differ (``name: file shape vs model shape``).

    Example:
        >>> check_state_dict(nn.Linear(2, 3), {"weight": torch.zeros(3, 2), "bias": torch.zeros(3)})
        >>> try:
        ...     check_state_dict(nn.Linear(2, 3), {"weight": torch.zeros(3, 2), "scale": torch.ones(1)})
        ... except WeightsMismatchError as error:
        ...     print(error)
        the weights in the state_dict do not fit Linear:
          missing keys (1): bias
          unexpected keys (1): scale
          shape mismatches (0): none
    """
    expected = module.state_dict()
    missing = [key for key in expected if key not in state_dict]
    unexpected = [key for key in state_dict if key not in expected]
    shapes = [
        f"{key}: {tuple(state_dict[key].shape)} vs {tuple(value.shape)}"
        for key, value in expected.items()
        if key in state_dict and state_dict[key].shape != value.shape
    ]
    if missing or unexpected or shapes:
        raise WeightsMismatchError(
            _WEIGHTS_MISMATCH.format(
                source=source,
                target=target or type(module).__name__,
                num_missing=len(missing),
                missing=_shown(missing),
                num_unexpected=len(unexpected),
                unexpected=_shown(unexpected),
                num_shapes=len(shapes),
                shapes=_shown(shapes),
            )
        )
