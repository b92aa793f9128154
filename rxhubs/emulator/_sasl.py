"""Protocol headers and SASL: ANONYMOUS and PLAIN are accepted (PLAIN checked only when a key is set)."""

from __future__ import annotations

import asyncio
import hmac
import struct
from collections.abc import Callable

from rxhubs.emulator import _frames as fr
from rxhubs.emulator._codec import DecodeError

_HDR = struct.Struct(">IBBH")
MAX_SASL_FRAME = 4096
MECHANISMS = ("ANONYMOUS", "PLAIN", "MSSBCBS")

SaslCheck = Callable[[str, bytes], bool]


def plain_checker(key_name: str, key: str) -> SaslCheck:
    """A check that accepts ANONYMOUS and PLAIN with exactly this key name and key."""

    def check(mechanism: str, response: bytes) -> bool:
        if mechanism != "PLAIN":
            return True
        parts = response.split(b"\0")
        if len(parts) != 3:
            return False
        return hmac.compare_digest(parts[1], key_name.encode()) and hmac.compare_digest(parts[2], key.encode())

    return check


async def negotiate(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, check: SaslCheck | None) -> bool:
    """Exchange protocol headers (and SASL when the client asks). Returns False when the client is refused."""
    header = await reader.readexactly(8)
    if header == fr.SASL_HEADER:
        writer.write(fr.SASL_HEADER + fr.sasl_mechanisms_frame(MECHANISMS))
        body = await _read_sasl_frame(reader)
        perf = fr.decode_performative(body)
        if perf.code != fr.SASL_INIT:
            writer.write(fr.sasl_outcome_frame(2))
            return False
        mechanism = str(perf.field(0))
        response = perf.field(1)
        ok = mechanism in MECHANISMS
        if ok and check is not None:
            ok = check(mechanism, response if isinstance(response, bytes) else b"")
        writer.write(fr.sasl_outcome_frame(0 if ok else 1))
        if not ok:
            return False
        header = await reader.readexactly(8)
    if header != fr.AMQP_HEADER:
        writer.write(fr.AMQP_HEADER)
        return False
    writer.write(fr.AMQP_HEADER)
    return True


async def _read_sasl_frame(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readexactly(8)
    size, doff, ftype, _ = _HDR.unpack(head)
    if ftype != fr.SASL_FRAME or size < 8 or size > MAX_SASL_FRAME or doff < 2 or doff * 4 > size:
        raise DecodeError("bad SASL frame")
    rest = await reader.readexactly(size - 8)
    return rest[doff * 4 - 8 :]
