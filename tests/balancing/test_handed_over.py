"""A handover straight to the newcomer, in virtual time (``Plan.release_to``): when nothing is claimable, the owner
writes each record it hands over with its recipient as owner, and the recipient reads it from the listing that
shows it, without a claim of its own; nothing is processed twice or lost."""

from __future__ import annotations

from typing import Any

import pytest

from tests.balancing.kit import Group

I = 10.0  # noqa: E741 - a balances at 10 s and 20 s; b joins at 5 s, is handed 4..7 at 10 s


@pytest.mark.parametrize("fenced", [True, False], ids=["fenced", "unfenced"])
def test_the_owner_writes_the_newcomer_into_the_records_and_the_newcomer_reads_without_claiming(fenced: bool) -> None:
    g = Group(8, interval=I, fenced=fenced, work=0.05, checkpoint_interval=1.0)
    g.traffic(0.5, 14.0, every=0.25)
    a = g.add("a", at=0.0)
    b = g.add("b", at=5.0)
    g.run(14.9)
    handed = {"4", "5", "6", "7"}
    assert b.owned == handed
    assert {(pid, owner) for t, pid, owner in a.store.claimed if t >= 10.0} >= {(p, "b") for p in handed}
    assert all(owner != "" for t, _, owner in a.store.claimed if t >= 10.0)  # never released to nobody
    assert not [pid for _, pid, _ in b.store.claimed if pid in handed]  # b never claimed them itself
    assert {p.partition_id for p in g.ledger if p.owner == "b" and p.started < 14.9} == handed  # b reads them
    g.run(22.0)
    assert {pid for t, pid, _ in b.store.claimed if t >= 15.0} >= handed  # renewed from its next round on
    assert g.store_owners() == {**{str(p): "a" for p in range(4)}, **{p: "b" for p in handed}}
    assert not g.duplicates() and not g.missing() and not g.overlaps()




def test_a_consumer_awaiting_a_handover_does_not_reread_the_partition_ids_until_it_is_over() -> None:
    """The partition-id read is a management call its round's listings wait for: while a handover is awaited the
    known ids serve, so the listing that shows the release is not held up; afterwards every round reads them.
    a's batch in flight at its round of 10 s lasts until 15.5 s, so b's round of 15 s comes while it awaits."""
    g = Group(8, interval=I, work=6.0)
    reads: list[float] = []
    ids = g.hub.get_partition_ids

    async def counted() -> object:
        reads.append(round(g.scheduler.clock, 3))
        return await ids()

    g.hub.get_partition_ids = counted  # type: ignore[method-assign]
    g.add("a", at=0.0)
    g.add("b", at=5.0)
    _send = g.hub.send
    g.at(9.5, lambda: [_send([b"x"], partition_id=str(p)) for p in range(8)])
    g.run(40.0)
    assert g.counts() == {"a": 4, "b": 4}
    assert [t for t in reads if 14.0 < t < 16.0] == []  # b's round of 15 s: awaiting, known ids
    assert 5.0 in reads and [t for t in reads if 25.0 < t < 30.0]  # its first round; after the handover, again
    assert not g.duplicates() and not g.missing()


def _newcomer_handed_half(g: Group) -> tuple[Any, dict[str, float], set[str]]:
    """``a`` owns the 8 partitions, ``b`` joins at 5 s and is handed 4-7 (not claiming them): b, when each of its
    partition streams was emitted, and the partitions handed."""
    g.traffic(0.5, 14.0, every=0.25)
    g.add("a", at=0.0)
    b = g.add("b", at=5.0)
    emitted: dict[str, float] = {}
    on_stream = b._on_stream

    def noted(stream: Any) -> None:
        emitted.setdefault(stream.partition_id, g.scheduler.clock)
        on_stream(stream)

    b._on_stream = noted  # type: ignore[method-assign]
    g.run(22.0)
    handed = {"4", "5", "6", "7"}
    assert b.owned == handed and set(emitted) == handed
    assert not [pid for t, pid, _ in b.store.claimed if pid in handed and t < 15.0]  # handed, not claimed
    return b, emitted, handed


def test_the_newcomer_starts_what_it_was_handed_as_soon_as_the_checkpoints_are_read() -> None:
    """Its round's claim (its presence, its renewals) answers nothing about a record that names it already, so the
    partitions handed over start while it is in flight: a store call sooner. Each store call takes 0.5 s here."""
    g = Group(8, interval=I, fenced=False, latency=0.5, work=0.05, checkpoint_interval=1.0)
    b, emitted, handed = _newcomer_handed_half(g)
    claims = [t for t, verb in b.store.calls if verb == "claim_ownership"]
    for pid in handed:  # started while one of b's claims was in flight, not after it answered
        assert any(t <= emitted[pid] < t + 0.5 for t in claims), (pid, emitted[pid], claims)
    assert not g.duplicates() and not g.missing() and not g.overlaps()


