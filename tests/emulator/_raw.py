"""A tiny raw AMQP client built on the emulator's own codec, for protocol and robustness tests."""

from __future__ import annotations

import asyncio
import struct
from typing import Any

from rxhubs.emulator import _frames as fr
from rxhubs.emulator._codec import Described, Symbol, UInt, ULong, encode_value

_HDR = struct.Struct(">IBBH")


def source(address: str, selector: str | None = None) -> Described:
    filters = None
    if selector is not None:
        key = Symbol("apache.org:selector-filter:string")
        filters = {key: Described(key, selector)}
    return Described(ULong(fr.SOURCE), [address, None, None, None, None, None, None, filters, None, None, None])


def target(address: str) -> Described:
    return Described(ULong(fr.TARGET), [address, None, None, None, None, None, None])


def data_message(body: bytes) -> bytes:
    return b"\x00\x53\x75" + encode_value(body)


class RawClient:
    """Speaks just enough AMQP to open a connection, a session and links, and to read frames back."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def connect(cls, port: int, *, idle_timeout_ms: int | None = None, open_session: bool = True,
                      ) -> RawClient:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        client = cls(reader, writer)
        writer.write(fr.SASL_HEADER)
        assert await reader.readexactly(8) == fr.SASL_HEADER
        await client.read_frame()  # mechanisms
        writer.write(fr.frame(0, fr.performative(fr.SASL_INIT, [Symbol("ANONYMOUS"), b"", None]), fr.SASL_FRAME))
        _, outcome = await client.read_frame()
        assert outcome is not None and outcome.field(0) == 0
        writer.write(fr.AMQP_HEADER)
        assert await reader.readexactly(8) == fr.AMQP_HEADER
        client.send(0, fr.OPEN, ["raw", "127.0.0.1", UInt(65536), None,
                                 UInt(idle_timeout_ms) if idle_timeout_ms else None])
        await client.expect(fr.OPEN)
        if open_session:
            client.send(0, fr.BEGIN, [None, UInt(0), UInt(1000), UInt(1000)])
            await client.expect(fr.BEGIN)
        return client

    def send(self, channel: int, code: int, fields: list[Any], payload: bytes = b"") -> None:
        self.writer.write(fr.frame(channel, fr.performative(code, fields) + payload))

    def attach_receiver(self, handle: int, address: str, selector: str | None = None,
                        properties: dict[Any, Any] | None = None) -> None:
        self.send(0, fr.ATTACH, [f"r{handle}", UInt(handle), True, None, None, source(address, selector),
                                 target("me"), None, None, None, None, None, None, properties])

    def attach_sender(self, handle: int, address: str) -> None:
        self.send(0, fr.ATTACH, [f"s{handle}", UInt(handle), False, None, None, source("me"), target(address),
                                 None, None, UInt(0)])

    def flow(self, handle: int, credit: int, delivery_count: int = 0, echo: bool = False) -> None:
        self.send(0, fr.FLOW, [UInt(0), UInt(1000), UInt(0), UInt(1000), UInt(handle), UInt(delivery_count),
                               UInt(credit), None, False, echo])

    async def read_frame(self) -> tuple[int, fr.Performative | None]:
        head = await self.reader.readexactly(8)
        size, doff, _ftype, channel = _HDR.unpack(head)
        rest = await self.reader.readexactly(size - 8)
        body = rest[doff * 4 - 8 :]
        return channel, (fr.decode_performative(body) if body else None)

    async def expect(self, code: int, timeout: float = 10) -> fr.Performative:
        """Read frames until one with ``code`` (skipping heartbeats and other performatives)."""
        async with asyncio.timeout(timeout):
            while True:
                _, perf = await self.read_frame()
                if perf is not None and perf.code == code:
                    return perf

    async def close(self) -> None:
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except (ConnectionError, OSError):
            pass
