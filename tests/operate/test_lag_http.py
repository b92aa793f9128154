"""Lag over HTTP: scraped by prometheus_client's own text parser and read the way KEDA's metrics-api scaler reads JSON.

A hub with a known backlog (the emulator; checkpoints in SQLite): the lag in events and in seconds must be what
the events themselves say (their sequence numbers and enqueued times, read back with the official client).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from azure.eventhub import EventHubConsumerClient
from prometheus_client.parser import text_string_to_metric_families

import rxhubs
from rxhubs import Checkpoint, Ownership
from rxhubs.operate import LagServer
from rxhubs.stores import SqliteCheckpointStore
from rxhubs.transport._liveness import stall_error
from tests.operate.readers import send

HUB, OUT = "backlog", "out"
ROOT = Path(__file__).resolve().parents[2]


def keda_metrics_api_value(body: bytes, value_location: str) -> float:
    """KEDA's metrics-api getValueFromJSONResponse for a gjson dotted path to a number (no wildcards)."""
    value: Any = json.loads(body)
    for key in value_location.split("."):
        value = value[int(key)] if isinstance(value, list) else value[key]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"valueLocation {value_location!r} is not a number")
    return float(value)


def enqueued_times(conn: str, partition_id: str) -> dict[int, float]:
    """Sequence number -> enqueued time (epoch seconds) of every event of a partition, per the official client."""
    client = EventHubConsumerClient.from_connection_string(conn, consumer_group="$Default")
    times: dict[int, float] = {}
    with client:
        receiver_done = time.monotonic() + 30

        def on_events(context: Any, events: Any) -> None:
            for e in events:
                times[e.sequence_number] = e.enqueued_time.timestamp()
            if not events or time.monotonic() > receiver_done:
                client.close()

        client.receive_batch(on_event_batch=on_events, partition_id=partition_id, starting_position="-1",
                             max_wait_time=1.0)
    return times


@pytest.fixture
def backlog(emulator_factory: Any, tmp_path: Path) -> Any:
    """Partition 0: 10 events, a pause, 5, a pause, 5; checkpoint at 9, owned by "w-1". Partition 1: 3, none."""
    emulator = emulator_factory(hubs={HUB: 2, OUT: 1})
    conn = emulator.connection_string(HUB)
    send(conn, {"0": 10, "1": 3})
    time.sleep(1.2)
    send(conn, {"0": 5}, "late")
    time.sleep(1.2)
    send(conn, {"0": 5}, "later")
    path = tmp_path / "cp.sqlite"
    ns = f"127.0.0.1:{emulator.port}"

    async def checkpoint() -> None:
        async with SqliteCheckpointStore(path) as store:
            await store.update_checkpoint(Checkpoint(ns, HUB, "$Default", "0", None, 9))
            await store.claim_ownership([Ownership(ns, HUB, "$Default", "0", "w-1")])

    asyncio.run(checkpoint())
    emulator.conn, emulator.path = conn, path
    return emulator


def server_for(backlog: Any) -> LagServer:
    return LagServer(lambda: rxhubs.EventHub.from_connection_string(backlog.conn),
                     lambda: SqliteCheckpointStore(backlog.path), "$Default", min_interval=0.0)


def test_prometheus_and_keda_read_the_known_backlog(backlog: Any) -> None:
    times0, times1 = enqueued_times(backlog.conn, "0"), enqueued_times(backlog.conn, "1")
    assert len(times0) == 20 and len(times1) == 3
    with server_for(backlog) as server:
        assert server.host == "127.0.0.1" and server.port > 0
        text = urllib.request.urlopen(server.url + "/metrics", timeout=30).read().decode()
        body = urllib.request.urlopen(server.url + "/lag", timeout=30).read()
    samples = {(s.name, s.labels["partition"]): s for f in text_string_to_metric_families(text) for s in f.samples}
    assert samples["rxhubs_lag_events", "0"].value == 10 and samples["rxhubs_lag_events", "1"].value == 3
    assert samples["rxhubs_checkpoint_sequence_number", "0"].value == 9
    assert ("rxhubs_checkpoint_sequence_number", "1") not in samples  # no checkpoint: no sample
    assert samples["rxhubs_last_enqueued_sequence_number", "0"].value == 19
    assert samples["rxhubs_partition_owner", "0"].labels["owner"] == "w-1"
    assert samples["rxhubs_partition_owner", "1"].labels["owner"] == ""
    behind0 = times0[19] - times0[10]  # the first event not done is 10 (second burst); the newest 19 (third)
    assert 1.0 < behind0 < times0[19] - times0[9] - 1.0
    assert samples["rxhubs_lag_seconds", "0"].value == pytest.approx(behind0, abs=0.002)
    assert samples["rxhubs_lag_seconds", "1"].value == pytest.approx(times1[2] - times1[0], abs=0.002)
    assert keda_metrics_api_value(body, "lag") == 13
    assert keda_metrics_api_value(body, "partitions.0.lag") == 10
    assert keda_metrics_api_value(body, "lag_seconds") == pytest.approx(behind0, abs=0.002)


