"""Child processes for the SQLite tests: competing claimers, and a writer to kill mid-write.

``python -m tests.stores.sqlite_worker writer PATH`` writes forever, printing each committed round.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from rxhubs import Checkpoint, Ownership
from rxhubs.stores import SqliteCheckpointStore

NS, HUB, CG = "ns", "hub", "$Default"
PARTITIONS = [str(p) for p in range(8)]


def claimer(path: str, index: int, rounds: int, barrier: Any, results: Any) -> None:
    """Round 0: create-only claim of partition "0"; later rounds: steal it with the etag everyone listed."""

    async def main() -> None:
        async with SqliteCheckpointStore(path) as store:
            await store.list_ownership(NS, HUB, CG)  # open the file before the race starts
            for round_ in range(rounds):
                etag = None
                if round_ > 0:
                    [current] = await store.list_ownership(NS, HUB, CG)
                    etag = current.etag
                barrier.wait()  # everyone has read the same etag: go
                won = await store.claim_ownership([Ownership(NS, HUB, CG, "0", f"p{index}", etag=etag)])
                results.put((round_, index, bool(won)))
                barrier.wait()  # everyone is done with this round

    asyncio.run(main())


async def writer(path: str) -> None:
    """Write checkpoints of 8 partitions in one transaction and renew ownership, forever; report each round."""
    async with SqliteCheckpointStore(path) as store:
        [mine] = await store.claim_ownership([Ownership(NS, HUB, CG, "0", "writer")])
        round_ = 0
        while True:
            round_ += 1
            await store.update_checkpoints(Checkpoint(NS, HUB, CG, p, str(round_ * 10), round_) for p in PARTITIONS)
            [mine] = await store.claim_ownership([Ownership(NS, HUB, CG, "0", "writer", etag=mine.etag)])
            print(round_, flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "writer":
        asyncio.run(writer(sys.argv[2]))
