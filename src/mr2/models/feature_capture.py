"""Make any classifier return ``(logits, features)`` without rewriting it."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

__all__ = [
    "ClassifierWithFeatures",
    "HeadInput",
    "find_classifier",
    "head_module",
]

_NO_LINEAR_HEAD = (
    "could not find the final linear layer of {model}: pass head='<module name>' (e.g. 'fc' for "
    "torchvision ResNets, 'heads.head' for torchvision ViTs, 'head' for timm ViTs)."
)
UNKNOWN_HEAD = "model has no submodule named {name!r}; submodules include: {names}."
HEAD_NOT_CALLED = (
    "the head module {name!r} was not called during the forward pass, so no features were "
    "captured. Pass the name of the layer that produces the logits."
)


def find_classifier(model: nn.Module) -> str:
    """Name of the module producing the logits: timm's ``get_classifier()``, else the last Linear.

    Example:
        >>> find_classifier(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3)))
        '2'
    """
    get_classifier = getattr(model, "get_classifier", None)
    if callable(get_classifier):
        head = get_classifier()
        for name, module in model.named_modules():
            if module is head and name:
                return name
    last = None
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            last = name
    if last is None:
        raise ValueError(_NO_LINEAR_HEAD.format(model=type(model).__name__))
    return last


def head_module(model: nn.Module, head: str | None = None) -> tuple[str, nn.Module]:
    """The dotted name and the module of ``model``'s head: ``head``, else :func:`find_classifier`'s.

    Raises:
        ValueError: ``model`` has no submodule of that name, or (``head`` None) no linear layer.

    Example:
        >>> head_module(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3)))
        ('2', Linear(in_features=8, out_features=3, bias=True))
    """
    name = head if head is not None else find_classifier(model)
    modules = dict(model.named_modules())
    if name not in modules:
        shown = ", ".join(repr(n) for n in list(modules)[1:12])
        raise ValueError(UNKNOWN_HEAD.format(name=name, names=shown))
    return name, modules[name]


class HeadInput:
    """The input of a classifier's head on the last forward pass, captured by a forward pre-hook: the
    one mechanism behind :class:`ClassifierWithFeatures` and the integrations' wrappers.

    :meth:`run` calls the model and returns its output with the captured features, flattened to
    [B, d]; the capture is cleared before and after, so a stale tensor is never returned.
    """

    def __init__(self, head: nn.Module, name: str) -> None:
        self.name = name
        self._captured: torch.Tensor | None = None
        head.register_forward_pre_hook(self._capture)

    def _capture(self, module: nn.Module, args: tuple[Any, ...]) -> None:
        self._captured = args[0]

    def run(self, model: nn.Module, *args: Any, **kwargs: Any) -> tuple[Any, torch.Tensor]:
        """``(model(*args, **kwargs), features [B, d])``.

        Raises:
            RuntimeError: the forward pass did not call the head.
        """
        self._captured = None
        output = model(*args, **kwargs)
        features, self._captured = self._captured, None
        if features is None:
            raise RuntimeError(HEAD_NOT_CALLED.format(name=self.name))
        return output, features.flatten(1)


class ClassifierWithFeatures(nn.Module):
    """Wrap a classifier so that ``forward(x)`` returns ``(logits, features)``.

    The features are the input of the head (the final linear layer), captured with a forward
    pre-hook, flattened to [B, d]. Nothing in the wrapped model changes: its ``state_dict`` is the
    wrapped model's under the prefix ``model.``, and :attr:`model` is the unwrapped model to save.

    Args:
        model: any classifier (torchvision, timm, your own) whose logits come from one module.
        head: dotted name of that module; default: timm's ``get_classifier()`` or the last
            ``nn.Linear`` in registration order.

    Example:
        >>> net = nn.Sequential(nn.Flatten(), nn.Linear(12, 5), nn.ReLU(), nn.Linear(5, 3))
        >>> logits, features = ClassifierWithFeatures(net)(torch.randn(2, 3, 4))
        >>> logits.shape, features.shape
        (torch.Size([2, 3]), torch.Size([2, 5]))
    """

    def __init__(self, model: nn.Module, head: str | None = None) -> None:
        super().__init__()
        self.model = model
        self.head_name, self.head = head_module(model, head)
        self._features = HeadInput(self.head, self.head_name)

    def forward(self, *args: Any, **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        logits, features = self._features.run(self.model, *args, **kwargs)
        return logits, features
