"""Test 1 of docs/testing.md: events of a partition leave the pipeline in order, each exactly once.

    python examples/test_ordering.py        (or: pytest examples/test_ordering.py)
"""

from __future__ import annotations

from telemetry_pipeline import build

from rxhubs.testing import marble_test, symbols


def test_each_partition_comes_out_in_order() -> None:
    with marble_test() as t:
        hub = t.hub({"0": "-a---b----c", "1": "---x----y"})
        store = t.store()
        sink = t.sink()  # records what was written, fails nowhere
        results = t.start(build(hub, store, sink, load_balancing_interval=1.0).pipe(symbols()))
        assert results == t.exp("-a-x-b--y-c")
        assert sink.symbols == ["a", "x", "b", "y", "c"]


if __name__ == "__main__":
    test_each_partition_comes_out_in_order()
    print("ok")
