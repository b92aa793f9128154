"""A release carries a hand (Azurite): whoever claims the partition from it fences without a stamp.

A consumer that stops drains each partition and writes its final checkpoint, then releases the record to no one. The
released ownership blob names its period, as a hand to a recipient does (``rxhubs/stores/_blob_hands.py``); a
consumer whose listing showed that release claims from that version, and its fence reads the checkpoint blob alone
(the claim's compare-and-swap was the ownership check) and, finding it written last by that period, stamps nothing.
It still reads: a released record may lie unclaimed for days, and a checkpoint written meanwhile by a tool that
claims nothing is read, not overruled. Observed in the storage client's own pipeline, so no request is left out.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from rxhubs import Ownership
from rxhubs.errors import OwnershipLostError
from rxhubs.stores import BlobCheckpointStore
from rxhubs.stores._blob_fence import FENCE_KEY, HANDED_AT_KEY, HANDED_KEY
from tests.stores.test_blob_fence_requests import CG, HUB, NS, Trace, traced_store
from tests.stores.test_blob_handover_fence import at, own, stamps
from tests.stores.test_blob_handover_path import GROUP as PATH_GROUP
from tests.stores.test_blob_handover_path import a_then_b, until


async def released(store: BlobCheckpointStore, *, note: bool = True) -> tuple[Ownership, Ownership]:
    """``a`` claims partition 0, fences it, checkpoints 7 and releases it (noted as a hand): its period, the release."""
    [a] = await store.claim_ownership([own("a")])
    await store.fence(a)
    await store.update_checkpoint_fenced(at("0", 7), a)
    release = own("", etag=a.etag)
    if note:
        store.note_handover(a, release)
    [done] = await store.claim_ownership([release])
    return a, done


def checkpoint_writes(trace: Trace) -> list[tuple[str, str, str]]:
    return [e for e in trace.events if e[0] == "request" and e[1] == "PUT" and e[2] == "checkpoint"]


async def test_a_listed_release_is_fenced_without_a_stamp(azurite: Any, blob_container: str) -> None:
    trace = Trace()
    async with BlobCheckpointStore.from_connection_string(azurite.connection_string, blob_container) as store_a, \
            traced_store(azurite, blob_container, trace) as store_b:
        a, _ = await released(store_a)
        own_blob = await store_a._blob(f"{NS}/{HUB}/{CG}/ownership/0".lower()).get_blob_properties()
        checkpoint_blob = store_a._blob(f"{NS}/{HUB}/{CG}/checkpoint/0".lower())
        etag = (await checkpoint_blob.get_blob_properties()).etag.strip('"')
        assert own_blob.metadata["ownerid"] == "", own_blob.metadata
        assert own_blob.metadata[HANDED_KEY].endswith(" a"), own_blob.metadata
        assert own_blob.metadata[HANDED_AT_KEY] == f"{etag} 7 70", own_blob.metadata
        [listed] = await store_b.list_ownership(NS, HUB, CG)
        [b] = await store_b.claim_ownership([own("b", etag=listed.etag)])
        trace.events.clear()
        assert await store_b.fence_with_state(b) == (at("0", 7), None)
        # the checkpoint blob read, not stamped; the ownership blob not read (b's claim from the release checked it)
        assert [e for e in trace.events if e[0] == "request"] == [("request", "HEAD", "checkpoint")], trace.events
        assert (await checkpoint_blob.get_blob_properties()).etag.strip('"') == etag
        # the first write is If-Match the etag the fence read, with b's key: no read before it
        trace.events.clear()
        await store_b.update_checkpoint_fenced(at("0", 9), b)
        assert [e for e in trace.events if e[0] == "request"] == [("request", "PUT", "checkpoint")]
        props = await checkpoint_blob.get_blob_properties()
        assert (props.metadata["sequencenumber"], props.metadata[FENCE_KEY].split(" ")[1]) == ("9", "b")
        with pytest.raises(OwnershipLostError):  # the released period is over: its store refuses it
            await store_a.update_checkpoint_fenced(at("0", 8), a)


@pytest.mark.parametrize("why", ["not listed", "not noted"])
async def test_a_claim_without_a_listed_hand_is_stamped(azurite: Any, blob_container: str, why: str) -> None:
    """A claimant that did not list the release (its claim overwrote the hand), or a release not noted: the fence
    reads the blob and stamps it, as for any claim."""
    trace = Trace()
    async with BlobCheckpointStore.from_connection_string(azurite.connection_string, blob_container) as store_a, \
            traced_store(azurite, blob_container, trace) as store_b:
        _, release = await released(store_a, note=why != "not noted")
        if why == "not noted":
            [listed] = await store_b.list_ownership(NS, HUB, CG)
            assert HANDED_KEY not in (await store_a._blob(
                f"{NS}/{HUB}/{CG}/ownership/0".lower()).get_blob_properties()).metadata
            release = listed
        [b] = await store_b.claim_ownership([own("b", etag=release.etag)])
        trace.events.clear()
        assert await store_b.fence(b) == at("0", 7)
        assert stamps(trace) == 1, trace.events


async def test_a_checkpoint_written_after_the_release_is_read_and_stamped(azurite: Any, blob_container: str) -> None:
    """A tool that claims nothing rewrites the checkpoint blob while the record lies released: the claimant that
    listed the release starts from what the blob says now, and stamps it (the released period no longer wrote last)."""
    trace = Trace()
    async with BlobCheckpointStore.from_connection_string(azurite.connection_string, blob_container) as store_a, \
            traced_store(azurite, blob_container, trace) as store_b:
        await released(store_a)
        [listed] = await store_b.list_ownership(NS, HUB, CG)
        await store_a._blob(f"{NS}/{HUB}/{CG}/checkpoint/0".lower()).set_blob_metadata(
            {"offset": "30", "sequencenumber": "3"})
        [b] = await store_b.claim_ownership([own("b", etag=listed.etag)])
        trace.events.clear()
        assert await store_b.fence(b) == at("0", 3)
        assert len(checkpoint_writes(trace)) == 1, trace.events


async def test_a_survivor_takes_a_stopped_consumers_partitions_from_its_hands(
    azurite: Any, blob_container: str
) -> None:
    """``rxhubs.consume`` on both sides: ``a`` and ``b`` share four partitions, ``a`` stops. ``b`` claims ``a``'s two
    from the releases its listing showed: it writes nothing to their checkpoint blobs (no stamp: they still carry
    ``a``'s key) and starts right after ``a``'s last event of each."""
    from rxhubs.testing import InMemoryEventHub

    hub = InMemoryEventHub(partition_count=4)
    trace = Trace()
    stores = [BlobCheckpointStore.from_connection_string(azurite.connection_string, blob_container),
              traced_store(azurite, blob_container, trace)]
    a, b, feeder = await a_then_b(hub, stores)
    first = b.partitions()
    await asyncio.sleep(0.2)
    trace.events.clear()
    await a.close()
    await until(lambda: len(b.partitions()) == 4)
    taken = b.partitions() - first
    # the releases named a's periods: nothing to stamp on the partitions b took (its own may be checkpointed meanwhile)
    stamps = [u for u in trace.written if any(u.endswith(f"/checkpoint/{pid}") for pid in taken)]
    assert stamps == [], (stamps, trace.events)
    for pid in sorted(taken):
        blob = stores[1]._blob(
            f"{hub.fully_qualified_namespace}/{hub.eventhub_name}/{PATH_GROUP}/checkpoint/{pid}".lower())
        props = await blob.get_blob_properties()
        assert props.metadata[FENCE_KEY].endswith(" a"), (pid, props.metadata)  # a's period: b did not stamp
    feeder.cancel()
    await b.close()
    for store in stores:
        await store.close()
    for pid in taken:
        by_a = [n for p, n in a.processed if p == pid]
        by_b = [n for p, n in b.processed if p == pid]
        assert by_b[0] == max(by_a) + 1, (pid, max(by_a), by_b[:3])  # right after a's last event
    everything = sorted(a.processed + b.processed)
    assert len(everything) == len(set(everything))


@pytest.mark.parametrize("blob", ["absent", "rewritten"])
async def test_a_hand_passed_on_unstarted_keeps_its_position(azurite: Any, blob_container: str, blob: str) -> None:
    """``a`` hands partition 0 to ``b`` with its final write of 9 in flight (it never lands here, as a write that timed
    out); ``b``, dealt one too many, releases it before starting it. The release carries ``a``'s hand on: ``c``,
    claiming from it, starts after 9 (before: the release named no one, the blob was absent, and ``c`` read the
    partition from the beginning; ``rxhubs bench scale --real`` under load, 18 partitions). A checkpoint written
    while the record lay released (``rewritten``: a tool, no fence key) is read instead, as for any release."""
    async with BlobCheckpointStore.from_connection_string(azurite.connection_string, blob_container) as store_a, \
            BlobCheckpointStore.from_connection_string(azurite.connection_string, blob_container) as store_b, \
            BlobCheckpointStore.from_connection_string(azurite.connection_string, blob_container) as store_c:
        [a] = await store_a.claim_ownership([own("a")])
        await store_a.fence(a)
        hand = own("b", etag=a.etag)
        store_a.note_handover(a, hand, final=at("0", 9))
        [b] = await store_a.claim_ownership([hand])
        await store_b.list_ownership(NS, HUB, CG)  # b sees the hand, and never starts the partition
        [released] = await store_b.claim_ownership([own("", etag=b.etag)])
        props = await store_b._blob(f"{NS}/{HUB}/{CG}/ownership/0".lower()).get_blob_properties()
        assert props.metadata.get(HANDED_KEY, "").endswith(" a"), props.metadata  # a's hand, passed on
        if blob == "rewritten":
            blob_client = store_c._blob(f"{NS}/{HUB}/{CG}/checkpoint/0".lower())
            await blob_client.upload_blob(b"", metadata={"offset": "40", "sequencenumber": "4"})
        await store_c.list_ownership(NS, HUB, CG)
        [c] = await store_c.claim_ownership([own("c", etag=released.etag)])
        start = await store_c.fence(c)
        assert start == (at("0", 9) if blob == "absent" else at("0", 4)), start
