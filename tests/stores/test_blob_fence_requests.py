"""The blob store's fence, request by request (Azurite): the reads go out together, the stamp after both answered.

The fence checks the ownership blob and reads the checkpoint blob; neither depends on the other, so both requests
are sent before either answer is read, and the stamp (the conditional write that fences the former owner) only
after both came back: a new owner's handover waits for two round trips, not three. Observed in the storage
client's own pipeline (its request and response hooks), so no request is left out.
"""

from __future__ import annotations

from typing import Any

import pytest

from rxhubs import Checkpoint, Ownership
from rxhubs.errors import OwnershipLostError
from rxhubs.stores import BlobCheckpointStore

NS, HUB, CG = "ns.example", "fence", "$Default"


class Trace:
    """``(request or response, method, blob kind)`` in the order the client's pipeline saw them."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []
        self.written: list[str] = []  # the path of each PUT request's blob, in order

    @staticmethod
    def _kind(url: str) -> str:
        return next((k for k in ("ownership", "checkpoint") if f"/{k}/" in url), "other")

    def request(self, request: Any) -> None:
        http = request.http_request
        self.events.append(("request", http.method, self._kind(str(http.url))))
        if http.method == "PUT":
            self.written.append(str(http.url).split("?")[0])

    def response(self, response: Any) -> None:
        http = response.http_request
        self.events.append(("response", http.method, self._kind(str(http.url))))


def own(owner: str, etag: str | None = None) -> Ownership:
    return Ownership(NS, HUB, CG, "0", owner, None, etag)


def traced_store(azurite: Any, blob_container: str, trace: Trace) -> BlobCheckpointStore:
    return BlobCheckpointStore.from_connection_string(
        azurite.connection_string, blob_container, raw_request_hook=trace.request, raw_response_hook=trace.response
    )


async def handed_from_a_to_b(store: BlobCheckpointStore) -> tuple[Ownership, Ownership]:
    """``a`` claimed partition 0, fenced it and checkpointed 7; ``b`` claimed it from ``a`` (not fenced yet)."""
    [a] = await store.claim_ownership([own("a")])
    await store.fence(a)
    await store.update_checkpoint_fenced(Checkpoint(NS, HUB, CG, "0", "70", 7), a)
    [b] = await store.claim_ownership([own("b", a.etag)])
    return a, b


@pytest.mark.parametrize("with_state", [False, True], ids=["fence", "fence_with_state"])
async def test_the_fence_reads_both_blobs_at_once_and_stamps_after_both(
    azurite: Any, blob_container: str, with_state: bool
) -> None:
    trace = Trace()
    store = traced_store(azurite, blob_container, trace)
    async with store:
        a, b = await handed_from_a_to_b(store)
        trace.events.clear()
        if with_state:
            start, _ = await store.fence_with_state(b)
        else:
            start = await store.fence(b)
        assert start is not None and start.sequence_number == 7
        events = trace.events
        requests = [(method, kind) for what, method, kind in events if what == "request"]
        assert ("HEAD", "ownership") in requests and ("PUT", "checkpoint") in requests
        stamp = events.index(("request", "PUT", "checkpoint"))
        reads = events[:stamp]
        # both reads sent before either answer came back
        assert [what for what, _, _ in reads[:2]] == ["request", "request"], events
        assert {kind for _, _, kind in reads[:2]} == {"ownership", "checkpoint"}, events
        # and the stamp only after both answered
        assert sum(1 for what, _, _ in reads if what == "response") == 2, events
        try:
            await store.update_checkpoint_fenced(Checkpoint(NS, HUB, CG, "0", "50", 5), a)
        except OwnershipLostError:
            pass
        else:
            raise AssertionError("the former owner wrote after the fence")
        assert (await store.list_checkpoints(NS, HUB, CG))[0].sequence_number == 7


async def test_a_fence_whose_ownership_moved_stamps_nothing(azurite: Any, blob_container: str) -> None:
    """The check fails (another consumer claimed the partition after this record was read): no write goes out."""
    trace = Trace()
    store = traced_store(azurite, blob_container, trace)
    async with store:
        a, b = await handed_from_a_to_b(store)
        await store.claim_ownership([own("c", b.etag)])  # c took it before b fenced
        trace.events.clear()
        with pytest.raises(OwnershipLostError):
            await store.fence(b)
        assert ("request", "PUT", "checkpoint") not in trace.events
        await store.update_checkpoint_fenced(Checkpoint(NS, HUB, CG, "0", "90", 9), a)  # a was never fenced out by b
