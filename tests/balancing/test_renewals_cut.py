"""A change of the group cuts a steady round's renewals short, and the round that serves it runs at once.

Consumer ``a`` owns 160 partitions; with a 2 s interval and a 6 s expiration each round renews them all: 161
records with its presence, six ``claim_ownership`` calls of 32, three at a time. The store holds ``a``'s claim calls
unanswered (a slow storage account while new consumers start). ``b`` joins meanwhile; ``a``'s watch during the claim
sees it, and once the held calls are answered the other three are not sent: ``a``'s next round runs at once (it lists
the records again: a round's listing) and hands ``b`` its half. The renewals that were not sent go out in that round;
nothing expired, nothing was reported as a failure. Without the cut the held round sent all six calls before its
next listing (rxhubs/balancing/_presence_watch.py, rxhubs/balancing/_store_calls.py ``Cut``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

import pytest

import rxhubs
from rxhubs import Ownership
from rxhubs.stores import CheckpointStore, InMemoryCheckpointStore
from rxhubs.testing import InMemoryEventHub
from tests.balancing.test_presence_watch import Noted
from tests.balancing.test_release_in_flight import owners, until

GROUP = "$Default"
FAST: dict[str, Any] = {"load_balancing_interval": 2.0, "ownership_expiration": 6.0, "store_timeout": 30.0,
                        "max_wait": 0.05}
PARTITIONS = 160


class Held(Noted):
    """``a``'s view of the shared store (its listings noted, as the watch's test notes them); holds its claims when
    asked, and notes each claim call's size."""

    def __init__(self, inner: InMemoryCheckpointStore) -> None:
        super().__init__(inner)
        self.hold: asyncio.Event | None = None  # set: answer; None: not holding
        self.arm = False  # hold the claim calls of the next round (from its listing of the records on)
        self.held = 0
        self.began = 0  # where in ``calls`` the held round's listing is

    async def list_ownership(self, ns: str, hub: str, group: str) -> list[Ownership]:
        found = await super().list_ownership(ns, hub, group)
        if self.arm and self.calls[-1][0] == "records":
            self.hold, self.arm, self.began = asyncio.Event(), False, len(self.calls)
        return found

    async def claim_ownership(self, claims: Iterable[Ownership]) -> list[Ownership]:
        claims = list(claims)
        self.calls.append(("claim", len(claims)))
        if self.hold is not None:
            self.held += 1
            await self.hold.wait()
        return await self.inner.claim_ownership(claims)


def run(hub: Any, owner: str, store: CheckpointStore, stop: rxhubs.Shutdown, errors: list[str]) -> Any:
    def on_error(context: Any, error: Exception) -> None:
        errors.append(f"{context.operation}: {error}")

    return asyncio.create_task(rxhubs.arun(
        rxhubs.consume(hub, GROUP, store, owner_id=owner, on_partition_error=on_error, **FAST),
        shutdown=stop, grace=10.0, signals=()))


async def test_a_join_cuts_a_steady_rounds_renewals_short_and_is_served_at_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    hub = InMemoryEventHub(partition_count=PARTITIONS)
    inner = InMemoryCheckpointStore()
    held = Held(inner)
    stops = {"a": rxhubs.Shutdown(), "b": rxhubs.Shutdown()}
    errors: list[str] = []
    a = run(hub, "a", held, stops["a"], errors)
    await until(lambda: sorted(owners(hub, inner).values()) == ["a"] * PARTITIONS)
    held.arm = True  # the next round's claim calls are held
    await until(lambda: held.held == 3)  # three calls in flight, three waiting for their turn
    began = held.began
    b = run(hub, "b", inner, stops["b"], [])
    await until(lambda: any(kind == "presence" and "b" in what for kind, what in held.calls[began:]))
    release, held.hold = held.hold, None
    assert release is not None
    release.set()
    await until(lambda: sorted(owners(hub, inner).values()).count("b") == PARTITIONS // 2)
    after_hold = held.calls[began:]
    next_listing = next(i for i, (kind, _) in enumerate(after_hold) if kind == "records")
    sent = [n for kind, n in after_hold[:next_listing] if kind == "claim"]
    assert sent == [32, 32, 32], after_hold[:next_listing]  # the other three calls were not sent: cut short
    assert all(o in ("a", "b") for o in owners(hub, inner).values())  # nothing expired, nothing lost
    claim_errors = [e for e in errors if e.startswith("claim")]
    assert claim_errors == []  # a cut is not a failure: neither reported nor warned about
    assert not [r for r in caplog.records if "not answered" in r.getMessage() and r.levelno >= logging.WARNING]
    for stop in stops.values():
        stop.request()
    assert await a == 0 and await b == 0


async def test_a_stop_cuts_a_steady_rounds_renewals_short(caplog: pytest.LogCaptureFixture) -> None:
    """``a`` is asked to stop while its steady round's six calls of renewals are being sent (three held in flight):
    the other three are not sent, and once the three are answered the wind-down releases all 160 records. Before, the
    stop waited for every renewal (at a stop of four of eight consumers of 1,024 partitions, 4.3 s of a leaver's 128
    renewals on a busy Azurite before it released anything)."""
    hub = InMemoryEventHub(partition_count=PARTITIONS)
    inner = InMemoryCheckpointStore()
    held = Held(inner)
    stop = rxhubs.Shutdown()
    errors: list[str] = []
    a = run(hub, "a", held, stop, errors)
    await until(lambda: sorted(owners(hub, inner).values()) == ["a"] * PARTITIONS)
    held.arm = True
    await until(lambda: held.held == 3)
    began = held.began
    stop.request()
    await asyncio.sleep(0.1)  # the stop's cut is set now; the held calls are still in flight
    release, held.hold = held.hold, None
    assert release is not None
    release.set()
    assert await a == 0
    renewals = [n for kind, n in held.calls[began:] if kind == "claim"][:3]
    assert renewals == [32, 32, 32]
    releases = [n for kind, n in held.calls[began:] if kind == "claim"][3:]
    # the leaving record's write (_dealing), the 160 records, the presence and leaving records' release: no renewal
    assert sum(releases) == 1 + PARTITIONS + 2, held.calls[began:]
    assert set(owners(hub, inner).values()) == {""}
    assert [e for e in errors if e.startswith("claim")] == []
