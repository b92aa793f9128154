"""One client connection: SASL, the AMQP open/begin/attach dance, frame dispatch, heartbeats, limits.

Anything malformed closes this connection only (with an AMQP error when the peer can still read one);
nothing a client sends can grow memory without bound: frames are capped by the advertised max frame size,
partly received messages by a per-connection budget, and outgoing deliveries wait for the socket to drain.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
import time
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import unquote, urlparse

from rxhubs.emulator import _frames as fr
from rxhubs.emulator import _management
from rxhubs.emulator._codec import Array, DecodeError, Described
from rxhubs.emulator._hubs import parse_selector
from rxhubs.emulator._links import (
    MAX_MESSAGE_SIZE,
    RUNTIME_METRIC,
    ConsumerLink,
    IncomingLink,
    Link,
    ReplyLink,
    _LinkError,
    offered_capabilities,
)
from rxhubs.emulator._sasl import negotiate

if TYPE_CHECKING:
    from rxhubs.emulator._server import Server

_LOG = logging.getLogger("rxhubs.emulator")

MAX_FRAME_SIZE = 1024 * 1024 + 4096
CHANNEL_MAX = 255
HANDLE_MAX = 255
SESSION_WINDOW = 65536
PARTIAL_BUDGET = 16 * 1024 * 1024
HANDSHAKE_TIMEOUT = 30.0
MAX_PENDING_REPLIES = 64
_HDR = struct.Struct(">IBBH")
SELECTOR = "apache.org:selector-filter:string"
EPOCH = "com.microsoft:epoch"


class _Buffered(Protocol):
    def get_write_buffer_size(self) -> int: ...


class Writer(Protocol):
    """What a connection writes to: an :class:`asyncio.StreamWriter`, or the WebSocket adapter."""

    @property
    def transport(self) -> _Buffered: ...

    def write(self, data: bytes) -> None: ...

    def is_closing(self) -> bool: ...

    async def drain(self) -> None: ...

    def close(self) -> None: ...


class ProtocolError(Exception):
    """The peer broke the protocol: close the connection with ``condition``."""

    def __init__(self, condition: str, description: str) -> None:
        super().__init__(description)
        self.condition = condition
        self.description = description


class Connection:
    """Serves one TCP connection until the peer closes it, it misbehaves or the server stops."""

    def __init__(self, server: Server, reader: asyncio.StreamReader, writer: Writer) -> None:
        self.server = server
        self.reader = reader
        self.writer = writer
        self.sessions: dict[int, Session] = {}  # by the peer's channel
        self.peer_max_frame = 512
        self.peer_idle_timeout: float | None = None
        self.last_received = time.monotonic()
        self.last_sent = time.monotonic()
        self.partial_bytes = 0
        self.grants: list[tuple[str, float]] = []  # entity paths authorized by tokens, and until when
        self.opened = False
        self.closing = False
        self._finished = asyncio.Event()

    # ------------------------------------------------------------------ output
    def write(self, data: bytes) -> None:
        if self.writer.is_closing():
            return
        self.writer.write(data)
        self.last_sent = time.monotonic()

    async def drain(self) -> None:
        await self.writer.drain()

    def reserve_partial(self, n: int) -> None:
        self.partial_bytes += n
        if self.partial_bytes > PARTIAL_BUDGET:
            raise ProtocolError(fr.RESOURCE_LIMIT, "Too many bytes of unfinished messages on this connection.")

    def release_partial(self, n: int) -> None:
        self.partial_bytes = max(0, self.partial_bytes - n)

    # ------------------------------------------------------------------ authorization
    def grant(self, path: str, until: float) -> None:
        """Authorize ``path`` ("" for the whole namespace) on this connection until ``until`` (epoch s)."""
        self.grants = [(p, t) for p, t in self.grants if p != path and t > time.time()] + [(path, until)]

    def authorized(self, entity: str) -> bool:
        """Whether this connection may use ``entity`` (a hub name or address): always, without SAS keys."""
        if self.server.keys is None:
            return True
        wanted, now = _management.resource_path(entity), time.time()
        return any(t > now and _management.covers(p, wanted) for p, t in self.grants)

    # ------------------------------------------------------------------ lifecycle
    async def serve(self) -> None:
        ticker: asyncio.Task[None] | None = None
        try:
            async with asyncio.timeout(HANDSHAKE_TIMEOUT):  # a silent peer cannot hold a connection forever
                mechanism = await negotiate(self.reader, self.writer, self.server.sasl_check)
                if mechanism is None:
                    return
                if mechanism == "PLAIN" and self.server.keys is not None:  # checked: a key name and its key
                    self.grant("", float("inf"))
            ticker = asyncio.get_running_loop().create_task(self._tick())
            await self._read_frames()
        except ProtocolError as exc:
            _LOG.info("closing a connection: %s (%s)", exc.condition, exc.description)
            self.write(fr.close_frame(fr.error(exc.condition, exc.description)))
        except DecodeError as exc:
            _LOG.info("closing a connection: undecodable frame (%s)", exc)
            self.write(fr.close_frame(fr.error(fr.DECODE_ERROR, str(exc))))
        except (asyncio.IncompleteReadError, ConnectionError, OSError, asyncio.LimitOverrunError, TimeoutError):
            pass
        except asyncio.CancelledError:
            raise
        except Exception:
            _LOG.exception("connection handler failed; closing the connection")
            self.write(fr.close_frame(fr.error(fr.INTERNAL_ERROR, "The emulator hit an internal error.")))
        finally:
            if ticker is not None:
                ticker.cancel()
            self._teardown()
            self._finished.set()
            with contextlib.suppress(Exception):
                self.writer.close()

    def _teardown(self) -> None:
        for session in list(self.sessions.values()):
            session.unmap()
        self.sessions.clear()

    async def shutdown(self) -> None:
        """Close the connection from the server side (the emulator is stopping)."""
        if self.closing:
            return
        self.closing = True
        if self.opened:
            for session in list(self.sessions.values()):
                for link in list(session.links.values()):
                    link.detach(fr.DETACH_FORCED, "The emulator is shutting down.")
            self.write(fr.close_frame(fr.error(fr.CONNECTION_FORCED, "The emulator is shutting down.")))
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.writer.drain(), 1.0)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._finished.wait(), 1.0)
        self.writer.close()

    async def _tick(self) -> None:
        """Send heartbeats at half the peer's idle timeout; close when the peer is silent past ours."""
        ours = self.server.idle_timeout
        while True:
            peer = self.peer_idle_timeout
            periods = [t for t in ((peer / 2) if peer else None, (ours / 4) if ours else None) if t]
            await asyncio.sleep(min([*periods, 1.0]))
            now = time.monotonic()
            if peer and now - self.last_sent >= peer / 2:
                self.write(fr.EMPTY_FRAME)
            if ours and now - self.last_received > ours:
                _LOG.info("closing a connection idle for more than %.0f s", ours)
                self.write(fr.close_frame(fr.error(fr.RESOURCE_LIMIT, "Connection idle timeout exceeded.")))
                self.writer.close()
                return

    # ------------------------------------------------------------------ input
    async def _read_frames(self) -> None:
        reader = self.reader
        while True:
            head = await reader.readexactly(8)
            size, doff, ftype, channel = _HDR.unpack(head)
            self.last_received = time.monotonic()
            if size < 8 or doff < 2 or doff * 4 > size:
                raise ProtocolError(fr.FRAMING_ERROR, "Malformed frame header.")
            if size > MAX_FRAME_SIZE:
                raise ProtocolError(fr.FRAMING_ERROR, f"Frame of {size} bytes exceeds the max frame size.")
            rest = await reader.readexactly(size - 8) if size > 8 else b""
            if ftype != fr.AMQP_FRAME:
                raise ProtocolError(fr.FRAMING_ERROR, "Unexpected frame type.")
            body = rest[doff * 4 - 8 :]
            if not body:
                continue  # heartbeat
            perf = fr.decode_performative(body)
            if not self.opened:
                if perf.code != fr.OPEN:
                    raise ProtocolError(fr.NOT_ALLOWED, "The first frame must be open.")
                self._on_open(perf)
                continue
            if perf.code == fr.CLOSE:
                if not self.closing:
                    self.closing = True
                    self._teardown()
                    self.write(fr.close_frame())
                await self._drain_quietly()
                return
            if perf.code == fr.BEGIN:
                self._on_begin(channel, perf)
            elif perf.code in (fr.END, fr.ATTACH, fr.FLOW, fr.TRANSFER, fr.DISPOSITION, fr.DETACH):
                session = self.sessions.get(channel)
                if session is None:
                    # The SDK sends detaches after ending a session; frames for a gone session are dropped.
                    _LOG.debug("ignoring a frame for channel %d, which has no session", channel)
                elif perf.code == fr.END:
                    session.unmap()
                    del self.sessions[channel]
                    self.write(fr.end_frame(session.channel))
                else:
                    session.on_frame(perf, body)
            elif perf.code == fr.OPEN:
                raise ProtocolError(fr.NOT_ALLOWED, "The connection is already open.")
            else:
                raise ProtocolError(fr.NOT_ALLOWED, f"Unexpected performative 0x{perf.code:02x}.")
            if self.writer.transport.get_write_buffer_size() > 4 * MAX_FRAME_SIZE:
                await self.writer.drain()

    async def _drain_quietly(self) -> None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.writer.drain(), 1.0)

    def _on_open(self, perf: fr.Performative) -> None:
        max_frame = perf.field(2)
        self.peer_max_frame = max_frame if isinstance(max_frame, int) and max_frame >= 512 else 4294967295
        self.peer_max_frame = min(self.peer_max_frame, 4 * 1024 * 1024)
        idle = perf.field(4)
        if isinstance(idle, int) and idle > 0:
            self.peer_idle_timeout = max(idle / 1000.0, 0.2)
        self.opened = True
        idle_ms = int(self.server.idle_timeout * 1000) if self.server.idle_timeout else None
        self.write(fr.open_frame("rxhubs-emulator", MAX_FRAME_SIZE, CHANNEL_MAX, idle_ms))

    def _on_begin(self, channel: int, perf: fr.Performative) -> None:
        if channel in self.sessions:
            raise ProtocolError(fr.NOT_ALLOWED, f"Channel {channel} already has a session.")
        if perf.field(0) is not None:
            raise ProtocolError(fr.NOT_ALLOWED, "The emulator does not begin sessions.")
        used = {s.channel for s in self.sessions.values()}
        ours = next((c for c in range(CHANNEL_MAX + 1) if c not in used), None)
        if ours is None or channel > CHANNEL_MAX:
            raise ProtocolError(fr.RESOURCE_LIMIT, "Too many sessions on this connection.")
        next_id, window = perf.field(1), perf.field(2)
        session = Session(self, ours, next_id if isinstance(next_id, int) else 0,
                          window if isinstance(window, int) else 0)
        self.sessions[channel] = session
        self.write(fr.begin_frame(ours, channel, 0, SESSION_WINDOW, SESSION_WINDOW, HANDLE_MAX))


