"""The telemetry seam: what the core tells an observer about its work, and a default that does nothing.

The core calls the current :data:`hooks` at a handful of places, per batch or per change of ownership, never
per event:

* a partition source received a batch (``rxhubs.sources``);
* ``hops.process`` runs the work of one batch (and with it ``EventProcessor.process_events``): the hook wraps
  the coroutine, so an observer can time it and make its span current while the user's function runs;
* the checkpoint operator writes a checkpoint (the hook wraps the store call the same way);
* the balancing loop claimed, released or lost a partition;
* an error was reported (``on_partition_error`` sees every error of a balanced pipeline);
* a receiver's connection went silent past its idle timeout (a dead path, ``rxhubs.transport``).

:class:`Telemetry` is that interface, and its methods do nothing: a hook costs one attribute read and one
call per batch. :mod:`rxhubs.otel` installs an implementation with :func:`install`; nothing in the core
imports it.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, Literal, TypeVar

if TYPE_CHECKING:
    from rxhubs._batch import EventBatch, OwnershipSession
    from rxhubs._models import Checkpoint, PartitionContext

__all__ = ["LossReason", "Telemetry", "hooks", "install"]

T = TypeVar("T")

#: Why a partition was lost: another consumer took it over, its ownership expired (renewals failed), a
#: reader with a higher owner level cut it off, a fenced store refused its checkpoint (another consumer claimed
#: it meanwhile), or the consumer stopped without releasing it.
LossReason = Literal["taken", "expired", "cut_off", "fenced", "stopped"]


class Telemetry:
    """What the core reports; every method does nothing here (subclass and :func:`install` to observe)."""

    def received(self, batch: EventBatch) -> None:
        """A partition source emits ``batch`` (called once per batch, empty ones included)."""

    def process(self, batch: EventBatch, attempt: int, work: Coroutine[Any, Any, T]) -> Coroutine[Any, Any, T]:
        """The work of one attempt (from 1) at ``batch``: return ``work`` or a coroutine that awaits it."""
        return work

    def checkpoint(
        self, checkpoint: Checkpoint, session: OwnershipSession | None, write: Coroutine[Any, Any, T]
    ) -> Coroutine[Any, Any, T]:
        """One store write of ``checkpoint``: return ``write`` or a coroutine that awaits it.

        ``session`` is the partition's ownership session (None without balancing): its errors are reported.
        """
        return write

    def claimed(self, context: PartitionContext, owner_id: str, stolen: bool) -> None:
        """``owner_id`` won ``context``'s partition (``stolen`` from a live owner that did not cooperate)."""

    def released(self, context: PartitionContext, owner_id: str) -> None:
        """``owner_id`` released the partition (a handover, a stop, a failure)."""

    def lost(self, context: PartitionContext, owner_id: str, reason: LossReason) -> None:
        """The partition stopped being ``owner_id``'s without a release."""

    def error(self, context: PartitionContext, operation: str, error: BaseException) -> None:
        """An error was reported for ``operation`` (``context.partition_id`` is ``""`` for the group's)."""

    def stalled(self, context: PartitionContext, silent: float) -> None:
        """A receiver of ``context`` heard nothing for ``silent`` seconds while reading: its path is dropped."""


#: The telemetry in force. The core reads it at each call (``_telemetry.hooks.received(batch)``).
hooks: Telemetry = Telemetry()


def install(telemetry: Telemetry | None) -> Telemetry:
    """Make ``telemetry`` the one in force (None: the no-op); return the one it replaces.

    Example:
        >>> import rxhubs._telemetry as seam
        >>> mine = Telemetry()
        >>> previous = seam.install(mine)
        >>> seam.hooks is mine, seam.install(previous) is mine
        (True, True)
    """
    global hooks
    previous, hooks = hooks, telemetry if telemetry is not None else Telemetry()
    return previous
