"""Drive the official azure-eventhub clients (sync and aio) against the emulator, bounded in time."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from azure.eventhub import EventData, EventHubConsumerClient, EventHubProducerClient
from azure.eventhub.aio import EventHubConsumerClient as AioConsumer
from azure.eventhub.aio import EventHubProducerClient as AioProducer


def send(conn_str: str, bodies: list[str], **batch_options: Any) -> None:
    """Send ``bodies`` as one batch with the sync producer."""
    with EventHubProducerClient.from_connection_string(conn_str) as producer:
        batch = producer.create_batch(**batch_options)
        for body in bodies:
            batch.add(EventData(body))
        producer.send_batch(batch)


async def asend(conn_str: str, bodies: list[str], **batch_options: Any) -> None:
    """Send ``bodies`` as one batch with the aio producer."""
    async with AioProducer.from_connection_string(conn_str) as producer:
        batch = await producer.create_batch(**batch_options)
        for body in bodies:
            batch.add(EventData(body))
        await producer.send_batch(batch)


class SyncReceiver:
    """Runs ``EventHubConsumerClient.receive_batch`` for one partition in a thread, collecting events/errors."""

    def __init__(self, conn_str: str, partition_id: str, consumer_group: str = "$Default", *,
                 client_options: dict[str, Any] | None = None, **options: Any) -> None:
        self.client = EventHubConsumerClient.from_connection_string(
            conn_str, consumer_group=consumer_group, retry_total=0, **(client_options or {}))
        self.events: list[EventData] = []
        self.errors: list[Exception] = []
        self._changed = threading.Condition()
        options.setdefault("max_wait_time", 0.2)
        self._thread = threading.Thread(
            target=self.client.receive_batch,
            kwargs={"on_event_batch": self._on_batch, "on_error": self._on_error, "partition_id": partition_id,
                    **options},
            daemon=True,
        )

    def _on_batch(self, _ctx: Any, events: list[EventData]) -> None:
        with self._changed:
            self.events.extend(events)
            self._changed.notify_all()

    def _on_error(self, _ctx: Any, error: Exception) -> None:
        with self._changed:
            self.errors.append(error)
            self._changed.notify_all()

    def __enter__(self) -> SyncReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.client.close()
        self._thread.join(15)

    def wait_events(self, count: int, timeout: float = 20) -> list[EventData]:
        with self._changed:
            self._changed.wait_for(lambda: len(self.events) >= count, timeout)
        return list(self.events)

    def wait_error(self, timeout: float = 20) -> Exception | None:
        with self._changed:
            self._changed.wait_for(lambda: bool(self.errors), timeout)
        return self.errors[0] if self.errors else None


def close_all(receivers: list[SyncReceiver]) -> None:
    """Close sync receivers in parallel (each close takes the SDK about a second)."""
    threads = [threading.Thread(target=r.close) for r in receivers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)


class AioReceiver:
    """The aio counterpart of :class:`SyncReceiver` (a task running ``receive_batch``)."""

    def __init__(self, conn_str: str, partition_id: str, consumer_group: str = "$Default", *,
                 client_options: dict[str, Any] | None = None, **options: Any) -> None:
        self.client = AioConsumer.from_connection_string(conn_str, consumer_group=consumer_group, retry_total=0,
                                                         **(client_options or {}))
        self.events: list[EventData] = []
        self.errors: list[Exception] = []
        self._changed = asyncio.Event()
        options.setdefault("max_wait_time", 0.2)
        self._options = {"partition_id": partition_id, **options}
        self._task: asyncio.Task[None] | None = None

    async def _on_batch(self, _ctx: Any, events: list[EventData]) -> None:
        self.events.extend(events)
        self._changed.set()

    async def _on_error(self, _ctx: Any, error: Exception) -> None:
        self.errors.append(error)
        self._changed.set()

    async def __aenter__(self) -> AioReceiver:
        self._task = asyncio.create_task(
            self.client.receive_batch(on_event_batch=self._on_batch, on_error=self._on_error, **self._options))
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.client.close()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def wait_events(self, count: int, timeout: float = 20) -> list[EventData]:
        async with asyncio.timeout(timeout):
            while len(self.events) < count:
                self._changed.clear()
                await self._changed.wait()
        return list(self.events)

    async def wait_error(self, timeout: float = 20) -> Exception | None:
        try:
            async with asyncio.timeout(timeout):
                while not self.errors:
                    self._changed.clear()
                    await self._changed.wait()
        except TimeoutError:
            return None
        return self.errors[0]
