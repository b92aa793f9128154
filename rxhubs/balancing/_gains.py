"""Starting what a round gained: checkpoints read with the claim, handed partitions started early, fences taken in.

The second half of the balancing loop's bookkeeping (:class:`~rxhubs.balancing._holdings.Holdings` is the first):
a partition the claim gained is read from its stored checkpoint, or, with a fenced store, from what its fence read
(the period begins there; the operator state saved with the checkpoint is restored onto the session). Partitions
handed to this consumer start while the round's claim is still in flight, as soon as their checkpoint is read or
their fence answered.
"""

from __future__ import annotations

import logging

from rxhubs._models import Checkpoint, Ownership
from rxhubs.balancing._holdings import Holdings
from rxhubs.balancing._planner import Plan
from rxhubs.balancing._session import PartitionSession, SessionState
from rxhubs.balancing._store_calls import Cut, Fenced
from rxhubs.errors import OwnershipLostError, StateError
from rxhubs.state._codec import decode
from rxhubs.stores import is_fenced

__all__ = ["Gains"]

log = logging.getLogger("rxhubs.balancing")


class Gains(Holdings):
    """Starts the partitions a round gained (a mixin of the loop, over :class:`Holdings`)."""

    def _start_claimed(self, checkpoints: dict[str, Checkpoint]) -> None:
        """Hand each partition just gained to the listener, with its stored checkpoint."""
        for pid, session in list(self.sessions.items()):
            if session.state is SessionState.CLAIMED and self.sessions.get(pid) is session:
                session.state = SessionState.READING
                self.listener.on_acquired(session, checkpoints.get(pid))

    async def _claim_and_read(
        self, sent: list[Ownership], decision: Plan, handed: dict[str, Ownership], sent_at: float, cut: Cut | None
    ) -> tuple[list[Ownership], dict[str, Checkpoint] | None, list[Ownership]]:
        """Claim ``sent``; when partitions are gained without a steal, read the checkpoints meanwhile.

        Returns the records won, the checkpoints read (None: not read), and the records whose claim call failed
        (:meth:`StoreCalls.claim_partly <rxhubs.balancing._store_calls.StoreCalls.claim_partly>`).

        Gained: released or expired partitions claimed, or partitions handed to this consumer (``handed``). Their
        checkpoints are final already: an owner writes a partition's checkpoint before it releases it, and the listing
        that showed the release came before this read (an expired owner writes no more). Not for steals (the owner still
        reads) or while stopping; with a fenced store, the fence reads them: the partitions handed over are fenced
        alongside the claim, and each starts as soon as its fence answered (:meth:`_start_fenced`); partitions
        claimed are fenced after the claim. The partitions handed over start as soon as their checkpoints are read
        (:meth:`_start_handed`), without waiting for the claim of the rest. ``cut``: a steady round's (renewals).
        """
        gaining = decision.claim or bool(handed)
        fenced = is_fenced(self.store)
        if not gaining or decision.steal or (fenced and not handed) or self._stopping is not None:
            won, unanswered = await self.calls.claim_partly(sent, cut=cut)
            return won, None, unanswered
        if fenced:  # the handed partitions' fences go out with the claim; each starts on its fence's answer
            def start(record: Ownership, result: Fenced | Exception) -> None:
                self._start_fenced(record, result, sent_at, decision)

            won, unanswered = await self.calls.claim_fencing(sent, list(handed.values()), start)
            return won, None, unanswered

        def start_handed(checkpoints: dict[str, Checkpoint]) -> None:
            self._start_handed(handed, checkpoints, sent_at, decision)

        return await self.calls.claim_reading_checkpoints(sent, start_handed if handed else None)

    def _start_handed(
        self, handed: dict[str, Ownership], checkpoints: dict[str, Checkpoint], sent_at: float, decision: Plan
    ) -> None:
        """Start reading the partitions handed to this consumer, while the round's claim is still in flight.

        Their records name it already, so nothing that claim (this consumer's presence, its renewals) answers can
        change that; waiting for it would only add a store call's time to the handover. :meth:`_apply` then renews
        them like the rest.
        """
        if self._stopping is not None:
            return
        for pid, record in handed.items():
            if pid not in self.sessions:
                session = self._new_session(pid, record, sent_at, decision)
                session.state, session.handed = SessionState.READING, True
                self.listener.on_acquired(session, checkpoints.get(pid))

    def _start_fenced(self, record: Ownership, result: Fenced | Exception, sent_at: float, decision: Plan) -> None:
        """Start one partition handed to this consumer as soon as its fence answered, the round's claim in flight.

        The fence began the period before anything is read, as for any partition gained. A failed fence starts
        nothing: the round fences the partition again after its claim, and takes the outcome in as it does for
        claimed partitions (lost: given up; another failure: the round is retried).
        """
        pid = record.partition_id
        if self._stopping is not None or isinstance(result, Exception) or pid in self.sessions:
            return
        session = self._new_session(pid, record, sent_at, decision)
        session.handed = True
        checkpoints = self._fenced_checkpoints([session], [result])
        if session.state is SessionState.CLAIMED and self.sessions.get(pid) is session:
            session.state = SessionState.READING
            self.listener.on_acquired(session, checkpoints.get(pid))

    async def _checkpoints_of_claimed(self, read: dict[str, Checkpoint] | None = None) -> dict[str, Checkpoint]:
        """The stored checkpoints, if partitions were just gained (none are read while stopping).

        ``read``: the checkpoints read while the claim was in flight, if they were (see :meth:`_claim_and_read`).

        With a fenced store, each partition gained is fenced first, and its checkpoint read by the fence: from
        then on a former owner's checkpoint writes fail. A partition whose record moved on meanwhile is lost.
        """
        if self._stopping is not None:  # gained while stopping: release without reading
            for session in self.sessions.values():
                if session.state is SessionState.CLAIMED:
                    session.mark_ready()
        claimed = [s for s in self.sessions.values() if s.state is SessionState.CLAIMED]
        if not claimed:
            return {}
        if not is_fenced(self.store):
            return read if read is not None else await self.calls.checkpoints()
        return self._fenced_checkpoints(claimed, await self.calls.fence([s.record for s in claimed]))

    def _fenced_checkpoints(
        self, claimed: list[PartitionSession], results: list[Fenced | Exception]
    ) -> dict[str, Checkpoint]:
        """Take the fences of the partitions just claimed in: periods begun, checkpoints read, partitions lost.

        The operator state read with a checkpoint is decoded onto the session (``restored_state``): the
        stateful operators restore it on the period's first batch. A state that cannot be decoded (corrupt, or
        not rxhubs state) is never replaced by an empty one: the partition is reported, not read, released and
        avoided for a backoff, like a partition whose reader failed.

        Raises:
            Exception: The first failure other than a lost partition (the round is then retried, and the
                partitions not fenced yet are fenced then).
        """
        checkpoints: dict[str, Checkpoint] = {}
        failure: Exception | None = None
        for session, result in zip(claimed, results, strict=True):
            if isinstance(result, OwnershipLostError):
                log.info("balancing: partition %s was taken over before its fence", session.partition_id)
                self._lose(session.partition_id, "taken")
            elif isinstance(result, Exception):
                failure = failure or result
            else:
                session.period = session.record
                checkpoint, state = result
                if state is not None and not self._restore(session, checkpoint, state):
                    continue
                if checkpoint is not None:
                    checkpoints[session.partition_id] = checkpoint
        if failure is not None:
            raise failure
        return checkpoints

    def _restore(self, session: PartitionSession, checkpoint: Checkpoint | None, state: bytes) -> bool:
        """Decode ``state`` onto ``session``; False (the partition reported, released later) if it cannot be."""
        try:
            session.restored_state = decode(state)
            return True
        except StateError as exc:
            at = f" (checkpoint at sequence number {checkpoint.sequence_number})" if checkpoint is not None else ""
            error = StateError(
                f"partition {session.partition_id}: the operator state saved with its checkpoint{at} cannot be "
                f"restored: {exc}; the partition is not read (restarting from empty state would give wrong "
                "results): repair or delete the saved state"
            )
            log.error("balancing: %s", error)
            self._avoid_after_failure(session.partition_id)
            session.mark_ready()  # released with the next claim, never read
            self.listener.on_unreadable(session, "state", error)
            return False
