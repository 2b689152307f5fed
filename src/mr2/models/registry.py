"""Build any model of mr2 from the ``model:`` section: ``build_model(ModelSection(...), K, shape)``."""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Callable, Sequence
from typing import Any

from torch import nn

from mr2.config.annotations import describe, matches
from mr2.config.schema import ModelSection
from mr2.config.shown import shown
from mr2.errors import MR2Error
from mr2.models.classifier import BackboneClassifier
from mr2.models.linear_head import LinearHead
from mr2.models.mlp import MLP
from mr2.models.resnet_cifar import ResNetCifar, WideResNet, resnet32, wrn28_10
from mr2.models.small_cnn import SmallCNN
from mr2.models.timm_models import build_timm_model
from mr2.models.torchvision_models import build_torchvision_model
from mr2.models.weights import WEIGHTS_AND_PRETRAINED, WeightsFileError, load_state_dict_file

__all__ = ["MODEL_NAMES", "ModelConfigError", "build_model", "feature_dim_of", "model_options"]

TIMM_PREFIX = "timm:"
TORCHVISION_PREFIX = "torchvision:"
#: Names accepted by :func:`build_model`, besides ``timm:<name>`` and ``torchvision:<name>``.
MODEL_NAMES = ("small_cnn", "mlp", "resnet32", "wrn28_10", "resnet50", "vit_b_16", "linear")

UNKNOWN_MODEL = (
    "unknown model {name!r}; valid names: {names}, 'timm:<timm model name>' (e.g. "
    "'timm:vit_base_patch16_224.mae') or 'torchvision:<name>' (e.g. 'torchvision:resnet18')"
)
BAD_INPUT_SHAPE = "model {name!r} expects input_shape {expected}, got {shape}"
NO_HUB_WEIGHTS = "model {name!r} has no downloadable pretrained weights; pass weights=<local file> instead"
UNKNOWN_OPTIONS = (
    "model {name!r} has no option(s) {keys}; its options are: {valid}. Fix or remove them in "
    "`model.options`"
)
OPTION_WRONG_TYPE = (
    "model {name!r}: option {key!r} must be {expected}; got {value} ({type}). Fix it in `model.options`"
)
LIBRARY_REFUSED_OPTION = (
    "model {name!r} does not take the option {key!r} ({library} refused it: {error}); fix or remove it "
    "in `model.options` (see {library}'s documentation of the model for its keyword arguments)"
)
MODEL_REFUSED = "model {name!r} cannot be built from this config: {error}"
_NO_FEATURE_DIM = (
    "cannot tell the feature dimension of {model}: it has no 'feature_dim' attribute and no nn.Linear layer"
)


class ModelConfigError(MR2Error, ValueError):
    """The model's config names no known model, options it does not take, or an input it cannot take.

    Example:
        >>> try:
        ...     build_model(ModelSection("mlp", options={"dropoutt": 0.3}), 3, (4,))
        ... except ModelConfigError as error:
        ...     print(str(error).split(". ")[0])
        model 'mlp' has no option(s) 'dropoutt'; its options are: hidden_dims, dropout
    """


def _image_shape(name: str, input_shape: Sequence[int]) -> tuple[int, int, int]:
    if len(input_shape) != 3:
        raise ModelConfigError(
            BAD_INPUT_SHAPE.format(name=name, expected="(C, H, W)", shape=tuple(input_shape))
        )
    channels, height, width = (int(n) for n in input_shape)
    return channels, height, width


def _small_cnn(num_classes: int, input_shape: Sequence[int], options: dict[str, Any]) -> nn.Module:
    channels, height, width = _image_shape("small_cnn", input_shape)
    return SmallCNN(num_classes, in_channels=channels, image_size=(height, width), **options)


def _mlp(num_classes: int, input_shape: Sequence[int], options: dict[str, Any]) -> nn.Module:
    return MLP(num_classes, input_shape=tuple(input_shape), **options)


def _resnet32(num_classes: int, input_shape: Sequence[int], options: dict[str, Any]) -> nn.Module:
    channels, _, _ = _image_shape("resnet32", input_shape)
    return resnet32(num_classes, in_channels=channels, **options)


def _wrn28_10(num_classes: int, input_shape: Sequence[int], options: dict[str, Any]) -> nn.Module:
    channels, _, _ = _image_shape("wrn28_10", input_shape)
    return wrn28_10(num_classes, in_channels=channels, **options)


