"""Fuzz-style test of the predictions reader: a few hundred generated bad inputs (wrong dtypes, NaN/Inf,
huge and negative ids, ragged CSV rows, empty files, binary garbage, huge headers, mismatched lengths,
bad npz keys, pickled object arrays, crafted array headers, bad class names and labels, compression
bombs: DEFLATE members, deflated .pt archives, list bombs of shared references, lists nested past
numpy's dimensions, long CSV cells), each bad by construction, deterministic (seeded).

They run in a child process (tests/report/fuzz_predictions_worker.py) under ``RLIMIT_AS`` = its address
space after importing torch (about 3 GB of mappings, little of it resident) plus 1.5 GB, with a timeout
against hangs. Each must end in the reader's user error (a ``ReportError``, one line, not an
allocation failure dressed as one); a subset goes through ``mr2 report --predictions`` and must exit 2
with one ``mr2 report: error:`` line on stderr and no output directory. Never a traceback, a hang or a
runaway allocation.
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from helpers.bombs import write_deep_pt, write_zero_npz

SEED = 22_08
HEADROOM = 1536 * 2**20  # bytes above the child's address space after its imports
WORKER = Path(__file__).with_name("fuzz_predictions_worker.py")

Writer = Callable[[Path], None]


class Cases:
    """Bad inputs written to a directory, and the manifest of calls the worker makes."""

    def __init__(self, root: Path, rng: np.random.Generator) -> None:
        self.root = root
        self.rng = rng
        self.cases: list[dict[str, Any]] = []
        self.count = 0

    def file(self, suffix: str, write: Writer) -> Path:
        self.count += 1
        path = self.root / f"f{self.count:04d}{suffix}"
        write(path)
        return path

    def read(self, tag: str, path: Path) -> None:
        self.cases.append({"id": f"{len(self.cases):04d}-{tag}", "kind": "read", "path": str(path)})

    def load(self, tag: str, specs: list[str], class_names: Path | None = None) -> None:
        self.cases.append(
            {"id": f"{len(self.cases):04d}-{tag}", "kind": "load", "specs": specs,
             "class_names": None if class_names is None else str(class_names)}
        )

    def cli(self, tag: str, specs: list[str], extra: list[str] | None = None) -> None:
        case_id = f"{len(self.cases):04d}-{tag}"
        self.cases.append(
            {"id": case_id, "kind": "cli", "specs": specs, "extra": extra or [],
             "out": str(self.root / f"out-{case_id}")}
        )

    # ------------------------------------------------------------------ helpers
    def ids(self, n: int, k: int = 4) -> np.ndarray:
        return self.rng.integers(0, k, n)

    def npz(self, **arrays: Any) -> Path:
        return self.file(".npz", lambda p: np.savez(p, **arrays))

    def pt(self, content: Any) -> Path:
        return self.file(".pt", lambda p: torch.save(content, p))

    def csv(self, text: str | bytes) -> Path:
        data = text.encode("utf-8") if isinstance(text, str) else text
        return self.file(".csv", lambda p: p.write_bytes(data))


def bad_dtypes(c: Cases) -> None:
    n = 12
    for dtype_name, values in [
        ("bool", np.ones(n, dtype=bool)),
        ("complex", c.ids(n) + 1j),
        ("str", np.array([str(v) for v in c.ids(n)])),
        ("bytes", np.array([str(v).encode() for v in c.ids(n)])),
        ("datetime", np.array(["2020-01-01"] * n, dtype="datetime64[D]")),
        ("timedelta", c.ids(n).astype("timedelta64[s]")),
        ("structured", np.zeros(n, dtype=[("a", "<i8"), ("b", "<f8")])),
        ("fraction", c.ids(n) + 0.25),
        ("float16-fraction", (c.ids(n) + 0.5).astype(np.float16)),
    ]:
        for key in ("y_true", "y_pred"):
            arrays = {"y_true": c.ids(n), "y_pred": c.ids(n)}
            arrays[key] = values
            c.read(f"dtype-{dtype_name}-{key}", c.npz(**arrays))
        logits = {"y_true": c.ids(n), "logits": np.stack([values] * 3, axis=1)}
        if dtype_name in ("fraction", "float16-fraction"):
            continue  # fractional scores are valid logits
        c.read(f"dtype-{dtype_name}-logits", c.npz(**logits))
    for dtype in (torch.bool, torch.complex64, torch.float32):
        y_true = torch.from_numpy(c.ids(n))
        fractional = torch.from_numpy(c.rng.random(n) * 0.9 + 0.05)  # in (0.05, 0.95): never integral
        bad = fractional.to(dtype) if dtype != torch.bool else torch.ones(n, dtype=torch.bool)
        c.read(f"pt-dtype-{dtype}", c.pt({"y_true": y_true, "y_pred": bad}))


def non_finite(c: Cases) -> None:
    n = 10
    for bad in (np.nan, np.inf, -np.inf):
        for _ in range(3):
            logits = c.rng.normal(size=(n, 4))
            logits[c.rng.integers(0, n), c.rng.integers(0, 4)] = bad
            c.read(f"logits-{bad}", c.npz(y_true=c.ids(n), logits=logits))
            ids = c.ids(n).astype(np.float64)
            ids[c.rng.integers(0, n)] = bad
            c.read(f"ids-{bad}", c.npz(y_true=ids, y_pred=c.ids(n)))
        logits16 = torch.from_numpy(c.rng.normal(size=(n, 4))).to(torch.bfloat16)
        logits16[0, 0] = bad
        c.read(f"pt-bf16-{bad}", c.pt({"y_true": torch.zeros(n, dtype=torch.long), "logits": logits16}))
        c.read(f"csv-{bad}", c.csv("y_true,a,b\n0,1,2\n1," + str(bad) + ",0\n"))


def huge_ids(c: Cases) -> None:
    n = 60
    values: list[Any] = [10_000, 30_000, 10**9, 2**31, 2**40, np.iinfo(np.int64).max]
    for value in values:
        for key in ("y_true", "y_pred"):
            arrays = {"y_true": c.ids(n), "y_pred": c.ids(n)}
            arrays[key] = arrays[key].astype(np.int64)
            arrays[key][int(c.rng.integers(0, n))] = value
            c.read(f"huge-{value}-{key}", c.npz(**arrays))
    for value in (np.iinfo(np.uint64).max, 2**63):
        ids = c.ids(n).astype(np.uint64)
        ids[3] = value
        c.read(f"huge-uint64-{value}", c.npz(y_true=ids, y_pred=c.ids(n)))
    for value in (1e9, 1e18, 1e19, 1e300, float(2**63)):
        ids = c.ids(n).astype(np.float64)
        ids[5] = value
        c.read(f"huge-float-{value}", c.npz(y_true=c.ids(n), y_pred=ids))
        c.read(f"huge-csv-{value}", c.csv("y_true,y_pred\n0,0\n1," + repr(value) + "\n"))
    c.read("huge-pt", c.pt({"y_true": torch.tensor([0, 1, 2**62]), "y_pred": torch.tensor([0, 1, 2])}))
    c.read("huge-pt-list", c.pt({"y_true": [0, 1, 2], "y_pred": [0, 1, 10**30]}))
    # With class names that fix K, an id above K (but below the limit) is out of range.
    c.read("id-above-names", c.npz(y_true=np.array([0, 1, 7]), y_pred=np.array([0, 1, 2]),
                                   class_names=np.array(["a", "b", "c"])))


def negative_ids(c: Cases) -> None:
    for value in (-1, -2**31, np.iinfo(np.int64).min):
        for key in ("y_true", "y_pred"):
            arrays = {"y_true": c.ids(8), "y_pred": c.ids(8)}
            arrays[key][2] = value
            c.read(f"negative-{value}-{key}", c.npz(**arrays))
    c.read("negative-float", c.npz(y_true=np.array([0.0, -3.0]), y_pred=np.array([0, 1])))
    c.read("negative-csv", c.csv("y_true,y_pred\n0,-1\n"))


def ragged_csv(c: Cases) -> None:
    for _ in range(12):
        width = int(c.rng.integers(2, 6))
        header = ["y_true", "y_pred"] if width == 2 else ["y_true", *(f"c{k}" for k in range(width - 1))]
        rows = []
        for _ in range(int(c.rng.integers(2, 8))):
            rows.append(",".join(str(int(v)) for v in c.rng.integers(0, 2, width)))
        bad = int(c.rng.integers(0, len(rows)))
        cells = rows[bad].split(",")
        rows[bad] = ",".join(cells[:-1]) if c.rng.random() < 0.5 else ",".join([*cells, "0"])
        c.read("ragged", c.csv(",".join(header) + "\n" + "\n".join(rows) + "\n"))


def empty_files(c: Cases) -> None:
    for suffix in (".npz", ".pt", ".csv"):
        c.read(f"empty{suffix}", c.file(suffix, lambda p: p.write_bytes(b"")))
    for text in ("\n", "\n\n\n", "y_true,y_pred\n", "y_true,a,b\n\n", ",\n", "   \n"):
        c.read("empty-csv-text", c.csv(text))
    c.read("empty-arrays", c.npz(y_true=np.zeros(0, dtype=np.int64), y_pred=np.zeros(0, dtype=np.int64)))
    c.read("empty-logits", c.npz(y_true=np.zeros(0, dtype=np.int64), logits=np.zeros((0, 3))))
    c.read("zero-width-logits", c.npz(y_true=np.zeros(3, dtype=np.int64), logits=np.zeros((3, 0))))
    c.read("empty-npz", c.file(".npz", lambda p: np.savez(p)))
    c.read("empty-dict-pt", c.pt({}))


def garbage(c: Cases) -> None:
    prefixes = [b"", b"PK\x03\x04", b"PK\x05\x06", b"\x93NUMPY", b"\x80\x04", b"\xef\xbb\xbf", b"y_true,"]
    for suffix in (".npz", ".pt", ".csv"):
        for prefix in prefixes:
            for _ in range(2):
                size = int(c.rng.integers(1, 4096))
                data = prefix + c.rng.integers(0, 256, size, dtype=np.uint8).tobytes()
                c.read(f"garbage{suffix}", c.file(suffix, lambda p, d=data: p.write_bytes(d)))
    c.read("nul-csv", c.csv(b"y_true,y_pred\n0,\x000\n"))
    c.read("latin1-csv", c.csv("y_true,caf\xe9,b\n0,1,2\n".encode("latin-1")))
    # A valid npz cut short, and one with a byte flipped in its data.
    source = c.root / "source.npz"
    np.savez_compressed(source, y_true=c.ids(200), logits=c.rng.normal(size=(200, 4)))
    blob = source.read_bytes()
    for cut in (10, len(blob) // 2, len(blob) - 5):
        c.read("truncated-npz", c.file(".npz", lambda p, b=blob[:cut]: p.write_bytes(b)))
    flipped = bytearray(blob)
    flipped[len(blob) // 3] ^= 0xFF
    c.read("flipped-npz", c.file(".npz", lambda p: p.write_bytes(bytes(flipped))))
    pt_source = c.root / "source.pt"
    torch.save({"y_true": torch.arange(50) % 4, "y_pred": torch.arange(50) % 4}, pt_source)
    pt_blob = pt_source.read_bytes()
    for cut in (20, len(pt_blob) // 2):
        c.read("truncated-pt", c.file(".pt", lambda p, b=pt_blob[:cut]: p.write_bytes(b)))


def huge_headers(c: Cases) -> None:
    for width in (10_001, 50_000, 200_000):
        header = "y_true," + ",".join(f"c{k}" for k in range(width))
        c.read(f"wide-csv-{width}", c.csv(header + "\n0," + ",".join(["0"] * width) + "\n"))
    c.read("wide-csv-header-only", c.csv("y_true," + ",".join(f"c{k}" for k in range(200_000)) + "\n"))
    c.read("huge-cell", c.csv("y_true,y_pred\n0," + "9" * 300_000 + "\n"))
    c.read("huge-header-cell", c.csv("y_true," + "x" * 300_000 + "\n0,1\n"))
    c.read("wide-npz", c.npz(y_true=np.zeros(2, dtype=np.int64), logits=np.zeros((2, 10_001), dtype=np.float16)))
    c.read("many-names-npz", c.npz(y_true=np.zeros(2, dtype=np.int64), y_pred=np.zeros(2, dtype=np.int64),
                                   class_names=np.array([f"n{k}" for k in range(20_000)])))
    c.read("wide-pt", c.pt({"y_true": torch.zeros(2, dtype=torch.long), "logits": torch.zeros(2, 10_001)}))


def crafted_npy(c: Cases) -> None:
    def write(path: Path, members: dict[str, bytes]) -> None:
        with zipfile.ZipFile(path, "w") as archive:
            for name, data in members.items():
                archive.writestr(name, data)

    def header(shape: tuple[int, ...], descr: str = "<f8") -> bytes:
        buffer = __import__("io").BytesIO()
        np.lib.format.write_array_header_1_0(buffer, {"descr": descr, "fortran_order": False, "shape": shape})
        return buffer.getvalue()

    y_true = __import__("io").BytesIO()
    np.lib.format.write_array(y_true, np.array([0, 1]))
    for shape in [(10**6, 10**6), (2, 10**12), (10**15,), (2, 3, 10**9), (2**62, 2)]:
        key = "logits" if len(shape) != 1 else "y_pred"
        members = {"y_true.npy": y_true.getvalue(), f"{key}.npy": header(shape)}
        c.read(f"crafted-{shape}", c.file(".npz", lambda p, m=members: write(p, m)))
    for raw in [b"\x93NUMPY\x01\x00\x10\x00{'descr': 'zz'}  \n", b"\x93NUMPY\x09\x00", b"\x93NUMPY\x01\x00\xff\xff"]:
        members = {"y_true.npy": raw, "y_pred.npy": y_true.getvalue()}
        c.read("crafted-header", c.file(".npz", lambda p, m=members: write(p, m)))
    members = {"y_true.npy": header((10**9,), "<i8") + b"\0" * 64, "y_pred.npy": y_true.getvalue()}
    c.read("crafted-truncated", c.file(".npz", lambda p, m=members: write(p, m)))
    c.read("npz-is-npy", c.file(".npz", lambda p: p.write_bytes(y_true.getvalue())))


def mismatched_lengths(c: Cases) -> None:
    for _ in range(6):
        n = int(c.rng.integers(2, 20))
        m = n + int(c.rng.choice([-1, 1, 5]))
        c.read("len-y_pred", c.npz(y_true=c.ids(n), y_pred=c.ids(m)))
        c.read("len-logits", c.npz(y_true=c.ids(n), logits=c.rng.normal(size=(m, 4))))
    c.read("logits-1d", c.npz(y_true=c.ids(5), logits=c.rng.normal(size=5)))
    c.read("logits-3d", c.npz(y_true=c.ids(5), logits=c.rng.normal(size=(5, 4, 2))))
    c.read("y_true-2d", c.npz(y_true=c.ids(6).reshape(2, 3), y_pred=c.ids(6)))
    c.read("y_true-0d", c.npz(y_true=np.array(3), y_pred=np.array(3)))
    c.read("ragged-pt", c.pt({"y_true": [[0, 1], [2]], "y_pred": [0, 1]}))
    a, b = c.npz(y_true=c.ids(10), y_pred=c.ids(10)), c.npz(y_true=c.ids(11), y_pred=c.ids(11))
    c.load("two-sizes", [str(a), str(b)])
    c.cli("two-sizes", [str(a), str(b)])
    same_n = c.npz(y_true=(np.arange(10) + 1) % 4, y_pred=c.ids(10))
    first = c.npz(y_true=np.arange(10) % 4, y_pred=c.ids(10))
    c.load("two-test-sets", [str(first), str(same_n)])
    c.cli("two-test-sets", [str(first), str(same_n)])
    w3 = c.npz(y_true=np.arange(4) % 3, logits=np.eye(4)[:, :3])
    w4 = c.npz(y_true=np.arange(4) % 3, logits=np.eye(4))
    c.load("two-widths", [str(w3), str(w4)])


def bad_keys(c: Cases) -> None:
    y = c.ids(6)
    for arrays in [
        {"y_pred": y}, {"y_true": y}, {"y_true": y, "y_pred": y, "logits": np.eye(6)[:, :4]},
        {"y_true": y, "preds": y}, {"y_true": y, "y_pred": y, "weights": y}, {"Y_TRUE": y, "y_pred": y},
        {"y_true": y, "y_pred": y, "class_names": np.array(["a", "b", "c", "d"]), "extra": y},
    ]:
        c.read("npz-keys", c.npz(**arrays))
        c.read("pt-keys", c.pt({k: torch.from_numpy(v) if v.dtype.kind in "iuf" else v.tolist() for k, v in arrays.items()}))
    c.read("pt-not-dict", c.pt([torch.zeros(3), torch.zeros(3)]))
    c.read("pt-tensor", c.pt(torch.zeros(3)))
    c.read("pt-int-keys", c.pt({0: torch.zeros(3), 1: torch.zeros(3)}))
    c.read("pt-nested", c.pt({"y_true": {"a": 1}, "y_pred": [0]}))
    c.read("pt-none", c.pt({"y_true": None, "y_pred": None}))
    c.read("pt-strings", c.pt({"y_true": "0,1,2", "y_pred": "0,1,2"}))
    c.read("pt-sparse", c.pt({"y_true": torch.eye(3).to_sparse(), "y_pred": torch.zeros(3, dtype=torch.long)}))


class Boom:
    """A class a weights_only load must refuse to build."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (print, ("unpickled!",))


