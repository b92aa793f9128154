"""The rebalance timeline behind docs/performance.md's plot, and the plots themselves."""

from __future__ import annotations

from pathlib import Path

from rxhubs.bench._plots import plot_rebalance, plot_throughput, rebalance_timeline


def test_rxhubs_reaches_the_fair_share_within_two_intervals_the_official_rules_take_many_more() -> None:
    series = rebalance_timeline(partitions=32, intervals=20.0)
    ours = series["rxhubs"]
    theirs = series["official processor rules"]
    first_fair = next(x for x, n in ours if n == 16)
    assert first_fair <= 2.0
    assert all(n == 16 for x, n in ours if x >= first_fair)  # and stays there
    at_two = dict(theirs)[2.0]
    assert at_two < 16  # one partition per cycle


def test_plots_are_png_files(tmp_path: Path) -> None:
    series = {"rxhubs": [(0.0, 0), (1.0, 16)], "official processor rules": [(0.0, 0), (1.0, 1)]}
    png = plot_rebalance(tmp_path, series).read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    figures = [
        {"scenario": "throughput", "metric": "events_per_s_tuned", "unit": "events/s", "rxhubs": 10, "baseline": 9},
        {"scenario": "rebalance", "metric": "intervals", "unit": "intervals", "rxhubs": 1, "baseline": 17},
    ]
    bars = plot_throughput(tmp_path, figures)
    assert bars is not None and bars.read_bytes()[:4] == b"\x89PNG"
    assert plot_throughput(tmp_path, figures[1:]) is None
