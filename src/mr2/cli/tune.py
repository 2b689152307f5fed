"""``mr2 tune``: choose ERM or an MR2 configuration on validation, confirm it on fresh seeds, for mr2's
engine (``--config RUN.yaml``) or for training code of your own (``--command``).

Examples::

    mr2 tune --config my-run.yaml                                   # full: 17 candidates against ERM
    mr2 tune --config my-run.yaml --candidates quick --criterion worst_class --workers 2  # 3 against ERM
    mr2 tune --config my-run.yaml --seeds 5 --confirm-seeds 5 --dry-run
    mr2 tune --config my-run.yaml --launcher slurm --launcher-option partition=gpu   # docs/cluster.md
    mr2 tune --command 'python train.py --loss-json {loss} --seed {seed} --out {out}' --num-classes 10
    mr2 tune --command '...' --num-classes 10 --dry-run --time-one-trial   # time ERM's first trial once

Running the same command again reuses finished runs (trials) and resumes interrupted ones. This
module only parses arguments: it builds the request and the trial source (:mod:`mr2.tune.request`,
:mod:`mr2.tune.engine_source`, :mod:`mr2.tune.command`) and hands them to
:func:`mr2.tune.runtime.run_stoppable`, which runs the one driver (:func:`mr2.tune.run_tune`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

#: ``--candidates``' default: mr2.tune.candidates.DEFAULT_CANDIDATE_SET, spelled out so that parsing
#: arguments imports nothing heavy (tests/tune check that the two agree).
DEFAULT_CANDIDATES = "full"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``tune`` subcommand's arguments to ``parser``."""
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--config", metavar="RUN.yaml",
                        help="your mr2 run configuration (mr2's engine trains)")
    source.add_argument("--command", metavar="'CMD {loss} {seed} {out}'",
                        help="your own training command: mr2 substitutes {loss} (the loss specification, "
                        "JSON), {seed} and {out} (where it writes val.npz and test.npz) per trial; "
                        "docs/tune.md")
    parser.add_argument("--num-classes", type=int, metavar="K", help="number of classes (with --command)")
    parser.add_argument("--class-names", metavar="FILE",
                        help="one class name per line, for the report (with --command)")
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
        help="override a key of the run configuration (repeatable)",
    )
    parser.add_argument("--seeds", metavar="N|S,S,...",
                        help="the selection seed pool: a count (0..N-1) or a list (default: what the design "
                        "uses, 2)")
    parser.add_argument("--confirm-seeds", metavar="M|S,S,...",
                        help="the fresh confirmation seed pool: a count (after the selection seeds) or a "
                        "list disjoint from them (default: what the design uses, 17; only the seeds its "
                        "screen and looks need are trained)")
    parser.add_argument("--candidates", default=DEFAULT_CANDIDATES, metavar="quick|full|LABEL,LABEL,..",
                        help="quick: MR2's paper, logit_only, distance_1d at c_bar 1 (3 candidates against "
                        "ERM); full: every variant at 3 c_bar or margin values and 5 baselines (17 against "
                        "ERM, 15 with --command: jtt and hbr need --config; docs/tune.md); or "
                        f"labels of full's candidates, erm among them (default {DEFAULT_CANDIDATES})")
    parser.add_argument("--criterion", default="hard_tier", metavar="hard_tier|worst_class|overall",
                        help="validation figure the candidates are compared by (default hard_tier)")
    parser.add_argument("--workers", type=int, metavar="W",
                        help="runs (trials) in parallel (default with --config: one per CPU core, at most "
                        "one per run, or one per GPU on GPUs; with --command: 1)")
    parser.add_argument("--threads-per-run", type=int, metavar="T",
                        help="torch threads per run (default: CPU cores // workers)")
    parser.add_argument("--output-dir", metavar="DIR",
                        help="where DIR/<name>/ goes (default: the config's output_dir; with --command: "
                        "runs)")
    parser.add_argument("--name", help="the tune directory's name (default: tune-<config file name>; with "
                        "--command: tune)")
    parser.add_argument("--launcher", choices=("local", "slurm"),
                        help="where the runs execute: local (the process pool, default) or slurm "
                        "(submitit jobs; docs/cluster.md)")
    parser.add_argument("--launcher-option", dest="launcher_options", action="append", default=[],
                        metavar="KEY=VALUE", help="a launcher key, e.g. partition=gpu (repeatable; see "
                        "docs/cluster.md)")
    parser.add_argument("--trial-timeout", type=float, metavar="SECONDS",
                        help="with --command: a trial running longer is stopped and FAILS (its candidate is "
                        "ruled out; default: no limit)")
    parser.add_argument("--dry-run", action="store_true", help="print the rule and the runs; train nothing")
    parser.add_argument("--retrain", action="store_true",
                        help="with --command: train again the stored trials of another command or changed "
                        "script (a rerun with either is refused without it, never mixed)")
    parser.add_argument("--time-one-trial", action="store_true",
                        help="with --command --dry-run: run ERM's first trial once, in a temporary "
                        "directory, and print the expected and the most time the tune would take from its "
                        "wall time")


