"""What ``hops.window`` and ``hops.scan_state`` share: state per partition and session, deltas, restore, bounds.

An operator keeps one :class:`Keyed` state per partition. The first batch of a new ownership session resets it
and restores it from ``session.restored_state[name]``; every batch passed on carries the operator's
:class:`~rxhubs.state._codec.StateDelta` (even a batch that changed nothing); a size over ``max_state_bytes``, a
fingerprint that does not match, a value that is not JSON-able or a failing user function fail the partition
(``session.fail("process", error)``), or, for batches read without balancing, the stream.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable
from typing import Any

from reactivex import abc
from reactivex.disposable import SingleAssignmentDisposable

from rxhubs._batch import EventBatch, OwnershipSession
from rxhubs._models import PartitionContext
from rxhubs.errors import ConfigurationError, StateError
from rxhubs.state._codec import DELETED, OperatorState, StateDelta

__all__ = [
    "PLAIN_TYPES", "Keyed", "Runner", "check_cap", "check_name", "dump", "fingerprint", "hashable", "hashes", "plain",
]  # fmt: skip

log = logging.getLogger("rxhubs.operators")

#: Values of these exact types are immutable and come back from JSON as they went in.
PLAIN_TYPES = frozenset({int, float, str, bool, type(None)})
_ENCODE = json.JSONEncoder(separators=(",", ":")).encode


def plain(value: Any) -> bool:
    return type(value) in PLAIN_TYPES


def dump(value: Any, what: str) -> str:
    """``value`` as compact JSON, or StateError naming ``what``."""
    if type(value) is int:
        return str(value)
    try:
        return _ENCODE(value)
    except (TypeError, ValueError) as exc:
        raise StateError(f"{what} is not JSON-able ({exc}); state is saved as JSON") from exc


def hashable(value: Any) -> Any:
    """A key read back from JSON: lists become tuples again (a dict cannot be a key)."""
    if isinstance(value, list):
        return tuple(hashable(v) for v in value)
    if isinstance(value, dict):
        raise StateError("a saved key is a JSON object; keys must be hashable (str, int, tuple...)")
    return value


def hashes(value: Any) -> bool:
    """Whether ``value`` can be hashed (a tuple holding a list cannot)."""
    try:
        hash(value)
    except TypeError:
        return False
    return True


def fingerprint(params: dict[str, Any]) -> str:
    """A digest of an operator's parameters (its kind, windows, aggregate kind, grace, clock...)."""
    return hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()[:16]


def check_name(name: object) -> str:
    if not isinstance(name, str) or not name:
        raise ConfigurationError(f"a stateful operator needs a name (a non-empty str), got {name!r}")
    return name


def check_cap(cap: object) -> int | None:
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
        raise ConfigurationError(f"max_state_bytes must be an int >= 1 or None, got {cap!r}")
    return cap


class Keyed:
    """The live state of one operator in one partition: size accounting and this batch's changes.

    Subclasses keep their own structures and call :meth:`put` / :meth:`drop` for every saved key they change.
    """

    def __init__(self, name: str, context: PartitionContext) -> None:
        self.name = name
        self.context = context
        self.sizes: dict[str, int] = {}
        self.total = 0
        self.changes: dict[str, Any] = {}
        self.seq = -1  # the last sequence number folded in

    def put(self, skey: str, value: Any, text: str) -> None:
        """``skey`` now has ``value`` (JSON-able, not to be mutated later), whose JSON is ``text``."""
        size = len(skey) + len(text)
        self.total += size - self.sizes.get(skey, 0)
        self.sizes[skey] = size
        self.changes[skey] = value

    def drop(self, skey: str) -> None:
        self.total -= self.sizes.pop(skey, 0)
        self.changes[skey] = DELETED

    def restore(self, state: OperatorState) -> None:
        """Load saved keys and meta (subclasses load their structures, then call this for sizes)."""
        for skey, value in state.keys.items():
            self.sizes[skey] = len(skey) + len(dump(value, "saved state"))
        self.total = sum(self.sizes.values())
        seq = state.meta.get("seq", -1)
        self.seq = seq if isinstance(seq, int) else -1

    def run(self, batch: EventBatch, now: float | None) -> Callable[[tuple[StateDelta, ...]], EventBatch]:
        """Fold ``batch`` in; what makes the batch to pass on, given its state deltas (this one's included)."""
        raise NotImplementedError

    def passthrough(self, batch: EventBatch) -> EventBatch:
        """``batch`` as this operator's batch class, with nothing found (a stale session's batch)."""
        raise NotImplementedError

    def meta(self) -> dict[str, Any]:
        raise NotImplementedError


