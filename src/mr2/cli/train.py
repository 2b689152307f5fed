"""``mr2 train --config FILE.yaml [--set key=value ...]``: one training run."""

from __future__ import annotations

import argparse
import sys

from mr2.config import load_config


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="YAML run configuration (defaults are used for absent keys)")
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
        help="override a config key, e.g. --set optim.lr=0.1 --set method.name=mr2 (repeatable)",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace a finished run of the same name")
    parser.add_argument("--quiet", action="store_true", help="no progress output")


def run(args: argparse.Namespace) -> int:
    """Train one run. An :class:`~mr2.errors.MR2Error` (bad config, data, method options...) reaches
    :func:`mr2.cli.main.main`, which prints it on one line and returns 2."""
    from mr2.engine.run import train

    notes: list[str] = []
    config = load_config(args.config, args.overrides, notes)
    for note in notes:
        print(f"mr2 train: note: {note}", file=sys.stderr)
    final = train(config, overwrite=args.overwrite, quiet=args.quiet)
    print(f"test accuracy {final['overall_accuracy']:.4f} ({config.output_dir}/{config.name}/final.json)")
    return 0
