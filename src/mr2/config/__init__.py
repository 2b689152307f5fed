"""Typed run configuration: YAML defaults, ``--set`` overrides, validation before any work."""

from mr2.config.errors import ConfigError
from mr2.config.loading import apply_overrides, load_config, load_yaml
from mr2.config.schema import (
    DataSection,
    MethodSection,
    ModelSection,
    OptimSection,
    RunConfig,
    config_from_dict,
    config_to_dict,
)

__all__ = [
    "ConfigError",
    "DataSection",
    "MethodSection",
    "ModelSection",
    "OptimSection",
    "RunConfig",
    "apply_overrides",
    "config_from_dict",
    "config_to_dict",
    "load_config",
    "load_yaml",
]
