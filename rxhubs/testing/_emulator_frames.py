"""Transfer frames as the rxhubs emulator sends them, for tests and the ``decode`` benchmark (private).

The bytes a receive connection carries: an event encoded by the SDK's producer encoder, stored and stamped by
the emulator (sequence number, offset, enqueued time; runtime metrics if asked) and framed as it frames a
delivery. ``tests/transport/test_frames.py`` parses them with both frame readers; ``rxhubs bench decode`` times
them.
"""

from __future__ import annotations

import os

__all__ = ["emulator_frames"]


def emulator_frames(body_size: int, properties: int = 0, metrics: bool = False, count: int = 64) -> bytes:
    """``count`` transfer frames as the emulator sends them (channel 1, handle 0)."""
    from azure.eventhub import EventData
    from azure.eventhub._pyamqp._encode import encode_payload
    from azure.eventhub._transport._pyamqp_transport import PyamqpTransport

    from rxhubs.emulator import _frames as fr
    from rxhubs.emulator import _message as msg

    event = EventData(os.urandom(body_size))
    for i in range(properties):
        event.properties[f"property-{i}"] = f"value-{i}"
    outgoing = PyamqpTransport.to_outgoing_amqp_message(event.raw_amqp_message)  # type: ignore[no-untyped-call]
    sent = bytes(encode_payload(bytearray(), outgoing))
    prepared = msg.prepare(sent)
    now = 1_767_225_600_000
    out = []
    for n in range(count):
        stored, da = msg.stamp(prepared, 1_000_000 + n, 4096 * n, now + n, None)
        if metrics:
            stored = msg.with_delivery_annotations(stored, da, msg.runtime_metrics(1_000_000 + count, 0, now, now))
        out += fr.transfer_frames(1, 0, n, stored, True, 1 << 20)
    return b"".join(out)
