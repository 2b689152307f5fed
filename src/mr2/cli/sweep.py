"""``mr2 sweep SWEEP.yaml | --preset NAME``: methods x seeds x hyperparameters, then the report.

Examples::

    mr2 sweep my-sweep.yaml --workers 2
    mr2 sweep --preset fashion-mnist
    mr2 sweep --preset cifar100-resnet32 --set data.root=/data/cifar --output-dir /scratch/runs
    mr2 sweep --preset demo --dry-run          # write the run configs; list runs, state, commands

Running the same command again skips finished runs and resumes interrupted ones. The work is done
by :func:`mr2.sweep.run_sweep`; this module only parses arguments.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

EXIT_FAILED_RUNS = 1
EXIT_BAD_INPUT = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``sweep`` subcommand's arguments to ``parser``."""
    parser.add_argument("spec", nargs="?", metavar="SWEEP.yaml",
                        help="sweep specification file; or `status DIR` / `report DIR` for a sweep directory")
    parser.add_argument("target", nargs="?", metavar="DIR", help=argparse.SUPPRESS)
    parser.add_argument("--preset", metavar="NAME",
                        help="a shipped sweep instead of a file (see `mr2 presets`)")
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
        help="override a key of the base run configuration, e.g. --set data.root=/data "
        "--set optim.epochs=5 (repeatable)",
    )
    parser.add_argument("--workers", type=int, metavar="N",
                        help="runs executed in parallel (overrides the file)")
    parser.add_argument("--threads-per-run", type=int, metavar="T",
                        help="torch threads per run (default: CPU cores // workers)")
    parser.add_argument("--output-dir", metavar="DIR",
                        help="where the sweep directory goes (default: the file's)")
    parser.add_argument("--name", help="sweep name, i.e. its directory under the output directory")
    parser.add_argument("--seeds", metavar="S,S,...", help="comma-separated seeds (overrides the file)")
    parser.add_argument("--methods", metavar="LABEL,...",
                        help="run only these method entries (and the reference)")
    parser.add_argument("--devices", metavar="ID,ID,...",
                        help="GPU ids shared out among the workers (overrides the file)")
    parser.add_argument("--dry-run", action="store_true",
                        help="list the runs and their commands; train nothing")
    parser.add_argument("--no-report", action="store_true", help="train only; write no report")
    parser.add_argument("--launcher", choices=("local", "slurm"),
                        help="where the runs execute: local process pool or submitit (overrides the file)")
    parser.add_argument("--launcher-option", dest="launcher_options", action="append", default=[],
                        metavar="KEY=VALUE", help="a launcher key, e.g. partition=gpu (repeatable; see "
                        "docs/cluster.md)")
    parser.add_argument("--no-wait", action="store_true",
                        help="with launcher slurm: submit the jobs and return (then `mr2 sweep status DIR`)")
    parser.add_argument("--no-plots", action="store_true", help="write the report without figures")


def _apply_arguments(spec_data: dict, args: argparse.Namespace) -> dict:
    from mr2.config import apply_overrides

    data = dict(spec_data)
    if args.launcher is not None or args.launcher_options:
        from mr2.sweep.launcher import parse_launcher_option

        launcher = dict(data.get("launcher") or {})
        if args.launcher is not None:
            launcher["name"] = args.launcher
        for option in args.launcher_options:
            key, value = parse_launcher_option(option)
            launcher[key] = value
        data["launcher"] = launcher
    if args.overrides:
        if isinstance(data.get("base_config"), str):
            from mr2.config import load_yaml

            base_file = data.pop("base_config")
            data["base"] = load_yaml(base_file)
        notes: list[str] = []
        data["base"] = apply_overrides(data.get("base") or {}, args.overrides, notes)
        for note in notes:
            print(f"mr2 sweep: note: {note}", file=sys.stderr)
    for key in ("workers", "threads_per_run", "output_dir", "name"):
        value = getattr(args, key)
        if value is not None:
            data[key] = value
    if args.devices is not None:
        try:
            data["devices"] = [int(d) for d in args.devices.split(",") if d.strip()]
        except ValueError:
            data["devices"] = args.devices
    if args.seeds is not None:
        try:
            data["seeds"] = [int(s) for s in args.seeds.split(",") if s.strip()]
        except ValueError:
            data["seeds"] = args.seeds
    if args.methods is not None:
        wanted = [m.strip() for m in args.methods.split(",") if m.strip()]
        methods = data.get("methods") or {}
        unknown = [m for m in wanted if m not in methods]
        if unknown:
            from mr2.sweep.spec import SweepSpecError

            raise SweepSpecError(
                f"--methods: no method entry {', '.join(map(repr, unknown))}; entries: {', '.join(methods)}."
            )
        reference = data.get("reference", next(iter(methods), None))
        data["methods"] = {k: v for k, v in methods.items() if k in wanted or k == reference}
    return data


