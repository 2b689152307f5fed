"""``mr2 tune --config RUN.yaml``: choose ERM or an MR2 configuration on validation, confirm it on
fresh seeds.

Examples::

    mr2 tune --config my-run.yaml                                   # quick: 4 candidates x 3 seeds
    mr2 tune --config my-run.yaml --candidates full --criterion worst_class --workers 2
    mr2 tune --config my-run.yaml --seeds 5 --confirm-seeds 5 --dry-run
    mr2 tune --config my-run.yaml --launcher slurm --launcher-option partition=gpu   # docs/cluster.md

Running the same command again reuses finished runs and resumes interrupted ones. The work is done
by :func:`mr2.tune.run_tune`; this module only parses arguments.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

EXIT_FAILED_RUNS = 1
EXIT_BAD_INPUT = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``tune`` subcommand's arguments to ``parser``."""
    parser.add_argument("--config", required=True, metavar="RUN.yaml", help="your run configuration")
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
        help="override a key of the run configuration (repeatable)",
    )
    parser.add_argument("--seeds", default="3", metavar="N|S,S,...",
                        help="selection seeds: a count (0..N-1) or a list (default 3)")
    parser.add_argument("--confirm-seeds", default="3", metavar="M|S,S,...",
                        help="fresh confirmation seeds: a count (after the selection seeds) or a list "
                        "disjoint from them (default 3)")
    parser.add_argument("--candidates", default="quick", metavar="quick|full",
                        help="quick: paper, logit_only, distance_1d at c_bar 1; full: every variant at "
                        "c_bar 0.5, 1, 2 (default quick)")
    parser.add_argument("--criterion", default="hard_tier", metavar="hard_tier|worst_class|overall",
                        help="validation figure the candidates are compared by (default hard_tier)")
    parser.add_argument("--workers", type=int, default=1, metavar="W", help="runs in parallel")
    parser.add_argument("--threads-per-run", type=int, metavar="T",
                        help="torch threads per run (default: CPU cores // workers)")
    parser.add_argument("--output-dir", metavar="DIR", help="where DIR/<name>/ goes (default: the config's)")
    parser.add_argument("--name", help="the tune directory's name (default: tune-<config file name>)")
    parser.add_argument("--launcher", choices=("local", "slurm"),
                        help="where the runs execute: local (the process pool, default) or slurm "
                        "(submitit jobs; docs/cluster.md)")
    parser.add_argument("--launcher-option", dest="launcher_options", action="append", default=[],
                        metavar="KEY=VALUE", help="a launcher key, e.g. partition=gpu (repeatable; see "
                        "docs/cluster.md)")
    parser.add_argument("--dry-run", action="store_true", help="print the rule and the runs; train nothing")


def run(args: argparse.Namespace) -> int:
    """Run ``mr2 tune``. Exit code 0: recommendation written and confirmed; 1: some run failed or
    no recommendation could be made; 2: invalid input (nothing written); 128 + signal number when
    stopped by a signal."""
    from mr2.cli.errors import user_errors
    from mr2.config import load_config
    from mr2.sweep import SweepInterrupted, SweepSpecError
    from mr2.tune import TuneInputError, describe_tune, make_request, run_tune
    from mr2.tune.run import preflight

    rejected: tuple[type[BaseException], ...] = (TuneInputError, SweepSpecError, *user_errors())
    try:
        launcher = None
        if args.launcher is not None or args.launcher_options:
            from mr2.sweep.launcher import parse_launcher_option

            launcher = {"name": args.launcher or "local"}
            launcher.update(parse_launcher_option(option) for option in args.launcher_options)
        config = load_config(args.config, args.overrides)
        request = make_request(
            config,
            name=args.name or f"tune-{Path(args.config).stem}",
            output_dir=args.output_dir,
            seeds=args.seeds,
            confirm_seeds=args.confirm_seeds,
            candidate_set=args.candidates,
            criterion=args.criterion,
            workers=args.workers,
            threads_per_run=args.threads_per_run,
            launcher=launcher,
        )
        if args.dry_run:
            print(describe_tune(request))
            return 0
        preflight(request)
    except rejected as error:
        print(f"mr2 tune: error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        outcome = run_tune(request)
    except SweepInterrupted as interrupt:
        print(f"\nmr2 tune: interrupted ({interrupt}); its trainers were stopped; run the same command "
              "again to resume.", file=sys.stderr)
        return 128 + interrupt.signum
    return 0 if outcome.ok else EXIT_FAILED_RUNS
