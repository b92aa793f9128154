"""Events received over azure-eventhub decode each field on first read, and are Events in every other way."""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import pickle

import pytest
from azure.eventhub import EventData

from rxhubs import Event
from rxhubs.transport._convert import ReceivedEvent, event_from_sdk, received_events


def _data(seq: int, body: bytes = b"payload") -> EventData:
    data = EventData(body)
    data.properties = {"kind": "reading", "n": seq}
    data.raw_amqp_message.annotations = {
        b"x-opt-sequence-number": seq,
        b"x-opt-offset": str(seq * 100).encode(),
        b"x-opt-enqueued-time": 1767225600000 + seq,
        b"x-opt-partition-key": b"device-7",
    }
    return data


def test_nothing_is_decoded_until_read() -> None:
    data = _data(3)
    (event,) = received_events([data])
    slot = Event.__dict__["body"]
    with pytest.raises(AttributeError):
        slot.__get__(event, Event)  # the body slot is still empty
    assert event.body == b"payload"
    assert slot.__get__(event, Event) == b"payload"  # decoded once, then kept
    assert event.sequence_number == 3


def test_every_field_equals_the_eager_conversion() -> None:
    data = _data(41, b'{"t": 21.5}')
    (lazy,) = received_events([data])
    eager = event_from_sdk(data)
    for field in dataclasses.fields(Event):
        assert getattr(lazy, field.name) == getattr(eager, field.name), field.name
    assert lazy == eager and eager == lazy
    assert lazy.enqueued_time == dt.datetime.fromtimestamp(1767225600.041, dt.UTC)
    assert lazy.partition_key == "device-7" and lazy.offset == "4100"
    assert lazy.body_as_json() == {"t": 21.5}
    assert repr(lazy) == repr(eager).replace("Event(", "ReceivedEvent(", 1)


def test_it_is_immutable() -> None:
    (event,) = received_events([_data(1)])
    with pytest.raises((AttributeError, dataclasses.FrozenInstanceError)):
        event.body = b"changed"  # type: ignore[misc]
    with pytest.raises((AttributeError, dataclasses.FrozenInstanceError)):
        event.sequence_number = 9  # type: ignore[misc]
    assert event.body == b"payload" and event.sequence_number == 1


def test_pickles_copies_and_replaces_as_a_plain_event() -> None:
    (event,) = received_events([_data(5)])
    for other in (pickle.loads(pickle.dumps(event)), copy.copy(event), copy.deepcopy(event)):
        assert type(other) is Event and other == event
    changed = dataclasses.replace(event, body=b"other")
    assert type(changed) is Event
    assert changed.body == b"other" and changed.sequence_number == 5 and changed.properties == event.properties
    assert dataclasses.asdict(event)["offset"] == "500"


def test_is_an_event_and_compares_across_kinds() -> None:
    a, b = received_events([_data(7), _data(8)])
    assert isinstance(a, Event) and isinstance(a, ReceivedEvent)
    assert a != b and a == event_from_sdk(_data(7))
    assert (a == "not an event") is False


def test_messages_read_directly_decode_like_the_sdk_events() -> None:
    from azure.eventhub._pyamqp.message import Message, Properties

    from rxhubs.transport._convert_messages import last_enqueued_from_message, received_messages

    annotations = {
        b"x-opt-sequence-number": 12, b"x-opt-offset": b"1200", b"x-opt-enqueued-time": 1767225600000,
        b"x-opt-partition-key": b"k",
    }
    message = Message(
        data=[b"par", b"ts"], message_annotations=annotations, application_properties={b"kind": b"reading"},
        properties=Properties(message_id=b"m-1", content_type=b"application/json"),
        delivery_annotations={
            b"last_enqueued_sequence_number": 40, b"last_enqueued_offset": b"4000",
            b"last_enqueued_time_utc": 1767225601000, b"runtime_info_retrieval_time_utc": 1767225602000,
        },
    )
    (event,) = received_messages([message])
    eager = event_from_sdk(EventData._from_message(message))
    assert event == eager
    assert event.body == b"parts" and event.properties == {"kind": "reading"}
    system = event.system_properties
    assert system["message-id"] == "m-1" and system["content-type"] == "application/json"
    assert type(pickle.loads(pickle.dumps(event))) is Event
    last = last_enqueued_from_message(message)
    assert last is not None and last.sequence_number == 40 and last.offset == "4000"
    assert last.enqueued_time == dt.datetime.fromtimestamp(1767225601, dt.UTC)
    assert last_enqueued_from_message(Message(data=[b"x"])) is None


