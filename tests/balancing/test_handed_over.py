"""A handover straight to the newcomer, in virtual time (``Plan.release_to``): when nothing is claimable, the owner
writes each record it hands over with its recipient as owner, and the recipient reads it from the listing that
shows it, without a claim of its own; nothing is processed twice or lost."""

from __future__ import annotations

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

