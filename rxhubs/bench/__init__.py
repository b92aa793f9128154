"""Benchmarks: each scenario measures rxhubs and its strongest alternative in the same run.

Run them with ``rxhubs bench SCENARIO [--json]``. Every figure is one dict (one JSON line) with the keys
``scenario, metric, unit, rxhubs, baseline, baseline_name, ratio, target, met``.

Layout: a scenario that is one module is ``_NAME.py``; a scenario with a process of its own (a worker, a trial)
or a model of its baseline is a folder ``NAME/`` whose ``_scenario.py`` is what ``rxhubs bench NAME`` runs,
beside its ``_worker.py`` (or ``_trial.py``) and what else measures it. The kit they share: ``_report`` (figures,
``sized`` for ``--smoke``), ``_procs`` (real components in their own processes) and ``_plots``. The seeded chaos
run has a room of its own, ``rxhubs/chaos/``.
"""

from __future__ import annotations

from rxhubs.bench._report import figure, format_table

__all__ = ["figure", "format_table"]
