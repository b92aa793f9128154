"""Where a partition just claimed starts, checked against the partition: out-of-range checkpoints and seeds.

**A checkpoint out of range.** A checkpoint ahead of the partition's last sequence number (the hub was deleted
and created again under the same name: sequence numbers started over) or behind its first retained one (the
group fell behind the retention) no longer names an event of the partition. Without a check (before rxhubs
0.x, or ``checkpoint_out_of_range=None``), a checkpoint ahead reads nothing, without a word, until the new hub's
sequence numbers pass the old checkpoint, and ``rxhubs checkpoints`` shows a lag of 0; a checkpoint behind
reads from the first retained event (the service does that), and the events that expired unread are never
mentioned. With a policy, when a partition is claimed from a checkpoint its properties are read **beside** the
first reads (the claim is not delayed) and a checkpoint out of range is logged at WARNING, naming the
partition, then:

* ``"earliest"`` (the default): read from the first retained event. Behind: the reader already does. Ahead:
  the checkpoint before the first retained event is written (in the partition's fenced period) and the
  partition is restarted from it (reported to ``on_partition_error`` with operation ``"start"``; read again
  after one interval's backoff);
* ``"latest"``: the same, from the end of the partition (the events retained are skipped);
* ``"fail"``: the partition is stopped with :class:`~rxhubs.errors.CheckpointOutOfRangeError` (operation
  ``"start"``); it is claimed and fails again after each backoff until an operator moves the checkpoint
  (``rxhubs checkpoints reset``). The other partitions go on.

A partition **handed over** by its former owner is not checked: that owner read it until moments ago and wrote
its final checkpoint where it stopped, so the checkpoint names an event of the partition (the owner checked the
checkpoint it started from at its own claim). Checking anyway cost a management call per partition at the
moment the handed partitions open their links: 16 at once when 16 partitions move, each a new management link
on the hub's connection, which delayed the links' attach by tens of milliseconds.

**A seed checkpoint** (``seed_checkpoint=True``): a partition claimed without a checkpoint gets one at once, at
the position ``default_start`` resolves to (``latest``: the partition's last event), before it is read from
there. KEDA's scaler counts a partition without a checkpoint as its whole retained backlog: a new group started
at ``latest`` would scale to the maximum until its first checkpoint.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Literal

from reactivex import Observable
from reactivex import operators as ops

from rxhubs._models import Checkpoint, PartitionContext, PartitionProperties, Position
from rxhubs._rx import from_coroutine
from rxhubs.balancing._session import PartitionSession
from rxhubs.errors import CheckpointOutOfRangeError, ConfigurationError
from rxhubs.stores import CheckpointStore, is_fenced
from rxhubs.transport._seek import checkpoint_before, first_sequence_number, next_sequence_number, sequence_at

__all__ = ["OutOfRangePolicy", "check_policy", "out_of_range", "seeded_start", "warn_keda_case", "watch_range"]

log = logging.getLogger("rxhubs.balancing")

#: What ``checkpoint_out_of_range`` takes (None: no check).
OutOfRangePolicy = Literal["earliest", "latest", "fail"]
_POLICIES = ("earliest", "latest", "fail")


def check_policy(policy: object) -> None:
    """Raise ConfigurationError unless ``policy`` is a policy or None.

    Example:
        >>> check_policy("earliest"); check_policy(None)
        >>> try:
        ...     check_policy("newest")
        ... except ConfigurationError as exc:
        ...     print(exc)
        checkpoint_out_of_range must be 'earliest', 'latest', 'fail' or None, got 'newest'
    """
    if policy is not None and policy not in _POLICIES:
        raise ConfigurationError(
            f"checkpoint_out_of_range must be 'earliest', 'latest', 'fail' or None, got {policy!r}"
        )


def _is_blob(store: CheckpointStore) -> bool:
    inner = getattr(store, "_sdk", None) or getattr(store, "store", None) or store
    module = type(inner).__module__
    return module.startswith(("rxhubs.stores._blob", "azure.eventhub.extensions.checkpointstoreblob"))


def warn_keda_case(namespace: str, eventhub_name: str, store: CheckpointStore) -> bool:
    """Log a WARNING if KEDA's Event Hubs scaler would not find this group's checkpoint blobs; True if it did.

    The blob stores (rxhubs' and the official one) lower-case the whole blob name; KEDA lower-cases only the
    consumer group, and uses the namespace and the hub as written in its trigger: with a capital letter in
    either, it finds no checkpoint and counts every retained event (it scales to the maximum).

    Example:
        >>> from rxhubs.stores import BlobCheckpointStore
        >>> store = BlobCheckpointStore.from_connection_string("UseDevelopmentStorage=true", "checkpoints")
        >>> warn_keda_case("myns.servicebus.windows.net", "telemetry", store)
        False
    """
    if not _is_blob(store) or (namespace == namespace.lower() and eventhub_name == eventhub_name.lower()):
        return False
    log.warning(
        "checkpoint blobs of %s/%s are named in lower case (%s/%s, the official layout); KEDA's Event Hubs scaler"
        " looks them up with the namespace and hub as written in its trigger: write them in lower case there,"
        " or it finds no checkpoint and scales to the maximum", namespace, eventhub_name, namespace.lower(),
        eventhub_name.lower(),
    )
    return True


def out_of_range(sequence_number: int, props: PartitionProperties) -> Literal["ahead", "behind"] | None:
    """Whether a checkpoint lies after the partition's last event, or before the event before its first retained.

    Example:
        >>> props = PartitionProperties("hub", "0", 100, 149, "9000", None, False)
        >>> out_of_range(149, props), out_of_range(99, props), out_of_range(500, props), out_of_range(40, props)
        (None, None, 'ahead', 'behind')
    """
    if sequence_number > props.last_enqueued_sequence_number:
        return "ahead"
    if sequence_number < first_sequence_number(props) - 1:
        return "behind"
    return None


def _describe(context: PartitionContext, checkpoint: int, where: str, props: PartitionProperties) -> str:
    c = context
    span = (f"it is empty (next sequence number {next_sequence_number(props)})" if props.is_empty
            else f"it holds {first_sequence_number(props)}..{props.last_enqueued_sequence_number}")
    why = ("was the hub deleted and created again?" if where == "ahead"
           else f"{first_sequence_number(props) - 1 - checkpoint} events expired unread")
    return (f"partition {c.partition_id} of {c.eventhub_name}/{c.consumer_group}: the checkpoint at sequence number "
            f"{checkpoint} is {where} of the partition ({span}; {why})")


def watch_range(
    hub: Any,
    store: CheckpointStore,
    session: PartitionSession,
    checkpoint: Checkpoint,
    policy: OutOfRangePolicy,
    fail: Callable[[PartitionSession, str, Exception], None],
    observed: Callable[[PartitionSession, PartitionProperties], None] | None = None,
) -> Observable[None]:
    """Read the partition's properties and apply ``policy`` if ``checkpoint`` is out of range (see the module).

    ``fail(session, "start", error)`` stops the partition (it is released, avoided for a backoff, claimed again);
    ``observed(session, props)`` sees the properties read (``_geo_offsets``: a promotion's stale offsets).
    """
    context = session.context

    async def check() -> None:
        props = await hub.get_partition_properties(context.partition_id)
        if observed is not None:
            observed(session, props)
        where = out_of_range(checkpoint.sequence_number, props)
        if where is None or not session.owned:
            return
        text = _describe(context, checkpoint.sequence_number, where, props)
        if policy == "fail":
            log.warning("%s; stopping it (checkpoint_out_of_range='fail'): move its checkpoint with"
                        " 'rxhubs checkpoints reset'", text)
            fail(session, "start", CheckpointOutOfRangeError(text))
            return
        if policy == "earliest" and where == "behind":
            log.warning("%s; reading from the first retained event (checkpoint_out_of_range='earliest')", text)
            return
        resume = first_sequence_number(props) if policy == "earliest" else next_sequence_number(props)
        log.warning("%s; restarting it at sequence number %d (checkpoint_out_of_range=%r)", text, resume, policy)
        moved = await checkpoint_before(hub, context, resume, props)
        if is_fenced(store) and session.period is not None:
            await store.update_checkpoint_fenced(moved, session.period)
        else:
            await store.update_checkpoint(moved)
        moved_text = f"{text}; its checkpoint was moved to {moved.sequence_number}"
        fail(session, "start", CheckpointOutOfRangeError(moved_text))

    return from_coroutine(check)


def seeded_start(
    hub: Any, store: CheckpointStore, session: PartitionSession, default: Position
) -> Observable[Position]:
    """Write the checkpoint just before where ``default`` lands, then give the position right after it."""
    context = session.context

    async def seed() -> Position:
        props = await hub.get_partition_properties(context.partition_id)
        if default.kind == "earliest":
            resume = first_sequence_number(props)
        elif default.kind == "latest":
            resume = next_sequence_number(props)
        elif default.kind == "sequence_number":
            assert isinstance(default.value, int)
            resume = default.value + (0 if default.inclusive else 1)
        else:
            resume = await sequence_at(hub, context.partition_id, context.consumer_group, default, props)
        checkpoint = await checkpoint_before(hub, context, resume, props)
        if is_fenced(store) and session.period is not None:
            await store.update_checkpoint_fenced(checkpoint, session.period)
        else:
            await store.update_checkpoint(checkpoint)
        log.info("partition %s: no checkpoint; seeded one at sequence number %d (seed_checkpoint)",
                 context.partition_id, checkpoint.sequence_number)
        return checkpoint.position()

    return from_coroutine(seed).pipe(ops.share())
