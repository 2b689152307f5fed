"""``mr2 demo`` (what ``make demo`` runs): ERM against MR2 on Fashion-MNIST, a real comparison.

It runs the ``demo`` preset (``src/mr2/presets/demo.yaml``: the reference CPU protocol's small CNN;
ERM, ``mr2``: ``MR2Loss()``'s default, the one README's quick start uses (distance temperature
T = d), and ``mr2_paper``: the paper's formula (T = 1), one seed each, two runs in parallel) as a
sweep into ``runs/demo``, then prints the
comparison table (overall, easy / medium / hard tiers ranked by ERM, worst class) and the paths of
the report and its plots. Running it again reuses the finished runs (and resumes interrupted ones).

Fashion-MNIST is looked for in the Debian package's location (``/usr/share/datasets/fashion-mnist``,
installed by ``make data`` as root where apt exists), then in ``data/fashion-mnist``; if it is in
neither, torchvision downloads it into ``data/fashion-mnist`` where there is internet. Otherwise the
demo stops with a message saying how to obtain it.
"""

from __future__ import annotations

import argparse
import math
import socket
import sys
from pathlib import Path
from typing import Any

#: Where the demo downloads Fashion-MNIST when the Debian package is absent.
LOCAL_DATA_ROOT = Path("data") / "fashion-mnist"
#: The Debian package's location (``mr2.data.fashion_mnist.DEFAULT_FASHION_MNIST_ROOT``, spelled out
#: here so that ``mr2 demo --help`` imports no torch).
DEBIAN_DATA_ROOT = Path("/usr/share/datasets/fashion-mnist")
FULL_PROTOCOL_PRESET = "fashion-mnist"
DOWNLOAD_TIMEOUT_S = 30.0
_DATA_UNAVAILABLE = (
    "mr2 demo: Fashion-MNIST is not available.\n"
    "  {problem}\n"
    "Get it in one of these ways, then run `make demo` (or `mr2 demo`) again:\n"
    "  - Debian/Ubuntu: `sudo make data` (or `sudo apt-get install dataset-fashion-mnist`), which\n"
    "    installs the files into /usr/share/datasets/fashion-mnist;\n"
    "  - with internet access: `mr2 demo` downloads them with torchvision into {local}\n"
    "    (this attempt failed: {download_error});\n"
    "  - by hand: put train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz,\n"
    "    t10k-images-idx3-ubyte.gz and t10k-labels-idx1-ubyte.gz into {local}\n"
    "    (or pass --data-root DIR)."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``demo`` subcommand's arguments to ``parser``."""
    parser.add_argument("--output-dir", default="runs", metavar="DIR",
                        help="where the demo's sweep directory goes (default: runs -> runs/demo)")
    parser.add_argument("--data-root", metavar="DIR",
                        help=f"directory holding the Fashion-MNIST IDX files (default: {DEBIAN_DATA_ROOT}, "
                        f"then {LOCAL_DATA_ROOT}, else downloaded into {LOCAL_DATA_ROOT})")
    parser.add_argument("--no-download", action="store_true",
                        help="never download Fashion-MNIST (fail with instructions instead)")
    parser.add_argument("--workers", type=int, metavar="N",
                        help="runs in parallel (default: the preset's, 2)")
    parser.add_argument("--epochs", type=int, metavar="E",
                        help="training epochs (default: the preset's; a different value starts new runs)")


def _locate_data(args: argparse.Namespace, out: Any) -> tuple[str | None, str]:
    """The data root to use (None: the Debian default), or ("", message) when there is none."""
    from mr2.data.errors import DatasetError
    from mr2.data.fashion_mnist import find_fashion_mnist_files

    if args.data_root is not None:
        try:
            find_fashion_mnist_files(args.data_root)
        except DatasetError as error:
            return "", _DATA_UNAVAILABLE.format(
                problem=error, local=args.data_root, download_error="not attempted with --data-root"
            )
        return args.data_root, ""
    try:
        find_fashion_mnist_files(None)
        return None, ""
    except DatasetError as error:
        problem = str(error)
    try:
        find_fashion_mnist_files(LOCAL_DATA_ROOT)
        return str(LOCAL_DATA_ROOT), ""
    except DatasetError:
        pass
    if args.no_download:
        return "", _DATA_UNAVAILABLE.format(problem=problem, local=LOCAL_DATA_ROOT,
                                           download_error="disabled by --no-download")
    print(f"Fashion-MNIST not found; downloading it with torchvision into {LOCAL_DATA_ROOT} ...",
          file=out, flush=True)
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(DOWNLOAD_TIMEOUT_S)
    try:
        from torchvision.datasets import FashionMNIST

        for train in (True, False):
            FashionMNIST(str(LOCAL_DATA_ROOT), train=train, download=True)
        find_fashion_mnist_files(LOCAL_DATA_ROOT)
    except Exception as error:
        return "", _DATA_UNAVAILABLE.format(problem=problem, local=LOCAL_DATA_ROOT,
                                           download_error=f"{type(error).__name__}: {error}")
    finally:
        socket.setdefaulttimeout(previous)
    return str(LOCAL_DATA_ROOT), ""


#: How the header names the preset's entries.
_DEMO_NAMES = {"erm": "ERM", "mr2": "MR2Loss() (default, T = d)", "mr2_paper": "the paper's MR2 (T = 1)"}
#: Printed under the table: which row is which loss, and where the real answer comes from.
DEMO_LEGEND = (
    "mr2: MR2Loss(num_classes=10), the default README's quick start uses (distance temperature T = d, "
    "c_bar 1, lambda_rep 0.1); mr2_paper: the paper's formula, MR2Loss.from_variant(\"paper\", 10) "
    "(T = 1). One seed shows little: BENCHMARKS.md has 5-seed numbers and the regime map, and "
    "`mr2 tune` (README: \"Find out whether it helps you\") chooses on your own validation data."
)


def _cell(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{100 * value:.2f}"


def comparison_table(comparison: Any) -> str:
    """Overall, tier and worst-class accuracy per method (%, mean over seeds), and the difference
    of every method to the reference, as an aligned text table."""
    tier_keys = [(f"tier:{name}", name) for name in comparison.tiers.names]
    columns = [("overall", "overall"), *tier_keys, ("group_min", "worst class")]
    header = ["method", *(label for _, label in columns), "(which)"]
    rows = []
    reference = comparison.methods[0]
    class_names = reference.runs[0].class_names
    for summary in comparison.methods:
        worst = int(summary.per_class_mean.argmin()) if summary.per_class_mean.size else -1
        name = class_names[worst] if class_names is not None and worst >= 0 else str(worst)
        rows.append([summary.method, *(_cell(summary.mean[key]) for key, _ in columns), name])
    for summary in comparison.methods[1:]:
        cells = []
        for key, _ in columns:
            diff = summary.difference[key]
            cells.append("n/a" if math.isnan(diff) else f"{100 * diff:+.2f}")
        rows.append([f"{summary.method} - {reference.method}", *cells, ""])
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    lines = []
    for row in [header, *rows]:
        cells = [str(row[0]).ljust(widths[0])]
        cells += [str(c).rjust(w) for c, w in zip(row[1:-1], widths[1:-1], strict=True)]
        cells.append(str(row[-1]).ljust(widths[-1]))
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Run the demo sweep and print the table. 0: done; 1: a run failed; 2: no data / bad input."""
    from mr2.config.paths import set_dotted
    from mr2.sweep import SweepInterrupted, SweepSpecError, load_preset, run_sweep

    out = sys.stdout
    root, problem = _locate_data(args, out)
    if problem:
        print(problem, file=sys.stderr)
        return 2
    try:
        spec = load_preset("demo")
    except SweepSpecError as error:
        print(f"mr2 demo: error: {error}", file=sys.stderr)
        return 2
    spec.output_dir = args.output_dir
    if root is not None:
        set_dotted(spec.base, "data.root", root)
    if args.epochs is not None:
        set_dotted(spec.base, "optim.epochs", args.epochs)
    if args.workers is not None:
        spec.workers = max(1, args.workers)
    methods = " vs ".join(_DEMO_NAMES.get(entry.label, entry.label) for entry in spec.methods)
    epochs = spec.base["optim"]["epochs"]
    print(
        f"mr2 demo: {methods} on Fashion-MNIST ({epochs} epoch{'s' if epochs != 1 else ''}, seed "
        f"{', '.join(map(str, spec.seeds))}), {spec.workers} run(s) in parallel -> {spec.sweep_dir}",
        file=out,
        flush=True,
    )
    try:
        result = run_sweep(spec, stream=out, status_every=20.0)
    except SweepSpecError as error:
        print(f"mr2 demo: error: {error}", file=sys.stderr)
        return 2
    except SweepInterrupted:
        print("\nmr2 demo: interrupted; run it again to resume.", file=sys.stderr)
        return 130
    if result.report is None:
        return 1
    comparison = result.report.output.comparison
    print(
        "\nTest accuracy in % (tiers: the classes ranked by ERM's accuracy and cut into thirds; "
        "worst class: the lowest per-class accuracy):\n",
        file=out,
    )
    print(comparison_table(comparison), file=out)
    print(f"\n{DEMO_LEGEND}", file=out)
    print(f"\nReport: {result.report.markdown_path}", file=out)
    plots = result.report.plot_paths
    if plots:
        print("Plots:", file=out)
        for path in plots:
            print(f"  {path}", file=out)
    print(f"\n{full_protocol_line()}", file=out)
    return 0 if result.ok else 1


def full_protocol_line() -> str:
    """The closing line: the full protocol's preset, with its description (and measured duration)."""
    from mr2.sweep.presets import preset_descriptions

    description = preset_descriptions()[FULL_PROTOCOL_PRESET]
    return f"Full protocol, mr2 sweep --preset {FULL_PROTOCOL_PRESET}: {description}"
