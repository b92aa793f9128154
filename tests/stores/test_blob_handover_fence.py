"""A graceful handover needs no stamp (Azurite): the former owner names its period, the recipient reads and starts.

The former owner (``a``) drained the partition, wrote its final checkpoint and hands the record to ``b`` with
``note_handover``: the ownership blob it writes names its period, and ``a``'s store refuses every later write of
that period. ``b``'s fence finds the checkpoint blob written last by that very period, so it reads the position
and sends no write. Anything else written in between makes it stamp as before. Observed in the storage client's
own pipeline, so no request is left out.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from rxhubs import Checkpoint, Ownership
from rxhubs.errors import OwnershipLostError
from rxhubs.stores import BlobCheckpointStore
from rxhubs.stores._blob_fence import FENCE_KEY, HANDED_AT_KEY, HANDED_KEY
from tests.stores.test_blob_fence_requests import CG, HUB, NS, Trace, traced_store


def own(owner: str, pid: str = "0", etag: str | None = None) -> Ownership:
    return Ownership(NS, HUB, CG, pid, owner, None, etag)


def at(pid: str, number: int) -> Checkpoint:
    return Checkpoint(NS, HUB, CG, pid, str(number * 10), number)


async def handed_over(store: BlobCheckpointStore, pids: list[str], *, note: bool = True) -> list[Ownership]:
    """``a`` claims and fences ``pids``, checkpoints each, then hands each to ``b``: ``b``'s records."""
    periods = await store.claim_ownership([own("a", pid) for pid in pids])
    for period in periods:
        await store.fence(period)
        await store.update_checkpoint_fenced(at(period.partition_id, 7), period)
    hands = [own("b", period.partition_id, period.etag) for period in periods]
    if note:
        for period, hand in zip(periods, hands, strict=True):
            store.note_handover(period, hand)
    return await store.claim_ownership(hands)


def stamps(trace: Trace) -> int:
    return sum(1 for what, method, kind in trace.events if (what, method, kind) == ("request", "PUT", "checkpoint"))


@pytest.mark.parametrize("partitions", [1, 4], ids=["alone", "batched"])
async def test_a_noted_handover_is_fenced_without_a_write(azurite: Any, blob_container: str, partitions: int) -> None:
    trace = Trace()
    async with traced_store(azurite, blob_container, trace) as store:
        records = await handed_over(store, [str(p) for p in range(partitions)])
        props = await store._blob(f"{NS}/{HUB}/{CG}/ownership/0".lower()).get_blob_properties()
        assert props.metadata.get(HANDED_KEY, "").endswith(" a"), props.metadata
        trace.events.clear()
        starts = [await store.fence(r) for r in records] if partitions == 1 else await _together(store, records)
        assert [s.sequence_number if s else None for s in starts] == [7] * partitions
        assert stamps(trace) == 0, trace.events
        # b's first write goes through with b's key, If-Match the version its fence read
        await store.update_checkpoint_fenced(at("0", 9), records[0])
        [cp] = [c for c in await store.list_checkpoints(NS, HUB, CG) if c.partition_id == "0"]
        assert cp.sequence_number == 9
        checkpoint = await store._blob(f"{NS}/{HUB}/{CG}/checkpoint/0".lower()).get_blob_properties()
        assert checkpoint.metadata[FENCE_KEY].endswith(" b")


async def _together(store: BlobCheckpointStore, records: list[Ownership]) -> list[Checkpoint | None]:
    import asyncio

    return list(await asyncio.gather(*(store.fence(r) for r in records)))


async def test_the_former_owner_cannot_write_after_its_handover(azurite: Any, blob_container: str) -> None:
    async with BlobCheckpointStore.from_connection_string(azurite.connection_string, blob_container) as store:
        [a] = await store.claim_ownership([own("a")])
        await store.fence(a)
        await store.update_checkpoint_fenced(at("0", 7), a)
        store.note_handover(a, own("b", etag=a.etag))
        with pytest.raises(OwnershipLostError, match="handed the partition over"):
            await store.update_checkpoint_fenced(at("0", 8), a)
        [cp] = await store.list_checkpoints(NS, HUB, CG)
        assert cp.sequence_number == 7


