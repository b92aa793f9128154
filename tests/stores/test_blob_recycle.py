"""The blob store's fresh connections after a failed call leave the other calls in flight alone (Azurite).

A call that timed out marks the store's HTTP session stale, and the next call swaps it for a new one. Closing
the old session at once closed the connections that the store's other calls were still using: each of them
failed, timed out or retried, and swapped the session again (after an Azurite outage on a loaded machine,
every store call missed its deadline for seconds after the heal). The old session is now closed once its last
request has ended. A ``FaultProxy`` with latency keeps a call in flight across the swap.
"""

from __future__ import annotations

import asyncio
from typing import Any

from rxhubs import Ownership
from rxhubs.stores import BlobCheckpointStore
from rxhubs.testing import FaultProxy

NS, HUB, CG = "ns.example", "recycle", "$Default"


async def test_a_swap_of_the_session_lets_the_calls_in_flight_finish_then_closes_the_old_one(
    azurite: Any, blob_container: str
) -> None:
    async with FaultProxy("127.0.0.1", azurite.port, seed=0) as proxy:
        conn = azurite.connection_string.replace(f":{azurite.port}/", f":{proxy.port}/")
        assert str(proxy.port) in conn
        listings: list[str] = []  # every listing request the client's pipeline sent, each retry too

        def count(request: Any) -> None:
            if "comp=list" in str(request.http_request.url):
                listings.append(request.http_request.method)

        async with BlobCheckpointStore.from_connection_string(conn, blob_container, raw_request_hook=count) as store:
            await store.claim_ownership([Ownership(NS, HUB, CG, "0", "a")])
            transport: Any = store._transport
            old = transport.session
            proxy.latency(0.5)
            in_flight = [asyncio.create_task(store.list_ownership(NS, HUB, CG)) for _ in range(3)]
            await asyncio.sleep(0.2)  # sent, not answered
            assert transport._in_flight.get(old) == 3
            store._mark_stale()  # as a call that timed out does
            await store._fresh()  # what the next call does first: swap the session
            assert transport.session is not old and not old.closed  # kept for the calls still using it
            fresh = await store.list_ownership(NS, HUB, CG)
            assert [o.owner_id for o in fresh] == ["a"]
            answers = await asyncio.gather(*in_flight, return_exceptions=True)
            assert all(isinstance(a, list) and [o.owner_id for o in a] == ["a"] for a in answers), answers
            assert len(listings) == 4, listings  # none of the three was cut off and sent again
            for _ in range(100):  # closed once the last of them ended (a task of its own)
                if old.closed:
                    break
                await asyncio.sleep(0.01)
            assert old.closed
            assert transport._in_flight == {} and transport._retired == set()


async def test_a_swap_with_nothing_in_flight_closes_the_old_session_at_once(azurite: Any, blob_container: str) -> None:
    async with BlobCheckpointStore.from_connection_string(azurite.connection_string, blob_container) as store:
        await store.list_ownership(NS, HUB, CG)
        transport: Any = store._transport
        old = transport.session
        store._mark_stale()
        await store.list_ownership(NS, HUB, CG)
        assert old.closed and transport.session is not old and not transport.session.closed
