"""A stand-in for a user's training script, for ``mr2 tune --command`` tests: no training, predictions
drawn per (loss specification, seed) like ``test_trial_tune.simulated``. NumPy only, so a trial takes a
fraction of a second. ``FAKE_MODE`` makes it misbehave: ``exit3``, ``nothing``, ``wrong_k``, ``nan``,
``labels`` (the second trial predicts other test samples), ``hang``, ``collapse`` (writes
``collapse.json`` as after a collapse guard's warning); ``FAKE_FAIL`` gives a mode to named
candidates only (``mr2-paper-c1:exit3,mr2-distance_1d-c1:nan``)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import zlib
from pathlib import Path

import numpy as np

K = 6
PER_CLASS = 60
BASE = np.array([0.95, 0.9, 0.85, 0.6, 0.5, 0.4])
LIFT = {"logit_only": np.array([0.0, 0.0, 0.0, 0.2, 0.25, 0.3])}
LABELS = {("erm", None): "erm", ("mr2", "paper"): "mr2-paper-c1", ("mr2", "logit_only"): "mr2-logit_only-c1",
          ("mr2", "distance_1d"): "mr2-distance_1d-c1"}


def predict(y: np.ndarray, label: str, seed: int, split: str) -> np.ndarray:
    """The same draw as ``test_trial_tune._predict``."""
    rng = np.random.default_rng([zlib.crc32(label.encode()), seed, len(split)])
    p = np.clip(BASE + LIFT.get(label.split("-")[1] if "-" in label else "", 0.0), 0, 1)[y]
    return np.where(rng.random(y.size) < p, y, (y + 1) % K)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--loss-json", required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    spec = json.loads(args.loss_json)
    label = LABELS[(spec["method"], spec["options"].get("variant"))]
    mode = os.environ.get("FAKE_MODE", "")
    # FAKE_FAIL="label:mode,label:mode": only those candidates misbehave.
    for item in filter(None, os.environ.get("FAKE_FAIL", "").split(",")):
        target, how = item.split(":")
        if target == label:
            mode = how
    counter = os.environ.get("FAKE_COUNTER")
    if counter:
        with open(counter, "a") as handle:
            handle.write(f"{label}@{args.seed}\n")
    print(f"training {label} seed {args.seed}")
    if mode == "exit3":
        print("CUDA error: out of memory", file=sys.stderr)
        return 3
    if mode == "nothing":
        return 0
    if mode == "hang":
        import time

        time.sleep(600)
    out = Path(args.out)
    y_val = np.repeat(np.arange(K), PER_CLASS)
    y_test = np.repeat(np.arange(K), PER_CLASS)[::-1].copy()
    if mode == "labels" and (label != "erm" or args.seed != 0):
        y_test = y_test[::-1].copy()
    for split, y in (("val", y_val), ("test", y_test)):
        pred = predict(y, label, args.seed, split)
        if mode in ("wrong_k", "nan"):
            logits = np.eye(K + (mode == "wrong_k"))[pred]
            if mode == "nan":
                logits[0, 0] = np.nan
            np.savez(out / f"{split}.npz", y_true=y, logits=logits)
        else:
            np.savez(out / f"{split}.npz", y_true=y, y_pred=pred)
    if mode == "collapse":  # what mr2.tune.write_predictions writes after a collapse guard warned
        (out / "collapse.json").write_text(json.dumps({"warned_at_steps": [5]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