async def test_a_write_after_the_former_owners_last_makes_the_fence_stamp(azurite: Any, blob_container: str) -> None:
    """The official store (no fence key) checkpointed after ``a``: ``b`` cannot trust the period; it stamps."""
    trace = Trace()
    async with traced_store(azurite, blob_container, trace) as store:
        [b] = await handed_over(store, ["0"])
        blob = store._blob(f"{NS}/{HUB}/{CG}/checkpoint/0".lower())
        await blob.set_blob_metadata({"offset": "80", "sequencenumber": "8"})  # as the official store writes
        trace.events.clear()
        start = await store.fence(b)
        assert start is not None and start.sequence_number == 8
        assert stamps(trace) == 1, trace.events
        assert (await blob.get_blob_properties()).metadata[FENCE_KEY].endswith(" b")


async def test_a_claim_that_was_not_noted_is_stamped(azurite: Any, blob_container: str) -> None:
    """A steal (or a release then a claim) carries no period: the fence stamps, as it always did."""
    trace = Trace()
    async with traced_store(azurite, blob_container, trace) as store:
        [b] = await handed_over(store, ["0"], note=False)
        trace.events.clear()
        start = await store.fence(b)
        assert start is not None and start.sequence_number == 7
        assert stamps(trace) == 1, trace.events


async def test_an_owner_before_the_handover_stays_fenced_out(azurite: Any, blob_container: str) -> None:
    """``z`` owned the partition before ``a`` fenced it; ``a`` hands it to ``b`` unstamped: ``z`` still cannot write."""
    async with BlobCheckpointStore.from_connection_string(azurite.connection_string, blob_container) as zs, \
            BlobCheckpointStore.from_connection_string(azurite.connection_string, blob_container) as store:
        [z] = await zs.claim_ownership([own("z")])
        await zs.fence(z)
        await zs.update_checkpoint_fenced(at("0", 5), z)
        [a] = await store.claim_ownership([own("a", etag=z.etag)])
        await store.fence(a)
        await store.update_checkpoint_fenced(at("0", 7), a)
        hand = own("b", etag=a.etag)
        store.note_handover(a, hand)
        [b] = await store.claim_ownership([hand])
        assert (await store.fence(b)) is not None
        with pytest.raises(OwnershipLostError):
            await zs.update_checkpoint_fenced(at("0", 6), z)
        [cp] = await store.list_checkpoints(NS, HUB, CG)
        assert cp.sequence_number == 7


# -- the hand carries the position: a recipient that listed it sends no request at its fence ---------------------


async def listed_hand(store_a: BlobCheckpointStore, trace: Trace, b_store: BlobCheckpointStore, *,
                      state: bytes | None = None) -> tuple[Ownership, Ownership]:
    """``a`` (its own store) checkpoints 7 and hands partition 0 to ``b``; ``b``'s store lists the records."""
    [a] = await store_a.claim_ownership([own("a")])
    await store_a.fence(a)
    if state is None:
        await store_a.update_checkpoint_fenced(at("0", 7), a)
    else:
        await store_a.commit_state(at("0", 7), a, state)
    hand = own("b", etag=a.etag)
    store_a.note_handover(a, hand)
    [b] = await store_a.claim_ownership([hand])
    [listed] = await b_store.list_ownership(NS, HUB, CG)
    assert (listed.owner_id, listed.etag) == ("b", b.etag)
    trace.events.clear()
    return a, b


@pytest.mark.parametrize("with_state", [False, True], ids=["fence", "fence_with_state"])
async def test_a_listed_hand_starts_the_recipient_without_a_request(
    azurite: Any, blob_container: str, with_state: bool
) -> None:
    """What rxhubs calls on the blob store is ``fence_with_state``: a hand with a position means no state."""
    trace = Trace()
    async with BlobCheckpointStore.from_connection_string(azurite.connection_string, blob_container) as store_a, \
            traced_store(azurite, blob_container, trace) as store_b:
        a, b = await listed_hand(store_a, trace, store_b)
        own_blob = await store_a._blob(f"{NS}/{HUB}/{CG}/ownership/0".lower()).get_blob_properties()
        checkpoint_blob = store_a._blob(f"{NS}/{HUB}/{CG}/checkpoint/0".lower())
        etag = (await checkpoint_blob.get_blob_properties()).etag.strip('"')
        assert own_blob.metadata[HANDED_AT_KEY] == f"{etag} 7 70", own_blob.metadata
        start = (await store_b.fence_with_state(b)) if with_state else (await store_b.fence(b), None)
        assert start == (at("0", 7), None)
        assert trace.events == []  # not a listing, not a read, not a stamp
        # the first write is If-Match the etag the hand gave, with b's key
        await store_b.update_checkpoint_fenced(at("0", 9), b)
        assert [e for e in trace.events if e[0] == "request"] == [("request", "PUT", "checkpoint")]
        props = await checkpoint_blob.get_blob_properties()
        assert (props.metadata["sequencenumber"], props.metadata[FENCE_KEY].split(" ")[1]) == ("9", "b")
        # the former owner's period is over: its store refuses it
        with pytest.raises(OwnershipLostError):
            await store_a.update_checkpoint_fenced(at("0", 8), a)


