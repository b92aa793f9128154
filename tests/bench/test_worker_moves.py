"""The handover worker's record of moves: a store write that names a new owner for a partition, and nothing else.

``rxhubs bench scale --real`` counts a change as converged at the last such write. A recipient's first renewal of a
record handed to it (the former owner's write already named it; the recipient saw that in a listing) names no new
owner: counted as a move, it put the convergence of a join up to two intervals late (renewals are spread).
"""

from __future__ import annotations

from rxhubs import Ownership
from rxhubs.bench.handover._worker import Record


def _record(pid: str, owner: str, group: str = "$Default") -> Ownership:
    return Ownership("ns", "hub", group, pid, owner, 1.0, "e")


def test_a_renewal_of_a_record_handed_to_this_consumer_is_not_a_move() -> None:
    record = Record("c3")
    record.note("list_ownership", [_record("5", "c3"), _record("6", "c0"), _record("c3", "c3", "$Default$presence")])
    assert record.won.keys() == {"5"}  # handed: no claim of its own
    record.note("claim_ownership", [_record("5", "c3"), _record("6", "c3")])  # a renewal of 5; a claim of 6
    assert [(pid, owner) for pid, owner, _ in record.moves] == [("6", "c3")]
    record.note("claim_ownership", [_record("6", "")])  # released
    assert [(pid, owner) for pid, owner, _ in record.moves] == [("6", "c3"), ("6", "")]
