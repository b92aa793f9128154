"""Hello, partition receiver: send a few events and read them back with a pull receiver.

Runs against the hub in $EVENTHUB_CONNECTION_STRING, or starts a local emulator when it is not set.
    python examples/hello_receiver.py
"""

from __future__ import annotations

import asyncio
import contextlib
import os

import rxhubs
from rxhubs.emulator import Emulator


async def main(connection_string: str) -> int:
    hub = rxhubs.EventHub.from_connection_string(connection_string)
    try:
        await hub.send([b'{"t": 21.5}', b'{"t": 21.7}', b'{"t": 22.0}'], partition_id="0")
        props = await hub.get_partition_properties("0")
        first, last = props.beginning_sequence_number, props.last_enqueued_sequence_number
        print(f"partition 0 holds sequence numbers {first}..{last}")
        start = rxhubs.Position.from_sequence_number(props.last_enqueued_sequence_number - 3)  # the last three
        received = []
        async with hub.receiver("0", start=start) as receiver:
            while len(received) < 3:
                batch = await receiver.receive_batch(100, max_wait=5.0)
                if not batch:
                    break
                received.extend(batch)
            print("the receiver now stands at", receiver.position)
        for event in received:
            print(event.sequence_number, event.enqueued_time.isoformat(), event.body_as_json())
        return 0 if [e.body_as_json()["t"] for e in received] == [21.5, 21.7, 22.0] else 1
    finally:
        await hub.close()


async def run() -> int:
    conn = os.environ.get("EVENTHUB_CONNECTION_STRING")
    async with contextlib.AsyncExitStack() as stack:
        if not conn:
            emulator = await stack.enter_async_context(Emulator(hubs={"telemetry": 2}))
            conn = emulator.connection_string("telemetry")
        return await main(conn)


if __name__ == "__main__":
    raise SystemExit(asyncio.run(run()))