def pickled(c: Cases) -> None:
    objects = np.array([0, "a", None, 1.5], dtype=object)
    c.read("npz-object-y_true", c.npz(y_true=objects, y_pred=np.arange(4)))
    c.read("npz-object-names", c.npz(y_true=np.arange(3), logits=np.eye(3), class_names=np.array(["a", 1, None], dtype=object)))
    c.read("npz-object-logits", c.npz(y_true=np.arange(2), logits=np.array([[1, "x"], [0, 2]], dtype=object)))
    c.read("pt-pickle-global", c.file(".pt", lambda p: torch.save({"y_true": Boom(), "y_pred": [0]}, p)))
    c.read("pt-raw-pickle", c.file(".pt", lambda p: p.write_bytes(pickle.dumps({"y_true": Boom()}))))
    c.read("npz-pickle-bytes", c.file(".npz", lambda p: p.write_bytes(pickle.dumps({"y_true": [0]}))))


def bad_csv(c: Cases) -> None:
    texts = [
        "label,y_pred\n0,0\n", "y_true,ypred\n0,0\n1,1\n", "Y_True,y_pred\n0,0\n", "y_true,y_pred,w\n0,0,1\n",
        "y_true,a,a\n0,1,2\n", "y_true,y_true\n0,0\n", "y_true,a,\n0,1,2\n", "y_true,cat\n0,0.5\n",
        "y_true,y_pred\n0,cat\n", "y_true,y_pred\n0.5,0\n", "y_true,y_pred\n0,1e400\n",
        "y_true,a,b\n0,x,1\n", '"y_\ntrue",a,b\n0,1,2\n', "y_true,\"a\nb\",c\n0,1,2\n",
        "y_true;y_pred\n0;0\n", "\ty_true,y_pred\n", "y_true,y_pred\n0,0\n1,1,\n", "y_true,a,b\n0,,1\n",
        "y_true,a,b\n0,0x1F,1\n", "y_true,y_pred\n0,1_000_000_000\n", "y_true,y_pred\n1+1,0\n",
    ]
    for text in texts:
        c.read("csv", c.csv(text))
    c.read("csv-bom-garbage", c.csv(b"\xef\xbb\xbf\xff\xfe y_true"))
    c.read("csv-utf16", c.csv("y_true,y_pred\n0,0\n".encode("utf-16")))


