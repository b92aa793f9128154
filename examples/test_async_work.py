"""Async work per batch, tested in virtual time: hops.process keeps each partition's order (docs/testing.md).

    python examples/test_async_work.py        (or: pytest examples/test_async_work.py)
"""

from __future__ import annotations

import rxhubs
from rxhubs import operators as hops
from rxhubs.testing import marble_test, sleep, symbols


async def slow_lookup(batch: rxhubs.EventBatch) -> None:
    """Stands for an HTTP call: 3 s for "a", 1 s for the others (virtual seconds in a test)."""
    await sleep(3.0 if batch[0].body == b"a" else 1.0)


def test_async_work_keeps_the_order() -> None:
    with marble_test() as t:
        hub = t.hub({"0": "-a-b-c"})
        pipeline = rxhubs.consume(hub, "$Default", t.store()).pipe(hops.process(slow_lookup, concurrency=2), symbols())
        results = t.start(pipeline)
    # a (read at 1) is done at 4; b (read at 3) is done at 4 too and waited for a; c: read at 5, done at 6
    assert [(r.time - t.subscribed, r.value.value) for r in results] == [(4.0, "a"), (4.0, "b"), (6.0, "c")]


if __name__ == "__main__":
    test_async_work_keeps_the_order()
    print("ok")
