"""Loss specifications: a training method's loss as a small JSON object any training code can turn into
the loss module (:func:`loss_from_spec`); ``mr2 tune`` hands one to every trial (``{loss}``).

A specification is ``{"method": NAME, "options": {...}, "num_classes": K}`` with ``NAME`` a method
whose class is a plain loss (:attr:`mr2.methods.base.TrainingMethod.plain_loss`: no second model, no
resampling, no model change; :func:`loss_methods`), ``options`` that method's keyword options
(:func:`mr2.methods.registry.method_options`) and ``num_classes`` (optional; when given,
``loss_from_spec(spec)`` needs nothing more, and a ``num_classes`` argument that disagrees is an
error). What a method needs (the features, ``feature_dim``, class counts) is read from its class.
The loss built from it is the engine's own method object (:mod:`mr2.methods`), wrapped so that plain
PyTorch code can call it without the engine (:class:`SpecLoss`)::

    loss = loss_from_spec('{"method": "mr2", "options": {"variant": "logit_only", "c_bar": 1.0}}',
                          num_classes=10)
    logits, features = model(x)          # features: the penultimate layer [B, d]
    loss(logits, features, target).backward()

Methods that are not plain losses (:func:`engine_only_methods`: JTT, HBR, LfF, LDAM, CDB) need the
engine's hooks (a second training stage, resampled epochs, a second model, a changed model, the
validation passes); they run through ``mr2 tune --config`` only. Importing this module loads no
method (the registry is read when a specification is checked).
"""

from __future__ import annotations

import json
import math
import reprlib
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from mr2.checks import is_int
from mr2.errors import MR2Error
from mr2.memory import allocatable_bytes
from mr2.methods.base import MethodContext, TrainingMethod

__all__ = [
    "MAX_FEATURE_DIM",
    "MAX_SPEC_CLASSES",
    "LossSpecError",
    "LossSpecJSONError",
    "SpecLoss",
    "engine_only_methods",
    "loss_from_spec",
    "loss_methods",
    "parse_loss_spec",
]

#: The longest JSON text a specification may be (a real one is a few hundred characters).
MAX_SPEC_LENGTH = 100_000
#: The largest K and feature width a specification may ask for (K x d state: 10^5 x 10^5 float32 is
#: 40 GB; the checks happen before anything is allocated).
MAX_SPEC_CLASSES = 100_000
MAX_FEATURE_DIM = 1_000_000


class LossSpecError(MR2Error, ValueError):
    """A loss specification (or its use) is wrong; the message says what and how to fix it."""


class LossSpecJSONError(LossSpecError):
    """A loss specification given as text is not valid JSON (e.g. its quotes were eaten by a shell)."""


BAD_CLASS_COUNTS = (
    "class_counts must be {num_classes} whole numbers >= 1 (the training samples of each class); got "
    "{problem}"
)


def _checked_counts(value: Any, num_classes: int) -> torch.Tensor:
    """``class_counts`` as an int64 tensor [K], every count a whole number >= 1: a length-1 list would be
    broadcast and zeros or negatives clamped, so the loss would not be the one the counts describe."""
    try:
        counts = torch.as_tensor(value, dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError):
        raise LossSpecError(BAD_CLASS_COUNTS.format(num_classes=num_classes, problem="not numbers")) from None
    problem = ""
    if counts.shape != (num_classes,):
        problem = f"shape {tuple(counts.shape)}"
    elif not bool(torch.isfinite(counts).all()) or bool((counts != counts.round()).any()):
        problem = "values that are not whole numbers"
    elif bool((counts < 1).any()):
        problem = f"counts below 1 for class(es) {torch.nonzero(counts < 1).flatten()[:10].tolist()}"
    if problem:
        raise LossSpecError(BAD_CLASS_COUNTS.format(num_classes=num_classes, problem=problem))
    return counts.to(torch.int64)


def loss_methods() -> tuple[str, ...]:
    """The methods a specification can name: those whose class is a plain loss."""
    from mr2.methods.registry import available_methods, method_class

    return tuple(name for name in available_methods() if method_class(name).plain_loss)


