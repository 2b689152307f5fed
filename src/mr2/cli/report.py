"""``mr2 report RUN_DIR... | --predictions FILE[=LABEL]...``: the class-wise disparity report.

Reads run directories (``config.yaml`` and ``final.json``, optionally ``metrics.jsonl``) or
predictions files of any classifier (:mod:`mr2.report.predictions`), prints the comparison table and
writes report.md, report.html, CSV/JSON files and plots to ``--out``. The work is done by
:func:`mr2.report.write_report`; this module only parses arguments.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from mr2.report.exceptions import ReportError
from mr2.report.limits import DEFAULT_MAX_ARRAY_BYTES, DEFAULT_MAX_CLASSES
from mr2.report.settings import ReportSettings

if TYPE_CHECKING:  # numpy: not imported by `mr2 report --help`
    from mr2.report.run_dir import RunRecord


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``report`` subcommand's arguments to ``parser``."""
    parser.add_argument(
        "run_dirs", nargs="*", metavar="RUN_DIR", help="run directories to report (or --predictions)"
    )
    parser.add_argument(
        "--predictions",
        nargs="+",
        metavar="FILE[=LABEL]",
        default=None,
        help="predictions files (.npz/.pt with y_true and y_pred or logits; .csv with y_true,y_pred "
        "or y_true and one score column per class), each optionally labelled METHOD or METHOD@SEED",
    )
    parser.add_argument(
        "--class-names",
        metavar="FILE",
        default=None,
        help="text file with one class name per line, in class-id order (with --predictions)",
    )
    parser.add_argument(
        "--max-classes",
        type=int,
        metavar="K",
        default=None,
        help="largest number of classes a predictions file may make (class ids below K; default: "
        f"{DEFAULT_MAX_CLASSES}); a stray huge class id is refused instead of allocating a K x K "
        "confusion matrix",
    )
    parser.add_argument(
        "--max-array-bytes",
        type=int,
        metavar="BYTES",
        default=None,
        help="most bytes the arrays of one predictions file may take once read, uncompressed "
        f"(default: {DEFAULT_MAX_ARRAY_BYTES:,}); checked from what the file declares before it is read",
    )
    parser.add_argument(
        "--reference",
        metavar="NAME",
        default=None,
        help="reference method: ranks the tiers and is compared against (default: the first run's)",
    )
    parser.add_argument(
        "--out", metavar="DIR", default="report", help="output directory (default: ./report)"
    )
    parser.add_argument(
        "--tiers",
        type=int,
        default=None,
        help="number of tiers (default: 3: easy/medium/hard; fewer when there are fewer classes)",
    )
    parser.add_argument(
        "--tier-source",
        choices=("test", "validation"),
        default="test",
        help="split of the reference runs that ranks the classes into tiers (default: test, the "
        "paper's protocol; validation avoids regression-to-the-mean bias)",
    )
    parser.add_argument(
        "--bottom-fraction",
        type=float,
        default=0.1,
        help="fraction of worst classes averaged in the 'bottom' column (default: 0.1)",
    )
    parser.add_argument(
        "--bootstrap",
        type=int,
        default=1000,
        metavar="B",
        help="bootstrap resamples per run for confidence intervals (0 disables; default: 1000)",
    )
    parser.add_argument(
        "--confidence", type=float, default=0.95, help="bootstrap interval coverage (default: 0.95)"
    )
    parser.add_argument("--seed", type=int, default=0, help="bootstrap seed (default: 0)")
    parser.add_argument(
        "--alpha", type=float, default=0.05, help="significance level marked in tables (default: 0.05)"
    )
    parser.add_argument("--no-plots", action="store_true", help="skip the figures")
    parser.add_argument("--no-html", action="store_true", help="skip report.html")


