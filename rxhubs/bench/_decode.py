"""Scenario ``decode``: the decode cost per event, the compiled frame reader against pyamqp's decoder.

The frames are the emulator's own: each event is sent by the SDK's encoder (``EventData`` as the producer
encodes it), stored and stamped by the emulator (sequence number, offset, enqueued time; with runtime metrics
when the consumer tracks last-enqueued properties) and framed as the emulator frames a delivery, so the bytes
are those a receive connection carries. Shapes: 64 B, 1 KB, 1 KB with 5 application properties, 1 KB with
runtime metrics, 16 KB.

* rxhubs: one :func:`parse <rxhubs.transport._framing_py.parse>` call per chunk of 64 frames (the native loop's
  way), giving pyamqp ``Message`` tuples;
* baseline: pyamqp's own work per frame, ``decode_frame`` then ``decode_payload`` (what its receive loop calls
  for every transfer; its socket reads, tasks and bookkeeping are not counted here).

With the compiled reader, a second figure per shape (``events_us_per_event_*``): frames to the receive path's
events, ``parse_events`` (events made in the reader) against ``parse_frames`` followed by the compiled wrapping
of each ``Message`` (the native path before the events were made in the reader).

Microseconds of CPU per event, best of several rounds; lower is better. The reader used is the one receivers use
(:func:`rxhubs.transport._frames.compiled_reader`), or the Python build when there is none (said in the figure).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from rxhubs.bench._report import figure, sized
from rxhubs.testing._emulator_frames import emulator_frames

CHUNK = 64  # frames per chunk (emulator_frames' default count)


def _best(work: Callable[[], Any], rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        start = time.process_time()
        work()
        best = min(best, time.process_time() - start)
    return best


def run(args: Any = None) -> list[dict[str, Any]]:
    from azure.eventhub._pyamqp._decode import decode_frame, decode_payload

    from rxhubs.transport import _framing_py
    from rxhubs.transport._frames import compiled_reader

    reader = compiled_reader() or _framing_py
    compiled = reader is not _framing_py
    repeat = sized(args, 60, 20, 2)
    rounds = sized(args, 7, 3, 1)
    shapes = {"64B": (64, 0, False), "1KB": (1024, 0, False), "1KB_5props": (1024, 5, False),
              "1KB_metrics": (1024, 0, True), "16KB": (16384, 0, False)}
    figures = []
    for name, (size, properties, metrics) in shapes.items():
        chunk = emulator_frames(size, properties, metrics)
        bodies = []
        pos = 0
        while pos < len(chunk):
            length = int.from_bytes(chunk[pos:pos + 4], "big")
            bodies.append(memoryview(chunk[pos + 8:pos + length]))
            pos += length
        messages, consumed, other, _ = reader.parse(chunk, 1, 0)
        assert len(messages) == CHUNK and consumed == len(chunk) and other is None
        # same values as pyamqp's (the last message: only a chunk's last has its delivery annotations decoded)
        assert messages[-1] == decode_payload(decode_frame(bodies[-1])[1][-1])

        def native(chunk: bytes = chunk) -> None:
            for _ in range(repeat):
                reader.parse(chunk, 1, 0)

        def pyamqp(bodies: list[memoryview] = bodies) -> None:
            for _ in range(repeat):
                for body in bodies:
                    decode_payload(decode_frame(body)[1][-1])

        events = repeat * CHUNK
        ours = _best(native, rounds) / events * 1e6
        theirs = _best(pyamqp, rounds) / events * 1e6
        figures.append(figure(
            "decode", f"decode_us_per_event_{name}", "us/event", round(ours, 2), round(theirs, 2),
            "pyamqp decode_frame + decode_payload", ">= 3.0x", higher_is_better=False,
            reader="compiled" if compiled else "python (no compiled reader)", load_average=os.getloadavg()[0],
        ))
        if compiled and hasattr(reader, "parse_events"):
            figures.append(_events_figure(reader, name, chunk, repeat, rounds))
    return figures


def _events_figure(reader: Any, name: str, chunk: bytes, repeat: int, rounds: int) -> dict[str, Any]:
    """Frames to the receive path's events: ``parse_events`` against ``parse_frames`` + wrapping each ``Message``.

    The baseline is the native path before the events were made in the reader (2026-11-29, cut (b)).
    """
    from rxhubs.transport._frames import event_wrapper

    wrap = event_wrapper()
    assert reader.parse_events(chunk, 1, 0)[0] == wrap(reader.parse_frames(chunk, 1, 0)[0])

    def made(chunk: bytes = chunk) -> None:
        for _ in range(repeat):
            reader.parse_events(chunk, 1, 0)

    def wrapped(chunk: bytes = chunk) -> None:
        for _ in range(repeat):
            wrap(reader.parse_frames(chunk, 1, 0)[0])

    events = repeat * CHUNK
    return figure(
        "decode", f"events_us_per_event_{name}", "us/event", round(_best(made, rounds) / events * 1e6, 2),
        round(_best(wrapped, rounds) / events * 1e6, 2), "parse_frames + received_messages (Message tuples wrapped)",
        ">= 1.0x", higher_is_better=False, reader="compiled", load_average=os.getloadavg()[0],
    )
