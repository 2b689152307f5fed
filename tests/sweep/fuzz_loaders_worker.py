"""Child process of tests/sweep/test_fuzz_loaders.py: generate bad sweep files and run configurations
(seeded), load each under an address-space limit and a per-case alarm, print a JSON summary.

Usage: python fuzz_loaders_worker.py DIR SEED HEADROOM_BYTES
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import random
import resource
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml

from mr2.cli.errors import user_errors
from mr2.cli.main import main
from mr2.config import ConfigError, config_from_dict, config_to_dict, load_config
from mr2.sweep.spec import SweepSpecError, load_spec

SECONDS_PER_CASE = 20
GOOD_BASE = {"data": {"name": "synthetic"}, "model": {"name": "mlp"}, "optim": {"epochs": 1}}


class Hang(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise Hang()


def _dotted(data: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for key, value in data.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            yield from _dotted(value, path + ".")
        else:
            yield path, value


def _nest(path: str, value: Any) -> dict[str, Any]:
    result: dict[str, Any] = {}
    node = result
    parts = path.split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = value
    return result


def _wrong_values(default: Any, rng: random.Random) -> list[Any]:
    """Values of a type the key cannot take, given its default."""
    pool: list[Any] = [[1, 2], {"a": 1}, [[[]]], {"x": [1, {"y": 2}]}]
    if isinstance(default, dict):  # a free-form mapping (options): anything but a mapping
        pool = [[1, 2], "text", 3, [[[]]]]
    elif isinstance(default, bool):
        pool += ["maybe", 2.5, 7]
    elif isinstance(default, (int, float)):
        pool += ["ten", "x" * 3000]
    elif isinstance(default, str):
        pool += [{"k": "v"}]
    return rng.sample(pool, 3)


def _dump(data: Any) -> str:
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    return yaml.dump(data, Dumper=dumper, sort_keys=False, width=1 << 20)


def _sweep(**changes: Any) -> dict[str, Any]:
    data: dict[str, Any] = {"name": "fz", "output_dir": "OUT", "base": GOOD_BASE, "methods": {"erm": {}},
                            "seeds": [0]}
    data.update(changes)
    return data


def cases(rng: random.Random) -> list[tuple[str, str, bytes]]:
    """(kind, category, file content): every one of them bad."""
    out: list[tuple[str, str, bytes]] = []

    def add(kind: str, category: str, content: str | bytes) -> None:
        out.append((kind, category, content.encode() if isinstance(content, str) else content))

    # Wrong types at every key of the run configuration, alone and inside a sweep's base.
    defaults = config_to_dict(config_from_dict({}))
    for path, default in _dotted(defaults):
        for value in _wrong_values(default, rng)[:2]:
            add("config", "wrong-type", _dump(_nest(path, value)))
        add("sweep", "wrong-type-base", _dump(_sweep(base={**GOOD_BASE, **_nest(path, _wrong_values(default,
                                                                                                   rng)[0])})))
    # Wrong types at every key of the sweep file.
    sweep_wrong: dict[str, list[Any]] = {
        "name": [[1], {"a": 1}, "a/b", "..", ""], "description": [[1], {"a": 1}], "output_dir": [[1], ""],
        "base": [[1], "text", 3], "base_config": [[1], 3, "does/not/exist.yaml"],
        "methods": [[1], "erm", {}, {"erm": [1]}, {"a b": {}}, {"erm": {"": 1}}, {"nope": {}}],
        "grid": [[1], "x", {"optim.lr": 0.1}, {"optim.lr": []}], "seeds": [-1, 0, [], [-1], ["a"], [0, 0],
                                                                           2.5, {"a": 1}, [2**40]],
        "reference": [[1], "nope"], "select_by": ["test_accuracy", [1]],
        "workers": [0, -3, "2", [1], 10**30], "threads_per_run": [0, "x", 10**9], "nproc_per_node": [0, [2]],
        "devices": [[-1], "0", [0.5], []], "required": ["data.root", [1], ["data.root"]],
        "report": [3, {"tiers": 0}, {"bootstrap": -1}, {"alpha": 2}, {"plots": "maybe"}, {"bootstrap": 10**12}],
        "launcher": [3, {"name": "aws"}, {"partitoin": "x"}, {"name": "slurm", "timeout_min": 0}],
    }
    for key, values in sweep_wrong.items():
        for value in values:
            add("sweep", "wrong-type-sweep", _dump(_sweep(**{key: value})))
    # Unknown keys, at the top and nested.
    for _ in range(12):
        name = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz_") for _ in range(rng.randint(1, 12))) + "_x"
        add("config", "unknown-key", _dump({name: 1}))
        add("config", "unknown-key", _dump({rng.choice(["data", "optim", "model"]): {name: 1}}))
        add("sweep", "unknown-key", _dump(_sweep(**{name: 1})))
        add("sweep", "unknown-key", _dump(_sweep(report={name: 1})))
    # Documents that are not a mapping.
    for text in ("3\n", "- a\n- b\n", "just text\n", "false\n", "[]\n", "0\n", "'x'\n", "--- 1\n--- 2\n",
                 "!!binary aGVsbG8=\n"):
        add("config", "not-a-mapping", text)
        add("sweep", "not-a-mapping", text)
    # Binary garbage and non-UTF-8.
    for _ in range(12):
        garbage = bytes(rng.randrange(256) for _ in range(rng.randint(1, 400)))
        add("config", "binary", b"\x00\xff" + garbage)
        add("sweep", "binary", b"name: \xff\xfe" + garbage)
    for text in (b"name: caf\xe9\n", b"\xff\xfe\x00n\x00a\x00m\x00e\x00", b"a: \x80\n", b"\xc3\x28: 1\n"):
        add("config", "not-utf8", text)
        add("sweep", "not-utf8", text)
    # Deep nesting.
    for depth in (51, 60, 500, 5_000):
        add("config", "deep", "data: " + "[" * depth + "]" * depth + "\n")
        add("config", "deep", "data:" + "".join(f"\n{'  ' * (i + 1)}k{i}:" for i in range(min(depth, 400))) + " 1\n")
        add("sweep", "deep", "methods: {erm: " + "{a: " * depth + "1" + "}" * depth + "}\n")
    add("config", "deep", "a: " + "[" * 50_000)
    # Huge numbers.
    add("config", "huge-number", "optim: {lr: .nan}\n")
    add("config", "schema-overflow", "optim: {lr: " + "9" * 400 + "}\n")  # an int too large for a float
    for text in ("optim: {epochs: " + "9" * 400 + "}\n", "optim: {lr: 1.0e+999}\n", "seed: -" + "9" * 50 + "\n",
                 "data: {batch_size: 99999999999999999999}\n"):
        add("config", "schema-range", text)
    for text in ("seeds: " + "9" * 400, "seeds: 100000000", "workers: " + "9" * 30, "seeds: [" + "9" * 30 + "]",
                 "report: {bootstrap: 1000000000000}"):
        add("sweep", "huge-number", _dump({k: v for k, v in _sweep().items() if k != "seeds"}) + text + "\n")
    # Aliases (and the billion laughs).
    bomb = "[&a [" + ", ".join(["lol"] * 9) + "], " + ", ".join(
        f"&{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]" for i in range(8)) + "]"
    for text in ("base: &b {data: {name: synthetic}}\nmethods: {erm: {}}\nx: *b\n",
                 f"optim: {{lr: 0.1}}\nmethod: {{name: mr2, options: {{c_bar: {bomb}}}}}\n",
                 "a: &x 1\n", "optim: &o {lr: 0.1}\ndata: {<<: *o}\n"):
        add("config", "alias", text)
        add("sweep", "alias", text)
    add("sweep", "alias", _dump(_sweep()) + f"grid: {{optim.lr: {bomb}}}\n")
    # Tags.
    for text in ("a: !!python/object:os.system {}\n", "a: !!python/name:os.system\n",
                 "a: !!python/object/apply:os.system ['true']\n", "optim: {lr: !!binary aGVsbG8=}\n",
                 "name: !custom x\n", "optim: !!set {lr: null}\n", "optim: !!omap [{lr: 1}]\n",
                 "name: 2020-01-01\n", "optim: {lr: !!str 0.1}\n", "data: !!python/tuple [1]\n"):
        add("config", "tag", text)
        add("sweep", "tag", text)
    # Duplicate keys.
    for text in ("name: a\nname: b\n", "optim: {lr: 0.1, lr: 0.2}\n", "data:\n  name: x\n  root: y\n  name: z\n",
                 "1: a\n1: b\n", "? [1]\n: x\n"):
        add("config", "duplicate", text)
    add("sweep", "duplicate", _dump(_sweep()) + "seeds: [1]\n")
    add("sweep", "duplicate", "methods: {erm: {}, erm: {}}\n")
    # Huge lists.
    add("config", "huge-list", _dump({"data": {"options": {"classes": list(range(5))}}, "optim": list(range(5_000))}))
    add("config", "huge-list", _dump({"model": {"options": {"hidden_dims": "x"}}, "seed": list(range(5_000))}))
    add("sweep", "huge-list", _dump(_sweep(seeds=list(range(10_001)))))
    add("sweep", "huge-list", _dump(_sweep(methods={"erm": {"optim.lr": list(range(1, 400)),
                                                            "optim.momentum": [0.1] * 400}})))
    add("sweep", "huge-list", _dump(_sweep(devices=list(range(10_000)), workers=10**6)))
    # Empty and blank sweep files (an empty run configuration is the defaults: valid).
    for text in ("", "\n", "# comment\n", "---\n", "...\n"):
        add("sweep", "empty", text)
    # Too large.
    add("config", "too-large", "name: a\n" + "#" * (1 << 20))
    return out


def run_case(kind: str, path: Path) -> tuple[str, str]:
    """("error", message) for the loader's user error, ("loaded", "") or ("other", traceback)."""
    expected = ConfigError if kind == "config" else SweepSpecError
    try:
        if kind == "config":
            load_config(path)
        else:
            load_spec(path)
    except expected as error:
        return "error", str(error)
    except Hang:
        return "hang", ""
    except MemoryError:
        return "memory", ""
    except BaseException:
        return "other", traceback.format_exc()[-1500:]
    return "loaded", ""


