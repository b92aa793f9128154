"""Deliveries from the stored transfer frames: byte for byte what encoding each delivery afresh would send.

The emulator keeps every event as its transfer frame and patches the link fields per delivery
(``rxhubs.emulator._delivery``). A raw client reads three links of one session at different positions, two with
runtime metrics, and checks every frame: channel, handle, delivery id and tag, the frame equal to
``transfer_frames`` of the delivered message (the general encoder), and the message's fields decoded by pyamqp.
Then the unmodified azure-eventhub client reads every field back as it was sent, on two consumers at once.
"""

from __future__ import annotations

import asyncio
import datetime
import struct
from typing import Any

import pytest
from azure.eventhub import EventData
from azure.eventhub._pyamqp._decode import decode_payload
from azure.eventhub.aio import EventHubProducerClient as AioProducer

from rxhubs.emulator import Emulator
from rxhubs.emulator import _frames as fr
from rxhubs.emulator._codec import Described, Symbol, UInt, ULong, encode_value
from rxhubs.emulator._links import RUNTIME_METRIC
from rxhubs.emulator._message import _sections as sections_of
from rxhubs.emulator._partition_key import partition_for_key

from ._raw import RawClient, source, target
from ._sdk import AioReceiver

pytestmark = pytest.mark.timeout(60)

HUB = "h"
CG = f"amqps://127.0.0.1/{HUB}/ConsumerGroups/$Default/Partitions/0"
_HDR = struct.Struct(">IBBH")
MAX_FRAME = 65536  # what RawClient advertises: the 70 KB event goes out in two frames


def _messages() -> list[tuple[bytes, bytes, dict[Any, Any]]]:
    """(encoded message, body, application properties): plain, with a header, with the sender's delivery
    annotations, with application properties, empty, and larger than a frame."""
    header = b"\x00\x53\x70" + encode_value([True, None])
    sender_da = encode_value(Described(ULong(fr.SEC_DELIVERY_ANNOTATIONS), {Symbol("theirs"): "kept"}))
    app = {"kind": "reading", "n": 7, "ok": True}
    out = []
    for i, (prefix, body, props) in enumerate([
        (b"", b"plain", {}),
        (header, b"with a header", {}),
        (header + sender_da, b"with delivery annotations", {}),
        (header, b"with a header and properties", app),
        (b"", b"", {}),
        (b"", bytes(range(256)) * 280, {}),
        (b"", b"last", {"i": 6}),
    ]):
        sections = prefix
        if props:
            sections += encode_value(Described(ULong(fr.SEC_APPLICATION_PROPERTIES), props))
        out.append((sections + b"\x00\x53\x75" + encode_value(body), body, props))
        assert i == len(out) - 1
    return out


async def _read_frame(client: RawClient) -> tuple[bytes, int, fr.Performative | None]:
    head = await client.reader.readexactly(8)
    size, doff, _ftype, channel = _HDR.unpack(head)
    rest = await client.reader.readexactly(size - 8)
    body = rest[doff * 4 - 8 :]
    return head + rest, channel, fr.decode_performative(body) if body else None


async def test_links_at_different_positions_get_exact_frames() -> None:
    sent = _messages()
    async with Emulator(hubs={HUB: 1}) as emulator:
        client = await RawClient.connect(emulator.port)
        client.attach_sender(9, f"amqps://127.0.0.1/{HUB}/Partitions/0")
        await client.expect(fr.ATTACH)
        await _send(client, sent[:5], 0)
        # link 1 from the start; link 2 from sequence number 3 and link 3 from the start, both with runtime metrics
        # (as rxhubs receivers ask): link 2's first run is stored frames with the metrics joined in, link 3's
        # holds event 2, whose own delivery annotations are merged with the metrics by the general encoder
        client.attach_receiver(1, CG, "amqp.annotation.x-opt-offset > '-1'")
        ours = {1: (await client.expect(fr.ATTACH)).field(1)}
        for handle, selector in ((2, "amqp.annotation.x-opt-sequence-number >= '3'"),
                                 (3, "amqp.annotation.x-opt-offset > '-1'")):
            client.send(0, fr.ATTACH, [f"r{handle}", UInt(handle), True, None, None, source(CG, selector),
                                       target("me"), None, None, None, None, None, fr.symbols([RUNTIME_METRIC])])
            ours[handle] = (await client.expect(fr.ATTACH)).field(1)
        assert len(set(ours.values())) == 3
        got: dict[int, list[bytes]] = {h: [] for h in ours.values()}
        delivery_ids: list[int] = []
        # first the five small events (the stored frames, patched), then the rest: the 70 KB event makes its run
        # go through the general encoder, which splits it
        firsts = {1: 0, 2: 3, 3: 0}
        for handle, first in firsts.items():
            client.flow(handle, credit=5 - first)
        await _collect(client, got, delivery_ids, {ours[h]: 5 - first for h, first in firsts.items()})
        await _send(client, sent[5:], 5)  # no link has credit left: nothing is delivered meanwhile
        for handle, first in firsts.items():
            client.flow(handle, credit=100, delivery_count=5 - first)
        await _collect(client, got, delivery_ids, {ours[h]: len(sent) - first for h, first in firsts.items()})
        await client.close()
    assert delivery_ids == list(range(len(delivery_ids)))  # one session: consecutive ids across all links
    for handle, first in firsts.items():
        link = ours[handle]
        assert len(got[link]) == len(sent) - first
        offsets = []
        for seq, message in enumerate(got[link], start=first):
            codes = [code for code, *_ in sections_of(message)]
            assert codes == sorted(codes) and codes.count(fr.SEC_DELIVERY_ANNOTATIONS) <= 1  # in spec order
            decoded = decode_payload(memoryview(message))
            _, body, props = sent[seq]
            assert decoded.data == [body]
            assert (decoded.application_properties or {}) == _as_decoded(props)
            ann = decoded.message_annotations
            assert ann[b"x-opt-sequence-number"] == seq
            offsets.append(int(ann[b"x-opt-offset"]))
            assert ann[b"x-opt-enqueued-time"] > 0
            assert (decoded.header is not None) == (seq in (1, 2, 3))
            da = decoded.delivery_annotations or {}
            if handle != 1:
                assert da[b"last_enqueued_sequence_number"] == (4 if seq < 5 else len(sent) - 1)  # as sent then
            else:
                assert b"last_enqueued_sequence_number" not in da
            assert (da.get(b"theirs") == b"kept") == (seq == 2)
        assert offsets == sorted(set(offsets))