def bad_names(c: Cases) -> None:
    y = np.arange(3)
    for names in [["a", "b", "a"], ["a", "", "c"], ["a", " ", "c"], ["a", "b"], ["a", "b", "c", "d"], ["a", "b", "\n"], ["a", "\x1b[2J", "c"]]:
        c.read("npz-names", c.npz(y_true=y, logits=np.eye(3), class_names=np.array(names)))
    c.read("npz-names-int", c.npz(y_true=y, logits=np.eye(3), class_names=np.arange(3)))
    c.read("npz-names-2d", c.npz(y_true=y, logits=np.eye(3), class_names=np.array([["a", "b", "c"]])))
    c.read("npz-names-bytes", c.npz(y_true=y, logits=np.eye(3), class_names=np.array([b"\xff", b"b", b"c"])))
    good = c.npz(y_true=y, y_pred=y)
    for text in ["", "\n\n", "a\nb\na\n", "a\n\nb\n", "a\nb\n", "a\nb\x1b[2J\nc\n", "a\tb\nc\nd\n", "".join(f"n{k}\n" for k in range(20_000))]:
        names = c.file(".txt", lambda p, t=text: p.write_text(t))
        c.load("names-file", [str(good)], class_names=names)
    binary = c.file(".txt", lambda p: p.write_bytes(b"\xff\xfe\x00a"))
    c.load("names-binary", [str(good)], class_names=binary)
    disagree = c.npz(y_true=y, logits=np.eye(3), class_names=np.array(["x", "y", "z"]))
    abc = c.file(".txt", lambda p: p.write_text("a\nb\nc\n"))
    c.load("names-disagree", [str(disagree)], class_names=abc)
    c.cli("names-disagree", [str(disagree)], ["--class-names", str(abc)])


