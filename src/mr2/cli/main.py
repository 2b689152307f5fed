"""Entry point of the ``mr2`` console script.

Each subcommand lives in its own module under :mod:`mr2.cli` and exposes ``add_arguments(parser)``
and ``run(args) -> int``. The CLI only parses arguments, builds configs and calls library code.

Start-up is kept short: only the module of the subcommand being run is imported, and the subcommand
modules import torch (and numpy) inside ``run``, so ``mr2 --help``, ``mr2 --version``, every
``mr2 COMMAND --help``, ``mr2 presets`` and ``mr2 sweep status DIR`` never import them
(tests/package/test_cli_startup.py checks it).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Collection, Sequence

from mr2 import __version__
from mr2.errors import COMMAND_ERROR, COMMAND_WRITE_FAILED

#: (subcommand, module, one-line help)
SUBCOMMANDS: tuple[tuple[str, str, str], ...] = (
    ("demo", "mr2.cli.demo", "run the demonstration comparison (MR2 vs cross-entropy)"),
    ("train", "mr2.cli.train", "train one run from a YAML config"),
    ("eval", "mr2.cli.eval", "re-evaluate a run directory's last checkpoint"),
    ("report", "mr2.cli.report", "disparity report over one or more run directories"),
    ("sweep", "mr2.cli.sweep", "methods x seeds x hyperparameters, then the report (resumable)"),
    ("tune", "mr2.cli.tune", "choose ERM or an MR2 configuration on validation, confirm on fresh seeds"),
    ("presets", "mr2.cli.presets", "list the shipped sweep presets (mr2 sweep --preset NAME)"),
)


def build_parser(commands: Collection[str] | None = None) -> argparse.ArgumentParser:
    """The ``mr2`` parser. Only the subcommands in ``commands`` (default: all) have their module
    imported and their arguments added; the others are listed by ``mr2 --help`` all the same."""
    parser = argparse.ArgumentParser(
        prog="mr2",
        description="Measure and reduce class-wise accuracy disparity (MR2 margin regularization).",
    )
    parser.add_argument("--version", action="version", version=f"mr2 {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module_name, help_text in SUBCOMMANDS:
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        if commands is None or name in commands:
            module = importlib.import_module(module_name)
            module.add_arguments(sub_parser)
            sub_parser.set_defaults(_run=module.run)
    return parser


#: A refused write, and an :class:`~mr2.errors.MR2Error` a subcommand did not catch itself, on one line.
WRITE_FAILED, USER_ERROR = COMMAND_WRITE_FAILED, COMMAND_ERROR


def _named_command(argv: Sequence[str]) -> list[str]:
    """The subcommand named in ``argv`` (none or one): its first argument that is not an option
    (``mr2`` itself takes only ``--help`` and ``--version``)."""
    return [arg for arg in argv if not arg.startswith("-")][:1]


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(_named_command(argv))
    args = parser.parse_args(argv)
    if getattr(args, "_run", None) is None:
        parser.print_help()
        return 2
    from mr2.cli.errors import user_errors
    from mr2.io import WriteError

    command = " ".join(["mr2", *_named_command(argv)])
    try:
        return int(args._run(args))
    except WriteError as error:  # the operating system refused a write: not a bug of mr2's
        message = WRITE_FAILED.format(command=command, path=error.filename, reason=error.strerror)
        print(message, file=sys.stderr)
        return 2
    except user_errors() as error:  # every MR2Error: bad input, its message says how to fix it
        print(USER_ERROR.format(command=command, error=error), file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
