"""Test 2 of docs/testing.md: a checkpoint never gets ahead of the sink.

The bug this catches: the checkpoint placed before the sink. When the sink then fails, the store already
says the failed events were done, and a restart skips them: they are lost.

    python examples/test_checkpoint_after_sink.py
"""

from __future__ import annotations

from typing import Any

import telemetry_pipeline
from reactivex import operators as ops

import rxhubs
from rxhubs import operators as hops
from rxhubs.testing import marble_test


def buggy_build(hub: Any, store: Any, sink: Any, **options: Any) -> Any:
    """The same pipeline with the checkpoint before the sink."""
    return rxhubs.consume(hub, "$Default", store, **options).pipe(
        ops.map(telemetry_pipeline.valid_readings),
        hops.checkpoint(store, max_interval=5.0),
        sink,
    )


def checkpoint_never_passes_the_sink(build: Any) -> None:
    with marble_test() as t:
        hub = t.hub({"0": "-a-----b-----c"})
        store = t.store()
        sink = t.sink("-------#")  # the write of "b" (tick 7) fails
        checkpoints = t.checkpoints_at(hub, store, 30)
        t.start(build(hub, store, sink, load_balancing_interval=1.0))
        written = len(sink.written)  # events of partition 0 that really reached the sink: "a"
        assert written == 1
        # sequence numbers from 0: a checkpoint of n says events 0..n are done
        assert checkpoints.get("0", -1) <= written - 1, f"checkpoint {checkpoints} is ahead of the sink"


def test_the_checkpoint_is_placed_after_the_sink() -> None:
    checkpoint_never_passes_the_sink(telemetry_pipeline.build)


def test_the_same_test_catches_the_checkpoint_before_the_sink() -> None:
    try:
        checkpoint_never_passes_the_sink(buggy_build)
    except AssertionError as error:
        assert "ahead of the sink" in str(error)
    else:
        raise AssertionError("the buggy pipeline passed: the test would not catch the bug")


if __name__ == "__main__":
    test_the_checkpoint_is_placed_after_the_sink()
    test_the_same_test_catches_the_checkpoint_before_the_sink()
    print("ok")
