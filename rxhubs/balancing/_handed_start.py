"""A partition handed to this consumer and given up before it read a batch: its start is written first.

A former owner hands a partition over as soon as its final checkpoint write is *sent* (a store whose hand carries
the position: the recipient starts from the hand, :mod:`rxhubs.stores._blob_hands`). That write can wait its turn
for seconds behind the handover's other final writes (checkpoint writes go 16 at a time per store:
``rxhubs/stores/_write_gate.py``). A recipient that gives the partition up again before it read anything (it was
dealt more than its share: a consumer joined after the former owner planned) wrote nothing, so until that write lands
the position lives only in its memory; the next owner's fence then reads the checkpoint before it, stamps the blob,
and the late write is refused: the events between were read twice (``rxhubs bench scale --real`` at 512 partitions:
73 events, each on a partition handed on before its first batch). So such a recipient writes the position it
started from (fenced, as its own period, in a turn among its checkpoint writes) before it gives the partition up:
one write, only in that case.

**With the state it started from.** Every store drops a partition's operator state when a checkpoint is written
without it (the old state no longer describes that checkpoint), so with a stateful pipeline (``hops.window``) the
position is written with the state its fence restored (``commit_state``), as the former owner committed them. Written
alone it erased that state: the next owner started at the right position with empty windows, and counted a window
short (``tests/faults/test_state_kill.py``: a stop handed partition 7 to ``b``, which gave it up 0.4 s later, unread;
the next owner's window held 4 of its 14 events).
"""

from __future__ import annotations

import logging
import math

from reactivex import Observable

from rxhubs._models import Checkpoint
from rxhubs._rx import deadline, from_coroutine
from rxhubs.balancing._session import PartitionSession
from rxhubs.state._codec import encode
from rxhubs.stores import CheckpointStore, is_fenced, is_stateful
from rxhubs.stores._write_gate import in_turn

__all__ = ["write_start"]

log = logging.getLogger("rxhubs.balancing")


def write_start(store: CheckpointStore, session: PartitionSession, start: Checkpoint) -> Observable[None]:
    """Write ``start`` as ``session``'s checkpoint (fenced, within its store timeout); complete either way.

    With the operator state restored with it (``session.restored_state``), if any: that is what the store holds.

    A failure is logged: the partition is given up regardless (a write refused means another owner took it).
    """

    async def write() -> None:
        period = session.period
        if not is_fenced(store) or period is None or not session.owned:
            return
        state = session.restored_state

        async def write_in_turn() -> None:  # a turn among the checkpoint writes: a stop may give many up at once
            async with deadline(session.store_timeout or math.inf):  # the loop sets it on every session
                if state is not None and is_stateful(store):
                    await store.commit_state(start, period, encode(state))
                else:
                    await store.update_checkpoint_fenced(start, period)

        log.info("partition %s: given up before its first batch; writing the position it was handed (%d)%s",
                 session.partition_id, start.sequence_number, " with its state" if state is not None else "")
        try:
            await in_turn(store, write_in_turn)
        except Exception as exc:  # the release goes on: the next owner reads the checkpoint the store holds
            log.info("partition %s: writing the position it was handed failed (%r)", session.partition_id, exc)

    return from_coroutine(write)