async def test_a_fence_after_the_listing_catches_the_recipients_first_write(azurite: Any, blob_container: str) -> None:
    """``c`` takes the record over after ``b`` listed the hand, and fences: ``b``'s first write is refused."""
    trace = Trace()
    async with BlobCheckpointStore.from_connection_string(azurite.connection_string, blob_container) as store_a, \
            traced_store(azurite, blob_container, trace) as store_b, \
            BlobCheckpointStore.from_connection_string(azurite.connection_string, blob_container) as store_c:
        _, b = await listed_hand(store_a, trace, store_b)
        [c] = await store_c.claim_ownership([own("c", etag=b.etag)])
        assert await store_c.fence(c) == at("0", 7)  # a steal: c stamps
        assert await store_b.fence(b) == at("0", 7)  # what b listed, before c came
        with pytest.raises(OwnershipLostError):
            await store_b.update_checkpoint_fenced(at("0", 9), b)
        await store_c.update_checkpoint_fenced(at("0", 8), c)
        [cp] = await store_c.list_checkpoints(NS, HUB, CG)
        assert cp.sequence_number == 8


async def test_a_hand_with_state_carries_no_position(azurite: Any, blob_container: str) -> None:
    """The state is the checkpoint blob's body: the recipient reads it (no shortcut), and gets it."""
    trace = Trace()
    async with BlobCheckpointStore.from_connection_string(azurite.connection_string, blob_container) as store_a, \
            traced_store(azurite, blob_container, trace) as store_b:
        _, b = await listed_hand(store_a, trace, store_b, state=b"window state")
        own_blob = await store_a._blob(f"{NS}/{HUB}/{CG}/ownership/0".lower()).get_blob_properties()
        assert HANDED_KEY in own_blob.metadata and HANDED_AT_KEY not in own_blob.metadata
        start, state = await store_b.fence_with_state(b)
        assert (start, state) == (at("0", 7), b"window state")
        assert any(e[0] == "request" for e in trace.events)


# -- the hand carries a write in flight: the release need not wait for the final checkpoint's answer -------------


async def hand_in_flight(
    store_a: BlobCheckpointStore, *, final_lands: bool, trace_a: Trace | None = None
) -> tuple[Ownership, Ownership]:
    """``a`` checkpointed 7; its final write (9) is sent and ``a`` hands partition 0 to ``b`` before the answer.

    ``final_lands``: the write lands after the release (False: it never does, as a write that failed).
    """
    [a] = await store_a.claim_ownership([own("a")])
    await store_a.fence(a)
    await store_a.update_checkpoint_fenced(at("0", 7), a)
    if trace_a is not None:
        trace_a.events.clear()
    final = asyncio.ensure_future(store_a.update_checkpoint_fenced(at("0", 9), a)) if final_lands else None
    hand = own("b", etag=a.etag)
    store_a.note_handover(a, hand, final=at("0", 9))  # (before the task ran: the write of 9 is still allowed)
    [b] = await store_a.claim_ownership([hand])
    if final is not None:
        await final
    return a, b


