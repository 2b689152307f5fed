"""Loss specifications: a candidate's loss as a small JSON object any training code can turn into the
loss module (:func:`loss_from_spec`).

A specification is ``{"method": NAME, "options": {...}}`` with ``NAME`` one of :data:`LOSS_METHODS`
(the training methods that are a loss and nothing more: no second model, no resampling, no model
change) and ``options`` that method's keyword options (:func:`mr2.methods.registry.method_options`).
The loss built from it is the engine's own method object (:mod:`mr2.methods`), wrapped so that plain
PyTorch code can call it without the engine (:class:`SpecLoss`)::

    loss = loss_from_spec('{"method": "mr2", "options": {"variant": "logit_only", "c_bar": 1.0}}',
                          num_classes=10)
    logits, features = model(x)          # features: the penultimate layer [B, d]
    loss(logits, features, target).backward()

Two-stage procedures (:data:`ENGINE_ONLY_METHODS`: JTT, HBR, LfF) need the engine's hooks (a second
training stage, resampled epochs, a second model); they run through ``mr2 tune --config`` only.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from mr2.methods.base import MethodContext, TrainingMethod
from mr2.tune.errors import TuneInputError

__all__ = [
    "ENGINE_ONLY_METHODS",
    "FEATURE_METHODS",
    "LOSS_METHODS",
    "SpecLoss",
    "loss_from_spec",
    "parse_loss_spec",
]

#: Methods a loss specification can name (each is a loss module).
LOSS_METHODS = ("erm", "mr2", "focal", "group_dro", "center_loss", "supcon")
#: Methods whose loss reads the features (the penultimate layer) as well as the logits.
FEATURE_METHODS = ("mr2", "center_loss", "supcon")
#: Methods that need mr2's engine (a second stage, resampling or a second model): ``--config`` only.
ENGINE_ONLY_METHODS = ("jtt", "hbr", "lff")
#: Methods whose loss has trainable parameters, created at construction (so ``feature_dim`` is needed).
_PARAMETER_METHODS = ("supcon",)
#: Options that act through engine hooks which plain training code does not call.
_ENGINE_OPTIONS = {"mr2": {"margin_warmup_epochs": 0}}

_BAD_SPEC = (
    "loss specification {value} is not a JSON object {{\"method\": NAME, \"options\": {{...}}}}: {problem}"
)
UNKNOWN_LOSS = (
    "loss specification names method {name!r}, which is not a loss mr2.tune can build; choose one of: "
    "{choices}"
)
ENGINE_ONLY = (
    "method {name!r} is a two-stage procedure that needs mr2's engine; it runs through `mr2 tune --config` "
    "only (losses for your own code: {choices})"
)
_ENGINE_OPTION = (
    "option {option!r} of method {name!r} acts through mr2's engine (an epoch hook your code does not "
    "call); leave it at {default!r} in a loss specification"
)
NEEDS_FEATURE_DIM = (
    "method {name!r} creates trainable parameters from the feature width: pass feature_dim= (the width "
    "of the features you give the loss) so they exist before you build the optimiser"
)
NEEDS_FEATURES = (
    "the {name!r} loss reads the features (the penultimate layer, [B, d]): call it as "
    "loss(logits, features, target) with features, not None"
)
_NEEDS_COUNTS = (
    "group_dro with adjustment > 0 needs the training set's class counts: pass class_counts= ([K] ints)"
)
_BAD_NUM_CLASSES = "num_classes must be an integer >= 2; got {value!r}"
_SHOWN = 80


def _bad(spec: Any, problem: str) -> TuneInputError:
    text = repr(spec)
    return TuneInputError(_BAD_SPEC.format(value=text if len(text) <= _SHOWN else text[:_SHOWN] + "...",
                                          problem=problem))


def parse_loss_spec(spec: str | Mapping[str, Any]) -> dict[str, Any]:
    """The checked specification ``{"method": ..., "options": {...}}`` (a new dict; JSON-able).

    Args:
        spec: a JSON string or a mapping.

    Raises:
        TuneInputError: not JSON, not an object of exactly ``method`` and ``options``, a method that is
            not in :data:`LOSS_METHODS`, an option the method does not take (the message lists them), an
            option that acts through an engine hook, or a value that is not finite.

    Example:
        >>> parse_loss_spec('{"method": "focal", "options": {"gamma": 2.0}}')
        {'method': 'focal', 'options': {'gamma': 2.0}}
    """
    from mr2.methods.registry import UNKNOWN_OPTIONS, method_options

    value: Any = spec
    if isinstance(spec, (str, bytes)):
        try:
            value = json.loads(spec, parse_constant=lambda name: math.nan)
        except ValueError as error:
            raise _bad(spec, f"not valid JSON ({error})") from None
    if not isinstance(value, Mapping):
        raise _bad(spec, "not an object")
    keys = set(value)
    if "method" not in keys or not keys <= {"method", "options"}:
        raise _bad(spec, f"it has the keys {sorted(map(str, keys))}, expected 'method' and 'options'")
    name, options = value["method"], value.get("options", {})
    if not isinstance(name, str):
        raise _bad(spec, "'method' is not a string")
    if not isinstance(options, Mapping) or not all(isinstance(k, str) for k in options):
        raise _bad(spec, "'options' is not an object")
    if name in ENGINE_ONLY_METHODS:
        raise TuneInputError(ENGINE_ONLY.format(name=name, choices=", ".join(LOSS_METHODS)))
    if name not in LOSS_METHODS:
        raise TuneInputError(UNKNOWN_LOSS.format(name=name, choices=", ".join(LOSS_METHODS)))
    try:
        json.dumps(dict(options), allow_nan=False)
    except (TypeError, ValueError):
        raise _bad(spec, "'options' holds a value that is not a finite JSON number, string, bool or list"
                   ) from None
    valid = method_options(name)
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise TuneInputError(UNKNOWN_OPTIONS.format(unknown=unknown, name=name, valid=sorted(valid)))
    for option, default in _ENGINE_OPTIONS.get(name, {}).items():
        if option in options and options[option] != default:
            raise TuneInputError(_ENGINE_OPTION.format(option=option, name=name, default=default))
    return {"method": name, "options": dict(options)}


class SpecLoss(nn.Module):
    """A training method of :mod:`mr2.methods` as a plain loss module: ``loss(logits, features, target)``.

    It is the engine's method object (``self.method``), set up on the first call (or at construction
    when ``feature_dim`` is given): the feature width and the device are taken from that call. Its state
    (MR2's class statistics, group DRO's class weights, center loss's centres) lives in buffers, so
    ``loss.to(device)`` and ``loss.state_dict()`` work; it updates that state only in training mode
    (``loss.train()``, the default; call ``loss.eval()`` while evaluating).

    Attributes:
        spec: the specification it was built from (:func:`parse_loss_spec`'s form).
        needs_features: whether the loss reads ``features`` (MR2, center loss, SupCon); when False,
            ``loss(logits, None, target)`` is enough.
        method: the wrapped :class:`mr2.methods.base.TrainingMethod`.

    Trainable parameters: only SupCon's projection head (created at construction, which is why SupCon
    needs ``feature_dim``); give your optimiser ``[*model.parameters(), *loss.parameters()]``. Center
    loss's centres are buffers updated by the loss itself (the paper's moving-centre rule), not
    parameters.
    """

    method: TrainingMethod

    def __init__(self, spec: dict[str, Any], method: TrainingMethod, num_classes: int,
                 class_counts: torch.Tensor | None) -> None:
        super().__init__()
        self.spec = spec
        self.method = method
        self.num_classes = num_classes
        self.needs_features = spec["method"] in FEATURE_METHODS
        self._class_counts = class_counts
        self._ready = False

    def setup(self, feature_dim: int, device: torch.device | str = "cpu") -> None:
        """Allocate the method's data-dependent state (as the engine does before training)."""
        counts = self._class_counts if self._class_counts is not None else torch.ones(self.num_classes)
        context = MethodContext(
            num_classes=self.num_classes,
            num_train_samples=0,
            class_counts=counts.to(torch.int64),
            feature_dim=int(feature_dim),
            device=torch.device(device),
            epochs=1,
        )
        self.method.setup(context)
        self._ready = True

    def forward(self, logits: torch.Tensor, features: torch.Tensor | None, target: torch.Tensor
                ) -> torch.Tensor:
        """The 0-dim loss of a batch: ``logits`` [B, K], ``features`` [B, d] (or None when
        :attr:`needs_features` is False), ``target`` [B] class ids."""
        if features is None and self.needs_features:
            raise TuneInputError(NEEDS_FEATURES.format(name=self.spec["method"]))
        if not self._ready:
            self.setup(0 if features is None else features.shape[-1], logits.device)
        loss: torch.Tensor = self.method(logits, features, target)
        return loss

    def extra_repr(self) -> str:
        return json.dumps(self.spec)


