"""One partition's committed operator state: the fold of the deltas the checkpoint operator commits (private).

The checkpoint operator (``rxhubs/operators/_checkpoint_record.py``) keeps one :class:`CommittedState` per
partition and period of ownership, folds into it the deltas of the **contiguous finished prefix**, in the
batches' read order, and writes it, encoded, in the same store call as the checkpoint that ends the prefix
(``StatefulCheckpointStore.commit_state``). It starts from the state restored with the period's checkpoint
(``OwnershipSession.restored_state``), so a write carries the keys this owner has not touched too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from rxhubs.state._codec import DELETED, OperatorState, StateDelta, encode

__all__ = ["CommittedState"]


class CommittedState:
    """One partition's committed operator state in one period of ownership: a fold of the prefix's deltas.

    Folded in place (a delta costs what it changed, not the size of the state); :meth:`encoded` snapshots it.

    Example:
        >>> from rxhubs.state._codec import decode
        >>> state = CommittedState({"w": OperatorState("f", {"a": 1})})
        >>> state.fold([StateDelta("w", "f", {"b": 2}, {"wm": 9})]), state.stateful
        (True, True)
        >>> dict(decode(state.encoded())["w"].keys)
        {'a': 1, 'b': 2}
    """

    __slots__ = ("_ops", "stateful")

    def __init__(self, restored: Mapping[str, OperatorState] | None = None) -> None:
        self._ops: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {
            name: (op.fingerprint, dict(op.keys), dict(op.meta)) for name, op in (restored or {}).items()
        }
        #: True once a batch of this period carried deltas: its checkpoints are then written with the state.
        self.stateful = False

    def fold(self, deltas: Iterable[StateDelta]) -> bool:
        """Apply ``deltas`` in order; True if they changed the state (keys, meta or fingerprint)."""
        changed = False
        for delta in deltas:
            self.stateful = True
            before = self._ops.get(delta.name)
            if before is None or before[0] != delta.fingerprint or before[2] != delta.meta:
                changed = True
                keys = before[1] if before is not None else {}
                self._ops[delta.name] = before = (delta.fingerprint, keys, dict(delta.meta))
            keys = before[1]
            for key, value in delta.changes.items():
                changed = True
                if value is DELETED:
                    keys.pop(key, None)
                else:
                    keys[key] = value
        return changed

    def snapshot(self) -> dict[str, OperatorState]:
        """The state as :data:`~rxhubs.state._codec.PartitionState` (copies)."""
        return {name: OperatorState(f, dict(k), dict(m)) for name, (f, k, m) in self._ops.items()}

    def encoded(self) -> bytes:
        """The state as :func:`~rxhubs.state._codec.encode` writes it (a snapshot: later folds do not change it)."""
        return encode({name: OperatorState(f, k, m) for name, (f, k, m) in self._ops.items()})
