"""Models: frozen records, positions and their validation, batches."""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rxhubs import Checkpoint, CloseReason, Event, EventBatch, Ownership, PartitionContext, Position
from rxhubs.errors import ConfigurationError

UTC = dt.UTC
T0 = dt.datetime(2026, 1, 1, tzinfo=UTC)
CTX = PartitionContext("ns.servicebus.windows.net", "telemetry", "$Default", "3")


def event(seq: int, body: bytes = b"x") -> Event:
    return Event(body, seq, str(seq * 100), T0)


def test_records_are_frozen() -> None:
    records = [
        (event(1), "body"),
        (CTX, "partition_id"),
        (Checkpoint.of(CTX, event(1)), "sequence_number"),
        (Ownership("n", "h", "c", "0", "me"), "owner_id"),
        (Position.earliest(), "kind"),
        (EventBatch(CTX, ()), "events"),
    ]
    for record, field in records:
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(record, field, None)


def test_event_body_helpers() -> None:
    e = Event('{"t": "é"}'.encode(), 0, "0", T0)
    assert e.body_as_str() == '{"t": "é"}'
    assert e.body_as_json() == {"t": "é"}


def test_batch_is_a_sequence_with_first_and_last_sequence_numbers() -> None:
    batch = EventBatch(CTX, (event(4), event(5), event(6)))
    assert len(batch) == 3 and [e.sequence_number for e in batch] == [4, 5, 6]
    assert batch[1].sequence_number == 5
    assert (batch.first_sequence_number, batch.last_sequence_number) == (4, 6)
    assert batch.partition_id == "3"
    assert batch.last_event == event(6)
    empty = EventBatch(CTX, ())
    assert empty.first_sequence_number is None and empty.last_event is None
    assert bool(empty) is True  # an empty heartbeat batch is still a value


def test_hold_without_a_source_is_harmless_and_with_events_keeps_accounting() -> None:
    batch = EventBatch(CTX, (event(1),))
    ack = batch.hold()
    ack()
    ack()
    filtered = batch.with_events([])
    assert filtered.context == CTX and len(filtered) == 0


def test_checkpoint_resumes_just_after_its_event() -> None:
    cp = Checkpoint.of(CTX, event(41))
    assert (cp.partition_id, cp.sequence_number, cp.offset) == ("3", 41, "4100")
    assert cp.position() == Position.from_sequence_number(41, inclusive=False)


def test_released_ownership() -> None:
    assert Ownership("n", "h", "c", "0", "").is_released
    assert not Ownership("n", "h", "c", "0", "a").is_released


def test_close_reasons() -> None:
    assert {r.name for r in CloseReason} >= {"SHUTDOWN", "OWNERSHIP_LOST"}


def test_positions() -> None:
    assert Position.earliest().inclusive and Position.latest().kind == "latest"
    assert Position.from_offset(12).value == "12"
    naive = dt.datetime(2026, 1, 1, 12, 0)
    assert Position.from_enqueued_time(naive).value == naive.replace(tzinfo=UTC)
    assert Position.coerce("-1") == Position.earliest()
    assert Position.coerce("@latest") == Position.latest()
    assert Position.coerce(7) == Position.from_sequence_number(7)
    assert Position.coerce(T0) == Position.from_enqueued_time(T0)


@pytest.mark.parametrize(
    "make",
    [
        lambda: Position.from_sequence_number(-2),
        lambda: Position.from_sequence_number("5"),  # type: ignore[arg-type]
        lambda: Position.from_sequence_number(True),
        lambda: Position.from_offset("a b"),
        lambda: Position.from_offset(""),
        lambda: Position.from_offset(1.5),  # type: ignore[arg-type]
        lambda: Position.from_enqueued_time("yesterday"),  # type: ignore[arg-type]
        lambda: Position("somewhere"),  # type: ignore[arg-type]
        lambda: Position("earliest", 3),
        lambda: Position.from_sequence_number(1, inclusive="yes"),  # type: ignore[arg-type]
        lambda: Position.coerce(object()),
        lambda: Position.coerce(2.5),
    ],
)
def test_invalid_positions_raise_configuration_error(make: object) -> None:
    with pytest.raises(ConfigurationError):
        make()  # type: ignore[operator]


@given(st.one_of(st.none(), st.booleans(), st.floats(), st.text(), st.binary(), st.lists(st.integers()), st.integers()))
def test_coerce_accepts_or_raises_only_configuration_error(value: object) -> None:
    try:
        position = Position.coerce(value)
    except ConfigurationError:
        return
    assert isinstance(position, Position)


def test_the_transports_fast_constructor_builds_the_same_frozen_record() -> None:
    fast = Event._unchecked(b"x", 3, "300", T0, "key", {"a": 1}, {"x-opt-offset": "300"})
    slow = Event(b"x", 3, "300", T0, "key", {"a": 1}, {"x-opt-offset": "300"})
    assert fast == slow and repr(fast) == repr(slow) and hash(fast.body) == hash(slow.body)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.body = b"y"  # type: ignore[misc]
