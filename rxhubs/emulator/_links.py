"""Links: what the emulator does on each kind of attached link.

* :class:`IncomingLink` - the client sends: events to a hub or a partition, or requests to ``$cbs`` and
  ``$management``. Every delivery is answered with Accepted or Rejected.
* :class:`ReplyLink` - the server sends replies to ``$cbs`` / ``$management`` requests of its session.
* :class:`ConsumerLink` - the server streams a partition from a start position, within the client's credit
  and the session window, re-using each event's stored encoding.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
from typing import TYPE_CHECKING, Any

from rxhubs.emulator import _delivery as dl
from rxhubs.emulator import _frames as fr
from rxhubs.emulator import _message as msg
from rxhubs.emulator._codec import Array, DecodeError
from rxhubs.emulator._hub import Hub
from rxhubs.emulator._hubs import Partition, now_ms
from rxhubs.emulator._ingest import split_plain
from rxhubs.emulator._selectors import StartPosition

if TYPE_CHECKING:
    from rxhubs.emulator._roles import SessionRole

_LOG = logging.getLogger("rxhubs.emulator")

MAX_MESSAGE_SIZE = 1024 * 1024  # the default of Emulator(max_message_size=...), as on the Standard tier
INCOMING_CREDIT = 5000
RUNTIME_METRIC = "com.microsoft:enable-receiver-runtime-metric"
DELIVERY_BATCH = 256
DELIVERY_BYTES = 1024 * 1024
BUSY_POLL = 0.1  # seconds between looks at a server-busy window that stops deliveries


class Link:
    """State shared by every link: its names, handles and the session it belongs to."""

    def __init__(self, session: SessionRole, name: str, remote_handle: int, handle: int, address: str) -> None:
        self.session = session
        self.name = name
        self.remote_handle = remote_handle
        self.handle = handle
        self.address = address
        self.detach_sent = False
        self.detach_condition: str | None = None  # the error of a detach this side sent

    def on_flow(self, perf: fr.Performative) -> None:
        """A flow frame for this link arrived."""

    def on_transfer(self, perf: fr.Performative) -> None:
        """A transfer frame for this link arrived."""
        raise _LinkError(fr.NOT_ALLOWED, "this link does not accept transfers")

    def on_detached(self) -> None:
        """The link is gone (detached by either side, or its session or connection ended)."""

    def detach(self, condition: str | None = None, description: str | None = None) -> None:
        """Detach (closed) from the server side, with an optional error."""
        if self.detach_sent:
            return
        self.detach_sent = True
        self.detach_condition = condition
        err = fr.error(condition, description) if condition else None
        self.session.send(fr.detach_frame(self.session.channel, self.handle, True, err))
        self.on_detached()


class _LinkError(Exception):
    def __init__(self, condition: str, description: str) -> None:
        super().__init__(description)
        self.condition = condition
        self.description = description


class IncomingLink(Link):
    """The client sends on this link: events (to a hub or partition) or management / CBS requests."""

    def __init__(self, session: SessionRole, name: str, remote_handle: int, handle: int, address: str, *,
                 hub: Hub | None, partition: Partition | None, node: str | None, delivery_count: int) -> None:
        super().__init__(session, name, remote_handle, handle, address)
        self.hub = hub
        self.partition = partition
        self.node = node
        self.delivery_count = delivery_count
        self.credit = INCOMING_CREDIT
        self._parts: list[bytes] = []
        self._size = 0
        self._oversized = False
        self._first: fr.Performative | None = None

    def grant_credit(self) -> None:
        s = self.session
        self.credit = INCOMING_CREDIT
        s.send(fr.flow_frame(s.channel, next_incoming_id=s.next_incoming_id, incoming_window=s.incoming_window,
                             next_outgoing_id=s.next_outgoing_id, outgoing_window=s.outgoing_window,
                             handle=self.handle, delivery_count=self.delivery_count, link_credit=self.credit))

    def on_flow(self, perf: fr.Performative) -> None:
        if perf.field(9):  # echo
            self.grant_credit()

    def on_transfer(self, perf: fr.Performative) -> None:
        if self._first is None:
            self._first = perf
            self.delivery_count += 1
            self.credit -= 1
        if perf.field(9):  # aborted
            self._reset()
            return
        if not self._oversized:
            self._size += len(perf.payload)
            limit = self.session.connection.server.max_message_size if self.node is None else 64 * 1024
            if self._size > limit:
                self._oversized = True
                self.session.connection.release_partial(self._size - len(perf.payload))
                self._parts = []
            else:
                self._parts.append(perf.payload)
                self.session.connection.reserve_partial(len(perf.payload))
        if perf.field(5):  # more
            return
        first = self._first
        payload = b"".join(self._parts)
        oversized = self._oversized
        self.session.connection.release_partial(0 if oversized else self._size)
        self._reset()
        if self.credit <= INCOMING_CREDIT // 2:
            self.grant_credit()
        state = self._handle(first, payload, oversized)
        if not first.field(4) and state is not None:  # not settled by the client: tell it the outcome
            delivery_id = first.field(1)
            if isinstance(delivery_id, int):
                self.session.send(fr.disposition_frame(self.session.channel, role_receiver=True, first=delivery_id,
                                                       last=None, settled=True, state=state))

    def _reset(self) -> None:
        self._first = None
        self._parts = []
        self._size = 0
        self._oversized = False

    def _handle(self, first: fr.Performative, payload: bytes, oversized: bool) -> Any:
        if oversized:
            return fr.rejected_state(fr.MESSAGE_SIZE_EXCEEDED,
                                     f"The received message (delivery-id:{first.field(1)}, size:{self._size} bytes) "
                                     f"exceeds the limit ({self.session.connection.server.max_message_size} bytes) "
                                     "currently allowed on the link.")
        try:
            if self.node is not None:
                if self.session.handle_request(self.node, payload):
                    return fr.ACCEPTED_STATE
                return fr.rejected_state(fr.RESOURCE_LIMIT, "Too many unanswered requests: grant credit on the "
                                         "reply link.")
            self._append(payload, first.field(3) == fr.BATCH_FORMAT)
        except DecodeError as exc:
            return fr.rejected_state(fr.DECODE_ERROR, f"The message could not be decoded: {exc}")
        except OSError as exc:
            return fr.rejected_state(fr.INTERNAL_ERROR, f"The event could not be stored: {exc.strerror or exc}")
        return fr.ACCEPTED_STATE

    def _append(self, payload: bytes, batch: bool) -> None:
        assert self.hub is not None
        plain = split_plain(payload) if batch else None  # the usual batch: plain events, stamped in one loop
        items: list[msg.Prepared] = []
        if plain is not None:
            outer_ann, inner, prefix = plain
        elif batch:
            outer_ann, inner = msg.split_batch(payload)
            items = [msg.prepare(m) for m in inner]
        else:
            single = msg.prepare(payload)
            outer_ann, inner, items = single.annotations, [payload], [single]
        if not inner:
            return
        key = msg.partition_key_of(outer_ann)
        partition = self.partition if self.partition is not None else self.hub.route(key)
        if plain is None or not partition.append_plain(inner, key, prefix):
            partition.append(items or [msg.prepare(prefix + m) for m in inner], key)


class ReplyLink(Link):
    """The server sends replies to ``$cbs`` or ``$management`` requests on this link."""

    def __init__(self, session: SessionRole, name: str, remote_handle: int, handle: int, address: str,
                 node: str) -> None:
        super().__init__(session, name, remote_handle, handle, address)
        self.node = node
        self.delivery_count = 0
        self.credit = 0
        self._queue: list[bytes] = []

    @property
    def pending(self) -> int:
        """Replies waiting for credit."""
        return len(self._queue)

    def reply(self, message: bytes) -> None:
        self._queue.append(message)
        self._pump()

    def on_flow(self, perf: fr.Performative) -> None:
        self.credit = _credit(perf, self.delivery_count)
        self._pump()

    def _pump(self) -> None:
        s = self.session
        while self._queue and self.credit > 0 and not self.detach_sent:
            message = self._queue.pop(0)
            delivery_id = s.take_delivery_id()
            frames = fr.transfer_frames(s.channel, self.handle, delivery_id, message, True, s.connection.peer_max_frame)
            s.send_transfers(frames)
            self.credit -= 1
            self.delivery_count += 1


def _credit(perf: fr.Performative, our_delivery_count: int) -> int:
    """The credit a receiver's flow grants: its delivery-count + link-credit - ours (serial arithmetic)."""
    link_credit = perf.field(6)
    if not isinstance(link_credit, int):
        return 0
    theirs = perf.field(5)
    base = theirs if isinstance(theirs, int) else our_delivery_count
    behind = ((base - our_delivery_count + 2**31) % 2**32) - 2**31
    return max(0, behind + link_credit)