def bad_labels(c: Cases) -> None:
    good = c.npz(y_true=np.arange(4) % 2, y_pred=np.arange(4) % 2)
    for label in ["", "@1", "m@", "m@1.5", "m@x", "  @2", "m\n#x", "m\x00", "m\x1b[31m", "m@1\r"]:
        c.load("label", [f"{good}={label}"])
        c.cli("label", [f"{good}={label}"])
    c.load("duplicate-label", [f"{good}=m@0", f"{good}=m@0"])
    c.load("missing", [str(c.root / "nope.npz")])
    c.load("nul-path", [str(c.root / "a\x00b.npz")])
    c.load("long-path", [str(c.root / ("a" * 5000 + ".npz"))])
    c.load("directory", [str(c.root)])
    c.load("wrong-suffix", [str(c.file(".json", lambda p: p.write_text("{}")))])
    c.load("no-files", [])


def cli_subset(c: Cases, rng: np.random.Generator) -> None:
    """Every 6th read case also through the CLI entry point."""
    reads = [case for case in c.cases if case["kind"] == "read"]
    for case in reads[:: 6]:
        c.cli("cli-" + case["id"].split("-", 1)[1], [case["path"]])
    c.cli("max-classes-0", [reads[0]["path"]], ["--max-classes", "0"])
    c.cli("max-classes-negative", [reads[0]["path"]], ["--max-classes", "-5"])