async def _send(client: RawClient, messages: list[tuple[bytes, bytes, dict[Any, Any]]], first: int) -> None:
    for i, (message, _, _) in enumerate(messages, start=first):
        client.send(0, fr.TRANSFER, [UInt(9), UInt(i), bytes([0, 0, 0, i]), UInt(0), False, False], message)
        assert (await client.expect(fr.DISPOSITION)).field(4).descriptor == fr.ACCEPTED


def _as_decoded(props: dict[str, Any]) -> dict[bytes, Any]:
    """Application properties as pyamqp decodes them (strings as bytes)."""
    return {k.encode(): v.encode() if isinstance(v, str) else v for k, v in props.items()}


async def _collect(client: RawClient, got: dict[int, list[bytes]], delivery_ids: list[int],
                   until: dict[int, int]) -> None:
    """Read transfers until each link has ``until[handle]`` messages, checking every frame."""
    partial = b""
    frames: list[bytes] = []
    async with asyncio.timeout(30):
        while any(len(got[handle]) < n for handle, n in until.items()):
            raw, channel, perf = await _read_frame(client)
            if perf is None or perf.code != fr.TRANSFER:
                continue
            assert channel == 0
            assert len(raw) <= MAX_FRAME
            frames.append(raw)
            partial += perf.payload
            if perf.field(5):  # more: a multi-frame delivery continues
                continue
            delivery_id, handle = perf.field(1), perf.field(0)
            assert perf.field(2) == struct.pack(">I", delivery_id)  # the tag is the delivery id
            assert perf.field(4) is False and perf.field(3) == 0
            # the frames are exactly what encoding the delivered message afresh gives
            assert b"".join(frames) == b"".join(fr.transfer_frames(0, handle, delivery_id, partial, False,
                                                                   MAX_FRAME))
            delivery_ids.append(delivery_id)
            got[handle].append(partial)
            partial, frames = b"", []


async def test_sdk_consumers_at_two_positions_read_every_field_as_sent() -> None:
    """The unmodified aio client, two consumers at once at different positions (one tracking last-enqueued
    properties, so its deliveries carry runtime metrics): every field is what was sent, and the two agree."""
    count = 12
    async with Emulator(hubs={HUB: 2}) as emulator:
        conn = emulator.connection_string(HUB)
        before = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=1)
        async with AioProducer.from_connection_string(conn) as producer:
            batch = await producer.create_batch(partition_key="device-7")
            for i in range(count):
                batch.add(_event(i))
            await producer.send_batch(batch)
        after = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=1)
        pid = str(partition_for_key("device-7", 2))
        async with (AioReceiver(conn, pid, starting_position="-1", track_last_enqueued_event_properties=True) as a,
                    AioReceiver(conn, pid, starting_position=5, starting_position_inclusive=True) as b):
            first, second = await asyncio.gather(a.wait_events(count), b.wait_events(count - 5))
    assert [e.sequence_number for e in first] == list(range(count))
    assert [e.sequence_number for e in second] == list(range(5, count))
    for event in first + second:
        i = event.sequence_number
        sent = _event(i)
        assert event.body_as_str() == sent.body_as_str()
        assert event.properties == _as_decoded(sent.properties)
        assert (event.content_type, event.correlation_id, event.message_id) == (
            sent.content_type, sent.correlation_id, sent.message_id)
        assert event.partition_key in ("device-7", b"device-7")
        assert before <= event.enqueued_time <= after
    for mine, theirs in zip(first[5:], second, strict=True):  # the same stored event, read on two links
        assert (mine.offset, mine.enqueued_time, mine.sequence_number) == (
            theirs.offset, theirs.enqueued_time, theirs.sequence_number)
    offsets = [int(e.offset) for e in first]
    assert offsets == sorted(set(offsets))
    tracked = first[-1].raw_amqp_message.delivery_annotations
    assert tracked[b"last_enqueued_sequence_number"] == count - 1
    assert b"last_enqueued_sequence_number" not in (second[-1].raw_amqp_message.delivery_annotations or {})


def _event(i: int) -> EventData:
    event = EventData(f"event {i} ".encode() * (1 + 40 * i))  # 8 bytes to about 4 KB
    event.properties = {"i": i, "kind": "reading", "ratio": i / 2, "even": i % 2 == 0}
    event.content_type = "application/json"
    event.correlation_id = f"corr-{i}"
    event.message_id = f"message-{i}"
    return event
