"""A round that begins handing partitions over does not renew them first (rxhubs/balancing/_renewals.handing_over).

An owner of 1,024 partitions that saw seven newcomers renewed hundreds of the 896 records it was about to hand over
in the very claim whose answer the drain waited for (11.5 s on a quiet machine, 833 records unanswered): the
handover started late and the seven took four intervals. Those records stay live long after the release, and the
next round renews any still draining.
"""

from __future__ import annotations

import pytest

from tests.balancing.kit import Group


def _handed_renewals(group: Group, joiner_at: float) -> tuple[set[str], list[tuple[float, str]]]:
    """The partitions ``a`` handed to ``b``, and ``a``'s renewals of them from ``b``'s presence to their release."""
    a = group.consumers["a"].store
    handed = {pid for pid, owner in group.store_owners().items() if owner == "b"}
    released = {pid: at for at, pid, owner in a.claimed if owner != "a" and pid in handed}  # release or hand
    presence = min(at for at, pid, owner in group.consumers["b"].store.claimed if pid == "b" == owner)
    assert presence >= joiner_at
    return handed, [(at, pid) for at, pid, owner in a.claimed
                    if owner == "a" and pid in handed and presence <= at <= released[pid]]


@pytest.mark.parametrize("joins", [9.0, 11.0])  # a renews half its records per round: each half is due in one
def test_the_round_that_hands_partitions_over_sends_no_renewal_of_them(joins: float) -> None:
    group = Group(16, interval=2.0, expiry=12.0, checkpoint_interval=5.0)  # renewals every second round
    group.add("a")
    group.add("b", at=joins)
    group.traffic(1.0, 30.0, every=0.5)
    group.run(40.0)
    handed, renewed = _handed_renewals(group, joins)
    assert len(handed) == 8 and group.consumers["b"].owned == handed
    assert renewed == []  # the old rule renewed those due in the handing round
    assert not group.missing() and not group.duplicates()


def test_a_partition_still_draining_at_the_next_round_is_renewed_by_it_and_not_lost() -> None:
    group = Group(16, interval=2.0, expiry=12.0, checkpoint_interval=5.0, work=3.0)  # each batch takes 3 s
    group.add("a")
    group.add("b", at=9.0)
    group.traffic(1.0, 30.0, every=0.5)
    group.run(60.0)
    handed, renewed = _handed_renewals(group, 9.0)
    assert len(handed) == 8 and group.consumers["b"].owned == handed
    assert renewed  # a batch in flight for 3 s holds the drain past the next round (2 s later), which renews
    first_round = min(at for at, _ in renewed)
    assert all(at == first_round for at, _ in renewed)  # the round after the handing one, not the handing one
    assert not group.missing() and not group.duplicates() and not group.overlaps()
