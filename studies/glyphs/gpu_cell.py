"""Issue 25, item 5: the glyph cell with ResNet-32 on the paper's schedule, sized to one GPU lease.

    python studies/glyphs/gpu_cell.py --glyphs glyphs.npz --out OUT [--budget 420]

A lease gives minutes of GPU time, not hours, so the cell's size is chosen at the start by a rule
fixed here before any run (it looks at speed only, never at a result):

1. Probe: ``--probe-procs`` processes (10; half cross-entropy, half the MR2 loss) each build
   ResNet-32 (1 x 32 x 32 input, K = 100, batch 128), warm up, wait for one common start time
   (``--probe-delay`` s after launch) and then count SGD steps for ``--probe-seconds`` (10), all
   in the same window, as the cell's runs will share the GPU. R is their summed steps per second
   (a process that was not ready at the start time is flagged ``late`` in probe.json).
2. A plan of r runs needs ``r x 71 x 200`` steps (9,000 training images at batch 128, 200 epochs);
   its predicted time is ``1.3 x r x 71 x 200 / R + 45`` seconds (data loading, validation each
   epoch, start-up). The first plan whose prediction fits what the probe left of ``--budget``
   (seconds from the script's start) is run:
   a. erm, mr2, mr2_distance_1d on seeds 0-4 (15 runs);
   b. erm, mr2 on seeds 0-4 (10);  c. seeds 0-3 (8);  d. seeds 0-2 (6);
   e. erm, mr2 on seeds 0-1 (4): run when nothing else fits.
3. ``mr2 sweep studies/glyphs/regimes/resnet32-gpu-n100.yaml`` with that plan's ``--methods`` and
   ``--seeds``, every run at once (``--workers`` = runs), ``--no-report``; the report is written
   afterwards on any machine with ``mr2 sweep report DIR``.

What comes back (``--out``): ``probe.json`` (R per process, the predictions, the plan chosen),
``sweep.log``, and ``cell.tgz``: the sweep directory without checkpoints and TensorBoard files,
re-packed every 30 s so that a run cut by the lease still returns what finished; the sweep is
stopped at ``--hard-stop`` seconds (default: budget + 60) so that the last packing happens in
time. If the plan ends with more than 100 s of the budget left, ``bench.txt`` holds
``benchmarks/bench_train_step.py --device cuda``. ``--device cpu --epochs 1 --train-per-class 10``
is this script's smoke test.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "studies" / "glyphs" / "regimes" / "resnet32-gpu-n100.yaml"
STEPS_PER_EPOCH = 71  # ceil(9,000 / 128)
EPOCHS = 200
SAFETY = 1.3
STARTUP_SECONDS = 45.0
PLANS = (
    ("erm,mr2,mr2_distance_1d", "0,1,2,3,4"),
    ("erm,mr2", "0,1,2,3,4"),
    ("erm,mr2", "0,1,2,3"),
    ("erm,mr2", "0,1,2"),
    ("erm,mr2", "0,1"),
)


def runs_of(plan: tuple[str, str]) -> int:
    return len(plan[0].split(",")) * len(plan[1].split(","))


def predicted_seconds(runs: int, steps_per_second: float, epochs: int = EPOCHS) -> float:
    return SAFETY * runs * STEPS_PER_EPOCH * epochs / steps_per_second + STARTUP_SECONDS


def choose_plan(steps_per_second: float, budget: float, epochs: int = EPOCHS) -> tuple[str, str]:
    for plan in PLANS[:-1]:
        if predicted_seconds(runs_of(plan), steps_per_second, epochs) <= budget:
            return plan
    return PLANS[-1]


def _probe_child(loss_name: str, start_at: float, seconds: float, warmup: int, device: str) -> None:
    """One probe process: warm up, wait for ``start_at`` (wall clock), count steps for ``seconds``."""
    import torch
    import torch.nn.functional as F

    from mr2 import MR2Loss
    from mr2.config import ModelSection
    from mr2.models.registry import build_model

    torch.manual_seed(0)
    model = build_model(ModelSection("resnet32"), num_classes=100, input_shape=(1, 32, 32)).to(device)
    x = torch.randn(128, 1, 32, 32, device=device)
    y = torch.randint(0, 100, (128,), device=device)
    if loss_name == "mr2":
        criterion = MR2Loss(100).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)

    def step() -> None:
        logits, features = model(x)
        loss = criterion(logits, features, y) if loss_name == "mr2" else F.cross_entropy(logits, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    for _ in range(warmup):
        step()
    sync()
    late = time.time() > start_at
    time.sleep(max(start_at - time.time(), 0.0))
    began = time.time()
    steps = 0
    while time.time() < began + seconds:
        for _ in range(5):  # synchronised every 5 steps: queued work is not counted as done
            step()
        sync()
        steps += 5
    elapsed = time.time() - began
    print(json.dumps({"loss": loss_name, "steps": steps, "seconds": elapsed, "late": late}))


def probe(procs: int, delay: float, seconds: float, warmup: int, device: str) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT / "src"))
    start_at = time.time() + delay
    children = [
        subprocess.Popen([sys.executable, __file__, "--probe-child", "mr2" if k % 2 else "ce",
                          "--probe-start-at", repr(start_at), "--probe-seconds", str(seconds),
                          "--probe-warmup", str(warmup), "--device", device],
                         stdout=subprocess.PIPE, text=True, env=env)
        for k in range(procs)]
    results = []
    for child in children:
        out, _ = child.communicate()
        if child.returncode != 0:
            raise SystemExit(f"gpu_cell.py: a probe process failed (exit {child.returncode})")
        results.append(json.loads(out.strip().splitlines()[-1]))
    rate = sum(r["steps"] / r["seconds"] for r in results)
    return {"processes": results, "steps_per_second": rate, "late": sum(r["late"] for r in results)}


def pack(sweep_dir: Path, out: Path) -> None:
    """Atomically (re)write out/cell.tgz: the sweep directory without checkpoints or TensorBoard."""
    if not sweep_dir.is_dir():
        return
    partial = out / "cell.tgz.partial"

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        parts = Path(info.name).parts
        return None if "checkpoints" in parts or "tensorboard" in parts else info

    with tarfile.open(partial, "w:gz") as archive:
        archive.add(sweep_dir, arcname=sweep_dir.name, filter=keep)
    os.replace(partial, out / "cell.tgz")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--glyphs", type=Path, help="the glyph file (docs/benchmarks/glyphs.md)")
    parser.add_argument("--out", type=Path, help="folder for probe.json, sweep.log, cell.tgz")
    parser.add_argument("--budget", type=float, default=420.0, help="seconds for the cell (default 420)")
    parser.add_argument("--hard-stop", type=float, default=None,
                        help="seconds from the start after which the sweep is stopped (default: budget + 60)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--epochs", type=int, default=EPOCHS, help="smoke tests only")
    parser.add_argument("--train-per-class", type=int, default=100, help="smoke tests only")
    parser.add_argument("--runs-dir", type=Path, default=ROOT / "runs")
    parser.add_argument("--probe-procs", type=int, default=10)
    parser.add_argument("--probe-delay", type=float, default=40.0,
                        help="seconds from launch to the probe's common start (default 40)")
    parser.add_argument("--probe-seconds", type=float, default=10.0)
    parser.add_argument("--probe-warmup", type=int, default=20)
    parser.add_argument("--probe-start-at", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--probe-child", choices=("ce", "mr2"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.probe_child:
        _probe_child(args.probe_child, args.probe_start_at, args.probe_seconds, args.probe_warmup,
                     args.device)
        return
    if args.glyphs is None or args.out is None:
        parser.error("--glyphs and --out are required")
    if not args.glyphs.is_file():
        raise SystemExit(f"gpu_cell.py: no glyph file at {args.glyphs}; "
                         "build it with studies/glyphs/make_glyphs.py")
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()

    measured = probe(args.probe_procs, args.probe_delay, args.probe_seconds, args.probe_warmup, args.device)
    rate = measured["steps_per_second"]
    budget_left = args.budget - (time.monotonic() - started)  # the probe's time counts
    plan = choose_plan(rate, budget_left, args.epochs)
    predictions = {f"{m} x {s}": round(predicted_seconds(runs_of((m, s)), rate, args.epochs), 1)
                   for m, s in PLANS}
    record = {**measured, "budget_seconds": args.budget, "budget_left_after_probe": round(budget_left, 1),
              "epochs": args.epochs,
              "predicted_seconds": predictions,
              "plan": {"methods": plan[0], "seeds": plan[1]},
              "probe_seconds": round(time.monotonic() - started, 1)}
    (args.out / "probe.json").write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record), flush=True)

    command = [sys.executable, "-m", "mr2", "sweep", str(SPEC), "--set", f"data.root={args.glyphs.resolve()}",
               "--set", f"device={args.device}", "--set", f"optim.epochs={args.epochs}",
               "--set", f"data.train_per_class={args.train_per_class}",
               "--methods", plan[0], "--seeds", plan[1], "--workers", str(runs_of(plan)),
               "--threads-per-run", "1", "--output-dir", str(args.runs_dir), "--no-report"]
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    sweep_dir = args.runs_dir / "glyphs-resnet32-n100"
    sweep_started = time.monotonic()
    with (args.out / "sweep.log").open("w") as log:
        sweep = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        last_pack = time.monotonic()
        hard_stop = args.budget + 60 if args.hard_stop is None else args.hard_stop
        while sweep.poll() is None:
            time.sleep(2)
            if time.monotonic() - started > hard_stop:
                print(f"hard stop at {hard_stop:.0f} s: stopping the sweep", flush=True)
                sweep.terminate()
                try:
                    sweep.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    sweep.kill()
                    sweep.wait()
                break
            if time.monotonic() - last_pack >= 30:
                pack(sweep_dir, args.out)
                last_pack = time.monotonic()
    sweep_seconds = time.monotonic() - sweep_started
    pack(sweep_dir, args.out)
    record.update(sweep_exit=sweep.returncode, sweep_seconds=round(sweep_seconds, 1))
    (args.out / "probe.json").write_text(json.dumps(record, indent=2) + "\n")
    print(f"sweep exit {sweep.returncode} after {sweep_seconds:.0f} s", flush=True)

    if args.device == "cuda" and args.budget - (time.monotonic() - started) > 100:
        with (args.out / "bench.txt").open("w") as bench:
            try:
                bench_command = [sys.executable, str(ROOT / "benchmarks" / "bench_train_step.py"),
                                 "--device", "cuda", "--repeats", "5"]
                subprocess.run(bench_command, stdout=bench, stderr=subprocess.STDOUT, env=env, timeout=90)
            except subprocess.TimeoutExpired:
                bench.write("\nbench_train_step.py: cut after 90 s\n")


if __name__ == "__main__":
    main()
