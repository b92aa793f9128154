"""A partition handed to a consumer that gives it up again before reading a batch: its start is written first.

With the blob store a former owner hands a partition over once its final checkpoint write is *sent*; the hand
carries the position, and that write may wait its turn for seconds (16 at a time per store). ``rxhubs bench scale
--real`` (512 partitions, seven joiners, under load) read 73 events twice this way: ``c0`` handed partition 138 to
a joiner with its final write still queued; the joiner, dealt more than its share (the last joiner arrived after
``c0`` planned), released it unread; the next owner's fence read the checkpoint before ``c0``'s last write, stamped
the blob, and that write was refused. The recipient now writes the position it started from before it gives such a
partition up (``rxhubs/balancing/_handed_start.py``): here ``b`` is handed 4-7 by ``a`` at 10 s, ``c`` joins right
after ``a`` planned, and ``b`` hands one of them on to ``c`` before a batch arrives. ``b`` must have written that
partition's checkpoint, at ``a``'s last position and as its own period, before the record naming ``c`` went out.
"""

from __future__ import annotations

from tests.balancing.kit import Group

I = 10.0  # noqa: E741 - the load-balancing interval


def test_a_partition_handed_on_before_its_first_batch_has_its_start_written_first() -> None:
    g = Group(8, interval=I, expiry=30.0, checkpoint_interval=1.0)
    g.traffic(0.5, 4.0, every=0.5)  # a reads and checkpoints every partition; then the hub is idle
    a = g.add("a", at=0.0)
    b = g.add("b", at=5.0)
    g.add("c", at=10.05)  # after a's round at 10 s listed the presence records: a deals to b only
    g.run(40.0)
    assert g.counts() == {"a": 3, "b": 3, "c": 2}, g.counts()
    handed_to_b = {pid for t, pid, owner in a.store.claimed if owner == "b" and pid.isdigit()}
    assert handed_to_b == {"4", "5", "6", "7"}, handed_to_b  # the fault was felt: b was dealt four, its share is three
    given_up = [(t, pid) for t, pid, owner in b.store.claimed if pid in handed_to_b and owner != "b"]
    assert given_up, b.store.claimed  # b passed one on (to c, or released it) without reading a batch of it
    last = g.checkpoints()
    for t, pid in given_up:
        written = [(w, seq) for w, p, seq in b.store.writes if p == pid and w <= t]
        assert written, (pid, b.store.writes)  # b wrote it before the record left
        assert written[-1][1] == last[pid] == g.sent[pid] - 1  # where a stopped: its last event
    assert not g.duplicates() and not g.overlaps() and not g.missing()
