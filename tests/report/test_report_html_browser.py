"""report.html in a real browser: headless Chromium driven over the DevTools protocol (cdp.py).

Skips, saying why, where no Chromium binary is installed (`.ci/run` installs Debian's `chromium`).
"""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from cdp import HeadlessChromium, find_chromium

from mr2.report.run_dir import load_runs
from mr2.report.tables import format_percent
from mr2.report.writer import write_report

CHROMIUM = find_chromium()

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        CHROMIUM is None,
        reason="no Chromium binary on PATH (apt-get install chromium; .ci/run does it as root)",
    ),
]

ROWS_JS = """
Array.from(document.querySelectorAll('#per-class tbody tr')).map(function (row) {
  return Array.from(row.cells).map(function (cell) {
    return [cell.textContent, cell.getAttribute('data-value')];
  });
})
"""


def click_header(browser: HeadlessChromium, label: str) -> None:
    found = browser.evaluate(
        "(function () { var b = Array.from(document.querySelectorAll('#per-class thead button'))"
        f".find(function (x) {{ return x.textContent === {json.dumps(label)}; }});"
        " if (!b) { return false; } b.click(); return true; })()"
    )
    assert found, label


def errors_in(events: list[dict[str, Any]]) -> list[Any]:
    bad = []
    for event in events:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.exceptionThrown":
            bad.append(params["exceptionDetails"])
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert", "warning"):
            bad.append(params.get("args"))
        elif method == "Log.entryAdded" and params["entry"].get("level") in ("error", "warning"):
            bad.append(params["entry"])
    return bad


def test_report_html_in_headless_chromium(comparison_runs: list[Path], tmp_path: Path) -> None:
    out = tmp_path / "report"
    # Five tiers: the bootstrap table has 10 columns of intervals, wider than the page.
    write_report(load_runs(comparison_runs), out, bootstrap_resamples=50, num_tiers=5)
    page = out / "report.html"
    data = json.loads((out / "report.json").read_text())
    assert CHROMIUM is not None
    with HeadlessChromium(CHROMIUM, tmp_path / "profile") as browser:
        browser.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": False},
        )
        browser.call("Page.navigate", {"url": page.as_uri()})
        browser.wait_for("Page.loadEventFired")

        assert browser.evaluate("document.title").startswith("Class-wise disparity report")
        # Self-contained: the only request is the page itself (images are data: URLs).
        requests = [
            e["params"]["request"]["url"] for e in browser.events if e.get("method") == "Network.requestWillBeSent"
        ]
        assert [u for u in requests if not u.startswith("data:")] == [page.as_uri()]
        assert browser.evaluate("document.images.length") >= 5
        assert browser.evaluate("Array.from(document.images).every(function (i) { return i.complete && i.naturalWidth > 100; })")

        # The summary table holds report.json's means.
        summary = browser.evaluate(
            "Array.from(document.querySelectorAll('#summary tbody tr')).map(function (r) {"
            " return Array.from(r.cells).map(function (c) { return [c.textContent, c.getAttribute('data-value')]; }); })"
        )
        keys = [m["key"] for m in data["metrics"]]
        for row in summary:
            method = row[0][0]
            for (text, value), key in zip(row[2:], keys, strict=True):
                mean = data["methods"][method]["mean"][key]
                assert float(value) == mean, (method, key)
                assert text.startswith(format_percent(mean)), (method, key, text)

        # The per-class table holds report.json's per-class means, in class order before any sort.
        rows = browser.evaluate(ROWS_JS)
        methods = list(data["methods"])
        num_classes = len(data["methods"]["erm"]["per_class_mean"])
        tier_of = {k: name for name, members in data["tiers"]["members"].items() for k in members}
        assert [int(r[0][1]) for r in rows] == list(range(num_classes))
        for k, row in enumerate(rows):
            assert row[1][0] == f"class{k}"
            assert row[2][0] == "40" and row[3][0] == tier_of[k]
            # Tiers ranked on the test split: the ranking accuracy is the reference's mean accuracy.
            assert float(row[4][1]) == data["methods"]["erm"]["per_class_mean"][k]
            for offset, method in enumerate(methods):
                value = data["methods"][method]["per_class_mean"][k]
                assert float(row[5 + offset][1]) == value
                assert row[5 + offset][0] == format_percent(value)

        # Sorting by a method's accuracy reorders the rows: ascending, then descending.
        mr2 = data["methods"]["mr2"]["per_class_mean"]
        click_header(browser, "mr2 accuracy")
        ascending = [int(r[0][1]) for r in browser.evaluate(ROWS_JS)]
        assert ascending == sorted(range(num_classes), key=lambda k: mr2[k])
        assert ascending != list(range(num_classes))
        assert browser.evaluate("document.querySelector('#per-class th[aria-sort]').textContent") == "mr2 accuracy"
        click_header(browser, "mr2 accuracy")
        descending = [int(r[0][1]) for r in browser.evaluate(ROWS_JS)]
        assert descending == sorted(range(num_classes), key=lambda k: -mr2[k])
        click_header(browser, "class")
        assert [int(r[0][1]) for r in browser.evaluate(ROWS_JS)] == list(range(num_classes))
        click_header(browser, "tier")
        tiers = [r[3][0] for r in browser.evaluate(ROWS_JS)]
        assert tiers == sorted(tiers)

        # Nothing widens the page past the viewport: wide tables (the bootstrap intervals) scroll
        # sideways in their own box.
        assert browser.evaluate("document.documentElement.scrollWidth") <= 1280
        bootstrap_box = browser.evaluate(
            "(function () { var t = document.querySelector('#bootstrap');"
            " return [t.scrollWidth, t.parentElement.clientWidth, getComputedStyle(t.parentElement).overflowX]; })()"
        )
        assert bootstrap_box[2] == "auto" and bootstrap_box[0] > bootstrap_box[1]

        click_header(browser, "mr2 accuracy")  # leave the screenshot sorted
        metrics = browser.call("Page.getLayoutMetrics")["cssContentSize"]
        shot = browser.call(
            "Page.captureScreenshot",
            {
                "format": "png",
                "captureBeyondViewport": True,
                "clip": {"x": 0, "y": 0, "width": metrics["width"], "height": metrics["height"], "scale": 1},
            },
        )
        png = base64.b64decode(shot["data"])
        assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 50_000
        (tmp_path / "report.png").write_bytes(png)

        assert errors_in(browser.events) == []