SOURCES_BOTH = "give run directories or --predictions files, not both"
SOURCES_NONE = "nothing to report: give run directories or --predictions FILE[=LABEL] ..."
_CLASS_NAMES_WITHOUT_PREDICTIONS = (
    "--class-names applies to --predictions files; run directories carry their class names"
)
MAX_CLASSES_WITHOUT_PREDICTIONS = (
    "--max-classes applies to --predictions files; run directories carry their class count"
)
MAX_ARRAY_BYTES_WITHOUT_PREDICTIONS = "--max-array-bytes applies to --predictions files"
SWEEP_VARIANTS = (
    "{first} and {other} are both method {method!r} with seed {seed!r}: labelled variants of the sweep "
    "in {sweep}, which `mr2 report` cannot tell apart (it groups run directories by method); "
    "run `mr2 sweep report {sweep}`, which reports each entry under its label"
)


def settings_from_args(args: argparse.Namespace) -> ReportSettings:
    """The report's settings from the parsed arguments."""
    return ReportSettings(
        reference=args.reference,
        num_tiers=args.tiers,
        tier_source=args.tier_source,
        bottom_fraction=args.bottom_fraction,
        alpha=args.alpha,
        bootstrap_resamples=args.bootstrap,
        confidence=args.confidence,
        seed=args.seed,
        plots=not args.no_plots,
        html=not args.no_html,
    )


def _in_a_sweep(run: RunRecord) -> bool:
    return run.path is not None and (run.path.parent / "sweep.json").is_file()


def _refuse_sweep_variants(runs: list[RunRecord]) -> None:
    """Two runs of one method and seed inside sweep directories are an entry and a labelled variant
    (``mr2_centered: {method.name: mr2}``): the sweep's report keeps them apart, this one cannot."""
    seen: dict[tuple[str, int | None], RunRecord] = {}
    for run in runs:
        first = seen.setdefault((run.method, run.seed), run)
        if first is not run and run.seed is not None and _in_a_sweep(first) and _in_a_sweep(run):
            assert run.path is not None
            raise ReportError(
                SWEEP_VARIANTS.format(
                    first=first.label,
                    other=run.label,
                    method=run.method,
                    seed=run.seed,
                    sweep=run.path.parent,
                )
            )


def _load(args: argparse.Namespace) -> list[RunRecord]:
    from mr2.report.predictions import load_predictions, read_class_names
    from mr2.report.run_dir import check_comparable, load_run

    if args.run_dirs and args.predictions:
        raise ReportError(SOURCES_BOTH)
    if args.predictions:
        limit = DEFAULT_MAX_CLASSES if args.max_classes is None else args.max_classes
        names = (
            read_class_names(args.class_names, max_classes=limit) if args.class_names is not None else None
        )
        array_bytes = DEFAULT_MAX_ARRAY_BYTES if args.max_array_bytes is None else args.max_array_bytes
        return load_predictions(
            args.predictions, class_names=names, max_classes=limit, max_array_bytes=array_bytes
        )
    if args.class_names is not None:
        raise ReportError(_CLASS_NAMES_WITHOUT_PREDICTIONS)
    if args.max_classes is not None:
        raise ReportError(MAX_CLASSES_WITHOUT_PREDICTIONS)
    if args.max_array_bytes is not None:
        raise ReportError(MAX_ARRAY_BYTES_WITHOUT_PREDICTIONS)
    if not args.run_dirs:
        raise ReportError(SOURCES_NONE)
    runs = [load_run(path) for path in args.run_dirs]
    _refuse_sweep_variants(runs)
    check_comparable(runs)
    return runs


def run(args: argparse.Namespace) -> int:
    """Build the report; print the table. Returns 0, or 2 with a message on bad input."""
    from mr2.report.tables import comparison_markdown
    from mr2.report.writer import write_report

    try:
        output = write_report(_load(args), args.out, settings_from_args(args))
    except ReportError as error:
        print(f"mr2 report: error: {error}", file=sys.stderr)
        return 2
    print(comparison_markdown(output.comparison))
    print(f"Report written to {args.out}/report.md ({len(output.files)} files).")
    return 0
