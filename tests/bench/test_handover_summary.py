"""The handover benchmark's figures, computed from two consumers' records (no processes: the arithmetic)."""

from __future__ import annotations

from typing import Any

from rxhubs.bench.handover._scenario import summarize


def record(processed: list[tuple[str, int, float]], **steps: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "processed": processed, "claims": {}, "closes": {}, "started": 0.0, "store_calls": 0, "connections": 2,
        "won": {}, "released": {}, "seen_released": {}, "checkpoint_reads": [], "opened": {}, "delivered": {},
    }
    return {**base, **steps}


def test_overlap_holes_gap_claim_and_timeline() -> None:
    # partition 0 stays with A; partition 1 moves: A's last event at 10.0, B's first at 10.3.
    a = record(
        [("0", 0, 1.0), ("0", 1, 2.0), ("1", 0, 1.0), ("1", 1, 10.0)],
        released={"1": 10.05}, store_calls=20,
    )
    b = record(
        [("1", 1, 10.3), ("1", 3, 10.4)],  # seq 1 twice (A and B); seq 2 of partition 1 never processed: lost
        won={"1": 10.1}, seen_released={"1": 10.08}, checkpoint_reads=[3.0, 10.12], claims={"1": [10.13]},
        opened={"1": 10.2}, delivered={"1": 10.28}, store_calls=40,
    )
    out = summarize([{"a": a, "b": b, "seconds": 20.0}])
    assert out["twice"] == 1 and out["lost"] == 1 and out["moved"] == 1
    assert out["gap_median"] == 0.3 and out["claim_to_first_median"] == 0.2
    assert out["cold_start"] == 1.0
    assert out["store_requests_per_interval"] == 3.0  # (20 + 40) / 2 consumers / (20 s / 2 s)
    steps = out["timeline"]
    assert list(steps) == [
        "release_written", "release_seen", "claimed", "checkpoint_read", "initialized", "link_open",
        "first_delivered", "first_processed",
    ]
    assert steps["checkpoint_read"] == 0.12  # the read after the claim, not the one at start
    assert all(x < y for x, y in zip(list(steps.values()), list(steps.values())[1:], strict=False))


def test_medians_pool_the_moves_of_every_trial() -> None:
    trials = []
    for gap in (0.1, 0.2, 0.6):
        a = record([("5", 0, 1.0)])
        b = record([("5", 1, 1.0 + gap)], won={"5": 1.0})
        trials.append({"a": a, "b": b, "seconds": 10.0})
    out = summarize(trials)
    assert out["moved"] == 3 and out["gap_median"] == 0.2 and out["gap_max"] == 0.6 and out["lost"] == 0
    assert out["connections_per_consumer"] == [2] * 6


def test_p95_is_the_nearest_rank_over_every_move_and_each_trial_has_its_median() -> None:
    trials = []
    for t in range(4):  # four trials of five moves: gaps 0.01 .. 0.20
        a = record([(str(p), 0, 1.0) for p in range(5)])
        b = record([(str(p), 1, 1.0 + (5 * t + p + 1) / 100) for p in range(5)])
        trials.append({"a": a, "b": b, "seconds": 10.0})
    out = summarize(trials)
    assert out["moved"] == 20 and out["gap_max"] == 0.2
    assert out["gap_p95"] == 0.19  # the 19th of 20 (nearest rank), not the largest
    assert out["gap_medians_per_trial"] == [0.03, 0.08, 0.13, 0.18]


def test_the_stall_skips_what_the_new_owner_repeated() -> None:
    # B repeats A's events 4 and 5 right after taking over, then reads 6: the partition made no progress
    # from A's last (10.0) until 10.25, though B's first event came at 9.9
    a = record([("2", s, 9.0 + s / 5) for s in range(6)])
    b = record([("2", 4, 9.9), ("2", 5, 9.95), ("2", 6, 10.25)])
    out = summarize([{"a": a, "b": b, "seconds": 10.0}])
    assert out["gap_median"] == -0.1 and out["twice"] == 2
    assert out["stall_median"] == 0.25 and out["stall_p95"] == 0.25


def test_without_repeats_the_stall_is_the_gap() -> None:
    a = record([("0", 0, 1.0), ("1", 0, 1.0)])
    b = record([("0", 1, 1.2), ("1", 1, 1.4)])
    out = summarize([{"a": a, "b": b, "seconds": 10.0}])
    assert out["stall_median"] == out["gap_median"] == 0.3 and out["twice"] == 0
