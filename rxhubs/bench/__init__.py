"""Benchmarks: each scenario measures rxhubs and its strongest alternative in the same run.

Run them with ``rxhubs bench SCENARIO [--json]``. Every figure is one dict (one JSON line) with the keys
``scenario, metric, unit, rxhubs, baseline, baseline_name, ratio, target, met``.
"""

from __future__ import annotations

from rxhubs.bench._report import figure, format_table

__all__ = ["figure", "format_table"]