def test_other_paths_and_methods_are_refused_and_a_store_outage_is_a_503(backlog: Any, tmp_path: Path) -> None:
    with server_for(backlog) as server:
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(server.url + "/", timeout=30)
        assert missing.value.code == 404
        with pytest.raises(urllib.error.HTTPError) as posted:
            urllib.request.urlopen(urllib.request.Request(server.url + "/lag", data=b"x"), timeout=30)
        assert posted.value.code == 405
    broken = tmp_path / "not-a-database.sqlite"
    broken.write_bytes(b"this is not SQLite" * 100)
    failing = LagServer(lambda: rxhubs.EventHub.from_connection_string(backlog.conn),
                        lambda: SqliteCheckpointStore(broken), "$Default")
    with failing as server:
        with pytest.raises(urllib.error.HTTPError) as outage:
            urllib.request.urlopen(server.url + "/lag", timeout=30)
        assert outage.value.code == 503 and len(outage.value.read().decode().strip().splitlines()) == 1


def test_a_taken_port_is_a_clear_error(backlog: Any) -> None:
    with server_for(backlog) as first:
        taken = LagServer(lambda: rxhubs.EventHub.from_connection_string(backlog.conn),
                          lambda: SqliteCheckpointStore(backlog.path), host="127.0.0.1", port=first.port)
        with pytest.raises(rxhubs.errors.ConfigurationError, match=f"lag endpoint 127.0.0.1:{first.port}"):
            taken.start()