def run_cli(kind: str, path: Path) -> tuple[int, str, str]:
    argv = ["train", "--config", str(path)] if kind == "config" else ["sweep", str(path), "--dry-run"]
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        try:
            code = main(argv)
        except SystemExit as exit:
            code = int(exit.code or 0)
        except BaseException:
            return -1, stdout.getvalue(), traceback.format_exc()[-1500:]
    return code, stdout.getvalue(), stderr.getvalue()


def main_worker(directory: Path, seed: int, headroom: int) -> dict[str, Any]:
    user_errors()  # the CLI's lazy imports, before the limit
    importlib.import_module("mr2.engine.run")  # what `mr2 train` imports (torch)
    with open("/proc/self/status") as status:
        size = next(int(line.split()[1]) for line in status if line.startswith("VmSize"))
    limit = size * 1024 + headroom
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    signal.signal(signal.SIGALRM, _alarm)
    rng = random.Random(seed)
    generated = cases(rng)
    results: list[dict[str, Any]] = []
    for index, (kind, category, content) in enumerate(generated):
        path = directory / f"case{index:04d}.yaml"
        path.write_bytes(content.replace(b"OUT", str(directory / "out").encode()))
        start = time.perf_counter()
        signal.alarm(SECONDS_PER_CASE)
        try:
            outcome, message = run_case(kind, path)
            cli: tuple[int, str, str] | None = None
            if index % 4 == 0 and outcome == "error":
                cli = run_cli(kind, path)
        except Hang:
            outcome, message, cli = "hang", "", None
        finally:
            signal.alarm(0)
        results.append({"index": index, "kind": kind, "category": category, "outcome": outcome,
                        "message": message, "seconds": time.perf_counter() - start, "cli": cli})
    return {"limit": limit, "results": results}


if __name__ == "__main__":
    run: Callable[..., dict[str, Any]] = main_worker
    summary = run(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))
    print(json.dumps(summary))
