"""Entry point of the ``mr2`` console script.

Each subcommand lives in its own module under :mod:`mr2.cli` and exposes ``add_arguments(parser)``
and ``run(args) -> int``. The CLI only parses arguments, builds configs and calls library code.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from mr2 import __version__

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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mr2",
        description="Measure and reduce class-wise accuracy disparity (MR2 margin regularization).",
    )
    parser.add_argument("--version", action="version", version=f"mr2 {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module_name, help_text in SUBCOMMANDS:
        module = importlib.import_module(module_name)
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        module.add_arguments(sub_parser)
        sub_parser.set_defaults(_run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "_run", None) is None:
        parser.print_help()
        return 2
    return int(args._run(args))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
