"""ClasswiseDisparity (a torchmetrics Metric): equals a float64 oracle of plain loops over the samples
and DisparityReport.from_predictions, flattens for log_dict, and 2 gloo processes give what 1 process
gives."""

from __future__ import annotations

import math
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
from torchmetrics import Metric

from mr2.metrics import ClasswiseDisparity
from mr2.metrics import classwise_disparity as metric_module
from mr2.report import DisparityReport, TierSplit
from mr2.report.exceptions import MissingClassWarning, ReportError
from mr2.report.log_keys import LogKeyCollisionWarning


def batches(seed: int, num_samples: int, num_classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    target = torch.randint(0, num_classes, (num_samples,), generator=generator)
    logits = torch.randn(num_samples, num_classes, generator=generator)
    logits[torch.arange(num_samples), target] += 0.8
    return logits, target


def oracle(predicted: list[int], target: list[int], num_classes: int, *, bottom_fraction: float = 0.1,
           num_tiers: int = 3) -> dict:
    """The disparity summary by plain loops over the samples and classes, in float64 (Python floats):
    per-class accuracy (None for a class without samples), overall, worst / best class (lowest id among
    ties), difference, ratio, mean, std (ddof = 0), the mean of the ceil(f K') worst classes, and the
    tiers ranked by the run's own accuracy (descending, ties by id; np.array_split sizes)."""
    support = [0] * num_classes
    correct = [0] * num_classes
    for p, y in zip(predicted, target, strict=True):
        support[y] += 1
        correct[y] += int(p == y)
    by_class = [correct[k] / support[k] if support[k] else None for k in range(num_classes)]
    present = [k for k in range(num_classes) if support[k]]
    accs = [by_class[k] for k in present]
    worst = min(present, key=lambda k: (by_class[k], k))
    best = min(present, key=lambda k: (-by_class[k], k))
    mean = sum(accs) / len(accs)
    std = math.sqrt(sum((a - mean) ** 2 for a in accs) / len(accs))
    count = max(1, math.ceil(round(bottom_fraction * len(accs), 9)))
    ranked = sorted(present, key=lambda k: (-by_class[k], k))  # easiest first
    tiers = min(num_tiers, len(present))
    sizes = [len(ranked) // tiers + (1 if t < len(ranked) % tiers else 0) for t in range(tiers)]
    tier_accuracy, start = [], 0
    for size in sizes:
        members = ranked[start:start + size]
        tier_accuracy.append(sum(by_class[k] for k in members) / len(members))
        start += size
    return {
        "by_class": by_class,
        "overall": sum(correct) / sum(support),
        "worst_class": worst,
        "best_class": best,
        "group_min": by_class[worst],
        "group_max": by_class[best],
        "difference": by_class[best] - by_class[worst],
        "ratio": by_class[worst] / by_class[best],
        "mean_class_accuracy": mean,
        "std": std,
        "bottom_mean": sum(sorted(accs)[:count]) / count,
        "tier_accuracy": tier_accuracy,
    }


def row_argmax(row: list[float]) -> int:
    best = 0
    for k, value in enumerate(row):
        if value > row[best]:
            best = k
    return best


@pytest.mark.parametrize(("num_classes", "absent"), [(2, None), (7, 3), (10, None), (100, None)])
def test_equals_a_float64_oracle_of_loops_over_the_samples(num_classes: int, absent: int | None) -> None:
    logits, target = batches(num_classes + 7, 1500, num_classes)
    if absent is not None:  # a class without test samples: NaN, left out of every summary
        target[target == absent] = (absent + 1) % num_classes
    metric = ClasswiseDisparity(num_classes)
    for start in range(0, 1500, 64):  # logits in some batches, ids in others
        chunk = slice(start, start + 64)
        preds = logits[chunk] if start % 128 == 0 else logits[chunk].argmax(dim=1)
        metric.update(preds, target[chunk])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore" if absent is not None else "error", MissingClassWarning)
        report = metric.compute()
        logged = metric.to_log_dict()
    want = oracle([row_argmax(row) for row in logits.double().tolist()], target.tolist(), num_classes)
    close = {"rel": 1e-12, "abs": 1e-15}
    got_by_class = report.by_class.tolist()
    assert [math.isnan(a) for a in got_by_class] == [a is None for a in want["by_class"]]
    assert [a for a in got_by_class if not math.isnan(a)] == pytest.approx(
        [a for a in want["by_class"] if a is not None], **close
    )
    assert (report.worst_class(), report.best_class()) == (want["worst_class"], want["best_class"])
    assert report.ratio() == pytest.approx(want["ratio"], **close)
    assert list(report.tier_accuracy().values()) == pytest.approx(want["tier_accuracy"], **close)
    for name, key in (("overall", "overall"), ("worst_class_accuracy", "group_min"),
                      ("best_class_accuracy", "group_max"), ("difference", "difference"),
                      ("mean_class_accuracy", "mean_class_accuracy"), ("std", "std"),
                      ("bottom_mean", "bottom_mean")):
        assert logged[name] == pytest.approx(want[key], **close), name
    # The data is neither trivial nor hopeless: above chance, below perfect, classes unequal.
    assert 1.0 / num_classes < want["overall"] < 0.95 and want["difference"] > 0


def test_is_a_torchmetrics_metric_with_a_summed_confusion_state() -> None:
    metric = ClasswiseDisparity(4)
    assert isinstance(metric, Metric)
    assert metric._reductions["confusion"] is not None
    assert metric._defaults["confusion"].shape == (4, 4)
    assert metric._defaults["confusion"].dtype == torch.int64


@pytest.mark.parametrize("num_classes", [2, 10, 100])
def test_equals_from_predictions_exactly(num_classes: int) -> None:
    logits, target = batches(num_classes, 1500, num_classes)
    names = [f"class {k}" for k in range(num_classes)]
    metric = ClasswiseDisparity(num_classes, class_names=names)
    for start in range(0, 1500, 64):  # logits in some batches, ids in others
        chunk = slice(start, start + 64)
        preds = logits[chunk] if start % 128 == 0 else logits[chunk].argmax(dim=1)
        metric.update(preds, target[chunk])
    ours = metric.compute()
    expected = DisparityReport.from_predictions(logits, target, num_classes, class_names=names)
    np.testing.assert_array_equal(ours.confusion, expected.confusion)
    assert ours.to_dict() == expected.to_dict()


def test_to_log_dict_names_and_values() -> None:
    logits, target = batches(1, 400, 5)
    names = ["ant", "bee", "cat", "dog", "eel"]
    tiers = TierSplit.from_accuracy([0.9, 0.8, 0.7, 0.6, 0.5], 2)
    metric = ClasswiseDisparity(5, class_names=names, tiers=tiers)
    metric.update(logits, target)
    logged = metric.to_log_dict("val/")
    report = DisparityReport.from_predictions(logits, target, 5, tiers=tiers)
    assert all(isinstance(v, float) for v in logged.values())
    assert logged["val/overall"] == report.overall
    assert logged["val/worst_class_accuracy"] == report.group_min()
    assert logged["val/best_class_accuracy"] == report.group_max()
    assert logged["val/difference"] == report.difference()
    assert logged["val/bottom_mean"] == report.bottom_mean()
    assert logged["val/tier/easy"] == report.tier_accuracy()["easy"]
    assert logged["val/tier/hard"] == report.tier_accuracy()["hard"]
    for k, name in enumerate(names):
        assert logged[f"val/class_accuracy/{name}"] == report.by_class[k]
    assert len(logged) == 7 + 2 + 5
    # Without names the classes are logged by id; without tiers no tier is logged.
    plain = ClasswiseDisparity(5)
    plain.update(logits, target)
    assert "class_accuracy/4" in plain.to_log_dict() and not any("tier/" in k for k in plain.to_log_dict())


def test_absent_class_is_nan_and_reset_clears() -> None:
    metric = ClasswiseDisparity(3)
    metric.update(torch.tensor([0, 1, 1]), torch.tensor([0, 1, 0]))
    with pytest.warns(MissingClassWarning):
        logged = metric.to_log_dict()
    assert math.isnan(logged["class_accuracy/2"]) and logged["class_accuracy/0"] == 0.5
    metric.reset()
    assert int(metric.confusion.sum()) == 0
    metric.update(torch.tensor([2, 1, 0]), torch.tensor([2, 1, 0]))
    assert metric.compute().confusion.tolist() == [[1, 0, 0], [0, 1, 0], [0, 0, 1]]


def test_bad_arguments() -> None:
    with pytest.raises(ReportError) as info:
        ClasswiseDisparity(0)
    assert str(info.value) == metric_module.NUM_CLASSES_INVALID.format(value=0)
    with pytest.raises(ReportError) as info:
        ClasswiseDisparity(3, class_names=["a"])
    assert str(info.value) == metric_module.CLASS_NAMES_MISMATCH.format(num_names=1, num_classes=3)
    with pytest.raises(ReportError) as info:
        ClasswiseDisparity(3, tiers=TierSplit.from_accuracy([0.5, 0.4], 2))
    assert str(info.value) == metric_module.TIERS_MISMATCH.format(expected=2, actual=3)
    metric = ClasswiseDisparity(3)
    with pytest.raises(ReportError, match="class ids outside"):
        metric.update(torch.tensor([0, 3]), torch.tensor([0, 1]))


@pytest.mark.distributed
@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="gloo unavailable")
def test_two_processes_equal_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """torchmetrics' DDP pattern: each of 2 gloo ranks updates with its share; compute() on every
    rank equals one process that saw every sample."""
    import torch.multiprocessing as mp

    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    monkeypatch.setenv("PYTHONPATH", ":".join(p for p in sys.path if p))
    import dist_metric_worker as worker

    mp.spawn(worker.run, args=(2, str(tmp_path / "init"), str(tmp_path)), nprocs=2, join=True)
    logits, target = worker.data()
    single = ClasswiseDisparity(worker.NUM_CLASSES, class_names=worker.NAMES)
    single.update(logits, target)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", MissingClassWarning)
        expected = single.to_log_dict("test/")
        confusion = torch.as_tensor(single.compute().confusion)
    locals_ = []
    for rank in range(2):
        result = torch.load(tmp_path / f"rank{rank}.pt", weights_only=True)
        torch.testing.assert_close(result["confusion"], confusion, rtol=0, atol=0)
        assert result["log_names"] == list(expected)
        torch.testing.assert_close(
            result["log_values"], torch.tensor(list(expected.values()), dtype=torch.float64),
            rtol=0, atol=0, equal_nan=True,
        )
        locals_.append(result["local"])
    # Each rank's own state holds only its share: the sum is the whole, neither part is.
    torch.testing.assert_close(locals_[0] + locals_[1], confusion)
    assert int(locals_[0].sum()) == 102 and int(locals_[1].sum()) == 101


def test_num_classes_above_the_limit_is_refused_before_allocating() -> None:
    # 10**6 classes would be an 8 TB K x K state (32 TB at the peak): refused at construction, naming
    # the peak, the state and the limit, whatever the machine (max_bytes fixes the limit here).
    with pytest.raises(ReportError) as info:
        ClasswiseDisparity(10**6, max_bytes=10**12)
    assert str(info.value) == metric_module.NUM_CLASSES_TOO_LARGE.format(
        value=10**6, peak="32.0 TB", matrices=4, size="8.0 TB",
        limit=metric_module.LIMIT_GIVEN.format(value=10**12, size="1.0 TB"), remedy=metric_module.REMEDY_GIVEN,
    )
    for bad in (True, 2.0, "3", -1):
        with pytest.raises(ReportError) as info:
            ClasswiseDisparity(bad)  # type: ignore[arg-type]
        assert str(info.value) == metric_module.NUM_CLASSES_INVALID.format(value=bad)
    for bad in (0, -5, 1.5, "1e9", True):
        with pytest.raises(ReportError) as info:
            ClasswiseDisparity(3, max_bytes=bad)  # type: ignore[arg-type]
        assert str(info.value) == metric_module.MAX_BYTES_INVALID.format(value=bad)


def test_the_limit_is_the_peak_not_the_state() -> None:
    # K = 1000: a state of 8 MB, a peak of 32 MB. A limit between the two refuses it; the peak fits.
    assert metric_module.peak_bytes(1000) == 4 * 8 * 1000**2
    with pytest.raises(ReportError, match=r"would take 32\.0 MB of memory at its peak"):
        ClasswiseDisparity(1000, max_bytes=16 * 10**6)
    metric = ClasswiseDisparity(1000, max_bytes=32 * 10**6)
    assert metric.confusion.shape == (1000, 1000)


LIMITED_CHILD = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (4 * 2**30, 4 * 2**30))
from mr2.metrics import ClasswiseDisparity
from mr2.report.exceptions import ReportError
try:
    ClasswiseDisparity(int(sys.argv[1]))
