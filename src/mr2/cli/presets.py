"""``mr2 presets``: list the shipped sweep presets (``mr2 sweep --preset NAME``)."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``presets`` subcommand's arguments to ``parser``."""
    parser.add_argument("name", nargs="?", help="print this preset's file instead of the list")


def run(args: argparse.Namespace) -> int:
    """List the presets with their descriptions, or print one preset file."""
    import sys

    from mr2.sweep.presets import preset_descriptions, preset_path
    from mr2.sweep.spec import SweepSpecError

    if args.name is not None:
        try:
            print(preset_path(args.name).read_text(), end="")
        except SweepSpecError as error:
            print(f"mr2 presets: error: {error}", file=sys.stderr)
            return 2
        return 0
    descriptions = preset_descriptions()
    width = max(len(name) for name in descriptions)
    for name, description in descriptions.items():
        print(f"{name:<{width}}  {description}")
    print("\nRun one with `mr2 sweep --preset NAME`; show its file with `mr2 presets NAME`.")
    return 0
