"""What the emulator's pieces need from the piece that owns them, as protocols.

A link needs its session, a session and the management node need their connection, a connection and the
WebSocket listener need the server. Each takes the protocol below instead of importing its owner's module, so
the modules depend one way: server -> connection -> session -> links / management -> hubs, frames, codec.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Protocol

from rxhubs.emulator._fault_state import FaultState, LinkLog
from rxhubs.emulator._geo import Replication
from rxhubs.emulator._hub import Hub
from rxhubs.emulator._identity import LocalIdentity
from rxhubs.emulator._sasl import SaslCheck

__all__ = ["ConnectionRole", "ServerRole", "SessionRole", "Writer"]


class _Buffered(Protocol):
    def get_write_buffer_size(self) -> int: ...


class Writer(Protocol):
    """What a connection writes to: an :class:`asyncio.StreamWriter`, or the WebSocket adapter."""

    @property
    def transport(self) -> _Buffered: ...

    def write(self, data: bytes | bytearray) -> None: ...

    def is_closing(self) -> bool: ...

    async def drain(self) -> None: ...

    def close(self) -> None: ...


class ServerRole(Protocol):
    """The emulator's server, as its connections and listeners see it."""

    @property
    def keys(self) -> Mapping[str, str] | None: ...

    @property
    def identities(self) -> tuple[LocalIdentity, ...]: ...

    @property
    def sasl_check(self) -> SaslCheck | None: ...

    @property
    def idle_timeout(self) -> float | None: ...

    @property
    def refuse_consumers_at_attach(self) -> bool: ...

    @property
    def max_message_size(self) -> int: ...

    @property
    def faults(self) -> FaultState: ...

    @property
    def link_log(self) -> LinkLog: ...

    @property
    def replication(self) -> Replication: ...

    def hub(self, name: str) -> Hub | None: ...

    async def serve_connection(self, reader: asyncio.StreamReader, writer: Writer) -> None: ...


class ConnectionRole(Protocol):
    """One client connection, as its sessions and the management node see it."""

    server: ServerRole
    peer_max_frame: int
    id: int
    close_condition: str | None

    def write(self, data: bytes | bytearray) -> None: ...

    async def drain(self) -> None: ...

    def reserve_partial(self, n: int) -> None: ...

    def release_partial(self, n: int) -> None: ...

    def grant(self, path: str, until: float) -> None: ...

    def authorized(self, entity: str) -> bool: ...


class SessionRole(Protocol):
    """One AMQP session, as its links see it."""

    connection: ConnectionRole
    channel: int
    next_incoming_id: int
    incoming_window: int
    next_outgoing_id: int
    outgoing_window: int
    remote_incoming_window: int

    def send(self, data: bytes) -> None: ...

    def send_transfers(self, frames: list[bytes]) -> None: ...

    def send_batch(self, data: bytes | bytearray, transfers: int) -> None: ...

    def take_delivery_id(self) -> int: ...

    def take_delivery_ids(self, n: int) -> int: ...

    def handle_request(self, node: str, payload: bytes) -> bool: ...
