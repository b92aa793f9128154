"""Operator state that travels with batches and is committed with the checkpoint (the seam of ``hops.window``).

The invariant: a committed pair ``(checkpoint, state)`` always has ``state`` equal to the fold of exactly the
events up to the checkpoint. Three parts keep it:

* A **stateful operator** (``hops.window``, ``hops.scan_state``) updates its live state per batch and attaches
  to the batch it passes on one immutable :class:`StateDelta`: the keys the batch changed (a new value, or
  :data:`DELETED`) and the operator's meta (its watermark, say). It passes every batch on, even one that
  emitted nothing, so the checkpoint can advance. Deltas ride on ``EventBatch._state``.
* The **checkpoint operator** folds the deltas of the contiguous finished prefix (:func:`fold`) into its
  committed copy and writes the copy, encoded (:func:`encode`), in the same store call as the checkpoint.
* A **new owner** reads the pair when it claims the partition; the decoded state reaches the operators on the
  batches' ownership session (``OwnershipSession.restored_state``), by operator name.

The committed state of one partition is a :data:`PartitionState`: ``{name: OperatorState}``. Keys are strings;
values and meta are JSON-able. :func:`encode` makes bytes that are versioned and checksummed; :func:`decode`
refuses anything else with :class:`~rxhubs.errors.StateError`.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, TypeAlias

from rxhubs.errors import StateError

__all__ = ["DELETED", "OperatorState", "PartitionState", "StateDelta", "decode", "encode", "fold"]


class _Deleted:
    """The value of a key a batch removed from state (a closed window, an expired key)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "DELETED"


#: A delta's value for a key the batch removed.
DELETED: Final = _Deleted()


@dataclass(frozen=True, slots=True)
class OperatorState:
    """The committed state of one stateful operator in one partition.

    Attributes:
        fingerprint: A digest of the operator's parameters; a restore under other parameters fails loudly.
        keys: Key -> value (JSON-able).
        meta: The operator's own bookkeeping (its watermark, counters), JSON-able.
    """

    fingerprint: str
    keys: Mapping[str, Any] = field(default_factory=dict)
    meta: Mapping[str, Any] = field(default_factory=dict)


#: The committed state of one partition: operator name -> its state.
PartitionState: TypeAlias = Mapping[str, OperatorState]


@dataclass(frozen=True, slots=True)
class StateDelta:
    """What one batch changed in one operator's state.

    Attributes:
        name: The operator's name (``hops.window("per_device", ...)``): it keys the saved state.
        fingerprint: A digest of the operator's parameters.
        changes: Key -> new value, or :data:`DELETED`.
        meta: The operator's meta after the batch (replaces the previous meta).

    Example:
        >>> d = StateDelta("counts", "f1", {"dev1|0": 2, "dev2|0": DELETED}, {"watermark": 60})
        >>> fold({}, [d])["counts"].keys
        {'dev1|0': 2}
    """

    name: str
    fingerprint: str
    changes: Mapping[str, Any] = field(default_factory=dict)
    meta: Mapping[str, Any] = field(default_factory=dict)


def fold(state: PartitionState, deltas: Iterable[StateDelta]) -> dict[str, OperatorState]:
    """Apply ``deltas``, in order, to ``state``; returns a new mapping (``state`` is not changed).

    Example:
        >>> s = fold({}, [StateDelta("w", "f", {"a": 1}), StateDelta("w", "f", {"a": 2, "b": 1})])
        >>> dict(s["w"].keys)
        {'a': 2, 'b': 1}
    """
    out: dict[str, OperatorState] = dict(state)
    for delta in deltas:
        before = out.get(delta.name)
        keys = dict(before.keys) if before is not None else {}
        for key, value in delta.changes.items():
            if value is DELETED:
                keys.pop(key, None)
            else:
                keys[key] = value
        out[delta.name] = OperatorState(delta.fingerprint, keys, dict(delta.meta))
    return out


_MAGIC: Final = b"RXS1"


def encode(state: PartitionState) -> bytes:
    """``state`` as bytes: ``RXS1``, a CRC-32 of the rest, then zlib-compressed JSON.

    Example:
        >>> decode(encode({"w": OperatorState("f", {"a": 1}, {"wm": 5})}))["w"].meta
        {'wm': 5}
    """
    doc = {name: {"f": op.fingerprint, "k": dict(op.keys), "m": dict(op.meta)} for name, op in state.items()}
    try:
        text = json.dumps(doc, separators=(",", ":"), sort_keys=True).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise StateError(f"operator state is not JSON-able: {exc}") from exc
    body = _compress(text)
    return _MAGIC + zlib.crc32(body).to_bytes(4, "big") + body


_SAMPLE: Final = 64 * 1024


def _compress(text: bytes) -> bytes:
    """Deflate ``text`` (any deflate stream decodes the same), fast also when it barely compresses.

    zlib's level 1 shrinks typical state (repeated keys, small numbers) 3-6x, but it is slow on data with little
    repetition (say, base64 or hashes in values: ~20 MB/s for 25% less). When a sample of a large state
    shrinks by less than a third, run-length matching with Huffman coding gets the same size several times
    faster.
    """
    if len(text) > 2 * _SAMPLE and len(zlib.compress(text[:_SAMPLE], 1)) > _SAMPLE * 2 // 3:
        packer = zlib.compressobj(1, zlib.DEFLATED, zlib.MAX_WBITS, 8, zlib.Z_RLE)
        return packer.compress(text) + packer.flush()
    return zlib.compress(text, 1)


def decode(data: bytes) -> dict[str, OperatorState]:
    """The state :func:`encode` made; :class:`~rxhubs.errors.StateError` for anything else.

    Example:
        >>> decode(b"junk")
        Traceback (most recent call last):
        ...
        rxhubs.errors.StateError: saved operator state is not rxhubs state (bad header)
    """
    if len(data) < 8 or data[:4] != _MAGIC:
        raise StateError("saved operator state is not rxhubs state (bad header)")
    body = data[8:]
    if zlib.crc32(body).to_bytes(4, "big") != data[4:8]:
        raise StateError("saved operator state is corrupt (checksum mismatch)")
    try:
        doc = json.loads(zlib.decompress(body).decode("utf-8"))
        return {name: OperatorState(op["f"], op["k"], op["m"]) for name, op in doc.items()}
    except (ValueError, KeyError, TypeError, zlib.error) as exc:
        raise StateError(f"saved operator state is corrupt: {exc}") from exc
