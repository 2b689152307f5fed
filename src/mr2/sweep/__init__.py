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

from mr2.sweep.plan import RunPoint, format_value, plan_sweep
from mr2.sweep.presets import load_preset, preset_descriptions, preset_names, preset_path
from mr2.sweep.report import SweepReport, SweepReportError, write_sweep_report
from mr2.sweep.run import SweepResult, describe_plan, prepare_sweep, run_sweep
from mr2.sweep.runner import RunOutcome, SweepInterrupted, run_points
from mr2.sweep.selection import Selection, SelectionError, SettingScore, select_settings
from mr2.sweep.spec import MethodEntry, ReportOptions, SweepSpec, SweepSpecError, load_spec, spec_from_dict

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
