"""``mr2 train --config FILE.yaml [--set key=value ...]``: one training run."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="YAML run configuration (defaults are used for absent keys)")
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
        help="override a config key, e.g. --set optim.lr=0.1 --set method.name=mr2 (repeatable)",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace a finished run of the same name")
    parser.add_argument("--quiet", action="store_true", help="no progress output")


def run(args: argparse.Namespace) -> int:
    """Train one run: :func:`mr2.engine.run.train_from_config_file` (bad input is one line, exit 2)."""
    from mr2.engine.run import train_from_config_file

    return train_from_config_file(args.config, args.overrides, overwrite=args.overwrite, quiet=args.quiet)
