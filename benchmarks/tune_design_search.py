"""The design search of issue 44 (step 1 of the rule in docs/benchmarks/tune-operating-characteristics.md).

    nice -n 5 .venv/bin/python benchmarks/tune_design_search.py "NAME;NAME;..." 0,0.5,1 100 [SEED] [WORKERS]

Runs each named design on every calibrated cell of ``benchmarks/tune_operating_characteristics.py``
(its simulator and ``run_scenario``, i.e. the shipped ``Plan``), ``REPS`` tunes per cell and scenario
(``0``: null, ``skewed``: the left-skewed null, a number: +delta points), one process per (design,
scenario, cell) with the generator ``[SEED, cell index]``, and prints per design and scenario the mean
over the cells (null: adopt, max; alternatives: adopt the good candidate, picked) and the mean
trainings. ``--list`` prints the names. Names: ``s<selection stages>k<kept>-scr<screen seeds>-m<contenders>
-L<looks>`` built from the racing design (the default until issue 44); ``-valtiers``: the screen keeps
the selection's hard classes (the first batch ran before ``screen_tiers`` existed).
"""

from __future__ import annotations

import importlib.util
import multiprocessing
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from mr2.tune.design import Design


def _oc() -> Any:
    spec = importlib.util.spec_from_file_location("tune_oc_search", Path(__file__).with_name(
        "tune_operating_characteristics.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


OC = _oc()
RESEARCH_FIELDS = {"boundaries", "variance", "multiplicity"}
#: (selection stages, kept after the first, screen seeds, contenders, looks, other fields)
GRID: list[tuple[tuple[int, ...], int | None, int, int, tuple[int, ...], dict[str, Any]]] = [
    ((1, 3), 7, 3, 4, (3, 6, 9), {}), ((1, 3), 7, 3, 4, (4, 8, 12), {}), ((1, 3), 7, 2, 4, (4, 8, 12), {}),
    ((1, 2), 7, 3, 5, (4, 8, 12), {}), ((1, 2), 7, 3, 4, (4, 8, 12), {}), ((1, 2), 6, 3, 6, (5, 10, 15), {}),
    ((1, 2), 8, 2, 8, (4, 8, 12), {}), ((1, 2), 8, 3, 6, (4, 8, 12), {}), ((1, 3), 7, 2, 7, (4, 8), {}),
    ((1, 2), 8, 2, 8, (3, 6, 9, 12), {}), ((1, 2), 17, 2, 8, (4, 8, 12), {}),
    ((1, 2), 8, 2, 8, (4, 8, 12, 16), {}), ((1, 2), 10, 2, 10, (4, 8, 12), {}),
    ((1, 2), 8, 2, 8, (4, 8, 12), {"spending": "pocock"}), ((1, 2), 6, 2, 6, (4, 8, 12, 16), {}),
    ((1, 2), 8, 2, 8, (4, 8, 12), {"futility": None}), ((1, 2), 12, 2, 12, (4, 8, 12), {}),
    ((1, 3), 7, 2, 7, (4, 8, 12), {}),
    ((1,), None, 2, 10, (4, 8, 12), {}), ((1,), None, 2, 12, (4, 8, 12), {}),
    ((1,), None, 2, 12, (3, 6, 9, 12), {}), ((1,), None, 2, 10, (3, 6, 9, 12), {}),
    ((1,), None, 3, 8, (4, 8, 12), {}), ((1,), None, 2, 14, (4, 8, 12), {}),
    ((1,), None, 2, 14, (3, 6, 9, 12), {}), ((1,), None, 2, 16, (3, 6, 9, 12), {}),
    ((1,), None, 2, 16, (4, 8, 12), {}), ((1,), None, 2, 14, (3, 6, 9), {}),
    ((1,), None, 2, 16, (3, 6, 9), {}),
    # Issue 44, part 3: levels with the futility stop counted on (boundaries="binding").
    ((1,), None, 2, 14, (3, 6, 9, 12), {"boundaries": "binding"}),
    ((1,), None, 2, 14, (3, 6, 9, 12), {"boundaries": "binding", "futility": 0.0}),
    ((1,), None, 2, 14, (3, 6, 9, 12), {"boundaries": "binding", "futility": 1.0}),
    ((1,), None, 2, 14, (3, 6, 9, 12), {"boundaries": "binding", "spending": "pocock"}),
    ((1,), None, 2, 16, (3, 6, 9, 12), {"boundaries": "binding"}),
]


def designs() -> dict[str, Design]:
    out: dict[str, Design] = {"racing": OC.RACING_DESIGN}
    for selection, keep, screen, contenders, looks, extra in GRID:
        name = (f"s{','.join(map(str, selection))}k{keep or ''}-scr{screen}-m{contenders}"
                f"-L{','.join(map(str, looks))}" + "".join(f"-{k}{v}" for k, v in extra.items()))
        shape = {"selection_looks": selection, "keep": (keep,) if keep else (), "screen": screen,
                 "contenders": contenders, "confirmation_looks": looks}
        # research options (boundaries="binding") need benchmarks/tune_research_design.py's design
        design = (OC.research(OC.RACING_DESIGN, **shape, **extra) if set(extra) & RESEARCH_FIELDS
                  else replace(OC.RACING_DESIGN, **shape, **extra))
        out[name] = design
        out[name + "-valtiers"] = replace(design, screen_tiers=False)
    return out


def _one(job: tuple[str, str, int, str, int, int]) -> tuple[str, str, str, float, float, float, float]:
    name, cell_name, i, scenario, reps, seed = job
    design = designs()[name]
    cells = {c["name"]: OC.Cell.from_dict(c) for c in OC.load_cells()}
    sim = OC.Simulator(cells[cell_name], np.random.default_rng([seed, i]))
    pools = (OC.SELECTION_POOL[:design.selection_seeds], OC.CONFIRMATION_POOL[:design.confirmation_seeds])
    skewed = OC.SKEWED if scenario == "skewed" else None
    o = OC.run_scenario(sim, design, OC.labels_for(17), 0.0 if skewed else float(scenario), reps, pools,
                        skewed=skewed)
    return (name, cell_name, scenario, float(o.adopt.mean()), float(o.right.mean()),
            float(o.picked_good.mean()), float(o.trainings.mean()))


def main(argv: list[str]) -> None:
    if argv[:1] == ["--list"]:
        print("\n".join(designs()))
        return
    names, scenarios, reps = argv[0].split(";"), argv[1].split(","), int(argv[2])
    seed = int(argv[3]) if len(argv) > 3 else 0
    workers = int(argv[4]) if len(argv) > 4 else 2
    unknown = [n for n in names if n not in designs()]
    if unknown:
        raise SystemExit(f"unknown design(s) {unknown}; --list names them")
    jobs = [(n, c, i, d, reps, seed) for n in names for d in scenarios for i, c in enumerate(OC.CELLS)]
    start = time.time()
    rows: dict[tuple[str, str], list[tuple[str, str, str, float, float, float, float]]] = {}
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        for row in pool.imap_unordered(_one, jobs):
            rows.setdefault((row[0], row[2]), []).append(row)
    for (name, scenario), found in sorted(rows.items()):
        found.sort(key=lambda r: OC.CELLS.index(r[1]))
        adopt, right, picked, trainings = (np.array([r[k] for r in found]) for k in (3, 4, 5, 6))
        if scenario in ("0", "skewed"):
            print(f"{name:40s} {scenario:6s} adopt mean {100 * adopt.mean():5.1f} "
                  f"max {100 * adopt.max():5.1f}  trainings {trainings.mean():5.1f}")
        else:
            print(f"{name:40s} +{scenario:5s} adopt it {100 * right.mean():5.1f} "
                  f"picked {100 * picked.mean():4.0f}  trainings {trainings.mean():5.1f}")
    print(f"{time.time() - start:.0f} s; seed {seed}, {reps} tunes per cell and scenario", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