@pytest.mark.parametrize("listed", [True, False], ids=["hand listed", "hand not listed"])
@pytest.mark.parametrize("final_lands", [True, False], ids=["final write lands", "final write never lands"])
async def test_a_hand_with_a_write_in_flight_starts_the_recipient_where_the_owner_stopped(
    azurite: Any, blob_container: str, listed: bool, final_lands: bool
) -> None:
    """The hand names 9 before the write of 9 is answered. ``b`` starts after 9 whether it listed the hand (no
    request) or not (its fence reads the hand from the ownership blob), and whether the write lands or not (the
    checkpoint blob says 7 then: ``b`` would have read 7 to 9 again). ``b``'s first write reads the etag it did not
    know (the blob names ``a``'s period, which handed over to ``b``: no ownership read), and goes through; ``a``'s
    last write is one request (its etag was kept), and ``a`` writes nothing more."""
    trace, trace_a = Trace(), Trace()
    async with traced_store(azurite, blob_container, trace_a) as store_a, \
            traced_store(azurite, blob_container, trace) as store_b:
        a, b = await hand_in_flight(store_a, final_lands=final_lands, trace_a=trace_a)
        writes = [e for e in trace_a.events if e[0] == "request" and e[2] == "checkpoint"]
        assert writes == ([("request", "PUT", "checkpoint")] if final_lands else []), writes
        own_blob = await store_a._blob(f"{NS}/{HUB}/{CG}/ownership/0".lower()).get_blob_properties()
        assert own_blob.metadata[HANDED_AT_KEY] == "- 9 90", own_blob.metadata
        [cp] = await store_b.list_checkpoints(NS, HUB, CG)
        assert cp.sequence_number == (9 if final_lands else 7)
        if listed:
            await store_b.list_ownership(NS, HUB, CG)
        trace.events.clear()
        start, state = await store_b.fence_with_state(b)
        assert (start, state) == (at("0", 9), None)
        assert (trace.events == []) == listed, trace.events  # listed: no request at all
        trace.events.clear()
        await store_b.update_checkpoint_fenced(at("0", 12), b)
        first = [(method, kind) for what, method, kind in trace.events if what == "request"]
        assert first == ([("HEAD", "checkpoint")] if listed else []) + [("PUT", "checkpoint")], first
        props = await store_b._blob(f"{NS}/{HUB}/{CG}/checkpoint/0".lower()).get_blob_properties()
        assert (props.metadata["sequencenumber"], props.metadata[FENCE_KEY].split(" ")[1]) == ("12", "b")
        with pytest.raises(OwnershipLostError):
            await store_a.update_checkpoint_fenced(at("0", 10), a)


async def a_hands_over_to_b(store_a: BlobCheckpointStore) -> tuple[Any, Any]:
    """``a`` owns partition 0 from 7 and hands it to ``b`` with its final write of 9 noted: ``a``'s record, ``b``'s."""
    [a] = await store_a.claim_ownership([own("a")])
    await store_a.fence(a)
    await store_a.update_checkpoint_fenced(at("0", 7), a)
    hand = own("b", etag=a.etag)
    store_a.note_handover(a, hand, final=at("0", 9))
    [b] = await store_a.claim_ownership([hand])
    return a, b


async def test_a_final_write_that_lands_after_the_recipients_first_write_is_refused(
    azurite: Any, blob_container: str
) -> None:
    """The write of 9 is slower than ``b``: ``b`` starts after 9 and writes 12 first; the late write of 9 then fails
    on its etag (it finds ``b``'s key), and the checkpoint stays at 12. Any other write of ``a``'s period is refused by
    ``a``'s store before it is sent."""
    async with BlobCheckpointStore.from_connection_string(azurite.connection_string, blob_container) as store_a, \
            BlobCheckpointStore.from_connection_string(azurite.connection_string, blob_container) as store_b:
        a, b = await a_hands_over_to_b(store_a)
        await store_b.list_ownership(NS, HUB, CG)
        assert await store_b.fence(b) == at("0", 9)
        await store_b.update_checkpoint_fenced(at("0", 12), b)
        with pytest.raises(OwnershipLostError):  # the one write the hand allows: the service refuses it (b's etag)
            await store_a.update_checkpoint_fenced(at("0", 9), a)
        with pytest.raises(OwnershipLostError) as refused:  # any other: a's store refuses it before sending
            await store_a.update_checkpoint_fenced(at("0", 10), a)
        assert "handed the partition over" in str(refused.value)
        [cp] = await store_b.list_checkpoints(NS, HUB, CG)
        assert cp.sequence_number == 12


