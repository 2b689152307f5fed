"""Issue 45 items 3 and 8 on tune's confirmation report (built by the same report code): a degenerate
confirmation run is named in the printed output and the report, and the confirmation's per-class
figures come as a DataFrame from the tune's result and from its directory."""

from __future__ import annotations

import io
import json
import zlib

import numpy as np
import pytest

from mr2.report.degenerate import DEGENERATE_MARK
from mr2.tune import Candidate, Predictions, TrialPredictions, tune

K = 6
PER_CLASS = 60
NAMES = [f"c{k}" for k in range(K)]
Y_VAL = np.repeat(np.arange(K), PER_CLASS)
Y_TEST = np.repeat(np.arange(K), PER_CLASS)[::-1].copy()
BASE = np.array([0.95, 0.9, 0.85, 0.6, 0.5, 0.4])
#: ERM's confirmation seed that never left chance: it predicts class 2 for every test sample.
STUCK_SEED = 4


def _predict(y: np.ndarray, label: str, seed: int, split: str) -> np.ndarray:
    if label == "erm" and seed == STUCK_SEED and split == "test":
        return np.full_like(y, 2)
    rng = np.random.default_rng([zlib.crc32(label.encode()), seed, len(split)])
    return np.where(rng.random(y.size) < BASE[y], y, (y + 1) % K)


def simulated(candidate: Candidate, seed: int) -> TrialPredictions:
    return TrialPredictions(val=Predictions(Y_VAL, y_pred=_predict(Y_VAL, candidate.label, seed, "val")),
                            test={"y_true": Y_TEST, "y_pred": _predict(Y_TEST, candidate.label, seed, "test")})


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    out = tmp_path_factory.mktemp("tune")
    stream = io.StringIO()
    result = tune(simulated, num_classes=K, candidates="erm,mr2-logit_only-c1", seeds=3, confirm_seeds=3,
                  output_dir=out, name="stuck", class_names=NAMES, stream=stream)
    return out / "stuck", result, stream.getvalue()


def test_the_confirmation_names_a_degenerate_run(tuned) -> None:
    _, result, printed = tuned
    assert result.report_dir is not None
    reason = f"erm@{STUCK_SEED} predicts class 2 (c2) for every sample"
    markdown = (result.report_dir / "report.md").read_text()
    for text in (printed, markdown):
        assert reason in text and f"| erm {DEGENERATE_MARK} |" in text
    report = json.loads((result.report_dir / "report.json").read_text())
    assert report["methods"]["erm"]["flagged_runs"] == [f"erm@{STUCK_SEED}"]
    # Kept: ERM's mean over the confirmation seeds includes the stuck run.
    seeds = report["methods"]["erm"]["seeds"]
    assert STUCK_SEED in seeds
    accuracy = [float(np.mean(_predict(Y_TEST, "erm", s, "test") == Y_TEST)) for s in seeds]
    assert report["methods"]["erm"]["mean"]["overall"] == pytest.approx(np.mean(accuracy), abs=1e-15)


def test_the_confirmation_as_a_dataframe(tuned) -> None:
    pd = pytest.importorskip("pandas")
    from mr2.report import per_class_frame

    directory, result, _ = tuned
    frame = per_class_frame(result, runs=True)
    pd.testing.assert_frame_equal(per_class_frame(directory, runs=True), frame)
    assert list(frame.index) == NAMES
    report = json.loads((result.report_dir / "report.json").read_text())
    for method, item in report["methods"].items():
        per_seed = []
        for seed in item["seeds"]:
            y_pred = _predict(Y_TEST, method, seed, "test")
            # the slow way: count class by class
            row = []
            for k in range(K):
                hits = sum(1 for t, p in zip(Y_TEST, y_pred, strict=True) if t == k and p == k)
                row.append(hits / PER_CLASS)
            per_seed.append(row)
            assert frame[f"run {method}@{seed} accuracy"].tolist() == pytest.approx(row, abs=1e-15)
        assert frame[f"{method} accuracy"].tolist() == pytest.approx(np.mean(per_seed, axis=0), abs=1e-15)
        if method != "erm":
            change = np.mean(per_seed, axis=0) - frame["erm accuracy"].to_numpy()
            assert frame[f"{method} change vs erm"].tolist() == pytest.approx(change, abs=1e-15)
