"""``mr2 tune``: choose ERM or an MR2 configuration on validation, confirm it on fresh seeds, for mr2's
engine (``--config RUN.yaml``) or for training code of your own (``--command``).

Examples::

    mr2 tune --config my-run.yaml                                   # full: 18 candidates x 3 seeds
    mr2 tune --config my-run.yaml --candidates quick --criterion worst_class --workers 2  # 4 candidates
    mr2 tune --config my-run.yaml --seeds 5 --confirm-seeds 5 --dry-run
    mr2 tune --config my-run.yaml --launcher slurm --launcher-option partition=gpu   # docs/cluster.md
    mr2 tune --command 'python train.py --loss-json {loss} --seed {seed} --out {out}' --num-classes 10

Running the same command again reuses finished runs (trials) and resumes interrupted ones. The work
is done by :func:`mr2.tune.run_tune` (``--config``) and :func:`mr2.tune.trial_tune.tune_trials`
(``--command``); this module only parses arguments.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from typing import Any

EXIT_FAILED_RUNS = 1
EXIT_BAD_INPUT = 2
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
    parser.add_argument("--seeds", default="3", metavar="N|S,S,...",
                        help="selection seeds: a count (0..N-1) or a list (default 3)")
    parser.add_argument("--confirm-seeds", default="3", metavar="M|S,S,...",
                        help="fresh confirmation seeds: a count (after the selection seeds) or a list "
                        "disjoint from them (default 3)")
    parser.add_argument("--candidates", default=DEFAULT_CANDIDATES, metavar="quick|full|LABEL,LABEL,..",
                        help="quick: ERM and MR2's paper, logit_only, distance_1d at c_bar 1 (4); full: ERM, "
                        "every variant at 3 c_bar or margin values and 5 baselines (18; docs/tune.md); or "
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
    parser.add_argument("--dry-run", action="store_true", help="print the rule and the runs; train nothing")


def run(args: argparse.Namespace) -> int:
    """Run ``mr2 tune``. Exit code 0: recommendation written and confirmed; 1: some run failed or
    no recommendation could be made; 2: invalid input (nothing written; with ``--command`` also a
    trial whose command failed or wrote unusable predictions, named with its log); 128 + signal
    number when stopped by a signal."""
    if args.command is not None:
        return _run_command(args)
    from mr2.cli.errors import user_errors
    from mr2.config import load_config
    from mr2.sweep import SweepInterrupted, SweepSpecError
    from mr2.tune import TuneInputError, describe_tune, make_request, run_tune
    from mr2.tune.run import preflight

    rejected: tuple[type[BaseException], ...] = (TuneInputError, SweepSpecError, *user_errors())
    try:
        for flag, value in (("--num-classes", args.num_classes), ("--class-names", args.class_names)):
            if value is not None:
                raise TuneInputError(_COMMAND_ONLY.format(flag=flag))
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
            from mr2.tune.estimate import tune_estimate

            print(describe_tune(request))
            print(tune_estimate(request))
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


_COMMAND_ONLY = "{flag} applies to --command (a --config run configuration knows its classes)"
_CONFIG_ONLY = "{flag} applies to --config (your command sets up its own training)"
_NEEDS_NUM_CLASSES = "--command needs --num-classes K (the number of classes your script predicts)"


class _Stopped(BaseException):
    """SIGTERM or SIGHUP while the trials run (a BaseException, like KeyboardInterrupt, so that no
    ``except Exception`` on the way takes it for a trial's failure)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise_stopped(signum: int, frame: Any) -> None:
    raise _Stopped(signum)


def _run_command(args: argparse.Namespace) -> int:
    """``mr2 tune --command``: trials of the user's own training command."""
    from concurrent.futures import ThreadPoolExecutor

    from mr2.config import ConfigError
    from mr2.report.exceptions import PredictionsError
    from mr2.report.predictions import read_class_names
    from mr2.sweep import SweepSpecError
    from mr2.tune import TuneInputError, TuneSelectionError
    from mr2.tune.command import CommandSource, allow_commands, check_command, stop_commands
    from mr2.tune.estimate import NO_ESTIMATE_COMMAND
    from mr2.tune.run import BAD_COUNT
    from mr2.tune.trial_tune import describe_trials, make_trial_request, tune_trials
    from mr2.tune.trials import TrialStore

    try:
        config_flags = (("--set", bool(args.overrides)),
                        ("--threads-per-run", args.threads_per_run is not None))
        for flag, given in config_flags:
            if given:
                raise TuneInputError(_CONFIG_ONLY.format(flag=flag))
        launcher = None
        if args.launcher is not None or args.launcher_options:
            from mr2.sweep.launcher import launcher_from_dict, parse_launcher_option

            raw = {"name": args.launcher or "local"}
            raw.update(parse_launcher_option(option) for option in args.launcher_options)
            launcher = launcher_from_dict(raw)
        template = check_command(args.command)
        if args.num_classes is None:
            raise TuneInputError(_NEEDS_NUM_CLASSES)
        workers = 1 if args.workers is None else args.workers  # mr2 cannot set the command's threads
        if workers < 1:
            raise TuneInputError(BAD_COUNT.format(flag="--workers", value=workers))
        names = read_class_names(args.class_names) if args.class_names is not None else None
        request = make_trial_request(
            num_classes=args.num_classes, candidates=args.candidates, seeds=args.seeds,
            confirm_seeds=args.confirm_seeds, criterion=args.criterion, output_dir=args.output_dir or "runs",
            name=args.name or "tune", class_names=names, source={"kind": "command", "command": template},
        )
        source = CommandSource(template, TrialStore(request.directory, request.num_classes))
        if args.dry_run:
            print(describe_trials(request, runs="trials"))
            for trial in request.selection_trials():
                print(f"  $ {source.command(trial)}")
            print(NO_ESTIMATE_COMMAND)
            return 0
    except (TuneInputError, PredictionsError, ConfigError, SweepSpecError) as error:
        print(f"mr2 tune: error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    executor: Any = None
    if launcher is not None and launcher.name == "slurm":
        from mr2.sweep.cluster import _executor as slurm_executor

        # One submitit job per trial; the jobs' files go to DIR/NAME/submitit/.
        executor = slurm_executor(request.directory / "submitit", launcher, f"mr2-tune-{request.name}")
    elif workers > 1:
        executor = ThreadPoolExecutor(workers)
    allow_commands()
    previous = {signum: signal.signal(signum, _raise_stopped) for signum in (signal.SIGTERM, signal.SIGHUP)}
    try:
        result = tune_trials(request, source, executor=executor, log=source.log)
    except TuneInputError as error:  # a trial's command failed or wrote unusable predictions
        print(f"mr2 tune: error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except TuneSelectionError as error:
        print(f"mr2 tune: no recommendation: {error}", file=sys.stderr)
        return EXIT_FAILED_RUNS
    except (_Stopped, KeyboardInterrupt) as stop:
        signum = stop.signum if isinstance(stop, _Stopped) else signal.SIGINT
        if isinstance(executor, ThreadPoolExecutor):
            executor.shutdown(wait=False, cancel_futures=True)  # no queued trial starts
        stop_commands()
        print(f"\nmr2 tune: interrupted ({signal.Signals(signum).name}); the running trials' commands were "
              "stopped, finished trials are kept; run the same command again to resume.", file=sys.stderr)
        return 128 + signum
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if isinstance(executor, ThreadPoolExecutor):
            executor.shutdown(wait=False, cancel_futures=True)
            stop_commands()  # e.g. after a trial's error while others still run
            executor.shutdown(wait=True)
    return 0 if result.report_dir is not None else EXIT_FAILED_RUNS
