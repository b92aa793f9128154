"""The producer of ``scale --real``: a steady trickle to every partition of a large hub, from several threads.

azure-eventhub's producer opens a link per partition at its first send to it, and opening one takes about half a
second whatever the machine does (``EventHubProducerClient._open`` sleeps 50 ms between the ~9 steps of the
token exchange, the attach and the credit), so one producer needed 8.5 minutes before its first round over 1,024
partitions was sent (and 256 partitions 2 minutes on a loaded machine). Here the partitions are dealt to
:data:`THREADS` producers (clients are not thread-safe: one each), which open their links side by side and then
send one event per partition per round on one shared clock: ``rate`` events/s in all.

Example:
    >>> slices(10, 4)
    [['0', '4', '8'], ['1', '5', '9'], ['2', '6'], ['3', '7']]
"""

from __future__ import annotations

import threading
import time

__all__ = ["THREADS", "WARM_ROUNDS", "produce", "slices"]

#: Producers side by side (each a client, a connection and a thread).
THREADS = 16
#: Rounds every producer has sent before the run counts as warm (every link open, sends steady).
WARM_ROUNDS = 2


def slices(partitions: int, threads: int) -> list[list[str]]:
    """The partition ids of each producer: dealt round-robin."""
    return [[str(p) for p in range(i, partitions, threads)] for i in range(min(threads, partitions))]


def produce(conn: str, stop: threading.Event, partitions: int, warm: threading.Event, rate: int) -> None:
    """Send one event per partition per round, ``rate`` events/s in all, until ``stop``; ``warm`` once steady."""
    period = partitions / rate
    parts = slices(partitions, THREADS)
    rounds = [0] * len(parts)
    start = time.monotonic()

    def one(index: int, ids: list[str]) -> None:
        from azure.eventhub import EventData, EventHubProducerClient

        with EventHubProducerClient.from_connection_string(conn) as producer:
            due = start
            while not stop.is_set():
                for pid in ids:
                    if stop.is_set():
                        return
                    batch = producer.create_batch(partition_id=pid)
                    batch.add(EventData(pid))
                    producer.send_batch(batch)
                rounds[index] += 1
                if min(rounds) >= WARM_ROUNDS:
                    warm.set()
                due += period  # the next round on the clock; far behind (links opening): no burst to catch up
                now = time.monotonic()
                if due < now - 2 * period:
                    due = now
                stop.wait(max(0.0, due - now))

    threads = [threading.Thread(target=one, args=(i, ids), daemon=True) for i, ids in enumerate(parts)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
