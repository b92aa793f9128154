"""One AMQP session of a client connection: its links (attach, flow, transfers, detach) and its windows.

:class:`~rxhubs.emulator._connection.Connection` makes one per ``begin``; links (:mod:`rxhubs.emulator._links`)
send through it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlparse

from rxhubs.emulator import _frames as fr
from rxhubs.emulator import _management
from rxhubs.emulator._codec import Array, Described
from rxhubs.emulator._fault_state import BUSY, BUSY_TEXT
from rxhubs.emulator._geo import GeoOffsetError
from rxhubs.emulator._links import (
    RUNTIME_METRIC,
    ConsumerLink,
    IncomingLink,
    Link,
    ReplyLink,
    _LinkError,
    offered_capabilities,
)
from rxhubs.emulator._selectors import parse_selector

if TYPE_CHECKING:
    from rxhubs.emulator._roles import ConnectionRole

__all__ = ["EPOCH", "HANDLE_MAX", "MAX_PENDING_REPLIES", "SELECTOR", "SESSION_WINDOW", "ProtocolError", "Session"]

_LOG = logging.getLogger("rxhubs.emulator")

HANDLE_MAX = 255
SESSION_WINDOW = 65536
MAX_PENDING_REPLIES = 64
SELECTOR = "apache.org:selector-filter:string"
EPOCH = "com.microsoft:epoch"


class ProtocolError(Exception):
    """The peer broke the protocol: close the connection with ``condition``."""

    def __init__(self, condition: str, description: str) -> None:
        super().__init__(description)
        self.condition = condition
        self.description = description


class Session:
    """An AMQP session: transfer windows, delivery ids and the links attached on it."""

    def __init__(self, connection: ConnectionRole, channel: int, next_incoming_id: int, remote_incoming_window: int,
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

    def send_batch(self, data: bytes | bytearray, transfers: int) -> None:
        """Send ``transfers`` transfer frames, already joined into ``data``, in one write."""
        self.next_outgoing_id = (self.next_outgoing_id + transfers) & 0xFFFFFFFF
        self.remote_incoming_window -= transfers
        self.connection.write(data)

    def take_delivery_id(self) -> int:
        return self.take_delivery_ids(1)

    def take_delivery_ids(self, n: int) -> int:
        """Take ``n`` consecutive delivery ids (modulo 2**32); returns the first."""
        d = self.next_delivery_id
        self.next_delivery_id = (d + n) & 0xFFFFFFFF
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
            max_message_size=self.connection.server.max_message_size if client_sends else None,
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
            if server.faults.busy("attach", hub.name):
                raise _LinkError(BUSY, BUSY_TEXT)
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
        try:
            start = self.connection.server.replication.resolve(start, partition.partition_id)
        except GeoOffsetError as exc:  # an offset of another replication segment: the service's answer
            self.connection.server.link_log.add(self.connection.id, hub.name, group, partition.partition_id,
                                                None, "refuse", exc.condition)
            raise _LinkError(exc.condition, str(exc)) from None
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
        if self.connection.server.faults.busy("attach", hub.name):
            link.log("refuse", BUSY)
            raise _LinkError(BUSY, BUSY_TEXT)
        refusal = partition.add_reader(group, link)
        if refusal is not None:
            link.log("refuse", refusal[0])
            raise _LinkError(*refusal)
        link.registered = True
        link.log("attach")
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