def bombs(c: Cases) -> None:
    """Small files declaring gigabytes: DEFLATE members (a valid archive of zeros, about 1,000 : 1),
    a deflated torch.save archive, lists of shared references, lists nested past numpy's dimensions,
    and a CSV whose one long cell would widen every cell of a fixed-width string array."""
    for samples in (150_000_000, 70_000_000):
        c.read(f"deflate-npz-{samples}", c.file(".npz", lambda p, n=samples: write_zero_npz(p, n)))
    c.read("deflate-npz-logits", c.file(".npz", lambda p: write_zero_npz(p, 10**8, ("y_true", "logits"))))
    plain = c.root / "plain.pt"
    torch.save({"y_true": torch.zeros(2 * 10**8, dtype=torch.uint8), "y_pred": [0]}, plain)
    packed = c.file(".pt", lambda p: _deflate(plain, p))
    plain.unlink()
    c.read("deflate-pt", packed)
    for depth, width in ((3, 1000), (4, 200), (2, 50_000), (30, 2)):
        value: Any = [0] * width
        for _ in range(depth - 1):
            value = [value] * width
        c.read(f"list-bomb-{depth}x{width}", c.pt({"y_true": value, "y_pred": [0]}))
    c.read("list-bomb-names", c.pt({"y_true": [0], "y_pred": [0], "class_names": [["a"] * 1000] * 10**6}))
    for depth in (33, 1000, 100_000):
        c.read(f"deep-list-{depth}", c.file(".pt", lambda p, d=depth: write_deep_pt(p, d)))
    rows = "".join("0,0\n" for _ in range(20_000))
    c.read("csv-long-cell", c.csv("y_true,y_pred\n" + rows + "0," + "1" * 100_000 + "\n"))
    c.read("csv-huge-int", c.csv("y_true,y_pred\n0," + "9" * 5000 + "\n"))


