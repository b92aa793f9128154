"""Robustness: malformed, truncated and mutated frames and abrupt disconnects only ever close that connection."""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rxhubs.emulator import BackgroundEmulator
from rxhubs.emulator import _frames as fr
from rxhubs.emulator._codec import Symbol, UInt

from ._raw import data_message, source, target

pytestmark = pytest.mark.timeout(120)

HUB = "h"
CG = f"amqps://127.0.0.1/{HUB}/ConsumerGroups/$Default/Partitions/0"


def _perf(code: int, fields: list[object], payload: bytes = b"", channel: int = 0) -> bytes:
    return fr.frame(channel, fr.performative(code, fields) + payload)


SASL = fr.SASL_HEADER + fr.frame(0, fr.performative(fr.SASL_INIT, [Symbol("ANONYMOUS"), b"", None]), fr.SASL_FRAME)
OPEN = _perf(fr.OPEN, ["fuzz", None, UInt(65536), None, None])
BEGIN = _perf(fr.BEGIN, [None, UInt(0), UInt(100), UInt(100)])
ATTACH_SENDER = _perf(fr.ATTACH, ["s", UInt(1), False, None, None, source("me"), target(f"/{HUB}"), None, None,
                                  UInt(0)])
ATTACH_RECEIVER = _perf(fr.ATTACH, ["r", UInt(2), True, None, None,
                                    source(CG, "amqp.annotation.x-opt-offset > '-1'"), target("me")])
STAGES = [
    b"",
    fr.SASL_HEADER,
    SASL,
    SASL + fr.AMQP_HEADER,
    SASL + fr.AMQP_HEADER + OPEN,
    SASL + fr.AMQP_HEADER + OPEN + BEGIN,
    SASL + fr.AMQP_HEADER + OPEN + BEGIN + ATTACH_SENDER,
    SASL + fr.AMQP_HEADER + OPEN + BEGIN + ATTACH_SENDER + ATTACH_RECEIVER,
    fr.AMQP_HEADER + OPEN + BEGIN + ATTACH_RECEIVER,
]
FRAMES = [
    OPEN,
    BEGIN,
    ATTACH_SENDER,
    ATTACH_RECEIVER,
    _perf(fr.TRANSFER, [UInt(1), UInt(0), b"t", UInt(0), False, False], data_message(b"payload")),
    _perf(fr.TRANSFER, [UInt(1), UInt(0), b"t", UInt(fr.BATCH_FORMAT), False, False],
          b"\x00\x53\x75" + bytes([0xA0, len(data_message(b"inner"))]) + data_message(b"inner")),
    _perf(fr.TRANSFER, [UInt(1), UInt(1), b"u", UInt(0), False, True], b"\x00\x53\x75\xb0\x00\x01"),
    _perf(fr.FLOW, [UInt(0), UInt(100), UInt(0), UInt(100), UInt(2), UInt(0), UInt(50), None, False, True]),
    _perf(fr.DISPOSITION, [True, UInt(0), None, True, None]),
    _perf(fr.DETACH, [UInt(2), True, None]),
    _perf(fr.DETACH, [UInt(77), True, None]),
    _perf(fr.END, [None]),
    _perf(fr.CLOSE, [None]),
    _perf(fr.ATTACH, ["x", UInt(1), False, None, None, None, None]),
    fr.EMPTY_FRAME,
]


@st.composite
def garbage(draw: st.DrawFn) -> bytes:
    stage = draw(st.sampled_from(STAGES))
    kind = draw(st.sampled_from(["random", "truncate", "mutate", "header", "sequence"]))
    if kind == "random":
        tail = draw(st.binary(max_size=300))
    elif kind == "sequence":
        tail = b"".join(draw(st.lists(st.sampled_from(FRAMES), max_size=6)))
    else:
        frame = draw(st.sampled_from(FRAMES))
        if kind == "truncate":
            tail = frame[: draw(st.integers(0, len(frame) - 1))]
        elif kind == "mutate":
            data = bytearray(frame)
            for _ in range(draw(st.integers(1, 4))):
                data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
            tail = bytes(data)
        else:
            size = draw(st.sampled_from([0, 7, 8, 9, 511, 2**20, 2**31, 2**32 - 1]))
            tail = size.to_bytes(4, "big") + bytes([draw(st.integers(0, 4)), draw(st.integers(0, 2))]) + b"\0\0"
            tail += draw(st.binary(max_size=64))
    cut = draw(st.one_of(st.none(), st.integers(0, len(stage) + len(tail))))
    blob = stage + tail
    return blob if cut is None else blob[:cut]


class _Errors(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[BackgroundEmulator, _Errors]]:
    errors = _Errors()
    loggers = [logging.getLogger("rxhubs.emulator"), logging.getLogger("asyncio")]  # asyncio: lost task errors
    for logger in loggers:
        logger.addHandler(errors)
    try:
        with BackgroundEmulator({HUB: 1}, idle_timeout=5.0) as emulator:
            yield emulator, errors
    finally:
        for logger in loggers:
            logger.removeHandler(errors)


def _blast(port: int, blob: bytes, linger: bool) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
        try:
            sock.sendall(blob)
            if linger:  # read whatever the server answers until it closes or goes quiet
                sock.settimeout(0.02)
                while sock.recv(65536):
                    pass
        except (ConnectionResetError, BrokenPipeError, TimeoutError):
            pass  # the server closed this connection on the garbage, or waits for the rest of a frame


def _assert_serving(port: int) -> None:
    """A fresh connection gets the server's protocol header back: it is alive and still accepting.

    A dead server (refused), or one whose loop hangs (accepted by the kernel, never answered), fails here.
    """
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(fr.SASL_HEADER)
        answer = b""
        while len(answer) < len(fr.SASL_HEADER):
            chunk = sock.recv(64)
            assert chunk, "the emulator closed a well-formed connection without answering"
            answer += chunk
    assert answer.startswith(fr.SASL_HEADER), answer


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                    HealthCheck.too_slow])
@given(blob=garbage(), linger=st.booleans())
def test_garbage_only_closes_that_connection(server: tuple[BackgroundEmulator, _Errors], blob: bytes,
                                             linger: bool) -> None:
    emulator, errors = server
    _blast(emulator.port, blob, linger)
    _assert_serving(emulator.port)
    assert not errors.records, [r.getMessage() for r in errors.records]


def test_server_still_serves_after_the_fuzzing(server: tuple[BackgroundEmulator, _Errors]) -> None:
    from azure.eventhub import EventData, EventHubProducerClient

    emulator, errors = server
    with EventHubProducerClient.from_connection_string(emulator.connection_string(HUB)) as producer:
        producer.send_event(EventData("still alive"))
        assert producer.get_partition_properties("0")["last_enqueued_sequence_number"] >= 0
    assert emulator.emulator is not None and emulator.emulator._server is not None
    connections = emulator.emulator._server.connections
    deadline = time.monotonic() + 10
    while connections and time.monotonic() < deadline:  # every fuzzed connection is eventually dropped
        time.sleep(0.1)
    assert not connections
    assert not errors.records
