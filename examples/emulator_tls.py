"""The emulator over TLS: the official client with the service's connection string form and a trusted CA file.

Needs ``pip install 'rxhubs[tls]'``. Starts the emulator with ``tls=True`` (a certificate authority and a
certificate for 127.0.0.1 made at start, AMQP over TLS on a free port), sends 3 events with the unmodified
``EventHubProducerClient`` (``connection_verify`` = the CA file) and reads them back with ``rxhubs.EventHub``.
    python examples/emulator_tls.py
"""

from __future__ import annotations

import asyncio

from azure.eventhub import EventData, EventHubProducerClient

import rxhubs
from rxhubs.emulator import BackgroundEmulator


async def read(conn: str, options: dict[str, str]) -> list[bytes]:
    hub = rxhubs.EventHub.from_connection_string(conn, **options)
    try:
        async with hub.receiver("0", start=rxhubs.Position.earliest()) as receiver:
            return [e.body for e in await receiver.receive_batch(10, max_wait=10)]
    finally:
        await hub.close()


def main() -> int:
    with BackgroundEmulator({"telemetry": 1}, tls=True) as emulator:
        conn, options = emulator.tls_connection_string("telemetry"), emulator.tls_client_options()
        print(f"{conn.split(';')[0]} over TLS, trusting {options['connection_verify']}")
        with EventHubProducerClient.from_connection_string(conn, **options) as producer:
            batch = producer.create_batch(partition_id="0")
            for i in range(3):
                batch.add(EventData(f"secure {i}"))
            producer.send_batch(batch)
        bodies = asyncio.run(read(conn, options))
    print(f"read back over TLS: {bodies}")
    return 0 if bodies == [b"secure 0", b"secure 1", b"secure 2"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