def engine_only_methods() -> tuple[str, ...]:
    """The methods that need mr2's engine (``mr2 tune --config`` only)."""
    from mr2.methods.registry import available_methods, method_class

    return tuple(name for name in available_methods() if not method_class(name).plain_loss)

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
    "{name} needs the training set's class counts to be the loss its options describe: pass class_counts= "
    "([K] positive ints)"
)
REPEATED_KEY = (
    "the key {key!r} appears twice in one object (JSON would keep the last one silently); write it once"
)
OPTION_TYPE = (
    "option {option!r} of method {name!r} must be {expected} (its default is {default!r}); got {value} "
    "({kind})"
)
STATE_TOO_LARGE = (
    "the {name!r} loss's state for K = {num_classes} classes and feature width {feature_dim} ({what}) "
    "takes {size}, more than the {free} this process can still allocate on {device}; give the loss "
    "narrower features (e.g. a projection) or fewer classes"
)
_BAD_NUM_CLASSES = "num_classes must be an integer from 2 to {maximum}; got {value!r}"
NUM_CLASSES_DIFFER = (
    "the loss specification says num_classes {spec} but num_classes={given} was passed; they must agree "
    "(or pass neither: the specification's is used)"
)
_NO_NUM_CLASSES = "the loss specification has no num_classes: pass num_classes=K"
_BAD_FEATURE_DIM = "feature_dim must be an integer from 1 to {maximum}; got {value!r}"
_SHOWN = 80


def _bad(spec: Any, problem: str, error: type[LossSpecError] = LossSpecError) -> LossSpecError:
    try:
        text = reprlib.repr(spec) if not isinstance(spec, (str, bytes)) else repr(spec[:_SHOWN + 1])
    except ValueError:  # an integer too long to print (Python's 4,300-digit limit)
        text = f"<a {type(spec).__name__} holding a number too long to print>"
    return error(_BAD_SPEC.format(value=text if len(text) <= _SHOWN else text[:_SHOWN] + "...",
                                  problem=problem))


class _RepeatedKey(Exception):
    """A JSON object names a key twice (not a ValueError: json.loads would not wrap it)."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` of :func:`json.loads`: the object, refusing a repeated key (JSON keeps
    the last one silently, so ``{"gamma": 2, "gamma": 0}`` would train with 0)."""
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _RepeatedKey(key)
        result[key] = value
    return result


def _option_type_problem(name: str, option: str, value: Any, default: Any) -> str:
    """Why ``value`` cannot be option ``option`` of method ``name`` whose default is ``default`` ("" if
    it can): a number's option takes a number (not a string, not true/false: the method would read
    ``"2"`` or ``true`` as 2.0 or 1.0), a switch's takes true or false. Options without a default of
    those kinds (strings, None) are checked by the method itself."""
    if isinstance(default, bool):
        expected = "true or false"
        ok = isinstance(value, bool)
    elif isinstance(default, (int, float)):
        expected = "a number"
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    else:
        return ""
    if ok:
        return ""
    return OPTION_TYPE.format(option=option, name=name, expected=expected, value=reprlib.repr(value),
                              kind=type(value).__name__, default=default)


