"""Child process of test_fuzz_predictions.py: feeds the generated bad inputs to the predictions reader
and to ``mr2 report --predictions`` under an address-space limit, and records what each raised.

Usage: ``python fuzz_predictions_worker.py MANIFEST RESULTS HEADROOM_BYTES``. The limit is set after the
imports (torch alone maps about 3 GB of address space at import): the current address-space size plus
``HEADROOM_BYTES``, so a runaway allocation fails with MemoryError instead of exhausting the machine.
"""

from __future__ import annotations

import contextlib
import io
import json
import resource
import sys
import traceback
import warnings
from pathlib import Path
from typing import Any

from mr2.cli.main import main as cli_main
from mr2.report.exceptions import ReportError
from mr2.report.predictions import load_predictions, read_class_names, read_predictions


def address_space_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize in /proc/self/status")


def run_case(case: dict[str, Any]) -> dict[str, Any]:
    """What one case did, with every warning it emitted (a user sees those on stderr too)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = _run(case)
    result["warnings"] = [f"{w.category.__name__}: {w.message}" for w in caught]
    return result


def _run(case: dict[str, Any]) -> dict[str, Any]:
    kind = case["kind"]
    try:
        if kind == "read":
            read_predictions(case["path"])
        elif kind == "load":
            names = read_class_names(case["class_names"]) if case.get("class_names") else None
            load_predictions(case["specs"], class_names=names)
        else:
            err = io.StringIO()
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                code = cli_main(["report", "--predictions", *case["specs"], *case.get("extra", []),
                                 "--out", case["out"], "--bootstrap", "0", "--no-plots"])
            return {"outcome": "exit", "code": code, "stderr": err.getvalue(),
                    "out_exists": Path(case["out"]).exists()}
    except ReportError as error:
        return {"outcome": "user_error", "type": type(error).__name__, "message": str(error)}
    except BaseException as error:  # every other outcome is what the test reports
        return {"outcome": "crash", "type": type(error).__name__, "traceback": traceback.format_exc()[-1500:]}
    return {"outcome": "accepted"}


def main() -> None:
    manifest, results_path, headroom = sys.argv[1], sys.argv[2], int(sys.argv[3])
    cases = json.loads(Path(manifest).read_text())
    limit = address_space_bytes() + headroom
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    results = {case["id"]: run_case(case) for case in cases}
    Path(results_path).write_text(json.dumps({"limit": limit, "results": results}))


if __name__ == "__main__":
    main()
