"""Operator state committed with the checkpoint, against every store that keeps it (StatefulCheckpointStore)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from rxhubs import Checkpoint, Ownership
from rxhubs.errors import OwnershipLostError
from rxhubs.stores import StatefulCheckpointStore, is_stateful
from tests.stores.conftest import _FACTORIES, CG, HUB, NS, Harness, _params

STATEFUL_STORES = ["memory", "sqlite", "blob", "blob-sync-client"]


@pytest.fixture(params=_params(STATEFUL_STORES))
async def stateful(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Harness]:
    h = await _FACTORIES[request.param](request, tmp_path)
    try:
        yield h
    finally:
        for cleanup in h.cleanups:
            await cleanup()


def own(partition_id: str, owner_id: str, etag: str | None = None) -> Ownership:
    return Ownership(NS, HUB, CG, partition_id, owner_id, None, etag)


def cp(partition_id: str, sequence_number: int) -> Checkpoint:
    return Checkpoint(NS, HUB, CG, partition_id, str(sequence_number * 100), sequence_number)


async def start(store: StatefulCheckpointStore, record: Ownership) -> tuple[Ownership, tuple[object, object]]:
    [won] = await store.claim_ownership([record])
    return won, await store.fence_with_state(won)


async def two(h: Harness) -> tuple[StatefulCheckpointStore, StatefulCheckpointStore]:
    first, second = h.store, await h.another()
    assert isinstance(first, StatefulCheckpointStore) and isinstance(second, StatefulCheckpointStore)
    assert is_stateful(first) and is_stateful(second)
    return first, second


async def test_the_pair_is_written_together_and_the_next_owner_reads_it(stateful: Harness) -> None:
    a_store, b_store = await two(stateful)
    a, first = await start(a_store, own("0", "a"))
    assert first == (None, None)
    await a_store.commit_state(cp("0", 7), a, b"state at 7")  # the first write of the partition creates it
    await a_store.commit_state(cp("0", 9), a, b"state at 9")

    _, pair = await start(b_store, own("0", "b", a.etag))
    assert pair == (cp("0", 9), b"state at 9")
    assert [c.sequence_number for c in await b_store.list_checkpoints(NS, HUB, CG)] == [9]


async def test_a_state_only_change_at_the_same_position_is_written(stateful: Harness) -> None:
    store, _ = await two(stateful)
    a, _ = await start(store, own("1", "a"))
    await store.commit_state(cp("1", 4), a, b"open window")
    await store.commit_state(cp("1", 4), a, b"closed window")
    [renewed] = await store.claim_ownership([own("1", "a", a.etag)])
    assert await store.fence_with_state(renewed) == (cp("1", 4), b"closed window")


async def test_a_former_owners_commit_is_refused_and_leaves_the_pair_as_it_was(stateful: Harness) -> None:
    zombie, other = await two(stateful)
    a, _ = await start(zombie, own("0", "a"))
    await zombie.commit_state(cp("0", 50), a, b"S50")

    b, pair = await start(other, own("0", "b", a.etag))  # a paused past its expiry; b took over and fenced
    assert pair == (cp("0", 50), b"S50")
    with pytest.raises(OwnershipLostError):
        await zombie.commit_state(cp("0", 60), a, b"S60 from the zombie")

    [b2] = await other.claim_ownership([own("0", "b", b.etag)])
    assert await other.fence_with_state(b2) == (cp("0", 50), b"S50")
    await other.commit_state(cp("0", 55), b2, b"S55")
    with pytest.raises(OwnershipLostError):
        await zombie.commit_state(cp("0", 70), a, b"S70")
    [c] = await other.claim_ownership([own("0", "c", b2.etag)])
    assert await other.fence_with_state(c) == (cp("0", 55), b"S55")


async def test_a_checkpoint_written_without_state_drops_the_state(stateful: Harness) -> None:
    store, _ = await two(stateful)
    a, _ = await start(store, own("2", "a"))
    await store.commit_state(cp("2", 5), a, b"S5")
    await store.update_checkpoint_fenced(cp("2", 8), a)  # a pipeline without stateful operators
    [again] = await store.claim_ownership([own("2", "a", a.etag)])
    assert await store.fence_with_state(again) == (cp("2", 8), None)

    await store.commit_state(cp("2", 9), again, b"S9")
    await store.update_checkpoint(cp("2", 12))  # unfenced, too
    [third] = await store.claim_ownership([own("2", "z", again.etag)])
    assert await store.fence_with_state(third) == (cp("2", 12), None)


async def test_the_plain_fence_keeps_the_state_and_a_megabyte_travels(stateful: Harness) -> None:
    store, _ = await two(stateful)
    big = bytes(range(256)) * 4096  # 1 MiB
    a, _ = await start(store, own("3", "a"))
    await store.commit_state(cp("3", 3), a, big)
    [b] = await store.claim_ownership([own("3", "b", a.etag)])
    assert await store.fence(b) == cp("3", 3)  # a consumer without state support fences: the state stays
    [c] = await store.claim_ownership([own("3", "c", b.etag)])
    checkpoint, state = await store.fence_with_state(c)
    assert checkpoint == cp("3", 3) and state == big


async def test_sqlite_ignores_a_state_row_of_another_position(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A checkpoint row moved by a version of rxhubs that did not know state: the old state is not restored."""
    import sqlite3

    from rxhubs.stores import SqliteCheckpointStore

    path = tmp_path / "cp.sqlite"
    async with SqliteCheckpointStore(path) as store:
        a, _ = await start(store, own("0", "a"))
        await store.commit_state(cp("0", 5), a, b"S5")
        with sqlite3.connect(path) as db:  # what an older rxhubs' checkpoint write does: the row alone
            db.execute("UPDATE rxhubs_checkpoint SET sequence_number = 9, \"offset\" = '900'")
        [b] = await store.claim_ownership([own("0", "b", a.etag)])
        with caplog.at_level("WARNING", logger="rxhubs.stores"):
            assert await store.fence_with_state(b) == (cp("0", 9), None)
        assert "ignoring the state" in caplog.text