@pytest.mark.parametrize("final_lands", [True, False], ids=["final write lands late", "final write never lands"])
async def test_a_recipient_that_renews_a_handed_record_before_its_fence_still_starts_from_the_hand(
    azurite: Any, blob_container: str, final_lands: bool
) -> None:
    """``b`` lists ``a``'s hand (the write of 9 still in flight) but takes the record by renewing it first (its round
    saw the record more than an interval after the hand: it may be b's own, expiring), then fences the renewed record.
    The renewal's compare-and-swap was from the version listed, so the hand still says where ``a`` stopped: ``b``
    starts after 9. Before, the renewal rewrote the blob without the hand and the fence read the checkpoint blob: 7
    (``a``'s last write not landed yet), stamped it, the write of 9 was refused, and 8-9 were read twice (``rxhubs
    bench scale --real``, 512 partitions). Broken by not moving the hand to the renewed version: the fence gives 7.
    ``b``'s later listings of the blob and renewals do not bring the used hand back (a fence of a later period of
    ``b``'s after its own checkpoints would otherwise start from it again)."""
    async with BlobCheckpointStore.from_connection_string(azurite.connection_string, blob_container) as store_a, \
            BlobCheckpointStore.from_connection_string(azurite.connection_string, blob_container) as store_b:
        a, handed = await a_hands_over_to_b(store_a)  # the final write is sent, not answered
        [listed] = await store_b.list_ownership(NS, HUB, CG)
        assert (listed.owner_id, listed.etag) == ("b", handed.etag)
        [b] = await store_b.claim_ownership([listed])  # b's round renews it before it reads it
        assert b.etag != listed.etag
        assert HANDED_AT_KEY not in (await store_b._blob(f"{NS}/{HUB}/{CG}/ownership/0".lower())
                                     .get_blob_properties()).metadata  # the fault: the blob no longer says 9
        start, state = await store_b.fence_with_state(b)
        if final_lands:  # a's write of 9 comes after b's fence, before b's first write: it still goes through
            await store_a.update_checkpoint_fenced(at("0", 9), a)
        assert (start, state) == (at("0", 9), None)
        await store_b.update_checkpoint_fenced(at("0", 12), b)
        [cp] = await store_b.list_checkpoints(NS, HUB, CG)
        assert cp.sequence_number == 12
        # the hand is used: b's next listing and renewal do not keep it for a later period of b's
        [relisted] = await store_b.list_ownership(NS, HUB, CG)
        [renewed] = await store_b.claim_ownership([relisted])
        assert await store_b.fence(renewed) == at("0", 12)


async def test_a_hand_is_used_once_even_if_the_blob_still_shows_it(azurite: Any, blob_container: str) -> None:
    """``b`` started from the hand it listed; a later listing shows the same hand (``b`` has not renewed yet). When
    ``b``'s renewal is followed by a fence (``b`` lost the partition meanwhile and claims its own record again), the
    fence reads the checkpoint ``b`` wrote since, not the old hand. Broken by keeping every listed hand: the fence
    gives 9 and ``b``'s first write finds its own former period's key (refused)."""
    async with BlobCheckpointStore.from_connection_string(azurite.connection_string, blob_container) as store_a, \
            BlobCheckpointStore.from_connection_string(azurite.connection_string, blob_container) as store_b:
        _a, handed = await a_hands_over_to_b(store_a)
        [listed] = await store_b.list_ownership(NS, HUB, CG)
        assert await store_b.fence(listed) == at("0", 9)
        await store_b.update_checkpoint_fenced(at("0", 15), listed)
        [again] = await store_b.list_ownership(NS, HUB, CG)
        assert again.etag == handed.etag  # the blob still carries the hand
        [renewed] = await store_b.claim_ownership([again])
        assert await store_b.fence(renewed) == at("0", 15)


@pytest.mark.parametrize("recipient_released", [True, False], ids=["released, then reclaimed", "stolen back"])
async def test_a_final_write_that_comes_after_the_former_owner_claimed_the_partition_again_is_refused(
    azurite: Any, blob_container: str, recipient_released: bool
) -> None:
    """``a`` hands partition 0 to ``b`` with its final write (9) still waiting for its turn (on a busy store it waited
    85 s behind the handover's other final writes). ``b`` starts after 9 and checkpoints 26; ``b`` stops and releases
    the partition (or loses it), and ``a`` claims it again. Only then does ``a``'s old write go out: it fails on its
    etag, re-reads, finds ``b``'s key, and checks the ownership blob, which names ``a`` again (its new claim, before
    that period's fence): the write went through, the checkpoint went back from 26 to 9, ``a``'s new period started
    from 9 and 10..26 were read twice (``rxhubs bench scale --real``, 1,024 partitions: 17 partitions, 13 events
    each). Broken by letting a handed period's write pass the ownership check: it is refused, whoever owns the
    partition now, once anyone else wrote the checkpoint blob."""
    async with BlobCheckpointStore.from_connection_string(azurite.connection_string, blob_container) as store_a, \
            BlobCheckpointStore.from_connection_string(azurite.connection_string, blob_container) as store_b:
        a, handed = await a_hands_over_to_b(store_a)  # the write of 9 is noted as in flight, not sent yet
        await store_b.list_ownership(NS, HUB, CG)
        assert await store_b.fence(handed) == at("0", 9)
        await store_b.update_checkpoint_fenced(at("0", 26), handed)  # b's own checkpoint lands
        [b] = await store_b.claim_ownership([handed])  # b renews
        if recipient_released:
            [gone] = await store_b.claim_ownership([own("", etag=b.etag)])  # b stops: released, no owner
            [a2] = await store_a.claim_ownership([own("a", etag=gone.etag)])
        else:
            [a2] = await store_a.claim_ownership([own("a", etag=b.etag)])  # a takes it back (b expired, say)
        with pytest.raises(OwnershipLostError):  # a's old final write gets its turn only now
            await store_a.update_checkpoint_fenced(at("0", 9), a)
        [cp] = await store_a.list_checkpoints(NS, HUB, CG)
        assert cp.sequence_number == 26
        assert await store_a.fence(a2) == at("0", 26)  # a's new period starts after b's last checkpoint