def test_with_a_fenced_store_the_newcomer_fences_what_it_was_handed_alongside_its_claim() -> None:
    """The fence (which reads the checkpoint) needs no claim first for a record that names the newcomer already, so
    it goes out with the round's claim and each partition starts on its fence's answer; nothing waits for the claim.
    Each store call takes 0.5 s; in virtual time the fences go first, one after the other, then the claim."""
    g = Group(8, interval=I, fenced=True, latency=0.5, work=0.05, checkpoint_interval=1.0)
    b, emitted, handed = _newcomer_handed_half(g)
    first, last = min(emitted.values()), max(emitted.values())
    looked = max(t for t, verb in b.store.calls if verb == "list_ownership" and t < first)  # the look that saw them
    fences = [t for t, verb in b.store.calls if verb == "fence" and looked < t < last + 0.5]
    assert len(fences) == len(handed)  # each fenced once, before it started
    assert all(t <= emitted[pid] for t, pid in zip(sorted(fences), sorted(emitted, key=emitted.get), strict=True))
    # no claim answered before they started: the round's claim went out with the fences, not before them
    assert not [t for t, verb in b.store.calls if verb == "claim_ownership" and looked < t < last]
    assert not g.duplicates() and not g.missing() and not g.overlaps()


def test_while_a_handover_is_awaited_the_hub_prepares_the_links_it_brings_and_a_steady_group_prepares_none() -> None:
    """After each round that awaits partitions, a hub that can (``rxhubs.EventHub``'s warm sessions) is asked to
    prepare that many links' sessions, kept two intervals; the owner, and everyone once the handover is done, ask
    for none."""
    g = Group(8, interval=I, work=0.05, checkpoint_interval=1.0)
    g.traffic(0.5, 30.0, every=0.25)
    asked: list[tuple[float, str, int, float]] = []

    class Warm:
        def prepare(self, consumer_group: str, count: int, ttl: float) -> None:
            asked.append((round(g.scheduler.clock, 3), consumer_group, count, ttl))

    g.hub._warm = Warm()  # type: ignore[attr-defined]
    g.add("a", at=0.0)
    b = g.add("b", at=5.0)
    g.run(4.9)
    assert asked == []  # a alone: nothing awaited
    g.run(40.0)
    assert b.owned == {"4", "5", "6", "7"}
    assert asked and asked[0] == (5.0, "$Default", 4, 2 * I)  # b's first round: four partitions awaited
    assert all(t < 15.0 and count == 4 for t, _, count, _ in asked)  # none once they arrived
    assert not g.duplicates() and not g.missing()


@pytest.mark.parametrize("fenced", [True, False], ids=["fenced", "unfenced"])
def test_its_own_stale_records_are_renewed_by_a_claim_before_it_reads_them_again(fenced: bool) -> None:
    """a gives its partitions up while the store does not answer (its watchdog: no renewal for the expiration less the
    store's timestamp resolution); the records still name it, and stay live for that resolution. When the store
    answers again they are not a handover (another consumer may be claiming them as they expire): a renews them
    with a compare-and-swap first, and reads only what that renewal won."""
    g = Group(4, interval=2.0, expiry=30.0, resolution=10.0, fenced=fenced, work=0.05, checkpoint_interval=1.0,
              latency=0.1)
    g.traffic(0.5, 50.0, every=0.5)
    a = g.add("a", at=0.0)
    g.run(10.5)
    a.store.silent = True  # a's last renewal was at 10 s: it gives up at 30 s, the records expire at 40 s
    g.run(31.0)
    a.store.silent = False
    g.run(39.9)  # its rounds are retried at most an interval apart
    live = [(t, pid) for t, pid, owner in a.store.claimed if 31.0 <= t < 39.9 and owner == "a" and pid != "a"]
    assert {pid for _, pid in live} == {"0", "1", "2", "3"}, live  # claimed while live: a renewal, not a handover
    # and where to start is read (the fence, or the checkpoint listing) only after that claim answered
    read = "fence" if fenced else "list_checkpoints"
    assert min(t for t, verb in a.store.calls if verb == read and t >= 31.0) > min(t for t, _ in live)
    g.run(60.0)
    assert g.store_owners() == {str(p): "a" for p in range(4)}
    assert not g.missing() and not g.overlaps()
