"""``mr2 eval RUN_DIR [--split test|val] [--checkpoint auto|last|best]``: re-evaluate a run."""

from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", help="a run directory written by mr2 train")
    parser.add_argument("--split", choices=("test", "val"), default="test", help="split to evaluate")
    parser.add_argument(
        "--checkpoint", choices=("auto", "last", "best"), default="auto",
        help="which checkpoint: auto (the one final.json came from: best.pt for select: best_val), "
        "last or best",
    )


def run(args: argparse.Namespace) -> int:
    from mr2.cli.errors import user_errors
    from mr2.engine.run import evaluate_run

    try:
        result = evaluate_run(args.run_dir, args.split, args.checkpoint)
    except user_errors() as error:
        print(f"mr2 eval: error: {error}", file=sys.stderr)
        return 2
    worst = min((a for a in result["per_class_accuracy"] if a == a), default=float("nan"))
    print(
        f"{args.split} accuracy {result['overall_accuracy']:.4f}, worst class {worst:.4f} "
        f"({result['checkpoint']}; {args.run_dir}/eval_{args.split}.json)"
    )
    return 0
