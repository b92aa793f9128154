"""A hand whose last write was in flight: the recipient learns that write's etag from one listing (Azurite).

``a`` hands eight partitions to ``b``, each hand naming a final write (9) still in flight; seven of those writes land,
the eighth does not (yet). ``b`` starts from the hands with no request. Its next listing of the ownership records,
once the hands have settled, also lists the checkpoint blobs (one request): the seven that hold the hands' positions,
written by ``a``'s period, give their etags, and ``b``'s first writes of them are one ``PUT`` each, with no ``HEAD``.
The eighth still shows 7, so its first write reads the blob as before (``HEAD``, then ``PUT``), and ``a``'s write of
9, landing late, is refused. Before, all eight first writes read their blob first: at a stop of four consumers of
1,024 partitions, 512 ``HEAD`` requests on the stop's critical path (``rxhubs bench scale --real``).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

import pytest

from rxhubs import Checkpoint, Ownership
from rxhubs.errors import OwnershipLostError
from rxhubs.stores import BlobCheckpointStore, _blob_written_hands
from rxhubs.stores._blob_fence import FENCE_KEY
from tests.stores.test_blob_fence_requests import CG, HUB, NS

PIDS = [str(p) for p in range(8)]


def own(owner: str, pid: str, etag: str | None = None) -> Ownership:
    return Ownership(NS, HUB, CG, pid, owner, None, etag)


def at(pid: str, number: int) -> Checkpoint:
    return Checkpoint(NS, HUB, CG, pid, str(number * 10), number)


class Sent:
    """``(method, blob or listing prefix)`` of each request, as the storage client's pipeline sends it."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str]] = []

    def __call__(self, request: Any) -> None:
        url = unquote(str(request.http_request.url))
        path = url.split("?")[0].split("/", 4)[-1]
        if "comp=list" in url:
            path = "list " + url.split("prefix=")[1].split("&")[0].split("/")[-2]
        self.requests.append((request.http_request.method, path))


async def hands_in_flight(store_a: BlobCheckpointStore) -> tuple[list[Ownership], list[Ownership]]:
    """``a`` checkpointed 7 on each partition and hands each to ``b`` with its write of 9 sent: its periods, ``b``'s
    records. The writes of 9 land but partition 7's."""
    periods = await store_a.claim_ownership([own("a", pid) for pid in PIDS])
    for period in periods:
        await store_a.fence(period)
        await store_a.update_checkpoint_fenced(at(period.partition_id, 7), period)
    hands = [own("b", period.partition_id, period.etag) for period in periods]
    for period, hand in zip(periods, hands, strict=True):
        store_a.note_handover(period, hand, final=at(period.partition_id, 9))
    records = await store_a.claim_ownership(hands)
    for period in periods:
        if period.partition_id != "7":
            await store_a.update_checkpoint_fenced(at(period.partition_id, 9), period)
    return sorted(periods, key=lambda o: int(o.partition_id)), sorted(records, key=lambda o: int(o.partition_id))


@pytest.mark.parametrize("settle", [0.0, 3600.0], ids=["settled", "too soon"])
async def test_the_recipients_first_writes_know_the_etags_a_listing_showed(
    azurite: Any, blob_container: str, monkeypatch: pytest.MonkeyPatch, settle: float
) -> None:
    monkeypatch.setattr(_blob_written_hands, "SETTLE", settle)
    sent = Sent()
    async with BlobCheckpointStore.from_connection_string(azurite.connection_string, blob_container) as store_a, \
            BlobCheckpointStore.from_connection_string(azurite.connection_string, blob_container,
                                                       raw_request_hook=sent) as store_b:
        periods, records = await hands_in_flight(store_a)
        await store_b.list_ownership(NS, HUB, CG)  # shows the hands
        starts = [await store_b.fence(record) for record in records]
        assert [s.sequence_number if s else None for s in starts] == [9] * 8  # from the hands
        sent.requests.clear()
        await store_b.list_ownership(NS, HUB, CG)  # a round's listing, the hands settled
        listings = sorted(path for method, path in sent.requests if path.startswith("list "))
        assert listings == (["list checkpoint", "list ownership"] if settle == 0.0 else ["list ownership"])
        sent.requests.clear()
        for record in records:
            await store_b.update_checkpoint_fenced(at(record.partition_id, 12), record)
        heads = sorted(path.rsplit("/", 1)[1] for method, path in sent.requests if method == "HEAD")
        assert heads == (["7"] if settle == 0.0 else PIDS), sent.requests
        assert sum(1 for method, _ in sent.requests if method == "PUT") == 8
        with pytest.raises(OwnershipLostError):  # a's write of 9 on partition 7, landing late, is refused
            await store_a.update_checkpoint_fenced(at("7", 9), periods[7])
        marks = {c.partition_id: c.sequence_number for c in await store_b.list_checkpoints(NS, HUB, CG)}
        assert marks == {pid: 12 for pid in PIDS}
        props = await store_b._blob(f"{NS}/{HUB}/{CG}/checkpoint/0".lower()).get_blob_properties()
        assert props.metadata[FENCE_KEY].endswith(" b")


async def test_a_write_between_the_listing_and_the_first_write_is_examined(
    azurite: Any, blob_container: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After the listing, the official store (no fence key) checkpoints partition 0: ``b``'s first write, ``If-Match``
    the listed etag, fails, reads the blob, finds no key, checks the ownership blob (``b``'s), and writes."""
    monkeypatch.setattr(_blob_written_hands, "SETTLE", 0.0)
    async with BlobCheckpointStore.from_connection_string(azurite.connection_string, blob_container) as store_a, \
            BlobCheckpointStore.from_connection_string(azurite.connection_string, blob_container) as store_b:
        _, records = await hands_in_flight(store_a)
        await store_b.list_ownership(NS, HUB, CG)
        for record in records:
            await store_b.fence(record)
        await store_b.list_ownership(NS, HUB, CG)
        assert store_b._fences[f"{NS}/{HUB}/{CG}/checkpoint/0".lower()][1]  # the listed etag, cached
        blob = store_b._blob(f"{NS}/{HUB}/{CG}/checkpoint/0".lower())
        await blob.set_blob_metadata({"offset": "100", "sequencenumber": "10"})  # as the official store writes
        await store_b.update_checkpoint_fenced(at("0", 12), records[0])
        props = await blob.get_blob_properties()
        assert (props.metadata["sequencenumber"], props.metadata[FENCE_KEY].split(" ")[1]) == ("12", "b")


def test_a_round_within_an_interval_of_the_periods_looks_for_their_hands() -> None:
    # A consumer handed 128 of 1,024 partitions whose periods began over 2.6 s, 10 s after the hands (starting them
    # beside seven other consumers); its one round before it was stopped listed 7.2-9.8 s after those periods began.
    # That listing looks for all 128 (with an interval's wait it looked for none, and the stop read 128 blobs).
    hands = _blob_written_hands.WrittenHands()
    prefix = "ns/hub/g/checkpoint/"
    for pid in range(128):
        hands.note(f"{prefix}{pid}", 9, now=100.0 + pid * 2.6 / 128)
    assert len(hands.due(prefix, now=109.8, listed=1024)) == 128
    assert hands.due(prefix, now=101.0, listed=1024) == []  # too soon: the hands' writes may still be in flight
