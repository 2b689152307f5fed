"""The tune's picture (``tune.html`` and its PNGs beside ``recommendation.json``): its numbers against
oracles written out here, a ``mr2 tune --command`` run that writes it (with class names), its
confirmation report's plots and per-class row order, and the page in headless Chromium."""

from __future__ import annotations

import base64
import json
import math
import re
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from helpers.tune_command import COMMAND
from mr2.cli.main import main
from mr2.tune.design import Advice, Look
from mr2.tune.picture import picture_data, stage_sizes, write_picture
from mr2.tune.selection import ValidationFigures
from mr2.tune.verdict import SeedFigures

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "report"))
from cdp import HeadlessChromium, find_chromium

K = 6
NAMES = ["top", "trouser", "pullover", "dress", "coat", "sandal"]
CHROMIUM = find_chromium()


def _figures(label: str, seed: int, overall: float) -> ValidationFigures:
    return ValidationFigures(f"{label}@{seed}", seed, overall, (0.9, 0.8, overall - 0.2, 0.95, 0.97, 0.99))


def test_the_race_and_the_looks_against_oracles(tmp_path):
    """Criterion ``overall``: a stage's score is the plain mean of the overall accuracies over the stage's
    seeds and its ± the seed SE (std ddof 1 / sqrt(n)); a look's interval is mean ± t_{0.975} SE and its
    boundary the mean at which the one-sided p equals the look's level."""
    seeds = [0, 1, 2]
    values = {"erm": [0.70, 0.72, 0.71], "a": [0.75, 0.74, 0.77], "b": [0.60], "c": [0.73, 0.70, 0.72]}
    validation = {label: {s: _figures(label, s, v) for s, v in zip(seeds, vs)} for label, vs in values.items()}
    attempted = {(label, s) for label, runs in validation.items() for s in runs}
    ref = {3: SeedFigures(0.50, 0.7), 4: SeedFigures(0.52, 0.7), 5: SeedFigures(0.49, 0.7)}
    new = {3: SeedFigures(0.53, 0.7), 4: SeedFigures(0.52, 0.7), 5: SeedFigures(0.55, 0.7)}
    level = 0.0025
    t_own = 0.03 / (np.std([0.03, 0.0, 0.06], ddof=1) / math.sqrt(3))
    looks = [Look("a", 0, [3, 4, 5], 0.03, t_own, float(stats.t.sf(t_own, 2)), level, False, "stop"),
             Look("c", 0, [3, 4, 5], 0.03, t_own, float(stats.t.sf(t_own, 2)), level, False, "stop")]
    advice = Advice(False, "erm", "a", None, looks, "inconclusive", ["a", "c"], {"b": "dropped"})
    per_class = {label: {s: np.linspace(0.5, 1.0, K) + (0.01 * s if label != "erm" else 0) for s in (3, 4, 5)}
                 for label in ("erm", "a", "c")}
    picture = picture_data(title="t", advice_line="KEEP ERM", advice=advice, reference="erm", criterion="overall",
                           selection_seeds=seeds, selection_looks=(1, 3), validation=validation,
                           attempted=attempted, test={"erm": ref, "a": new, "c": new}, per_class=per_class,
                           num_classes=K, class_names=NAMES, hard_classes=[0, 1])
    assert stage_sizes((1, 3), 3) == [1, 3]
    first, last = picture.stages
    assert [e.label for e in first.entries] == ["erm", "a", "c", "b"]  # ERM first, then best first
    erm = first.entries[0]
    assert erm.mean == pytest.approx(np.mean([0.70, 0.72])) and erm.seeds == [0, 1]
    assert erm.se == pytest.approx(np.std([0.70, 0.72], ddof=1) / math.sqrt(2))
    assert all(math.isnan(e.se) for e in first.entries[1:])  # one seed: no interval
    assert {e.label: e.went_on for e in first.entries} == {"erm": True, "a": True, "c": True, "b": False}
    assert [e.label for e in last.entries] == ["erm", "a", "c"]
    for entry in last.entries:
        assert entry.mean == pytest.approx(np.mean(values[entry.label]))
        assert entry.se == pytest.approx(np.std(values[entry.label], ddof=1) / math.sqrt(3))
    diffs = np.array([0.03, 0.0, 0.06])
    for point in picture.looks:
        se = diffs.std(ddof=1) / math.sqrt(3)
        assert point.mean == pytest.approx(diffs.mean()) and point.se == pytest.approx(se)
        assert point.high - point.mean == pytest.approx(stats.t.ppf(0.975, 2) * se)
        assert stats.t.sf(point.needed / se, 2) == pytest.approx(level)
        assert (point.mean > point.needed) == (stats.t.sf(point.mean / se, 2) < level)
    # Per class: hardest first on ERM's validation accuracy (class 2 at about 0.5 first).
    assert picture.order == [2, 1, 0, 3, 4, 5]
    assert picture.ranking[2] == pytest.approx(np.mean([0.50, 0.52, 0.51]))
    assert picture.changes[0].change[:3] == pytest.approx([0.04] * 3)  # mean of 0.03, 0.04, 0.05
    page = write_picture(tmp_path, picture)
    text = page.read_text()
    for name in ("tune-race.png", "tune-confirmation.png", "tune-classes.png"):
        assert (tmp_path / name).read_bytes().startswith(b"\x89PNG") and f"src='{name}'" in text
    assert "<b id='hard-tier'>top, trouser</b>" in text