def _linear(num_classes: int, input_shape: Sequence[int], options: dict[str, Any]) -> nn.Module:
    if len(input_shape) != 1:
        raise ModelConfigError(
            BAD_INPUT_SHAPE.format(name="linear", expected="(d,)", shape=tuple(input_shape))
        )
    return LinearHead(int(input_shape[0]), num_classes, **options)


_OWN_BUILDERS: dict[str, Callable[[int, Sequence[int], dict[str, Any]], nn.Module]] = {
    "small_cnn": _small_cnn,
    "mlp": _mlp,
    "resnet32": _resnet32,
    "wrn28_10": _wrn28_10,
    "linear": _linear,
}
#: mr2's own models: the class whose constructor takes ``model.options``, and the parameters of it
#: the builders above fill in themselves (from K and the input shape, or fixed by the name).
_OWN_CONSTRUCTORS: dict[str, tuple[Callable[..., nn.Module], frozenset[str]]] = {
    "small_cnn": (SmallCNN, frozenset({"num_classes", "in_channels", "image_size"})),
    "mlp": (MLP, frozenset({"num_classes", "input_shape"})),
    "resnet32": (ResNetCifar, frozenset({"num_classes", "depth", "in_channels"})),
    "wrn28_10": (WideResNet, frozenset({"num_classes", "depth", "widen_factor", "in_channels"})),
    "linear": (LinearHead, frozenset({"feature_dim", "num_classes"})),
}
_TORCHVISION_NAMES = ("resnet50", "vit_b_16")
_UNEXPECTED_KEYWORD = re.compile(r"unexpected keyword argument '(\w+)'")


def model_options(name: str) -> tuple[str, ...]:
    """The keys ``model.options`` may hold for one of mr2's own models, in constructor order.

    Raises:
        ModelConfigError: if ``name`` is not one of mr2's own models (timm / torchvision models
            take their library's keyword arguments).

    Example:
        >>> model_options("resnet32")
        ('shortcut', 'base_width')
        >>> model_options("linear")
        ()
    """
    if name not in _OWN_CONSTRUCTORS:
        raise ModelConfigError(UNKNOWN_MODEL.format(name=name, names=", ".join(_OWN_CONSTRUCTORS)))
    constructor, filled = _OWN_CONSTRUCTORS[name]
    parameters = inspect.signature(constructor).parameters.values()
    return tuple(
        p.name
        for p in parameters
        if p.name not in filled and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    )


#: How a message names a value of a type, and a list of them.
_NAMES: dict[Any, tuple[str, str]] = {
    int: ("an integer", "integers"),
    float: ("a number", "numbers"),
    bool: ("true or false", "booleans"),
    str: ("a string", "strings"),
}


def _check_own_options(name: str, options: dict[str, Any]) -> None:
    """Unknown keys, then each value against the constructor's annotation of its parameter."""
    valid = model_options(name)
    unknown = [key for key in options if key not in valid]
    if unknown:
        raise ModelConfigError(
            UNKNOWN_OPTIONS.format(
                name=name, keys=", ".join(map(repr, unknown)), valid=", ".join(valid) or "none"
            )
        )
    constructor, _ = _OWN_CONSTRUCTORS[name]
    hints = typing.get_type_hints(constructor.__init__)
    for key, value in options.items():
        annotation = hints.get(key, Any)
        # A Literal's type only: a value of the right type that is not allowed is the constructor's to
        # refuse (its message explains the choices).
        if not matches(value, annotation, literal="type"):
            raise ModelConfigError(
                OPTION_WRONG_TYPE.format(
                    name=name, key=key, expected=describe(annotation, _NAMES), value=shown(value),
                    type=type(value).__name__,
                )
            )


def _build_library_model(
    library: str,
    build: Callable[..., BackboneClassifier],
    config: ModelSection,
    num_classes: int,
    input_shape: tuple[int, ...],
) -> BackboneClassifier:
    """Call a timm / torchvision builder with the model's name (its library prefix removed), weights
    and options; turn what a bad config makes it raise into ModelConfigError."""
    name, options = config.name, dict(config.options)
    try:
        return build(
            name.removeprefix(f"{library}:"),
            num_classes,
            input_shape,
            weights=config.weights,
            pretrained=config.pretrained,
            load_head=config.load_head,
            weights_key_prefix=config.weights_key_prefix,
            **options,
        )
    except TypeError as error:
        match = _UNEXPECTED_KEYWORD.search(str(error))
        if match is None or match.group(1) not in options:
            raise
        raise ModelConfigError(
            LIBRARY_REFUSED_OPTION.format(name=name, key=match.group(1), library=library, error=error)
        ) from error
    except (ModelConfigError, WeightsFileError):
        raise
    except ValueError as error:
        raise ModelConfigError(MODEL_REFUSED.format(name=name, error=error)) from error