def run(args: argparse.Namespace) -> int:
    """Run ``mr2 tune``. Exit code 0: the tune ran to its advice (adopt or keep ERM; failed candidates
    are ruled out and listed); 1: no advice could be given (ERM failed, or no choice could be made);
    2: invalid input (nothing written; also a trial whose predictions tune cannot use, named with its
    log); 128 + signal number when stopped by a signal."""
    from mr2.cli.errors import user_errors
    from mr2.report.exceptions import PredictionsError
    from mr2.sweep import SweepSpecError
    from mr2.tune import TuneInputError
    from mr2.tune.errors import EXIT_BAD_INPUT

    rejected: tuple[type[BaseException], ...] = (TuneInputError, SweepSpecError, PredictionsError,
                                                 *user_errors())
    try:
        prepared = _command(args) if args.command is not None else _config(args)
    except rejected as error:
        print(f"mr2 tune: error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if prepared is None or isinstance(prepared, int):  # --dry-run (its exit code)
        return prepared or 0
    from mr2.tune.runtime import run_stoppable

    return run_stoppable(*prepared)


def _launcher(args: argparse.Namespace) -> dict[str, Any] | None:
    if args.launcher is None and not args.launcher_options:
        return None
    from mr2.sweep.launcher import parse_launcher_option

    launcher: dict[str, Any] = {"name": args.launcher or "local"}
    launcher.update(parse_launcher_option(option) for option in args.launcher_options)
    return launcher


def _config(args: argparse.Namespace) -> tuple[Any, Any] | None:
    """``mr2 tune --config``: the request and the engine source, checked (the data and every
    candidate built) before anything is written."""
    from mr2.config import load_config
    from mr2.tune import TuneInputError
    from mr2.tune.engine_source import engine_source
    from mr2.tune.request import check_report_memory, make_request

    for flag, value in (("--num-classes", args.num_classes), ("--class-names", args.class_names),
                        ("--trial-timeout", args.trial_timeout)):
        if value is not None:
            raise TuneInputError(_COMMAND_ONLY.format(flag=flag))
    if args.time_one_trial:
        raise TuneInputError(_TIME_COMMAND_ONLY)
    if args.retrain:
        raise TuneInputError(_RETRAIN_COMMAND_ONLY)
    config = load_config(args.config, args.overrides)
    request = make_request(
        output_dir=args.output_dir or config.output_dir, name=args.name or f"tune-{Path(args.config).stem}",
        candidates=args.candidates, losses_only=False, seeds=args.seeds, confirm_seeds=args.confirm_seeds,
        criterion=args.criterion)
    source = engine_source(config, request, workers=args.workers, threads_per_run=args.threads_per_run,
                           launcher=_launcher(args))
    if args.dry_run:
        from mr2.tune.driver import describe
        from mr2.tune.estimate import tune_estimate

        print(describe(request, source))
        print(tune_estimate(source))
        return None
    source.preflight()
    classes = source.num_classes()
    if classes is None:
        return request, source
    check_report_memory(request, classes)
    return request.with_num_classes(classes), source


def _command(args: argparse.Namespace) -> tuple[Any, Any] | int | None:
    """``mr2 tune --command``: the request and the command source, checked before anything is written."""
    from mr2.report.predictions import read_class_names
    from mr2.tune import TuneInputError
    from mr2.tune.command import check_command, command_source, interpreter_warning
    from mr2.tune.engine_source import BAD_COUNT
    from mr2.tune.estimate import NO_ESTIMATE_COMMAND
    from mr2.tune.request import make_request

    config_flags = (("--set", bool(args.overrides)), ("--threads-per-run", args.threads_per_run is not None))
    for flag, given in config_flags:
        if given:
            raise TuneInputError(_CONFIG_ONLY.format(flag=flag))
    check_command(args.command)  # the template first: its problems are the most likely ones
    if args.time_one_trial and not args.dry_run:
        raise TuneInputError(_TIME_NEEDS_DRY_RUN)
    if args.num_classes is None:
        raise TuneInputError(_NEEDS_NUM_CLASSES)
    workers = 1 if args.workers is None else args.workers  # mr2 cannot set the command's threads
    if workers < 1:
        raise TuneInputError(BAD_COUNT.format(flag="--workers", value=workers))
    names = read_class_names(args.class_names) if args.class_names is not None else None
    request = make_request(
        num_classes=args.num_classes, candidates=args.candidates, seeds=args.seeds,
        confirm_seeds=args.confirm_seeds, criterion=args.criterion, output_dir=args.output_dir or "runs",
        name=args.name or "tune", class_names=names)
    def make_source(request: Any) -> Any:
        return command_source(args.command, request, workers=workers, launcher=_launcher(args),
                              timeout=args.trial_timeout, retrain=args.retrain)

    source = make_source(request)
    warning = interpreter_warning(args.command)
    if warning:
        print(warning, file=sys.stderr)
    if args.dry_run:
        from mr2.tune.driver import describe

        print(describe(request, source, commands=True), flush=True)
        if not args.time_one_trial:
            print(NO_ESTIMATE_COMMAND)
            return None
        from mr2.tune.errors import EXIT_NO_ADVICE
        from mr2.tune.estimate import time_one_trial

        # The timed trial's source stops its command on Ctrl-C or an error (CommandSource.run).
        line, ok = time_one_trial(request, make_source, workers, sys.stdout)
        print(line)
        return 0 if ok else EXIT_NO_ADVICE
    return request, source


_COMMAND_ONLY = "{flag} applies to --command (a --config run configuration knows its classes)"
_CONFIG_ONLY = "{flag} applies to --config (your command sets up its own training)"
_TIME_NEEDS_DRY_RUN = (
    "--time-one-trial applies to --dry-run (a tune prints its time estimate after ERM's first trial)"
)
_TIME_COMMAND_ONLY = "--time-one-trial applies to --command (a --config dry run measures its steps itself)"
_RETRAIN_COMMAND_ONLY = (
    "--retrain applies to --command (with --config, a run finished with another configuration is never "
    "reused: delete its directory, or give the tune another --name)"
)
_NEEDS_NUM_CLASSES = "--command needs --num-classes K (the number of classes your script predicts)"
