"""rxhubs.otel in virtual time: ownership spans and counts as consumers join, hand over and lose partitions;
errors counted by operation, failed attempts marked on their spans, and no secret in anything exported."""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.trace import StatusCode
from reactivex.testing import TestScheduler

import rxhubs
from rxhubs import Checkpoint, EventBatch, Ownership
from rxhubs import operators as hops
from rxhubs.errors import StoreError
from rxhubs.stores import CheckpointStore, InMemoryCheckpointStore
from rxhubs.testing import InMemoryEventHub
from tests.otel.conftest import Exported, by

#: The work-duration histogram; in these tests its values are virtual seconds (TestScheduler), not wall time.
WORK_TIME = "messaging.process.duration"

GROUP = "$Default"
PID = "messaging.destination.partition.id"
CLIENT = "messaging.client.id"
CHANGE = "rxhubs.ownership.change"
KEY = "c2VjcmV0LWtleS0xMjM0NQ=="
CONNECTION_STRING = f"Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=root;SharedAccessKey={KEY}"
FAST: dict[str, Any] = {"load_balancing_interval": 1.0, "ownership_expiration": 3.0}


class Switch(CheckpointStore):
    """One consumer's way to the shared in-memory store, which can go down for that consumer alone."""

    def __init__(self, inner: InMemoryCheckpointStore) -> None:
        self.inner = inner
        self.down = False

    def _check(self) -> None:
        if self.down:
            raise StoreError("store unreachable from this consumer", retriable=True)

    async def list_ownership(self, namespace: str, hub: str, group: str) -> list[Ownership]:
        self._check()
        return await self.inner.list_ownership(namespace, hub, group)

    async def claim_ownership(self, ownerships: Any) -> list[Ownership]:
        self._check()
        return await self.inner.claim_ownership(ownerships)

    async def update_checkpoint(self, checkpoint: Checkpoint) -> None:
        self._check()
        await self.inner.update_checkpoint(checkpoint)

    async def list_checkpoints(self, namespace: str, hub: str, group: str) -> list[Checkpoint]:
        self._check()
        return await self.inner.list_checkpoints(namespace, hub, group)


def ownership_spans(exported: Exported, operation: str) -> Counter[tuple[str, str]]:
    """(owner, partition) of each ``<operation> telemetry`` span."""
    spans = exported.spans(f"{operation} telemetry")
    return Counter((str(s.attributes[CLIENT]), str(s.attributes[PID])) for s in spans)  # type: ignore[index]


def test_ownership_spans_and_counts_follow_a_handover_and_an_expiry(exported: Exported) -> None:
    scheduler = TestScheduler()
    hub, shared = InMemoryEventHub(partition_count=4), InMemoryCheckpointStore()
    a_store, b_store = Switch(shared), Switch(shared)
    rxhubs.consume(hub, GROUP, a_store, owner_id="a", **FAST).pipe(hops.checkpoint(a_store)).subscribe(
        scheduler=scheduler
    )
    scheduler.advance_to(3.0)
    assert ownership_spans(exported, "claim") == Counter({("a", p): 1 for p in "0123"})
    assert [value for _, value in exported.points("rxhubs.partitions.owned")] == [4]

    rxhubs.consume(hub, GROUP, b_store, owner_id="b", **FAST).pipe(hops.checkpoint(b_store)).subscribe(
        scheduler=scheduler
    )
    scheduler.advance_to(10.0)  # b joined: a hands two partitions over, b claims them
    released = ownership_spans(exported, "release")
    claimed_by_b = {p for (owner, p) in ownership_spans(exported, "claim") if owner == "b"}
    assert len(released) == 2 and {owner for owner, _ in released} == {"a"}
    assert claimed_by_b == {p for _, p in released}
    assert all(s.attributes["rxhubs.ownership.stolen"] is False for s in exported.spans("claim telemetry"))
    assert [value for _, value in exported.points("rxhubs.partitions.owned")] == [4]  # both consumers live here

    a_store.down = True  # a cannot renew: its two partitions expire 3 s after its last renewal
    scheduler.advance_to(20.0)
    lost = exported.spans("lose telemetry")
    kept_by_a = {"0", "1", "2", "3"} - claimed_by_b
    assert {(s.attributes[CLIENT], s.attributes[PID], s.attributes["rxhubs.ownership.reason"]) for s in lost} == {
        ("a", p, "expired") for p in kept_by_a
    }
    assert {p for (owner, p) in ownership_spans(exported, "claim") if owner == "b"} == {"0", "1", "2", "3"}
    changes = Counter()
    for attributes, value in exported.points("rxhubs.ownership.changes"):
        changes[(attributes[CHANGE], attributes.get("rxhubs.ownership.reason"))] += value
    assert changes == Counter({("claimed", None): 4 + 2 + 2, ("released", None): 2, ("lost", "expired"): 2})
    assert [value for _, value in exported.points("rxhubs.partitions.owned")] == [4]
    # a's failed rounds are counted as errors of the group (no partition id)
    errors = by(exported.points("rxhubs.errors"), "messaging.operation.name")
    assert errors["list"] >= 3
    assert all(PID not in attributes for attributes, _ in exported.points("rxhubs.errors"))