@pytest.mark.slow
@pytest.mark.parametrize("workers", ["1", "2"])
def test_rxhubs_consume_serves_its_lag_and_run_workers_too(backlog: Any, tmp_path: Path, workers: str) -> None:
    times0, times1 = enqueued_times(backlog.conn, "0"), enqueued_times(backlog.conn, "1")
    behind0 = times0[19] - times0[10]  # the first event not done is 10 (second burst); the newest 19 (third)
    # The consumer publishes to a second hub that refuses producers until the test clears the fault: it cannot
    # finish (nor checkpoint) an event, while its own endpoint reads the backlog hub, which stays healthy.
    backlog.faults.server_busy(600, on="attach", hub=OUT)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EVENTHUB_", "AZURE_STORAGE_"))}
    env.update(EVENTHUB_CONNECTION_STRING=backlog.conn, PYTHONPATH=str(ROOT))
    consume = subprocess.Popen(
        [sys.executable, "-m", "rxhubs.cli", "consume", "--store", f"sqlite:///{backlog.path}", "--sink",
         f"eventhub:{OUT}", "--lag-endpoint", "127.0.0.1:0", "--workers", workers,
         "--interval", "0.5", "--checkpoint-interval", "0.2", "--duration", "60"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path, stdin=subprocess.DEVNULL,
    )
    try:
        assert consume.stderr is not None
        line = consume.stderr.readline()
        while line and not line.startswith("rxhubs consume: lag at"):
            line = consume.stderr.readline()  # a worker's log line may come first
        assert line.startswith("rxhubs consume: lag at http://127.0.0.1:"), line
        url = line.split(" at ")[1].split("/metrics")[0]
        for _ in range(3):  # held back by the hub: the endpoint serves the known backlog, in events and seconds
            body = urllib.request.urlopen(url + "/lag", timeout=30).read()
            assert keda_metrics_api_value(body, "lag") == 13
            assert keda_metrics_api_value(body, "partitions.0.lag") == 10
            assert keda_metrics_api_value(body, "partitions.1.lag") == 3
            assert keda_metrics_api_value(body, "lag_seconds") == pytest.approx(behind0, abs=0.002)
            text = urllib.request.urlopen(url + "/metrics", timeout=30).read().decode()
            samples = {(s.name, s.labels["partition"]): s.value
                       for f in text_string_to_metric_families(text) for s in f.samples if "partition" in s.labels}
            assert samples["rxhubs_lag_events", "0"] == 10 and samples["rxhubs_lag_events", "1"] == 3
            assert samples["rxhubs_lag_seconds", "0"] == pytest.approx(behind0, abs=0.002)
            assert samples["rxhubs_lag_seconds", "1"] == pytest.approx(times1[2] - times1[0], abs=0.002)
            time.sleep(0.5)
        assert consume.poll() is None
        backlog.faults.clear()
        lag = None
        for _ in range(300):  # the consumer catches up: the lag it serves falls to 0
            lag = keda_metrics_api_value(urllib.request.urlopen(url + "/lag", timeout=30).read(), "lag")
            if lag == 0:
                break
            time.sleep(0.2)
        assert lag == 0
        body = urllib.request.urlopen(url + "/lag", timeout=30).read()
        assert keda_metrics_api_value(body, "lag_seconds") == 0
        assert len(enqueued_times(backlog.connection_string(OUT), "0")) >= 13  # the backlog, published after the fault
    finally:
        backlog.faults.clear()
        consume.terminate()
        consume.wait(60)


@pytest.mark.parametrize("address", ["nope", "127.0.0.1:99999", "host:"])
def test_a_bad_lag_endpoint_is_one_line_and_exit_2(address: str, capsys: Any, monkeypatch: Any) -> None:
    from rxhubs.cli import main

    monkeypatch.setenv("EVENTHUB_CONNECTION_STRING", "Endpoint=sb://127.0.0.1:1/;SharedAccessKeyName=k;"
                       "SharedAccessKey=c2VjcmV0;EntityPath=hub")
    assert main(["consume", "--store", "memory:", "--lag-endpoint", address]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.strip().splitlines() == [
        f"rxhubs consume: error: a lag endpoint is PORT or HOST:PORT (e.g. 127.0.0.1:9464), got {address!r}"
    ]


def test_the_stall_series_counts_the_dead_paths_this_process_noticed(backlog: Any) -> None:
    """A receiver's watchdog calls stall_error once per dead path (tests/faults/test_silent_path.py shows when)."""
    hub = rxhubs.EventHub.from_connection_string(backlog.conn)
    context = rxhubs.PartitionContext(hub.fully_qualified_namespace, hub.eventhub_name, "$Default", "1")
    with server_for(backlog) as server:
        before = json.loads(urllib.request.urlopen(server.url + "/lag", timeout=30).read())
        for _ in range(2):
            stall_error(context, 3.0, 1.0)
        stall_error(rxhubs.PartitionContext(context.fully_qualified_namespace, "other-hub", "$Default", "1"), 3.0, 1.0)
        body = json.loads(urllib.request.urlopen(server.url + "/lag", timeout=30).read())
        text = urllib.request.urlopen(server.url + "/metrics", timeout=30).read().decode()
    assert before["partitions"]["1"]["stalls"] == 0
    assert body["partitions"]["1"]["stalls"] - before["partitions"]["1"]["stalls"] == 2  # this hub's only
    assert body["partitions"]["0"]["stalls"] == before["partitions"]["0"]["stalls"]
    assert body["stalls"] == sum(p["stalls"] for p in body["partitions"].values())
    families = text_string_to_metric_families(text)
    samples = {(s.name, s.labels["partition"]): s.value for f in families for s in f.samples}
    assert samples["rxhubs_receive_stalls_total", "1"] == body["partitions"]["1"]["stalls"]


def test_unknown_seconds_are_null_at_the_top_never_caught_up(backlog: Any) -> None:
    """The events that give the seconds cannot be read (the read group does not exist): the top is null.

    A maximum with an unknown term is unknown: neither 0.0 (KEDA would see "caught up" at a lag of 13) nor the
    0.0 of a partition that is caught up. KEDA's metrics-api scaler refuses a null (not a number): no value,
    rather than a wrong one. In Prometheus the partition's ``rxhubs_lag_seconds`` sample is absent.
    """
    server = LagServer(lambda: rxhubs.EventHub.from_connection_string(backlog.conn),
                       lambda: SqliteCheckpointStore(backlog.path), "$Default", read_group="missing", min_interval=0.0)
    with server:
        body = json.loads(urllib.request.urlopen(server.url + "/lag", timeout=30).read())
        assert body["lag"] == 13 and body["lag_seconds"] is None
        assert [body["partitions"][p]["lag_seconds"] for p in ("0", "1")] == [None, None]
        with pytest.raises(ValueError, match="not a number"):
            keda_metrics_api_value(json.dumps(body).encode(), "lag_seconds")

        async def catch_up_partition_1() -> None:
            async with SqliteCheckpointStore(backlog.path) as store:
                await store.update_checkpoint(Checkpoint(f"127.0.0.1:{backlog.port}", HUB, "$Default", "1", None, 2))

        asyncio.run(catch_up_partition_1())
        body = json.loads(urllib.request.urlopen(server.url + "/lag", timeout=30).read())
        text = urllib.request.urlopen(server.url + "/metrics", timeout=30).read().decode()
    assert body["lag"] == 10 and body["partitions"]["1"]["lag_seconds"] == 0.0
    assert body["lag_seconds"] is None  # partition 1's 0.0 is not the group's time behind
    samples = {(s.name, s.labels["partition"]): s.value
               for f in text_string_to_metric_families(text) for s in f.samples}
    assert ("rxhubs_lag_seconds", "0") not in samples and samples["rxhubs_lag_seconds", "1"] == 0.0
    assert samples["rxhubs_lag_events", "0"] == 10