def parse_loss_spec(spec: str | Mapping[str, Any]) -> dict[str, Any]:
    """The checked specification ``{"method": ..., "options": {...}}`` (a new dict; JSON-able).

    Args:
        spec: a JSON string or a mapping.

    Raises:
        LossSpecError: not JSON, not an object of exactly ``method`` and ``options``, a method that is
            not in :func:`loss_methods`, an option the method does not take (the message lists them), an
            option that acts through an engine hook, or a value that is not finite.

    Example:
        >>> parse_loss_spec('{"method": "focal", "options": {"gamma": 2.0}}')
        {'method': 'focal', 'options': {'gamma': 2.0}}
    """
    from mr2.methods.registry import UNKNOWN_OPTIONS, method_class, method_options

    value: Any = spec
    if isinstance(spec, (str, bytes)):
        if len(spec) > MAX_SPEC_LENGTH:
            raise _bad(spec[:_SHOWN], f"{len(spec):,} characters, more than {MAX_SPEC_LENGTH:,}")
        try:
            value = json.loads(spec, parse_constant=lambda name: math.nan, object_pairs_hook=_unique_keys)
        except _RepeatedKey as repeated:
            raise _bad(spec, REPEATED_KEY.format(key=str(repeated)[:_SHOWN])) from None
        except ValueError as error:
            raise _bad(spec, f"not valid JSON ({error})", LossSpecJSONError) from None
        except RecursionError:
            raise _bad(spec, "nested too deeply to read") from None
    if not isinstance(value, Mapping):
        raise _bad(spec, "not an object")
    keys = set(value)
    if "method" not in keys or not keys <= {"method", "options", "num_classes"}:
        raise _bad(spec, f"it has the keys {sorted(map(str, keys))}, expected 'method', 'options' and "
                   "optionally 'num_classes'")
    name, options = value["method"], value.get("options", {})
    classes = value.get("num_classes")
    if classes is not None and (not is_int(classes) or not 2 <= classes <= MAX_SPEC_CLASSES):
        raise LossSpecError(_BAD_NUM_CLASSES.format(maximum=MAX_SPEC_CLASSES, value=classes))
    if not isinstance(name, str):
        raise _bad(spec, "'method' is not a string")
    if not isinstance(options, Mapping) or not all(isinstance(k, str) for k in options):
        raise _bad(spec, "'options' is not an object")
    losses = loss_methods()
    if name in engine_only_methods():
        raise LossSpecError(ENGINE_ONLY.format(name=name[:_SHOWN], choices=", ".join(losses)))
    if name not in losses:
        raise LossSpecError(UNKNOWN_LOSS.format(name=name[:_SHOWN], choices=", ".join(losses)))
    try:
        json.dumps(dict(options), allow_nan=False)
    except RecursionError:
        raise _bad(spec, "'options' is nested too deeply") from None
    except (TypeError, ValueError):
        raise _bad(spec, "'options' holds a value that is not a finite JSON number, string, bool or list"
                   ) from None
    valid = method_options(name)
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise LossSpecError(UNKNOWN_OPTIONS.format(unknown=unknown, name=name, valid=sorted(valid)))
    for option, value in options.items():
        problem = _option_type_problem(name, option, value, valid[option])
        if problem:
            raise LossSpecError(problem)
    for option, default in method_class(name).engine_options.items():
        if option in options and options[option] != default:
            raise LossSpecError(_ENGINE_OPTION.format(option=option, name=name, default=default))
    parsed: dict[str, Any] = {"method": name, "options": dict(options)}
    return parsed if classes is None else {**parsed, "num_classes": int(classes)}


def state_bytes(name: str, options: Mapping[str, Any], num_classes: int, feature_dim: int) -> tuple[int, str]:
    """``(bytes, what)``: the float32 state a method of a specification allocates in its setup for K
    classes and features of width d (0 for the methods whose state does not grow with d): MR2's class
    feature sums and center loss's centres [K, d], SupCon's projection head (``mlp``: Linear(d, d) and
    Linear(d, p); ``linear``: Linear(d, p))."""
    k, d = num_classes, feature_dim
    if name in ("mr2", "center_loss"):
        return 4 * k * d, f"[{k}, {d}] float32 {'class feature sums' if name == 'mr2' else 'centres'}"
    if name == "supcon":
        p = options.get("projection_dim", 128)
        p = p if is_int(p) and p > 0 else 128
        if options.get("head", "mlp") == "linear":
            return 4 * (d * p + p), f"a Linear({d}, {p}) projection head"
        return 4 * (d * d + d + d * p + p), f"a Linear({d}, {d}) + Linear({d}, {p}) projection head"
    return 0, ""


def _free_bytes(device: torch.device) -> int | None:
    """What this process can still allocate on ``device`` (None: unknown)."""
    if device.type == "cuda":
        try:
            return int(torch.cuda.mem_get_info(device)[0])
        except (RuntimeError, AssertionError):
            return None
    if device.type == "cpu":
        return allocatable_bytes()
    return None