def run(args: argparse.Namespace) -> int:
    """Run the sweep. Exit code 0: all runs finished (here, or in another process the sweep waited
    for) and the report was written; 1: some run failed (the others ran; the report covers them);
    2: invalid input or an operating-system error; 128 + the signal's number when stopped by a
    signal (130 Ctrl-C, 143 SIGTERM, 129 SIGHUP), after stopping its trainers."""
    if args.spec == "status" and args.target is not None:
        return _status(Path(args.target))
    if args.spec == "report" and args.target is not None:
        return _report(Path(args.target), args)

    from mr2.config import ConfigError, load_yaml
    from mr2.report.tables import comparison_markdown
    from mr2.sweep import SweepInterrupted, SweepSpecError, describe_plan, prepare_sweep, run_sweep
    from mr2.sweep.presets import preset_path
    from mr2.sweep.spec import spec_from_dict

    try:
        if args.target is not None:
            raise SweepSpecError(f"unexpected argument {args.target!r}; did you mean `mr2 sweep status "
                                 f"{args.target}` or `mr2 sweep report {args.target}`?")
        if (args.spec is None) == (args.preset is None):
            raise SweepSpecError("give a sweep file or --preset NAME (one of them).")
        source = preset_path(args.preset) if args.preset is not None else Path(args.spec)
        raw = load_yaml(source)
        if isinstance(raw.get("base_config"), str) and not Path(raw["base_config"]).is_absolute():
            raw["base_config"] = str(source.parent / raw["base_config"])
        data = _apply_arguments(raw, args)
        spec = spec_from_dict(data, source=source, default_name=args.preset or source.stem)
        if args.dry_run:
            print(describe_plan(spec, prepare_sweep(spec)))
            return 0
        result = run_sweep(spec, report=not args.no_report, plots=False if args.no_plots else None,
                           wait=not args.no_wait)
    except (ConfigError, SweepSpecError) as error:
        print(f"mr2 sweep: error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as error:  # disk full, permissions changed mid-sweep: checked upfront where possible
        print(f"mr2 sweep: error: {_os_error(error)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except SweepInterrupted as interrupt:
        print(f"\nmr2 sweep: interrupted ({interrupt}); its trainers were stopped; run the same command "
              "again to resume.", file=sys.stderr)
        return 128 + interrupt.signum
    if result.report is not None:
        print()
        print(comparison_markdown(result.report.output.comparison))
        print(f"Report: {result.report.markdown_path}")
    if args.no_wait and spec.launcher.name == "slurm":
        return 0 if not result.failed else EXIT_FAILED_RUNS
    return 0 if result.ok else EXIT_FAILED_RUNS


def _os_error(error: OSError) -> str:
    """An operating-system error as one line: what failed, on which file."""
    where = f" ({error.filename})" if error.filename else ""
    return f"{error.strerror or error}{where}"


def _status(sweep_dir: Path) -> int:
    """``mr2 sweep status DIR``: 0; 2 when DIR is not a sweep directory. Imports no torch."""
    from mr2.sweep.spec import SweepSpecError
    from mr2.sweep.status import status_table, sweep_status

    try:
        print(status_table(sweep_status(sweep_dir)))
    except SweepSpecError as error:
        print(f"mr2 sweep: error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return 0


def _report(sweep_dir: Path, args: argparse.Namespace) -> int:
    """``mr2 sweep report DIR``: 0 written; 1 no report (no finished reference run); 2 when DIR is
    not a sweep directory."""
    from mr2.report.exceptions import ReportError
    from mr2.report.tables import comparison_markdown
    from mr2.sweep import SweepSpecError, plan_sweep, write_sweep_report
    from mr2.sweep.selection import SelectionError
    from mr2.sweep.status import load_sweep

    try:
        spec = load_sweep(sweep_dir)
        points = plan_sweep(spec)
    except SweepSpecError as error:
        print(f"mr2 sweep: error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    missing = [p.name for p in points if not p.directory.is_finished]
    try:
        report = write_sweep_report(spec, points, plots=False if args.no_plots else None)
    except (ReportError, SelectionError) as error:
        print(f"mr2 sweep report: no report: {error}", file=sys.stderr)
        return EXIT_FAILED_RUNS
    print(comparison_markdown(report.output.comparison))
    if missing:
        print(f"\n{len(missing)} of {len(points)} run(s) not finished, left out: {', '.join(missing)}")
    print(f"Report: {report.markdown_path}")
    return 0