@pytest.fixture(scope="module")
def tuned(tmp_path_factory) -> tuple[Path, str, int]:
    out = tmp_path_factory.mktemp("picture")
    names = out / "names.txt"
    names.write_text("\n".join(NAMES) + "\n")
    import contextlib
    import io

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        code = main(["tune", "--command", COMMAND, "--num-classes", str(K), "--class-names", str(names),
                     "--candidates", "quick", "--seeds", "2", "--confirm-seeds", "3", "--output-dir", str(out),
                     "--name", "c"])
    return out / "c", buffer.getvalue(), code


@pytest.mark.slow
def test_a_command_tune_writes_its_picture_with_class_names(tuned):
    directory, printed, code = tuned
    assert code == 0, printed
    record = json.loads((directory / "recommendation.json").read_text())
    page = directory / "tune.html"
    assert f"Picture: {page}" in printed
    text = page.read_text()
    hard = record["selection"]["hard_tier_classes"]
    assert f"<b id='hard-tier'>{', '.join(NAMES[k] for k in hard)}</b>" in text
    # The looks table holds the record's looks, in order.
    table = text[text.index('<table id="looks-table">'):]
    table = table[:table.index("</table>")]
    rows = re.findall(r"<tr><td>(\d+)</td><td>(\d+)</td><td>([^<]+)</td><td>([^<]+)</td>", table)
    looks = record["advice"]["looks"]
    assert [(int(a), int(b), c) for a, b, c, _ in rows] == [(x["look"] + 1, len(x["seeds"]), x["contender"])
                                                            for x in looks]
    assert [float(d) for *_, d in rows] == pytest.approx([100 * x["mean_difference"] for x in looks], abs=0.006)
    # The race's last stage: the contenders sent on are the record's.
    assert record["selection"]["sent_to_confirmation"] == record["advice"]["contenders"]
    assert "recommended" not in record["selection"] and "recommendation_is_reference" not in record["selection"]
    assert record["selection"]["candidates_against_erm"] == 3
    # The stand-in script is deterministic: logit_only is adopted on 3 fresh seeds.
    assert (record["confirmation"]["what_happened"], record["adopt"]) == ("adopted", True)
    # Printed: the hard classes by name, the header's count.
    assert "3 candidates against ERM" in printed.splitlines()[0]
    assert f"ranked on all of ERM's validation samples): {', '.join(f'{NAMES[k]} ({k})' for k in hard)}." in printed


def _erm_ranking(directory: Path) -> np.ndarray:
    """ERM's mean per-class accuracy the verdict's tiers were ranked on: over its screen runs on the
    test split (the reused selection seed's and the fresh screen seeds') when a screen ran, else over
    its selection runs on validation."""
    advice = json.loads((directory / "recommendation.json").read_text())["advice"]
    if advice["screen_seeds"]:
        paths = [directory / "trials" / "selection" / "erm" / f"seed={s}" / "test.npz"
                 for s in advice["reused_seeds"]]
        paths += [directory / "trials" / "confirmation" / "erm" / f"seed={s}" / "test.npz"
                  for s in advice["screen_seeds"]]
    else:
        paths = sorted((directory / "trials" / "selection" / "erm").glob("seed=*/val.npz"))
    rows = []
    for path in paths:
        with np.load(path) as data:
            y, p = data["y_true"], data["y_pred"]
        rows.append([float(np.mean(p[y == k] == k)) for k in range(K)])
    return np.mean(np.array(rows, dtype=np.float64), axis=0)


