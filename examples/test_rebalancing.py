"""Test 3 of docs/testing.md: a peer joins, takes its share, crashes; nothing is lost.

    python examples/test_rebalancing.py
"""

from __future__ import annotations

from telemetry_pipeline import build

from rxhubs.testing import marble_test, to_symbols

OPTIONS = {"load_balancing_interval": 2.0, "ownership_expiration": 6.0}


def test_every_event_is_processed_while_a_peer_comes_and_crashes() -> None:
    with marble_test() as t:
        traffic = {p: "-" + "-".join(letter * 1 for letter in "abcdefghijklmnopqrst") for p in "0123"}
        hub = t.hub(traffic)
        store = t.store()
        sink = t.sink()
        peer = t.peer(hub, store, "----------j" + "-" * 15 + "x", owner_id="peer", **OPTIONS)
        shared = t.ownership_at(hub, store, 20)
        t.start(build(hub, store, sink, owner_id="me", **OPTIONS), disposed=320)

        assert sorted(shared.values()) == ["me", "me", "peer", "peer"]  # fair share once the peer joined
        mine = "".join(s for _, s in sink.written)
        theirs = "".join(to_symbols(b) for b in peer.batches)
        for letter in "abcdefghijklmnopqrst":  # at least once, across both consumers, for all 4 partitions
            assert mine.count(letter) + theirs.count(letter) >= 4, letter


if __name__ == "__main__":
    test_every_event_is_processed_while_a_peer_comes_and_crashes()
    print("ok")
