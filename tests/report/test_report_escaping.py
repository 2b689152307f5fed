"""What a report file shows of user text (method labels, run and class names, the data set) is
escaped: markdown and HTML markup in report.md / report.html, formula-leading cells in the CSV files
(OWASP's CSV-injection rule), while numbers stay numbers."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np
import pytest

from mr2.report import write_report
from mr2.report.csv_cells import csv_text
from mr2.report.run_dir import RunRecord
from mr2.report.tables import escape_markdown

HOSTILE = "**bold** [link](javascript:alert(1)) <script>x</script> a|b `code` _u_ ~s~ $m$ \\"
ESCAPED = (
    "\\*\\*bold\\*\\* \\[link\\](javascript:alert(1)) &lt;script&gt;x&lt;/script&gt; a\\|b \\`code\\` "
    "\\_u\\_ \\~s\\~ \\$m\\$ \\\\"
)
FORMULA = '=HYPERLINK("http://example.invalid","click")'
DDE = "-2+3+cmd|' /C calc'!A0"
NAMES = ["@SUM(A1)", "+1+1", "\tTab", "plain", "-0.5"]


def test_escape_markdown() -> None:
    assert escape_markdown(HOSTILE) == ESCAPED
    assert escape_markdown("line\nbreak\r\ttab") == "line break  tab"  # one table row stays one line
    assert escape_markdown("erm") == "erm"


@pytest.mark.parametrize(
    ("cell", "written"),
    [
        ("=1+2", "'=1+2"), ("+1+1", "'+1+1"), ("-2+3+cmd|' /C calc'!A0", "'-2+3+cmd|' /C calc'!A0"),
        ("@SUM(A1)", "'@SUM(A1)"), ("\tTab", "'\tTab"), ("\rx", "'\rx"), ("plain", "plain"), ("", ""),
        ("-0.5", "-0.5"), ("+3", "+3"), ("-1e-05", "-1e-05"), ("-inf", "-inf"), ("0.25", "0.25"),
        ("-", "'-"), ("-1-1", "'-1-1"),
    ],
)
def test_csv_text_prefixes_formula_cells_but_not_numbers(cell: str, written: str) -> None:
    assert csv_text(cell) == written


def _runs(names: list[str], methods: list[str], dataset: str) -> list[RunRecord]:
    k = len(names)
    good = np.diag(np.full(k, 4)).astype(np.int64)
    worse = good.copy()
    worse[0, 0], worse[0, 1] = 1, 3
    return [
        RunRecord(name=methods[0], method=methods[0], confusion=good, class_names=names, dataset=dataset),
        RunRecord(name=methods[1], method=methods[1], confusion=worse, class_names=names, dataset=dataset),
    ]


def test_report_md_and_html_escape_labels(tmp_path: Path) -> None:
    runs = _runs(["a", "b", "c"], [HOSTILE, "erm"], dataset="<b>data</b>")
    write_report(runs, tmp_path, bootstrap_resamples=0)
    markdown = (tmp_path / "report.md").read_text()
    assert "<script>" not in markdown and "[link](" not in markdown and "**bold**" not in markdown
    assert f"| {ESCAPED} |" in markdown  # the run list and the comparison tables
    assert f"Reference method: **{ESCAPED}**" in markdown
    assert f"![Per-class accuracy change vs {ESCAPED}]" in markdown
    assert "&lt;b&gt;data&lt;/b&gt;" in markdown and "<b>" not in markdown
    page = (tmp_path / "report.html").read_text()
    assert "<script>x" not in page and "<strong>bold</strong>" not in page and "<code>code</code>" not in page
    assert "<b>data" not in page
    assert "&lt;script&gt;x&lt;/script&gt;" in page
    assert "Reference method: <strong>**bold** [link](javascript:alert(1)) &lt;script&gt;" in page


def test_csv_files_prefix_formula_cells_and_keep_numbers(tmp_path: Path) -> None:
    write_report(_runs(NAMES, [FORMULA, DDE], dataset="toy"), tmp_path, bootstrap_resamples=0, plots=False)
    cells = {}
    for name in ("comparison.csv", "runs.csv", "per_class.csv"):
        cells[name] = list(csv.reader(io.StringIO((tmp_path / name).read_text())))
    methods = {row[0] for row in cells["comparison.csv"][1:]}
    assert methods == {"'" + FORMULA, "'" + DDE}
    assert {row[1] for row in cells["runs.csv"][1:]} == {"'" + FORMULA, "'" + DDE}
    per_class = cells["per_class.csv"]
    assert [row[1] for row in per_class[1:]] == ["'@SUM(A1)", "'+1+1", "'\tTab", "plain", "-0.5"]
    assert per_class[0][5:] == ["accuracy_" + FORMULA, "accuracy_" + DDE]  # not leading: left alone
    difference = [row for row in cells["comparison.csv"][1:] if row[0] == "'" + DDE and row[1] == "overall"]
    assert float(difference[0][5]) == pytest.approx(-3 / 20)  # a negative number stays a number
    for rows in cells.values():
        for row in rows:
            for cell in row:
                assert not cell or cell[0] not in "=+@\t\r" or cell.startswith("'")
                if cell.startswith("-"):
                    float(cell)  # a leading minus is only ever a number's


def test_diagnostics_csv_prefixes_class_names(tmp_path: Path) -> None:
    (run, _) = _runs(NAMES, ["mr2", "erm"], dataset="toy")
    run.class_statistics = {"temperatures": np.array([1.0, -2.0, 3.0, 4.0, 5.0])}
    write_report([run], tmp_path, bootstrap_resamples=0, plots=False)
    rows = list(csv.reader(io.StringIO((tmp_path / "diagnostics" / "mr2.csv").read_text())))
    assert [row[1] for row in rows[1:]] == ["'@SUM(A1)", "'+1+1", "'\tTab", "plain", "-0.5"]
    temperatures = [row[rows[0].index("temperatures")] for row in rows[1:]]
    assert temperatures == ["1.0", "-2.0", "3.0", "4.0", "5.0"]