def test_direct_path_version_guard() -> None:
    from rxhubs.transport._direct import sdk_version_supported

    assert sdk_version_supported("5.11.0") and sdk_version_supported("5.15.1")
    assert not sdk_version_supported("5.10.9") and not sdk_version_supported("6.0.0")
    assert not sdk_version_supported("not-a-version")


def test_a_plain_message_leaves_only_its_annotations_behind() -> None:
    import gc

    from azure.eventhub._pyamqp.message import Message

    from rxhubs.transport._convert_messages import ReceivedAnnotations, ReceivedMessage, received_messages

    annotations = {b"x-opt-sequence-number": 9, b"x-opt-offset": b"900", b"x-opt-enqueued-time": 1767225600009,
                   b"x-opt-partition-key": b"k"}
    plain = Message(data=[b"body"], message_annotations=annotations)
    with_properties = Message(data=[b"body"], message_annotations=annotations, application_properties={b"a": 1})
    event, other = received_messages([plain, with_properties])
    assert type(event) is ReceivedAnnotations and type(other) is ReceivedMessage
    # nothing of the message but its annotations (a dict the collector does not track) stays with the event
    referents = gc.get_referents(event)
    assert not any(r is plain or r is plain.data for r in referents)
    assert any(r is annotations for r in referents) and not gc.is_tracked(annotations)
    eager = event_from_sdk(EventData._from_message(plain))
    for field in dataclasses.fields(Event):
        assert getattr(event, field.name) == getattr(eager, field.name), field.name
    assert event == eager and type(pickle.loads(pickle.dumps(event))) is Event
    assert event.system_properties == {"x-opt-sequence-number": 9, "x-opt-offset": "900",
                                       "x-opt-enqueued-time": 1767225600009, "x-opt-partition-key": "k"}
    assert not gc.is_tracked(event.system_properties) and event.properties == {}
    assert other.properties == {"a": 1} and any(r is with_properties for r in gc.get_referents(other))


def test_system_properties_answer_as_their_dict() -> None:
    from rxhubs.transport._convert import SystemProperties

    system = SystemProperties({b"x-opt-offset": b"896", b"x-opt-sequence-number": 7}, None)
    expected = {"x-opt-offset": "896", "x-opt-sequence-number": 7}
    assert system.get("x-opt-offset") == "896" and system.get("missing") is None and system.get("missing", 3) == 3
    assert "x-opt-offset" in system and "missing" not in system
    assert list(system.keys()) == list(expected) and list(system.values()) == list(expected.values())
    assert dict(system.items()) == expected and system == expected


def test_an_event_without_sequence_number_is_a_frame_error_on_the_public_path_too() -> None:
    """The SDK's receive_batch path (RXHUBS_DIRECT_RECEIVE=0): a damaged annotations section code left the event
    without annotations; it used to fail as a KeyError of b'x-opt-sequence-number' wrapped in a TransportError."""
    from rxhubs.transport._frame_errors import FrameError

    good, lost = _data(1), _data(2)
    lost.raw_amqp_message.annotations = None
    with pytest.raises(FrameError, match="no sequence number") as caught:
        received_events([good, lost])
    assert caught.value.retriable
    assert [e.sequence_number for e in received_events([good])] == [1]
