"""Sweeps: compare methods over seeds and hyperparameters, and publish the table.

A sweep file gives a base run configuration, the methods (each with an optional grid of
hyperparameters), the seeds and a reference method. ``mr2 sweep SWEEP.yaml`` trains every point in
its own process (N in parallel), skips finished runs, resumes interrupted ones, selects each method's
hyperparameters on the validation split and writes the disparity report of the whole sweep.

Modules:
    spec: the typed sweep specification (:func:`load_spec`, :func:`spec_from_dict`).
    plan: expansion into run points with readable, file-system-safe names (:func:`plan_sweep`).
    runner: which runs to train, resumable, failures isolated (:func:`run_points`).
    processes: the trainer processes, stopped together and never outliving the sweep.
    deathsignal, tether: the kernel's death signal that ties trainers (and the fork server) to it.
    progress: the progress lines and the ETA.
    selection: hyperparameter selection on the validation split (:func:`select_settings`).
    report: the sweep's report in ``<sweep_dir>/report`` (:func:`write_sweep_report`).
    run: all of it in one call (:func:`run_sweep`).
    presets: the shipped sweep files (``mr2 presets``; :func:`load_preset`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mr2.lazy import lazy_exports

if TYPE_CHECKING:
    from mr2.sweep.plan import RunPoint, format_value, plan_sweep
    from mr2.sweep.presets import load_preset, preset_descriptions, preset_names, preset_path
    from mr2.sweep.processes import SweepInterrupted
    from mr2.sweep.report import SweepReport, SweepReportError, write_sweep_report
    from mr2.sweep.run import SweepResult, describe_plan, prepare_sweep, run_sweep
    from mr2.sweep.runner import RunOutcome, run_points
    from mr2.sweep.selection import Selection, SelectionError, SettingScore, select_settings
    from mr2.sweep.spec import (
        MethodEntry,
        ReportOptions,
        SweepSpec,
        SweepSpecError,
        load_spec,
        spec_from_dict,
    )

#: public name -> the module that defines it (imported on first access, so that ``mr2 sweep status``
#: and the spec loader import no torch)
EXPORTS: dict[str, str] = {
    "RunPoint": "mr2.sweep.plan",
    "format_value": "mr2.sweep.plan",
    "plan_sweep": "mr2.sweep.plan",
    "load_preset": "mr2.sweep.presets",
    "preset_descriptions": "mr2.sweep.presets",
    "preset_names": "mr2.sweep.presets",
    "preset_path": "mr2.sweep.presets",
    "SweepReport": "mr2.sweep.report",
    "SweepReportError": "mr2.sweep.report",
    "write_sweep_report": "mr2.sweep.report",
    "SweepResult": "mr2.sweep.run",
    "describe_plan": "mr2.sweep.run",
    "prepare_sweep": "mr2.sweep.run",
    "run_sweep": "mr2.sweep.run",
    "RunOutcome": "mr2.sweep.runner",
    "SweepInterrupted": "mr2.sweep.processes",
    "run_points": "mr2.sweep.runner",
    "Selection": "mr2.sweep.selection",
    "SelectionError": "mr2.sweep.selection",
    "SettingScore": "mr2.sweep.selection",
    "select_settings": "mr2.sweep.selection",
    "MethodEntry": "mr2.sweep.spec",
    "ReportOptions": "mr2.sweep.spec",
    "SweepSpec": "mr2.sweep.spec",
    "SweepSpecError": "mr2.sweep.spec",
    "load_spec": "mr2.sweep.spec",
    "spec_from_dict": "mr2.sweep.spec",
}

__all__ = [
    "MethodEntry",
    "ReportOptions",
    "RunOutcome",
    "RunPoint",
    "Selection",
    "SelectionError",
    "SettingScore",
    "SweepInterrupted",
    "SweepReport",
    "SweepReportError",
    "SweepResult",
    "SweepSpec",
    "SweepSpecError",
    "describe_plan",
    "format_value",
    "load_preset",
    "load_spec",
    "plan_sweep",
    "prepare_sweep",
    "preset_descriptions",
    "preset_names",
    "preset_path",
    "run_points",
    "run_sweep",
    "select_settings",
    "spec_from_dict",
    "write_sweep_report",
]

if not TYPE_CHECKING:  # type checkers see the names imported above, and no catch-all
    __getattr__ = lazy_exports(__name__, EXPORTS)