async def test_a_recipient_that_hands_on_before_its_first_write_still_writes_where_it_started(
    azurite: Any, blob_container: str
) -> None:
    """``b`` starts from ``a``'s hand (the write of 9 in flight) and hands the partition on to ``c`` before it wrote
    anything: its one write (the position it started from, ``rxhubs.balancing._handed_start``) finds ``a``'s key on
    the blob, which is the period ``b``'s began after: it goes through although ``b``'s period is handed over too
    (only a key other than those two refuses a handed period's write)."""
    async with BlobCheckpointStore.from_connection_string(azurite.connection_string, blob_container) as store_a, \
            BlobCheckpointStore.from_connection_string(azurite.connection_string, blob_container) as store_b:
        _a, b = await a_hands_over_to_b(store_a)  # a's write of 9 never lands
        await store_b.list_ownership(NS, HUB, CG)
        assert await store_b.fence(b) == at("0", 9)
        hand = own("c", etag=b.etag)
        store_b.note_handover(b, hand, final=at("0", 9))
        await store_b.update_checkpoint_fenced(at("0", 9), b)
        [cp] = await store_b.list_checkpoints(NS, HUB, CG)
        assert cp.sequence_number == 9
        props = await store_b._blob(f"{NS}/{HUB}/{CG}/checkpoint/0".lower()).get_blob_properties()
        assert props.metadata[FENCE_KEY].endswith(" b")


@pytest.mark.parametrize("recipient_wrote", [False, True], ids=["recipient not written yet", "recipient wrote first"])
async def test_a_final_write_that_creates_the_checkpoint_blob_lands_after_the_hand(
    azurite: Any, blob_container: str, recipient_wrote: bool
) -> None:
    """``a`` never checkpointed partition 0 (no blob yet); it hands it to ``b`` with its final write of 9 in flight,
    and the hand lands first. That write creates the blob: the ownership blob names ``b`` by then, and the write is
    the one the hand allows, so it is not checked against the ownership blob (the check refused it, and the blob
    stayed absent: when ``b`` passed the partition on before starting it, as a consumer handed one too many does,
    the next owner started from the beginning; ``rxhubs bench scale --real``, 18 partitions, 10 events each read
    twice). If ``b`` created the blob first, ``a``'s write is refused as any write after the recipient's."""
    async with BlobCheckpointStore.from_connection_string(azurite.connection_string, blob_container) as store_a, \
            BlobCheckpointStore.from_connection_string(azurite.connection_string, blob_container) as store_b:
        [a] = await store_a.claim_ownership([own("a")])
        assert await store_a.fence(a) is None  # no checkpoint yet
        hand = own("b", etag=a.etag)
        store_a.note_handover(a, hand, final=at("0", 9))
        [b] = await store_a.claim_ownership([hand])  # the hand lands before the final write
        await store_b.list_ownership(NS, HUB, CG)
        assert await store_b.fence(b) == at("0", 9)
        if recipient_wrote:
            await store_b.update_checkpoint_fenced(at("0", 12), b)
            with pytest.raises(OwnershipLostError):
                await store_a.update_checkpoint_fenced(at("0", 9), a)
        else:
            await store_a.update_checkpoint_fenced(at("0", 9), a)
        [cp] = await store_b.list_checkpoints(NS, HUB, CG)
        assert cp.sequence_number == (12 if recipient_wrote else 9)
        with pytest.raises(OwnershipLostError):  # any other write of a's period is still refused
            await store_a.update_checkpoint_fenced(at("0", 10), a)