async def test_a_partition_handed_on_before_its_first_batch_keeps_the_state_it_was_handed(
    stateful: Harness,
) -> None:
    """``b`` is handed a partition with its state and gives it up unread (``rxhubs/balancing/_handed_start.py``).

    It writes the position it started from before the record leaves: with the state its fence restored, or
    the store drops the state (a checkpoint written alone), and ``c`` restarts the open windows empty.
    """
    from rxhubs import PartitionContext
    from rxhubs.balancing._handed_start import write_start
    from rxhubs.balancing._session import PartitionSession
    from rxhubs.state._codec import OperatorState, decode, encode

    a_store, b_store = await two(stateful)
    saved = encode({"per_device": OperatorState("f", {"dev-12": 10}, {"wm": 5.0})})
    a, _ = await start(a_store, own("0", "a"))
    await a_store.commit_state(cp("0", 60), a, saved)
    [handed] = await a_store.claim_ownership([own("0", "b", a.etag)])  # a's stop names b in its final write

    checkpoint, state = await b_store.fence_with_state(handed)
    assert (checkpoint, state) == (cp("0", 60), saved)
    session = PartitionSession(PartitionContext(NS, HUB, CG, "0"), handed)
    session.period, session.restored_state, session.handed = handed, decode(state), True
    await write_start(b_store, session, checkpoint)
    [handed_on] = await b_store.claim_ownership([own("0", "c", handed.etag)])  # b gives it up unread, to c

    _, pair = await start(a_store, own("0", "c", handed_on.etag))  # c's fence
    assert pair[0] == cp("0", 60)
    assert pair[1] is not None and decode(pair[1]) == decode(saved)  # the windows b never read, still there