def build_model(config: ModelSection, num_classes: int, input_shape: tuple[int, ...]) -> BackboneClassifier:
    """Build the model named by ``config``; its ``forward(x)`` returns ``(logits, features)``.

    Args:
        config: the model's name, weights and options.
        num_classes: K, the number of logits.
        input_shape: shape of ONE input: ``(C, H, W)`` for images, ``(d,)`` for cached features.

    Returns:
        A :class:`~mr2.models.classifier.BackboneClassifier`: ``feature_dim``, ``num_classes``,
        ``backbone``, ``classifier`` (the final ``nn.Linear``) and ``forward_features``.

    Raises:
        ModelConfigError: (a ``ValueError``) unknown name (listing the valid ones), an option the
            model does not take (naming it and the valid ones), an input shape or option value the
            model cannot take, or both ``weights`` and ``pretrained``.
        mr2.models.weights.WeightsFileError: a missing, unreadable or refused weights file.
        mr2.models.weights.WeightsMismatchError: weights that do not fit, naming the keys.

    Example:
        >>> model = build_model(ModelSection("resnet32"), num_classes=100, input_shape=(3, 32, 32))
        >>> model.feature_dim, model.num_classes
        (64, 100)
        >>> build_model(ModelSection("linear"), num_classes=10, input_shape=(640,)).classifier
        Linear(in_features=640, out_features=10, bias=True)
    """
    name = config.name
    options = dict(config.options)
    if config.weights is not None and config.pretrained:
        raise ModelConfigError(WEIGHTS_AND_PRETRAINED)
    model: BackboneClassifier
    if name in _OWN_BUILDERS:
        if config.pretrained:
            raise ModelConfigError(NO_HUB_WEIGHTS.format(name=name))
        _check_own_options(name, options)
        try:
            built = _OWN_BUILDERS[name](num_classes, input_shape, options)
        except ModelConfigError:
            raise
        except ValueError as error:  # an option value the constructor refuses (depth, shortcut, ...)
            raise ModelConfigError(MODEL_REFUSED.format(name=name, error=error)) from error
        assert isinstance(built, BackboneClassifier)
        model = built
        if config.weights is not None:
            state_dict = load_state_dict_file(config.weights, key_prefix=config.weights_key_prefix)
            model.load_weights(state_dict, load_head=config.load_head, source=config.weights)
    elif name in _TORCHVISION_NAMES or name.startswith(TORCHVISION_PREFIX):
        model = _build_library_model("torchvision", build_torchvision_model, config, num_classes, input_shape)
    elif name.startswith(TIMM_PREFIX):
        model = _build_library_model("timm", build_timm_model, config, num_classes, input_shape)
    else:
        raise ModelConfigError(UNKNOWN_MODEL.format(name=name, names=", ".join(MODEL_NAMES)))
    if config.freeze_backbone:
        model.freeze_backbone()
    return model


def feature_dim_of(model: nn.Module) -> int:
    """Width d of the features a model returns.

    Its ``feature_dim`` attribute when it has one (every model of :func:`build_model`), else the
    input width of its last ``nn.Linear`` in registration order (e.g. a wrapped torchvision model).

    Raises:
        ValueError: if neither exists.

    Example:
        >>> feature_dim_of(build_model(ModelSection("small_cnn"), 10, (1, 28, 28)))
        256
        >>> feature_dim_of(nn.Sequential(nn.Linear(8, 5), nn.ReLU(), nn.Linear(5, 3)))
        5
    """
    dim = getattr(model, "feature_dim", None)
    if isinstance(dim, int):
        return dim
    last = None
    for module in model.modules():
        if isinstance(module, nn.Linear):
            last = module
    if last is None:
        raise ValueError(_NO_FEATURE_DIM.format(model=type(model).__name__))
    return last.in_features