class ConsumerLink(Link):
    """Streams one partition to a consumer, within its credit, from a start position."""

    def __init__(self, session: SessionRole, name: str, remote_handle: int, handle: int, address: str, *,
                 partition: Partition, consumer_group: str, start: StartPosition | None, epoch: int | None,
                 runtime_metrics: bool) -> None:
        super().__init__(session, name, remote_handle, handle, address)
        self.partition = partition
        self.consumer_group = consumer_group
        self.epoch = epoch
        self.runtime_metrics = runtime_metrics
        self.cursor = partition.start_index(start)  # the sequence number of the next event to deliver
        self.delivery_count = 0
        self.credit = 0
        self.registered = False
        self.logged = False  # its attach is in the link log (so its detach goes there too)
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"emulator-consumer-{self.name}")

    def on_flow(self, perf: fr.Performative) -> None:
        self.credit = _credit(perf, self.delivery_count)
        if perf.field(8) and self.cursor >= self.partition.next_sequence_number:  # drain with nothing to send
            self.delivery_count = (self.delivery_count + self.credit) & 0xFFFFFFFF
            self.credit = 0
            self._send_flow(drain=True)
        elif perf.field(9):  # echo
            self._send_flow()
        self._wake.set()

    def on_window(self) -> None:
        self._wake.set()

    def _send_flow(self, drain: bool = False) -> None:
        s = self.session
        s.send(fr.flow_frame(s.channel, next_incoming_id=s.next_incoming_id, incoming_window=s.incoming_window,
                             next_outgoing_id=s.next_outgoing_id, outgoing_window=s.outgoing_window,
                             handle=self.handle, delivery_count=self.delivery_count, link_credit=self.credit,
                             available=max(0, self.partition.next_sequence_number - self.cursor), drain=drain))

    def evict(self, condition: str, description: str) -> None:
        self.registered = False
        self.detach(condition, description)

    def log(self, event: str, condition: str | None = None) -> None:
        """Add an attach, detach or refusal of this link to the server's link log."""
        conn = self.session.connection
        self.logged = self.logged or event == "attach"
        conn.server.link_log.add(conn.id, self.partition.hub, self.consumer_group, self.partition.partition_id,
                                 self.epoch, event, condition)

    def on_detached(self) -> None:
        if self.registered:
            self.registered = False
            self.partition.remove_reader(self.consumer_group, self)
        if self.logged:
            self.logged = False
            self.log("detach", self.detach_condition or self.session.connection.close_condition)
        task = self._task
        if task is not None and task is not asyncio.current_task():
            task.cancel()
        self._task = None

    def _next_batch(self, part: Partition, max_frame: int) -> tuple[bytes | bytearray, int, int]:
        """The next run of deliveries within credit and window: (its bytes, transfer frames, deliveries)."""
        s = self.session
        seq = self.cursor
        start = seq - part.base
        n = min(self.credit, s.remote_incoming_window, len(part.bodies) - start, DELIVERY_BATCH)
        # bound what one write holds: offsets are log positions, each a record header more than the message
        stop = bisect.bisect_right(part.offsets, part.offsets[start] + DELIVERY_BYTES, start + 1, start + n)
        heads, bodies = part.heads[start:stop], part.bodies[start:stop]
        n = len(bodies)
        first_id = s.take_delivery_ids(n)
        metrics = b""
        if self.runtime_metrics:
            last_seq, last_off, last_ms = part.last_enqueued()
            metrics = msg.runtime_metrics(last_seq, last_off, last_ms, now_ms())
        room = max_frame - len(metrics)
        if part.largest_frame <= room or max(map(len, heads)) + max(map(len, bodies)) <= room:  # one frame each
            if not metrics:
                return dl.assemble(heads, bodies, s.channel, self.handle, first_id), n, n
            own_da = part.own_da
            if bisect.bisect_left(own_da, seq) == bisect.bisect_left(own_da, seq + n):  # nothing to merge
                return dl.assemble_with_metrics(heads, bodies, s.channel, self.handle, first_id, metrics), n, n
        frames: list[bytes] = []
        for i, (head, body) in enumerate(zip(heads, bodies, strict=True)):
            payload = dl.message_of(head, body)
            if metrics:
                payload = msg.with_delivery_annotations(payload, len(head) - dl.HEAD, metrics)
            frames.extend(fr.transfer_frames(s.channel, self.handle, (first_id + i) & 0xFFFFFFFF, payload, False,
                                             max_frame))
        return b"".join(frames), len(frames), n

    async def _run(self) -> None:
        part = self.partition
        s = self.session
        conn = s.connection
        faults = conn.server.faults
        try:
            while not self.detach_sent:
                if faults.busy("flow", part.hub):  # credit is not served while the server is busy
                    await asyncio.sleep(BUSY_POLL)
                    continue
                if self.credit <= 0 or s.remote_incoming_window <= 0:
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                if self.cursor < part.first:  # a reader left behind by the retention goes on at the first retained
                    self.cursor = part.first
                if self.cursor >= part.next_sequence_number:
                    await part.wait_beyond(self.cursor)
                    continue
                data, transfers, sent = self._next_batch(part, conn.peer_max_frame)
                self.cursor += sent
                self.credit -= sent
                self.delivery_count = (self.delivery_count + sent) & 0xFFFFFFFF
                s.send_batch(data, transfers)
                await conn.drain()
        except asyncio.CancelledError:
            raise
        except (ConnectionError, OSError):
            return
        except Exception:  # a bug here must not take the server down: drop this link only
            _LOG.exception("consumer link %s failed", self.name)
            if not self.detach_sent:
                self.detach(fr.INTERNAL_ERROR, "The emulator failed to deliver events on this link.")


def offered_capabilities(desired: Any) -> Array | None:
    """Echo the desired capabilities the emulator supports."""
    items = desired.items if isinstance(desired, Array) else desired if isinstance(desired, list) else [desired]
    supported = [str(c) for c in items if str(c) in (RUNTIME_METRIC, "com.microsoft:georeplication")]
    return fr.symbols(supported) if supported else None