def _deflate(source: Path, target: Path) -> None:
    with zipfile.ZipFile(source) as archive, zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as out:
        for info in archive.infolist():
            out.writestr(info.filename, archive.read(info.filename))


GENERATORS = [
    bad_dtypes, non_finite, huge_ids, negative_ids, ragged_csv, empty_files, garbage, huge_headers,
    crafted_npy, mismatched_lengths, bad_keys, pickled, bad_csv, bad_names, bad_labels, bombs,
]


@pytest.fixture(scope="module")
def fuzz_results(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    root = tmp_path_factory.mktemp("fuzz")
    rng = np.random.default_rng(SEED)
    cases = Cases(root, rng)
    for generate in GENERATORS:
        generate(cases)
    cli_subset(cases, rng)
    manifest, results = root / "manifest.json", root / "results.json"
    manifest.write_text(json.dumps(cases.cases))
    completed = subprocess.run(
        [sys.executable, str(WORKER), str(manifest), str(results), str(HEADROOM)],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    return cases.cases, json.loads(results.read_text())


def test_hundreds_of_bad_inputs(fuzz_results: tuple[list[dict[str, Any]], dict[str, Any]]) -> None:
    cases, data = fuzz_results
    assert len(cases) >= 300
    assert len({case["id"] for case in cases}) == len(cases)
    results = data["results"]
    problems = []
    for case in cases:
        result = results[case["id"]]
        if case["kind"] == "cli":
            err = result.get("stderr", "")
            good = (
                result["outcome"] == "exit" and result["code"] == 2 and err.startswith("mr2 report: error: ")
                and err.endswith("\n") and err.count("\n") == 1 and not result["out_exists"]
            )
        else:
            message = result.get("message", "")
            good = (
                result["outcome"] == "user_error" and bool(message) and "\n" not in message
                and "\r" not in message and "allocate" not in message and "memory" not in message.lower()
            )
        good = good and not result["warnings"]
        if not good:
            problems.append(f"{case['id']}: {result}")
    assert not problems, f"{len(problems)} of {len(cases)} inputs without a clear user error:\n" + "\n".join(
        problems[:40]
    )


def test_the_limit_bounds_the_child(fuzz_results: tuple[list[dict[str, Any]], dict[str, Any]]) -> None:
    # The worker really ran under RLIMIT_AS: its recorded limit is finite and above its baseline.
    _, data = fuzz_results
    assert HEADROOM < data["limit"] < 64 * 2**30