def loss_from_spec(
    spec: str | Mapping[str, Any],
    num_classes: int,
    *,
    feature_dim: int | None = None,
    class_counts: Any = None,
) -> SpecLoss:
    """The loss module a specification describes (the object ``Candidate.make_loss()`` returns).

    Args:
        spec: a JSON string or a mapping ``{"method": NAME, "options": {...}}`` (e.g. the ``{loss}`` of
            ``mr2 tune --command``, or ``loss_spec`` in ``recommendation.json``).
        num_classes: K.
        feature_dim: the width of the features given to the loss; set up at once when given (needed by
            SupCon, whose projection head has parameters for your optimiser), else on the first call.
        class_counts: [K] training samples per class; only ``group_dro`` with ``adjustment > 0`` uses it.

    Raises:
        TuneInputError: a bad specification (:func:`parse_loss_spec`), a bad ``num_classes``, or a
            missing ``feature_dim`` / ``class_counts`` the method needs.

    Example:
        >>> import torch.nn.functional as F
        >>> loss = loss_from_spec({"method": "erm", "options": {}}, num_classes=3)
        >>> z, y = torch.tensor([[1.0, 2.0, 0.5]]), torch.tensor([1])
        >>> loss.needs_features, bool(torch.isclose(loss(z, None, y), F.cross_entropy(z, y)))
        (False, True)
    """
    from mr2.checks import MR2InputError
    from mr2.checks import is_int as _is_int
    from mr2.methods.registry import MethodConfigError, build_method

    parsed = parse_loss_spec(spec)
    if not _is_int(num_classes) or num_classes < 2:
        raise TuneInputError(_BAD_NUM_CLASSES.format(value=num_classes))
    name, options = parsed["method"], parsed["options"]
    if name in _PARAMETER_METHODS and feature_dim is None:
        raise TuneInputError(NEEDS_FEATURE_DIM.format(name=name))
    counts = None if class_counts is None else torch.as_tensor(class_counts)
    if name == "group_dro" and float(options.get("adjustment", 0.0)) > 0 and counts is None:
        raise TuneInputError(_NEEDS_COUNTS)
    try:
        method = build_method(name, int(num_classes), **options)
    except (MethodConfigError, MR2InputError, TypeError, ValueError) as error:
        raise TuneInputError(f"loss specification {json.dumps(parsed)}: {error}") from None
    loss = SpecLoss(parsed, method, int(num_classes), counts)
    if feature_dim is not None:
        loss.setup(feature_dim)
    return loss
