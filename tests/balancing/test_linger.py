"""A partition handed over while idle is read until its next batch, for at most ``LINGER`` seconds, in virtual time
(``PartitionStream._close``'s linger): what arrives meanwhile is the old owner's, served at once; the rest is the
newcomer's, read right after the old owner's checkpoint."""

from __future__ import annotations

from rxhubs.balancing._looks import LINGER, imminent_gap
from tests.balancing.kit import Group

I = 10.0  # noqa: E741 - the load-balancing interval: a balances at 10 s and hands 4..7 over to b


def _group() -> Group:
    g = Group(8, interval=I)
    g.add("a", at=0.0)
    g.add("b", at=5.0)
    return g


def _send(g: Group, at: float) -> None:
    def send() -> None:
        for pid in g.hub.partition_ids:
            g.hub.send([b"x"], partition_id=pid)
            g.sent[pid] = g.sent.get(pid, 0) + 1

    g.at(at, send)


def test_a_batch_that_arrives_within_the_linger_is_the_old_owners_then_it_hands_over() -> None:
    g = _group()
    _send(g, 10.0 + LINGER / 2)
    g.run(10.0 + LINGER / 2 + imminent_gap(I) + 0.001)
    handed = {"4", "5", "6", "7"}
    assert g.consumers["b"].owned == handed  # released right after that batch, not at the linger's end
    assert {(p.owner, p.partition_id) for p in g.ledger} == {("a", str(p)) for p in range(8)}
    _send(g, 11.0)
    g.run(12.0)
    assert {p.partition_id for p in g.ledger if p.owner == "b"} == handed  # b reads on after a's batch
    assert not g.duplicates() and not g.missing() and not g.overlaps()


def test_with_nothing_arriving_the_partition_is_handed_over_at_the_lingers_end() -> None:
    g = _group()
    g.run(10.09)
    assert LINGER > 0.09 and g.counts() == {"a": 8, "b": 0}  # a lingers (without it, b holds 4..7 at 10.05 s)
    g.run(10.0 + LINGER + imminent_gap(I) + 0.001)
    assert g.counts() == {"a": 4, "b": 4}
    _send(g, 10.0 + LINGER + 0.1)
    g.run(12.0)
    assert {p.partition_id for p in g.ledger if p.owner == "b"} == {"4", "5", "6", "7"}
    assert not g.duplicates() and not g.missing()


def test_a_batch_in_flight_at_the_revoke_ends_the_stream_without_lingering() -> None:
    """A busy partition stops reading at once: its batch in flight finishes and it is released, no linger after."""
    g = Group(8, interval=I, work=0.5)
    g.add("a", at=0.0)
    g.add("b", at=5.0)
    _send(g, 9.8)  # in flight from 9.8 to 10.3 s
    _send(g, 10.05)  # while that batch is in flight: b's (a stopped reading at the revoke)
    g.run(12.0)
    assert {p.partition_id for p in g.ledger if p.owner == "b"} == {"4", "5", "6", "7"}
    assert all(p.owner == "a" for p in g.ledger if p.started < 10.0)
    assert not g.duplicates() and not g.missing() and not g.overlaps()
