"""``mr2 eval RUN_DIR [--split test|val] [--checkpoint auto|last|best]``: re-evaluate a run."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", help="a run directory written by mr2 train")
    parser.add_argument("--split", choices=("test", "val"), default="test", help="split to evaluate")
    parser.add_argument(
        "--checkpoint", choices=("auto", "last", "best"), default="auto",
        help="which checkpoint: auto (the one final.json came from: best.pt for select: best_val), "
        "last or best",
    )


def run(args: argparse.Namespace) -> int:
    """Re-evaluate a run. An :class:`~mr2.errors.MR2Error` reaches :func:`mr2.cli.main.main`, which
    prints it on one line and returns 2."""
    from mr2.engine.run import evaluate_run

    result = evaluate_run(args.run_dir, args.split, args.checkpoint)
    worst = min((a for a in result["per_class_accuracy"] if a == a), default=float("nan"))
    print(
        f"{args.split} accuracy {result['overall_accuracy']:.4f}, worst class {worst:.4f} "
        f"({result['checkpoint']}; {args.run_dir}/eval_{args.split}.json)"
    )
    return 0