class Runner:
    """One subscription of a stateful operator: routes batches to their partition's state."""

    def __init__(
        self,
        observer: abc.ObserverBase[EventBatch],
        name: str,
        digest: str,
        cap: int | None,
        make: Callable[[PartitionContext], Keyed],
        now: Callable[[], float] | None,
    ) -> None:
        self.observer = observer
        self.name = name
        self.digest = digest
        self.cap = cap
        self.make = make
        self.now = now
        self.parts: dict[PartitionContext, tuple[OwnershipSession | None, Keyed | None]] = {}
        self.upstream = SingleAssignmentDisposable()
        self.stopped = False

    def on_next(self, batch: EventBatch) -> None:
        if self.stopped:
            return
        session = batch._session
        entry = self.parts.get(batch.context)
        if entry is None or entry[0] is not session:
            if entry is not None and session is not None and not session.owned:
                # a straggler of a period that ended: nothing it does is committed; pass it on untouched
                self.observer.on_next(self.make(batch.context).passthrough(batch))
                return
            try:
                entry = (session, self._fresh(batch.context, session))
            except StateError as exc:
                entry = (session, None)
                self.parts[batch.context] = entry
                self._fail(batch, exc)
                return
            self.parts[batch.context] = entry
        state = entry[1]
        if state is None:
            return  # this partition failed in this session: its batches are dropped (it is read again)
        try:
            build = state.run(batch, self.now() if self.now is not None else None)
            if self.cap is not None and state.total > self.cap:
                raise StateError(
                    f"state of operator {self.name!r} in partition {batch.partition_id} reached {state.total}"
                    f" bytes, over max_state_bytes={self.cap}: too many open windows or keys (shorten windows or"
                    " the ttl, or raise the cap)"
                )
        except Exception as exc:
            self.parts[batch.context] = (session, None)
            self._fail(batch, exc)
            return
        changes, state.changes = state.changes, {}
        self.observer.on_next(build((*batch._state, StateDelta(self.name, self.digest, changes, state.meta()))))

    def _fresh(self, context: PartitionContext, session: OwnershipSession | None) -> Keyed:
        state = self.make(context)
        restored = session.restored_state if session is not None else None
        saved = restored.get(self.name) if restored else None
        if saved is not None:
            if saved.fingerprint != self.digest:
                raise StateError(
                    f"saved state of operator {self.name!r} in partition {context.partition_id} was made with other"
                    f" parameters (fingerprint {saved.fingerprint}, now {self.digest}): restoring it would give"
                    " wrong results. Give the operator a new name to start afresh, or restore its parameters."
                )
            state.restore(saved)
            log.info("%s: partition %s restored %d keys (%d bytes) of saved state", self.name,
                     context.partition_id, len(state.sizes), state.total)
        return state

    def _fail(self, batch: EventBatch, error: Exception) -> None:
        log.error("%s: partition %s failed (%r): stopping the partition", self.name, batch.partition_id, error)
        if batch._session is not None:
            batch._session.fail("process", error)
            return
        self.stopped = True
        self.observer.on_error(error)

    def on_error(self, error: Exception) -> None:
        if not self.stopped:
            self.stopped = True
            self.observer.on_error(error)

    def on_completed(self) -> None:
        # The end of a stream is not the end of the data (ownership moved, or the consumer stops): open
        # windows are not closed; their state is committed with the checkpoint and the next owner goes on.
        if not self.stopped:
            self.stopped = True
            self.observer.on_completed()