def check_state_memory(name: str, options: Mapping[str, Any], num_classes: int, feature_dim: int,
                       device: torch.device | str = "cpu") -> None:
    """Refuse, before allocating, a method state (:func:`state_bytes`) larger than the memory left on
    ``device`` (the system's, the container's and the address-space limit's headroom on the CPU; the
    free memory of a GPU): one line instead of the allocator's ``RuntimeError``.

    Raises:
        LossSpecError: :data:`STATE_TOO_LARGE`.
    """
    from mr2.report.limits import format_bytes

    size, what = state_bytes(name, options, num_classes, feature_dim)
    if not size:
        return
    place = torch.device(device)
    free = _free_bytes(place)
    if free is not None and size > free:
        raise LossSpecError(STATE_TOO_LARGE.format(
            name=name, num_classes=num_classes, feature_dim=feature_dim, what=what, size=format_bytes(size),
            free=format_bytes(free), device=place))


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
        self.needs_features = type(method).reads_features
        self._class_counts = class_counts
        self._ready = False

    def setup(self, feature_dim: int, device: torch.device | str = "cpu") -> None:
        """Allocate the method's data-dependent state (as the engine does before training), after
        checking that it fits in the memory left (:func:`check_state_memory`).

        Raises:
            LossSpecError: the state would take more memory than the device has left.
        """
        check_state_memory(self.spec["method"], self.spec["options"], self.num_classes, int(feature_dim),
                           device)
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
            raise LossSpecError(NEEDS_FEATURES.format(name=self.spec["method"]))
        if not self._ready:
            self.setup(0 if features is None else features.shape[-1], logits.device)
        loss: torch.Tensor = self.method(logits, features, target)
        return loss

    def extra_repr(self) -> str:
        return json.dumps(self.spec)


def loss_from_spec(
    spec: str | Mapping[str, Any],
    num_classes: int | None = None,
    *,
    feature_dim: int | None = None,
    class_counts: Any = None,
) -> SpecLoss:
    """The loss module a specification describes (the object ``Candidate.make_loss()`` returns).

    Args:
        spec: a JSON string or a mapping ``{"method": NAME, "options": {...}}`` (e.g. the ``{loss}`` of
            ``mr2 tune --command``, or ``loss_spec`` in ``recommendation.json``).
        num_classes: K (default: the specification's ``num_classes``; both given must agree).
        feature_dim: the width of the features given to the loss; set up at once when given (needed by
            SupCon, whose projection head has parameters for your optimiser), else on the first call.
        class_counts: [K] training samples per class; only ``group_dro`` with ``adjustment > 0`` uses it.

    Raises:
        LossSpecError: a bad specification (:func:`parse_loss_spec`), a bad ``num_classes``, or a
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
    from mr2.methods.registry import MethodConfigError, build_method, method_class

    parsed = parse_loss_spec(spec)
    if num_classes is None:
        num_classes = parsed.get("num_classes")
        if num_classes is None:
            raise LossSpecError(_NO_NUM_CLASSES)
    if not _is_int(num_classes) or not 2 <= num_classes <= MAX_SPEC_CLASSES:
        raise LossSpecError(_BAD_NUM_CLASSES.format(maximum=MAX_SPEC_CLASSES, value=num_classes))
    if parsed.get("num_classes", num_classes) != num_classes:
        raise LossSpecError(NUM_CLASSES_DIFFER.format(spec=parsed["num_classes"], given=num_classes))
    if feature_dim is not None and (not _is_int(feature_dim) or not 1 <= feature_dim <= MAX_FEATURE_DIM):
        raise LossSpecError(_BAD_FEATURE_DIM.format(maximum=MAX_FEATURE_DIM, value=feature_dim))
    name, options = parsed["method"], parsed["options"]
    cls = method_class(name)
    if cls.needs_feature_dim and feature_dim is None:
        raise LossSpecError(NEEDS_FEATURE_DIM.format(name=name))
    counts = None if class_counts is None else _checked_counts(class_counts, int(num_classes))
    counted = cls.needs_class_counts or (name == "group_dro" and float(options.get("adjustment", 0.0)) > 0)
    if counted and counts is None:
        raise LossSpecError(_NEEDS_COUNTS.format(name=name))
    try:
        method = build_method(name, int(num_classes), **options)
    except (MethodConfigError, MR2InputError, TypeError, ValueError) as error:
        raise LossSpecError(f"loss specification {json.dumps(parsed)}: {error}") from None
    loss = SpecLoss(parsed, method, int(num_classes), counts)
    if feature_dim is not None:
        loss.setup(feature_dim)
    return loss
