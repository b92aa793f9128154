"""Bad input across the public API (hypothesis): positions, store records, partition ids.

Whatever a caller passes, the answer is a :class:`~rxhubs.errors.ConfigurationError` at the call (or a
:class:`~rxhubs.errors.NotFoundError` for an unknown partition), never a stray ``TypeError``/``ValueError``
from deep inside, and never a record a store accepts but cannot read back. Connection strings
(``tests/transport/test_connection_string.py``), ``Position.coerce`` (``tests/test_models.py``) and AMQP frames
(``tests/emulator/test_fuzz.py``) have their own tests.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rxhubs
from rxhubs import Checkpoint, Ownership, Position
from rxhubs.errors import ConfigurationError, NotFoundError
from rxhubs.stores import InMemoryCheckpointStore, SqliteCheckpointStore
from rxhubs.testing import InMemoryEventHub

NOT_A_POSITION = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=8), st.binary(max_size=8),
    st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
).filter(lambda v: v is not None)

KEY_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=1, max_size=40)
JUNK = st.one_of(st.none(), st.booleans(), st.floats(), st.binary(max_size=4), st.lists(st.integers(), max_size=2))


@settings(max_examples=80, deadline=None)
@given(value=NOT_A_POSITION)
def test_receiver_start_must_be_a_position(value: Any) -> None:
    hub = InMemoryEventHub(partition_count=2)
    with pytest.raises(ConfigurationError):
        hub.receiver("0", start=value)


@settings(max_examples=80, deadline=None)
@given(value=NOT_A_POSITION, as_mapping=st.booleans())
def test_consume_and_partition_batches_reject_non_positions_at_the_call(value: Any, as_mapping: bool) -> None:
    hub = InMemoryEventHub(partition_count=2)
    store = InMemoryCheckpointStore()
    start = {"0": value} if as_mapping else value

    def position(v: Any) -> bool:  # consume also takes azure-eventhub's forms ("-1", "@latest", 42, "8192", ...)
        try:
            rxhubs.Position.coerce(v)
        except ConfigurationError:
            return False
        return True

    if isinstance(start, dict):
        sdk_form = all(isinstance(k, str) and position(v) for k, v in start.items())
    else:
        sdk_form = position(start)
    if sdk_form:
        rxhubs.consume(hub, "$Default", store, start=start)
        rxhubs.consume(hub, "$Default", store, default_start=start)
    elif start != {}:  # an empty mapping is a valid start (and default_start): no partition named
        with pytest.raises(ConfigurationError):
            rxhubs.consume(hub, "$Default", store, start=start)
        with pytest.raises(ConfigurationError):
            rxhubs.consume(hub, "$Default", store, default_start=start)
    with pytest.raises(ConfigurationError):
        rxhubs.partition_batches(hub, "0", start=value)


@settings(max_examples=60, deadline=None)
@given(
    kind=st.sampled_from(["sequence_number", "offset", "enqueued_time", "earliest", "latest", "nonsense"]),
    value=st.one_of(JUNK, st.integers(max_value=-2), st.text(max_size=6)),
    inclusive=st.one_of(st.booleans(), JUNK),
)
def test_positions_built_by_hand_are_checked(kind: str, value: Any, inclusive: Any) -> None:
    try:
        position = Position(kind, value, inclusive)  # type: ignore[arg-type]
    except ConfigurationError:
        return
    # what was accepted is a well-formed position
    assert isinstance(position.inclusive, bool)
    if position.kind == "sequence_number":
        assert isinstance(position.value, int) and position.value >= -1
    elif position.kind == "offset":
        # opaque (digits, or a geo-replicated namespace's form): only what would break the receiver's filter is out
        value = position.value
        assert isinstance(value, str) and value and value.isprintable() and not {" ", "'"} & set(value)
    elif position.kind == "enqueued_time":
        assert isinstance(position.value, dt.datetime)
    else:
        assert position.kind in ("earliest", "latest") and position.value is None


@settings(max_examples=40, deadline=None)
@given(partition_id=st.one_of(KEY_TEXT.filter(lambda p: p not in ("0", "1")), st.integers(), JUNK))
def test_unknown_or_malformed_partition_ids(partition_id: Any) -> None:
    hub = InMemoryEventHub(partition_count=2)

    async def pull() -> None:
        async with hub.receiver(partition_id) as receiver:
            await receiver.receive_batch(1, max_wait=0.01)

    with pytest.raises((ConfigurationError, NotFoundError)):
        asyncio.run(pull())


# -- store records ----------------------------------------------------------------------------------------


@settings(max_examples=80, deadline=None)
@given(
    field=st.sampled_from(["fully_qualified_namespace", "eventhub_name", "consumer_group", "partition_id",
                           "offset", "sequence_number"]),
    value=st.one_of(JUNK, st.integers(min_value=2**63), st.integers(max_value=-2), st.just(""), st.text(max_size=4)),
)
def test_checkpoint_records_are_checked_when_built(field: str, value: Any) -> None:
    fields: dict[str, Any] = {
        "fully_qualified_namespace": "ns", "eventhub_name": "hub", "consumer_group": "$Default",
        "partition_id": "0", "offset": "12", "sequence_number": 3,
    }
    fields[field] = value
    try:
        checkpoint = Checkpoint(**fields)
    except ConfigurationError:
        return
    assert isinstance(checkpoint.sequence_number, int) and not isinstance(checkpoint.sequence_number, bool)
    assert -1 <= checkpoint.sequence_number < 2**63
    assert checkpoint.offset is None or isinstance(checkpoint.offset, str)
    assert all(isinstance(getattr(checkpoint, k), str) for k in list(fields)[:4]) and checkpoint.partition_id


@settings(max_examples=60, deadline=None)
@given(
    field=st.sampled_from(["partition_id", "owner_id", "last_modified_time", "etag"]),
    value=st.one_of(JUNK, st.integers(), st.text(max_size=4)),
)
def test_ownership_records_are_checked_when_built(field: str, value: Any) -> None:
    fields: dict[str, Any] = {
        "fully_qualified_namespace": "ns", "eventhub_name": "hub", "consumer_group": "$Default",
        "partition_id": "0", "owner_id": "a", "last_modified_time": None, "etag": None,
    }
    fields[field] = value
    try:
        ownership = Ownership(**fields)
    except ConfigurationError:
        return
    assert isinstance(ownership.owner_id, str) and isinstance(ownership.partition_id, str) and ownership.partition_id
    assert ownership.etag is None or isinstance(ownership.etag, str)
    assert ownership.last_modified_time is None or isinstance(ownership.last_modified_time, int | float)


STORES: dict[str, Callable[[Path], Any]] = {
    "memory": lambda _: InMemoryCheckpointStore(),
    "sqlite": lambda tmp: SqliteCheckpointStore(tmp / f"{uuid.uuid4().hex}.sqlite"),
}


@pytest.mark.parametrize("kind", sorted(STORES))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    partition_ids=st.lists(KEY_TEXT, min_size=1, max_size=4, unique_by=str.lower),
    owner=KEY_TEXT,
    numbers=st.lists(st.integers(-1, 2**63 - 1), min_size=4, max_size=4),
    offsets=st.lists(st.one_of(st.none(), st.integers(0, 2**63 - 1).map(str)), min_size=4, max_size=4),
)
def test_any_well_formed_record_round_trips(
    kind: str, tmp_path: Path, partition_ids: list[str], owner: str, numbers: list[int], offsets: list[str | None]
) -> None:
    """Odd but valid keys (unicode, '/', spaces, case) and extreme numbers come back exactly as written."""

    async def scenario() -> None:
        store = STORES[kind](tmp_path)
        try:
            checkpoints = [
                Checkpoint("ns", "hub", "$Default", pid, offsets[i], numbers[i]) for i, pid in enumerate(partition_ids)
            ]
            for checkpoint in checkpoints:
                await store.update_checkpoint(checkpoint)
            # keys are case-insensitive (the blob layout lower-cases them; so may any store)
            got = {c.partition_id.lower(): (c.offset, c.sequence_number) for c in await store.list_checkpoints(
                "ns", "hub", "$Default")}
            assert got == {c.partition_id.lower(): (c.offset, c.sequence_number) for c in checkpoints}
            won = await store.claim_ownership([Ownership("ns", "hub", "$Default", p, owner) for p in partition_ids])
            assert sorted(o.partition_id.lower() for o in won) == sorted(p.lower() for p in partition_ids)
            listed = {o.partition_id.lower(): o.owner_id for o in await store.list_ownership("ns", "hub", "$Default")}
            assert listed == dict.fromkeys((p.lower() for p in partition_ids), owner)
        finally:
            await store.close()

    asyncio.run(scenario())