class Session:
    """An AMQP session: transfer windows, delivery ids and the links attached on it."""

    def __init__(self, connection: Connection, channel: int, next_incoming_id: int, remote_incoming_window: int,
                 ) -> None:
        self.connection = connection
        self.channel = channel
        self.next_incoming_id = next_incoming_id
        self.incoming_window = SESSION_WINDOW
        self.next_outgoing_id = 0
        self.outgoing_window = SESSION_WINDOW
        self.remote_incoming_window = remote_incoming_window
        self.next_delivery_id = 0
        self.links: dict[int, Link] = {}  # by the peer's handle
        self.replies: dict[str, ReplyLink] = {}

    # ------------------------------------------------------------------ output
    def send(self, data: bytes) -> None:
        self.connection.write(data)

    def send_transfers(self, frames: list[bytes]) -> None:
        n = len(frames)
        self.next_outgoing_id = (self.next_outgoing_id + n) & 0xFFFFFFFF
        self.remote_incoming_window -= n
        self.connection.write(b"".join(frames) if n > 1 else frames[0])

    def take_delivery_id(self) -> int:
        d = self.next_delivery_id
        self.next_delivery_id = (d + 1) & 0xFFFFFFFF
        return d

    def unmap(self) -> None:
        for link in list(self.links.values()):
            link.detach_sent = True
            link.on_detached()
        self.links.clear()
        self.replies.clear()

    # ------------------------------------------------------------------ input
    def on_frame(self, perf: fr.Performative, body: bytes) -> None:
        code = perf.code
        if code == fr.TRANSFER:
            self.next_incoming_id = (self.next_incoming_id + 1) & 0xFFFFFFFF
            self.incoming_window -= 1
            if self.incoming_window < SESSION_WINDOW // 2:
                self.incoming_window = SESSION_WINDOW
                self._session_flow()
            link = self._link(perf.field(0))
            try:
                link.on_transfer(perf)
            except _LinkError as exc:
                self._drop(link, exc.condition, exc.description)
        elif code == fr.FLOW:
            self._on_flow(perf)
        elif code == fr.DISPOSITION:
            pass  # consumers settle what they received; Event Hubs keeps no per-delivery state
        elif code == fr.ATTACH:
            self._on_attach(perf, body)
        elif code == fr.DETACH:
            link = self._link(perf.field(0))
            del self.links[link.remote_handle]
            if self.replies.get(getattr(link, "node", "")) is link:
                del self.replies[getattr(link, "node", "")]
            if not link.detach_sent:
                link.detach_sent = True
                self.send(fr.detach_frame(self.channel, link.handle, bool(perf.field(1))))
                link.on_detached()

    def _session_flow(self) -> None:
        self.send(fr.flow_frame(self.channel, next_incoming_id=self.next_incoming_id,
                                incoming_window=self.incoming_window, next_outgoing_id=self.next_outgoing_id,
                                outgoing_window=self.outgoing_window))

    def _link(self, handle: Any) -> Link:
        link = self.links.get(handle) if isinstance(handle, int) else None
        if link is None:
            raise ProtocolError(fr.UNATTACHED_HANDLE, f"Handle {handle!r} is not attached.")
        return link

    def _drop(self, link: Link, condition: str, description: str) -> None:
        link.detach(condition, description)

    def _on_flow(self, perf: fr.Performative) -> None:
        next_in = perf.field(0)
        window = perf.field(1)
        if isinstance(window, int):
            base = next_in if isinstance(next_in, int) else 0
            self.remote_incoming_window = ((base + window - self.next_outgoing_id + 2**31) % 2**32) - 2**31
        handle = perf.field(4)
        if handle is not None:
            self._link(handle).on_flow(perf)
        for link in self.links.values():
            if isinstance(link, ConsumerLink):
                link.on_window()

    # ------------------------------------------------------------------ attach
    def _on_attach(self, perf: fr.Performative, body: bytes) -> None:
        name, handle, role = perf.field(0), perf.field(1), perf.field(2)
        if not isinstance(name, str) or not isinstance(handle, int) or not isinstance(role, bool):
            raise ProtocolError(fr.INVALID_FIELD, "Attach without a name, handle or role.")
        if handle in self.links:
            raise ProtocolError("amqp:session:handle-in-use", f"Handle {handle} is already in use.")
        if len(self.links) > HANDLE_MAX:
            raise ProtocolError(fr.RESOURCE_LIMIT, "Too many links on this session.")
        used = {link.handle for link in self.links.values()}
        ours = next(h for h in range(HANDLE_MAX + 2) if h not in used)
        source, target = perf.field(5), perf.field(6)
        raw_source, raw_target = fr.raw_field(perf, body, 5), fr.raw_field(perf, body, 6)
        client_sends = role is False
        address = _address(target if client_sends else source)
        link: Link
        refusal: tuple[str, str] | None = None
        try:
            segments = _segments(address)
            if client_sends:
                link = self._incoming(name, handle, ours, address, segments, perf)
            else:
                link = self._outgoing(name, handle, ours, address, segments, perf, source)
        except _LinkError as exc:
            refusal = (exc.condition, exc.description)
            link = Link(self, name, handle, ours, address)
        self.links[handle] = link
        delivery_count = 0 if not client_sends else None
        if refusal is not None and (client_sends or self.connection.server.refuse_consumers_at_attach):
            # The service refuses a link at attach: it answers with null source and target, then detaches with
            # the error (Microsoft.Azure.Amqp AmqpLink.CloseInternal; AMQP 1.0 section 2.6.3). The SDK takes
            # only such an attach for a refusal, so a producer's error surfaces while its link opens
            # (create_batch), not at the first send. The SDK's consumer, though, swallows a refusal while its
            # link opens and re-attaches without calling on_error, so consumer links are refused this way only
            # when asked (refuse_consumers_at_attach); by default they attach and are then detached, which the
            # SDK reports.
            raw_source = raw_target = None
        self.send(fr.attach_frame(
            self.channel, name=name, handle=ours, role_receiver=client_sends, source=raw_source, target=raw_target,
            initial_delivery_count=delivery_count,
            max_message_size=MAX_MESSAGE_SIZE if client_sends else None,
            offered_capabilities=offered_capabilities(perf.field(12)) if not client_sends else None,
            snd_settle_mode=perf.field(3) if isinstance(perf.field(3), int) else 2,
            rcv_settle_mode=perf.field(4) if isinstance(perf.field(4), int) else 0,
        ))
        if refusal is not None:
            _LOG.info("refused link %r on %r: %s", name, address, refusal[1])
            link.detach(*refusal)
            return
        if isinstance(link, IncomingLink):
            link.grant_credit()
        elif isinstance(link, ConsumerLink):
            link.start()

    def _incoming(self, name: str, handle: int, ours: int, address: str, segments: list[str],
                  perf: fr.Performative) -> Link:
        count = perf.field(9)
        delivery_count = count if isinstance(count, int) else 0
        node = _node(segments)
        if node is not None:
            return IncomingLink(self, name, handle, ours, address, hub=None, partition=None, node=node,
                                delivery_count=delivery_count)
        server = self.connection.server
        if not self.connection.authorized(address):
            raise _LinkError(fr.UNAUTHORIZED, _management.unauthorized_text("Send", address))
        if len(segments) == 1 or (len(segments) == 3 and segments[1].lower() == "partitions"):
            hub = server.hub(segments[0])
            if hub is None:
                raise _LinkError(fr.NOT_FOUND, f"The messaging entity '{segments[0]}' could not be found.")
            partition = None
            if len(segments) == 3:
                partition = hub.partitions.get(segments[2])
                if partition is None:
                    raise _LinkError(fr.NOT_FOUND, f"Partition '{segments[2]}' of '{hub.name}' could not be found.")
            return IncomingLink(self, name, handle, ours, address, hub=hub, partition=partition, node=None,
                                delivery_count=delivery_count)
        raise _LinkError(fr.NOT_FOUND, f"The messaging entity '{address}' could not be found.")

    def _outgoing(self, name: str, handle: int, ours: int, address: str, segments: list[str],
                  perf: fr.Performative, source: Any) -> Link:
        node = _node(segments)
        if node is not None:
            reply = ReplyLink(self, name, handle, ours, address, node)
            self.replies[node] = reply
            return reply
        if not self.connection.authorized(address):
            raise _LinkError(fr.UNAUTHORIZED, _management.unauthorized_text("Listen", address))
        if len(segments) != 5 or segments[1].lower() != "consumergroups" or segments[3].lower() != "partitions":
            raise _LinkError(fr.NOT_FOUND, f"The messaging entity '{address}' could not be found.")
        hub = self.connection.server.hub(segments[0])
        if hub is None:
            raise _LinkError(fr.NOT_FOUND, f"The messaging entity '{segments[0]}' could not be found.")
        group = segments[2]
        if not hub.has_consumer_group(group):
            raise _LinkError(fr.NOT_FOUND, f"The consumer group '{group}' of '{hub.name}' could not be found.")
        partition = hub.partitions.get(segments[4])
        if partition is None:
            raise _LinkError(fr.NOT_FOUND, f"Partition '{segments[4]}' of '{hub.name}' could not be found.")
        start = None
        filters = None
        if isinstance(source, Described) and isinstance(source.value, list) and len(source.value) > 7:
            filters = source.value[7]
        if isinstance(filters, dict):
            for key, value in filters.items():
                if str(key) == SELECTOR:
                    text = value.value if isinstance(value, Described) else value
                    if isinstance(text, bytes):
                        text = text.decode("utf-8", "replace")
                    try:
                        start = parse_selector(str(text))
                    except ValueError as exc:
                        raise _LinkError(fr.ARGUMENT_ERROR, str(exc)) from None
        props = perf.field(13)
        epoch = None
        if isinstance(props, dict):
            for key, value in props.items():
                if str(key) == EPOCH and isinstance(value, int):
                    epoch = value
        desired = perf.field(12)
        items = desired.items if isinstance(desired, Array) else [desired] if desired is not None else []
        metrics = any(str(c) == RUNTIME_METRIC for c in items)
        link = ConsumerLink(self, name, handle, ours, address, partition=partition, consumer_group=group,
                            start=start, epoch=epoch, runtime_metrics=metrics)
        refusal = partition.add_reader(group, link)
        if refusal is not None:
            raise _LinkError(*refusal)
        link.registered = True
        return link

    # ------------------------------------------------------------------ requests
    def handle_request(self, node: str, payload: bytes) -> bool:
        """Answer a ``$cbs`` / ``$management`` request; False when replies are piling up (refuse it)."""
        link = self.replies.get(node)
        if link is not None and link.pending >= MAX_PENDING_REPLIES:
            return False
        reply = _management.handle(self.connection, node, payload)
        if link is None:
            _LOG.info("dropping a %s reply: the client has no receiver link for it", node)
            return True
        link.reply(reply)
        return True


def _address(terminus: Any) -> str:
    if isinstance(terminus, Described) and isinstance(terminus.value, list) and terminus.value:
        value = terminus.value[0]
        if isinstance(value, bytes):
            return value.decode("utf-8", "replace")
        return str(value) if value is not None else ""
    return ""


def _segments(address: str) -> list[str]:
    path = urlparse(address).path if "://" in address else address
    return [unquote(s) for s in path.split("/") if s]


def _node(segments: list[str]) -> str | None:
    if segments and segments[-1] in ("$cbs", "$management"):
        return segments[-1]
    return None
