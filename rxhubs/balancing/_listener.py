"""What the balancing loop tells the owner of the partition streams (:class:`LoopListener`)."""

from __future__ import annotations

from typing import Literal, Protocol

from rxhubs._models import Checkpoint
from rxhubs.balancing._session import PartitionSession

__all__ = ["LoopListener", "RevokeReason"]

#: Why a partition is revoked: handed over to another consumer, a graceful stop, or a disposal (no waiting).
RevokeReason = Literal["handover", "shutdown", "dispose"]


class LoopListener(Protocol):
    """What the loop tells the owner of the partition streams."""

    def on_acquired(self, session: PartitionSession, checkpoint: Checkpoint | None) -> None:
        """Start reading ``session``'s partition; ``checkpoint`` is its stored checkpoint."""

    def on_revoke(self, session: PartitionSession, reason: RevokeReason) -> None:
        """Stop reading, finish, flush, then call :meth:`BalancingLoop.ready` so the loop releases it."""

    def on_lost(self, session: PartitionSession) -> None:
        """The partition is not this consumer's any more: stop reading at once; write nothing for it."""

    def on_released(self, session: PartitionSession) -> None:
        """The partition was released (or its release attempted): it is not this consumer's any more."""

    def on_unreadable(self, session: PartitionSession, operation: str, error: Exception) -> None:
        """A partition just claimed cannot be read (its saved operator state is corrupt): report it.

        The loop releases it without reading it, and avoids it for a backoff.
        """

    def on_awaiting(self, count: int) -> None:
        """Other consumers will hand ``count`` partitions to this one soon: prepare to read them (after each round)."""

    def on_error(self, operation: str, error: Exception) -> None:
        """A balancing step failed (``"list"``, ``"claim"`` or ``"release"``); the loop retries it."""

    def on_stopped(self, error: Exception | None) -> None:
        """After :meth:`BalancingLoop.stop`: everything is released; the loop is done (``error``: why, if fatal)."""