def test_errors_are_counted_by_operation_marked_on_their_spans_and_never_carry_a_secret(exported: Exported) -> None:
    scheduler = TestScheduler()
    hub, store = InMemoryEventHub(partition_count=2), InMemoryCheckpointStore()
    hub.send([b"1", b"2"], partition_id="0")
    store.fail("list_ownership", times=1, error=StoreError(f"listing failed ({CONNECTION_STRING})", retriable=True))
    store.fail("update_checkpoint", times=1, error=StoreError(f"write refused: {CONNECTION_STRING}", retriable=True))
    attempts: Counter[str] = Counter()

    def work(batch: EventBatch) -> None:
        attempts[batch.partition_id] += 1
        if attempts[batch.partition_id] == 1:
            raise RuntimeError(f"enrichment service refused {CONNECTION_STRING}")

    rxhubs.consume(hub, GROUP, store, owner_id="me").pipe(hops.process(work), hops.checkpoint(store)).subscribe(
        scheduler=scheduler
    )
    scheduler.advance_to(30.0)
    assert attempts == Counter({"0": 2})

    errors = {
        (attributes["messaging.operation.name"], attributes["error.type"], attributes.get(PID)): value
        for attributes, value in exported.points("rxhubs.errors")
    }
    assert errors == {("list", "StoreError", None): 1, ("process", "RuntimeError", "0"): 1,
                      ("checkpoint", "StoreError", "0"): 1}
    failed, retried = exported.spans("process telemetry")
    assert (failed.attributes["rxhubs.attempt"], retried.attributes["rxhubs.attempt"]) == (1, 2)  # type: ignore[index]
    assert failed.status.status_code is StatusCode.ERROR and failed.attributes["error.type"] == "RuntimeError"  # type: ignore[index]
    [event] = [e for e in failed.events if e.name == "exception"]
    assert event.attributes["exception.type"] == "RuntimeError"  # type: ignore[index]
    assert "SharedAccessKey=***" in str(event.attributes["exception.message"])  # type: ignore[index]
    assert retried.status.status_code is StatusCode.UNSET and "error.type" not in (retried.attributes or {})
    write_failed, written = exported.spans("checkpoint telemetry")
    assert write_failed.status.status_code is StatusCode.ERROR and written.status.status_code is StatusCode.UNSET
    assert by(exported.points(WORK_TIME), "error.type") == {"RuntimeError": (1, 0.0), None: (1, 0.0)}
    assert by(exported.points("rxhubs.events.processed"), PID) == {"0": 2}  # counted once, when the work succeeded

    exported_text = "".join(span.to_json() for span in exported.spans()) + repr(exported.reader.get_metrics_data())
    assert KEY not in exported_text
    assert "ns.servicebus.windows.net" in exported_text  # endpoints are kept: they are what an operator needs


def test_without_balancing_failed_work_and_checkpoint_writes_are_counted_once_each(exported: Exported) -> None:
    scheduler = TestScheduler()
    hub, store = InMemoryEventHub(partition_count=1), InMemoryCheckpointStore()
    hub.send([b"1"], partition_id="0")
    store.fail("update_checkpoint", times=2)
    calls = 0

    def work(batch: EventBatch) -> None:
        nonlocal calls
        calls += 1
        if calls <= 3:
            raise ValueError("bad record")

    rxhubs.partition_batches(hub, "0").pipe(hops.process(work), hops.checkpoint(store)).subscribe(
        scheduler=scheduler
    )
    scheduler.advance_to(30.0)
    assert calls == 4
    errors = {
        (attributes["messaging.operation.name"], attributes["error.type"]): value
        for attributes, value in exported.points("rxhubs.errors")
    }
    assert errors == {("process", "ValueError"): 3, ("checkpoint", "StoreError"): 2}
    assert [s.status.status_code for s in exported.spans("checkpoint telemetry")] == [
        StatusCode.ERROR, StatusCode.ERROR, StatusCode.UNSET
    ]


class BrokenTracer(trace.Tracer):
    """A tracer that fails to start spans (a misconfigured SDK or exporter plug-in, say)."""

    def start_span(self, *args: Any, **kwargs: Any) -> trace.Span:
        raise RuntimeError("tracer broken")

    def start_as_current_span(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("tracer broken")


class BrokenTracerProvider(trace.TracerProvider):
    def get_tracer(self, *args: Any, **kwargs: Any) -> trace.Tracer:
        return BrokenTracer()


def test_a_failing_tracer_never_stops_the_pipeline_and_the_metrics_go_on(
    exported: Exported, caplog: pytest.LogCaptureFixture
) -> None:
    rxhubs.otel.instrument(tracer_provider=BrokenTracerProvider(), meter_provider=exported.meter_provider)
    scheduler = TestScheduler()
    hub, store = InMemoryEventHub(partition_count=1), InMemoryCheckpointStore()
    hub.send([b"1", b"2", b"3"], partition_id="0")
    done: list[int] = []
    with caplog.at_level(logging.DEBUG, logger="rxhubs.otel"):
        rxhubs.consume(hub, GROUP, store, owner_id="me", max_batch_size=1).pipe(
            hops.process(lambda batch: None), hops.checkpoint(store, max_interval=None, every=1)
        ).subscribe(lambda batch: done.append(batch.last_sequence_number), scheduler=scheduler)
        scheduler.advance_to(5.0)
    assert done == [0, 1, 2]
    _, checkpoints = store.peek(hub.fully_qualified_namespace, hub.eventhub_name, GROUP)
    assert [c.sequence_number for c in checkpoints] == [2]
    assert by(exported.points("rxhubs.events.processed"), PID) == {"0": 3}
    assert by(exported.points("rxhubs.ownership.changes"), PID) == {"0": 1}
    assert len(exported.points("rxhubs.checkpoint.age")) == 1
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert sorted(w.split(" in ")[1].split(" (")[0] for w in warnings) == [
        "checkpoint span", "claim span", "process span"
    ]  # once per kind; the repeats are DEBUG
    assert sum(r.levelno == logging.DEBUG for r in caplog.records) >= 4