@pytest.mark.slow
def test_the_confirmation_report_has_plots_and_its_rows_run_hardest_first(tuned):
    """Its report.md says the per-class rows run hardest first: they do, on the ranking the verdict's
    tiers come from (the default design screens on a pool of 3: ERM's mean test accuracy over its
    screen runs, the reused selection seed's among them), shown, not n/a."""
    directory = tuned[0]
    report = directory / "confirmation" / "report"
    assert sorted(p.name for p in (report / "plots").glob("*.png"))
    md = (report / "report.md").read_text()
    assert "from the hardest" in md
    section = md[md.index("| class | name |"):]
    rows = [line for line in section.splitlines()[2:] if line.startswith("|")][:K]
    ids = [int(line.strip("|").split("|")[0]) for line in rows]
    ranking = _erm_ranking(directory)
    assert sorted(ids) == list(range(K))
    shown = [float(line.strip("|").split("|")[4]) for line in rows]
    assert shown == pytest.approx([100 * ranking[k] for k in ids], abs=0.006)
    assert shown == sorted(shown) and len(set(np.round(ranking, 6))) > 1
    assert [line.strip("|").split("|")[1].strip() for line in rows] == [NAMES[k] for k in ids]


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium binary on PATH (apt-get install chromium)")
def test_the_picture_in_headless_chromium(tuned, tmp_path):
    directory = tuned[0]
    page = directory / "tune.html"
    record = json.loads((directory / "recommendation.json").read_text())
    assert CHROMIUM is not None
    with HeadlessChromium(CHROMIUM, tmp_path / "profile") as browser:
        browser.call("Emulation.setDeviceMetricsOverride",
                     {"width": 1280, "height": 900, "deviceScaleFactor": 1, "mobile": False})
        browser.call("Page.navigate", {"url": page.as_uri()})
        browser.wait_for("Page.loadEventFired")
        assert browser.evaluate("document.title") == "mr2 tune c: 3 candidates against ERM"
        images = browser.evaluate("Array.from(document.images).map(function (i) {"
                                  " return [i.id, i.complete, i.naturalWidth]; })")
        expected = ["race", "confirmation", "classes"] if record["advice"]["looks"] else ["race"]
        assert [i[0] for i in images] == expected
        assert all(complete and width > 300 for _, complete, width in images)
        hard = [NAMES[k] for k in record["selection"]["hard_tier_classes"]]
        assert browser.evaluate("document.getElementById('hard-tier').textContent") == ", ".join(hard)
        classes = browser.evaluate("Array.from(document.querySelectorAll('#classes-table tbody tr'))"
                                   ".map(function (r) { return r.cells[0].textContent; })")
        assert sorted(classes) == sorted(NAMES)
        looks = browser.evaluate("document.querySelectorAll('#looks-table tbody tr').length")
        assert looks == len(record["advice"]["looks"])
        assert browser.evaluate("document.documentElement.scrollWidth") <= 1280
        metrics = browser.call("Page.getLayoutMetrics")["cssContentSize"]
        shot = browser.call("Page.captureScreenshot", {
            "format": "png", "captureBeyondViewport": True,
            "clip": {"x": 0, "y": 0, "width": metrics["width"], "height": metrics["height"], "scale": 1}})
        png = base64.b64decode(shot["data"])
        assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 50_000
        (tmp_path / "tune.png").write_bytes(png)
        bad = [e for e in browser.events if e.get("method") in ("Runtime.exceptionThrown",)
               or (e.get("method") == "Log.entryAdded" and e["params"]["entry"].get("level") == "error")]
        assert bad == []


def test_a_look_whose_test_used_another_spread_is_drawn_from_its_own_t_and_p():
    """A look whose t came from a spread pooled over the contenders (more degrees of freedom than
    n - 1): its standard error is mean / t and its boundary the mean at which its p-value (same t
    distribution) equals the look's level."""
    ref = {3: SeedFigures(0.50, 0.7), 4: SeedFigures(0.52, 0.7), 5: SeedFigures(0.49, 0.7)}
    new = {3: SeedFigures(0.53, 0.7), 4: SeedFigures(0.52, 0.7), 5: SeedFigures(0.55, 0.7)}
    se, df, level = 0.004, 12, 0.0015
    t = 0.03 / se
    look = Look("a", 0, [3, 4, 5], 0.03, t, float(stats.t.sf(t, df)), level, False, "adopt")
    advice = Advice(True, "a", "a", None, [look], "confirmed", ["a"])
    validation = {label: {s: _figures(label, s, 0.7) for s in (0, 1)} for label in ("erm", "a")}
    picture = picture_data(title="t", advice_line="ADOPT a", advice=advice, reference="erm", criterion="overall",
                           selection_seeds=[0, 1], selection_looks=None, validation=validation,
                           attempted=set(), test={"erm": ref, "a": new}, per_class={}, num_classes=K,
                           class_names=None, hard_classes=[0])
    [point] = picture.looks
    assert point.se == pytest.approx(se)
    assert point.needed == pytest.approx(stats.t.isf(level, df) * se, rel=1e-6)
    assert point.high - point.mean == pytest.approx(stats.t.ppf(0.975, df) * se, rel=1e-6)
    assert point.mean > point.needed  # adopted: above its boundary
    assert picture.class_names == [str(k) for k in range(K)]
