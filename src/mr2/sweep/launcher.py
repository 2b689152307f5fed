"""Where a sweep's runs execute: ``launcher: {name: local}`` (the local process pool, default) or
``launcher: {name: slurm, ...}`` (a Slurm job array through submitit, :mod:`mr2.sweep.cluster`).

In the sweep file::

    launcher:
      name: slurm              # or local
      executor: slurm          # submitit's executor: slurm, or local / debug to try without a cluster
      partition: gpu
      account: null
      qos: null
      constraint: null
      gpus_per_run: 1          # GPUs per node of a run (> 1: data-parallel, see docs/cluster.md)
      nodes_per_run: 1         # > 1: one task per GPU on every node, torch.distributed from Slurm
      cpus_per_run: null       # CPUs per task
      mem_gb: null
      timeout_min: 60          # the job's time limit; at its end the job requeues itself
      array_parallelism: 256   # runs of the array executing at once
      max_requeues: 3          # resubmissions of a failed job, and requeues after time-outs
      setup: []                # shell lines run before each job (module load ..., source venv)

On the command line: ``--launcher slurm`` sets the name, ``--launcher-option KEY=VALUE``
(repeatable) any other key. Keys are validated like the run configuration (unknown key: an error
naming it and the valid ones).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from typing import Any, Literal

from mr2.config import ConfigError
from mr2.config.schema import build_dataclass

__all__ = [
    "LAUNCHERS",
    "NEEDS_SUBMITIT",
    "NO_SLURM",
    "LauncherOptions",
    "check_launcher_available",
    "launcher_from_dict",
    "parse_launcher_option",
]

#: The launcher names.
LAUNCHERS = ("local", "slurm")
NEEDS_SUBMITIT = (
    "launcher 'slurm' needs submitit, which is not installed; install it with `pip install "
    "'mr2[cluster]'` (or `pip install submitit`)"
)
NO_SLURM = (
    "launcher 'slurm' with executor 'slurm' needs Slurm's commands, but {missing} not found on PATH (is "
    "this a Slurm login node?); --launcher-option executor=local runs the same code path on this machine"
)
#: The Slurm commands submitit's Slurm executor calls (sbatch to submit; srun to detect the cluster).
SLURM_COMMANDS = ("sbatch", "srun")
_BAD_OPTION = "launcher key {path!r} {problem}; got {value!r}"
NOT_KEY_VALUE = "--launcher-option takes KEY=VALUE (e.g. partition=gpu); got {value!r}"
SLURM_ONLY = (
    "launcher key {key!r} only applies to launcher 'slurm'; set --launcher slurm (or launcher.name: "
    "slurm) or remove it"
)


@dataclass
class LauncherOptions:
    """A validated ``launcher:`` mapping (see the module docstring)."""

    name: Literal["local", "slurm"] = "local"
    executor: Literal["slurm", "local", "debug"] = "slurm"
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    gpus_per_run: int = 0
    nodes_per_run: int = 1
    cpus_per_run: int | None = None
    mem_gb: float | None = None
    timeout_min: int = 60
    array_parallelism: int = 256
    max_requeues: int = 3
    setup: list[Any] = field(default_factory=list)

    def check(self, path: str = "launcher") -> None:
        """Cross-field and range checks (types are checked by the builder)."""
        minimums = {"gpus_per_run": 0, "nodes_per_run": 1, "timeout_min": 1, "array_parallelism": 1,
                    "max_requeues": 0}
        for key, minimum in minimums.items():
            if getattr(self, key) < minimum:
                raise ConfigError(_BAD_OPTION.format(path=f"{path}.{key}", problem=f"must be >= {minimum}",
                                                    value=getattr(self, key)))
        if self.cpus_per_run is not None and self.cpus_per_run < 1:
            raise ConfigError(_BAD_OPTION.format(path=f"{path}.cpus_per_run", problem="must be >= 1 or null",
                                                value=self.cpus_per_run))
        if self.mem_gb is not None and self.mem_gb <= 0:
            raise ConfigError(_BAD_OPTION.format(path=f"{path}.mem_gb", problem="must be > 0 or null",
                                                value=self.mem_gb))
        if not isinstance(self.setup, list) or not all(isinstance(line, str) for line in self.setup):
            raise ConfigError(_BAD_OPTION.format(path=f"{path}.setup",
                                                 problem="must be a list of shell lines", value=self.setup))
        if self.nodes_per_run > 1 and self.executor != "slurm":
            raise ConfigError(_BAD_OPTION.format(path=f"{path}.nodes_per_run",
                                                problem="> 1 needs executor 'slurm' (submitit's local "
                                                "executors run on one node)", value=self.nodes_per_run))

    @property
    def tasks_per_node(self) -> int:
        """Tasks of a job on each node: one per GPU when the run spans several nodes, else 1 (a
        single-node multi-GPU run starts torchrun inside its one task)."""
        return max(1, self.gpus_per_run) if self.nodes_per_run > 1 else 1


def launcher_from_dict(data: Any, path: str = "launcher") -> LauncherOptions:
    """Validate a ``launcher:`` mapping (None: the local pool).

    Raises:
        ConfigError: an unknown key, a wrong type or value (naming the key).

    Example:
        >>> launcher_from_dict({"name": "slurm", "partition": "gpu", "gpus_per_run": 2}).tasks_per_node
        1
        >>> try:
        ...     launcher_from_dict({"name": "slurm", "partitoin": "gpu"})
        ... except ConfigError as error:
        ...     print(str(error)[:48])
        unknown config key 'launcher.partitoin'; valid k
    """
    options = build_dataclass(LauncherOptions, {} if data is None else data, path)
    options.check(path)
    if options.name == "slurm":
        try:
            import submitit  # noqa: F401
        except ImportError:
            raise ConfigError(NEEDS_SUBMITIT) from None
    if options.name == "local":
        slurm_keys = [key for key in (data or {}) if key != "name"]
        if slurm_keys:
            raise ConfigError(SLURM_ONLY.format(key=slurm_keys[0]))
    return options


def check_launcher_available(options: LauncherOptions) -> None:
    """Fail before anything is written when the launcher cannot start jobs here: Slurm's commands
    missing for ``executor: slurm`` (submitit would fail only when submitting).

    Kept out of :func:`launcher_from_dict`: ``mr2 sweep status|report DIR`` rebuild a Slurm sweep on
    machines without Slurm.

    Raises:
        ConfigError: :data:`NO_SLURM`, naming the missing commands.
    """
    if options.name != "slurm" or options.executor != "slurm":
        return
    missing = [command for command in SLURM_COMMANDS if shutil.which(command) is None]
    if missing:
        names = " and ".join(f"`{command}`" for command in missing)
        raise ConfigError(NO_SLURM.format(missing=names + (" were" if len(missing) > 1 else " was")))


def parse_launcher_option(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` of ``--launcher-option``; the value is parsed as YAML (``2`` -> 2, ``null``).

    Example:
        >>> parse_launcher_option("gpus_per_run=2"), parse_launcher_option("partition=gpu")
        (('gpus_per_run', 2), ('partition', 'gpu'))
    """
    from mr2.config.loading import parse_yaml

    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(NOT_KEY_VALUE.format(value=text))
    try:  # the rules of user YAML (no aliases: parse_yaml); text that is not YAML stays text
        parsed = parse_yaml(value, f"--launcher-option {text!r}") if value.strip() else ""
    except ConfigError:
        parsed = value
    return key.strip(), parsed
