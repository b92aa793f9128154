"""Protocol headers and SASL: ANONYMOUS and PLAIN are accepted (PLAIN checked only when keys are set)."""

from __future__ import annotations

import asyncio
import hmac
import struct
from collections.abc import Callable, Mapping
from typing import Protocol

from rxhubs.emulator import _frames as fr
from rxhubs.emulator._codec import DecodeError

_HDR = struct.Struct(">IBBH")
MAX_SASL_FRAME = 4096
MECHANISMS = ("ANONYMOUS", "PLAIN", "MSSBCBS")

SaslCheck = Callable[[str, bytes], bool]


class Writer(Protocol):
    def write(self, data: bytes) -> None: ...


def plain_checker(keys: Mapping[str, str]) -> SaslCheck:
    """A check that accepts ANONYMOUS, and PLAIN with one of these key names and its key."""

    def check(mechanism: str, response: bytes) -> bool:
        if mechanism != "PLAIN":
            return True
        parts = response.split(b"\0")
        if len(parts) != 3:
            return False
        key = keys.get(parts[1].decode("utf-8", "replace"))
        return key is not None and hmac.compare_digest(parts[2], key.encode())

    return check


async def negotiate(reader: asyncio.StreamReader, writer: Writer, check: SaslCheck | None) -> str | None:
    """Exchange protocol headers (and SASL when the client asks).

    Returns:
        The SASL mechanism the client used ("" without SASL), or None when the client is refused.
    """
    header = await reader.readexactly(8)
    mechanism = ""
    if header == fr.SASL_HEADER:
        writer.write(fr.SASL_HEADER + fr.sasl_mechanisms_frame(MECHANISMS))
        body = await _read_sasl_frame(reader)
        perf = fr.decode_performative(body)
        if perf.code != fr.SASL_INIT:
            writer.write(fr.sasl_outcome_frame(2))
            return None
        mechanism = str(perf.field(0))
        response = perf.field(1)
        ok = mechanism in MECHANISMS
        if ok and check is not None:
            ok = check(mechanism, response if isinstance(response, bytes) else b"")
        writer.write(fr.sasl_outcome_frame(0 if ok else 1))
        if not ok:
            return None
        header = await reader.readexactly(8)
    if header != fr.AMQP_HEADER:
        writer.write(fr.AMQP_HEADER)
        return None
    writer.write(fr.AMQP_HEADER)
    return mechanism


async def _read_sasl_frame(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readexactly(8)
    size, doff, ftype, _ = _HDR.unpack(head)
    if ftype != fr.SASL_FRAME or size < 8 or size > MAX_SASL_FRAME or doff < 2 or doff * 4 > size:
        raise DecodeError("bad SASL frame")
    rest = await reader.readexactly(size - 8)
    return rest[doff * 4 - 8 :]