except ReportError as error:
    print("refused", error)
"""

PEAK_CHILD = """
import resource, sys, warnings
import torch
from mr2.metrics import ClasswiseDisparity
warnings.simplefilter("ignore")  # the classes without samples
from pathlib import Path
k = int(sys.argv[1])
def high_water():
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
# Reset the high-water mark (Linux >= 4.0): the imports' transient peak (compiling .pyc files in a
# fresh virtual environment) would otherwise hide the metric's.
Path("/proc/self/clear_refs").write_text("5")
base = high_water()
metric = ClasswiseDisparity(k)
metric.update(torch.randint(0, k, (1000,)), torch.randint(0, k, (1000,)))
report = metric.compute()
metric.reset()  # the report held meanwhile: the state, its reset copy, the report's and the new state
print((high_water() - base) / (8 * k**2))
"""


def _child(code: str, *args: str) -> str:
    completed = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120, check=False
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    return completed.stdout


def test_a_k_that_cannot_fit_the_address_space_is_a_report_error() -> None:
    # Under a 4 GB address space (torch alone maps about 3 GB of it), K = 30,000 (7.2 GB of state,
    # 28.8 GB at the peak) is refused with the memory named, not a raw RuntimeError of the allocator.
    line = _child(LIMITED_CHILD, "30000")
    assert line.startswith("refused ClasswiseDisparity(30000) would take 28.8 GB of memory at its peak")
    assert "this process can allocate now" in line and "max_bytes=N" in line and line.count("\n") == 1


def test_the_stated_peak_is_what_the_metric_takes() -> None:
    # K = 3000 (a 72 MB state): construction, update, compute and reset while the report is held take
    # at most PEAK_MATRICES states, plus a fixed overhead that does not grow with K.
    peak = float(_child(PEAK_CHILD, "3000"))
    assert 2.5 < peak <= metric_module.PEAK_MATRICES + 0.5  # resident pages: 3.5 to 4.2 measured


@pytest.mark.parametrize("tiers", [0, 3, "easy", [0, 1, 2]])
def test_tiers_must_be_a_tier_split(tiers: object) -> None:
    with pytest.raises(ReportError) as info:
        ClasswiseDisparity(3, tiers=tiers)  # type: ignore[arg-type]
    assert str(info.value) == metric_module.TIERS_INVALID.format(kind=type(tiers).__name__)


def test_class_names_must_be_strings() -> None:
    with pytest.raises(ReportError) as info:
        ClasswiseDisparity(3, class_names="abc")
    assert str(info.value) == metric_module.CLASS_NAMES_INVALID.format(kind="str")
    with pytest.raises(ReportError) as info:
        ClasswiseDisparity(2, class_names=["a", 1])  # type: ignore[list-item]
    assert str(info.value) == metric_module.CLASS_NAMES_INVALID.format(kind="list holding int")


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_logits_are_refused(bad: float) -> None:
    # argmax of an all-NaN row is class 0: without the check, four such rows of class 0 would give
    # class 0 an accuracy of 1.0.
    metric = ClasswiseDisparity(3)
    logits = torch.zeros(4, 3)
    logits[:, 1] = 1.0
    logits[2] = bad
    with pytest.raises(ReportError) as info:
        metric.update(logits, torch.zeros(4, dtype=torch.long))
    assert str(info.value) == metric_module.LOGITS_NOT_FINITE.format(count=3)
    assert int(metric.confusion.sum()) == 0  # nothing counted


def test_all_nan_rows_are_refused_and_the_opt_out_documents_why() -> None:
    nan_rows = torch.full((4, 3), float("nan"))
    target = torch.zeros(4, dtype=torch.long)
    with pytest.raises(ReportError, match="non-finite"):
        ClasswiseDisparity(3).update(nan_rows, target)
    # validate_args=False skips the host sync, and then NaN rows count as class 0 (what it trades off).
    unchecked = ClasswiseDisparity(3, validate_args=False)
    unchecked.update(nan_rows, target)
    assert unchecked.confusion.tolist() == [[4, 0, 0], [0, 0, 0], [0, 0, 0]]
    with pytest.raises(ReportError) as info:
        ClasswiseDisparity(3, validate_args=1)  # type: ignore[arg-type]
    assert str(info.value) == metric_module.VALIDATE_ARGS_INVALID.format(value=1)


def test_update_takes_what_a_classifier_returns() -> None:
    logits, target = batches(3, 50, 4)
    features = torch.randn(50, 8)
    plain = ClasswiseDisparity(4)
    plain.update(logits, target)
    for output in ((logits, features), [logits, features], (logits,)):
        metric = ClasswiseDisparity(4)
        metric.update(output, target)
        assert metric.confusion.tolist() == plain.confusion.tolist()
    ids = ClasswiseDisparity(4)
    ids.update(logits.argmax(dim=1), target)
    assert ids.confusion.tolist() == plain.confusion.tolist()


@pytest.mark.parametrize(
    ("preds", "description"),
    [
        ((), "an empty tuple"),
        ([], "an empty list"),
        (("x", torch.zeros(3)), "a tuple whose first element is an object of type str"),
        ("logits", "an object of type str"),
        (None, "an object of type NoneType"),
        (np.zeros((3, 4)), "an object of type ndarray"),
        (torch.zeros(3, 4, dtype=torch.complex64), "a tensor of shape (3, 4) and dtype torch.complex64"),
        (torch.zeros(3, 4, dtype=torch.bool), "a tensor of shape (3, 4) and dtype torch.bool"),
    ],
)
def test_update_refuses_anything_else_naming_it(preds: object, description: str) -> None:
    metric = ClasswiseDisparity(4)
    with pytest.raises(ReportError) as info:
        metric.update(preds, torch.zeros(3, dtype=torch.long))  # type: ignore[arg-type]
    assert str(info.value) == metric_module.PREDS_INVALID.format(description=description)


def test_update_names_the_shapes_of_a_mismatch() -> None:
    metric = ClasswiseDisparity(4)
    with pytest.raises(ReportError, match=r"preds has shape \(3, 4, 2\)"):
        metric.update(torch.zeros(3, 4, 2), torch.zeros(3, dtype=torch.long))
    with pytest.raises(ReportError, match=r"got dtype torch\.float32"):
        metric.update(torch.zeros(3), torch.zeros(3, dtype=torch.long))
    with pytest.raises(ReportError) as info:
        metric.update(torch.zeros(3, 4), [0, 1, 2])  # type: ignore[arg-type]
    assert str(info.value) == metric_module.TARGET_INVALID.format(description="an object of type list")


def test_class_names_are_logged_with_the_log_key_spelling() -> None:
    # "T-shirt/top" must not add a level under class_accuracy/ (Lightning's log_dict, TensorBoard):
    # the same spelling as the engine's TensorBoard tags (mr2.report.log_keys).
    names = ["T-shirt/top", "sea lion", "T-shirt_top", ""]
    metric = ClasswiseDisparity(4, class_names=names, tiers=TierSplit.from_accuracy([0.4, 0.3, 0.2, 0.1], 4))
    metric.update(torch.tensor([0, 1, 2, 3, 0]), torch.tensor([0, 1, 2, 3, 1]))
    with pytest.warns(LogKeyCollisionWarning, match="'T-shirt_top' -> 'T-shirt_top_2'"):
        logged = metric.to_log_dict("val/")
    per_class = {k.removeprefix("val/class_accuracy/"): v for k, v in logged.items() if "class_accuracy/" in k}
    assert per_class == {"T-shirt_top": 1.0, "sea_lion": 0.5, "T-shirt_top_2": 1.0, "3": 1.0}
    assert {k for k in logged if "/tier/" in k} == {f"val/tier/tier_{t}" for t in range(1, 5)}
    assert all(k.count("/") == 2 for k in logged if "class_accuracy/" in k or "/tier/" in k)
