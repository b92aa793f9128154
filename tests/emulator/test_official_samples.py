"""The official azure-eventhub samples, unmodified, against the emulator.

The samples come from the sdist of the installed azure-eventhub version, fetched with pip on first use into
the git-ignored ``.cache/`` folder of the repository (never vendored). Every sample in the sdist must be
classified below: it either runs here (with the emulator's connection string in ``EVENT_HUB_CONN_STR``), or it
is excluded with the reason, and the test checks that the reason is visible in the sample's source. A new
SDK version with new samples therefore fails until they are classified. docs/emulator.md lists the same.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from rxhubs.emulator import BackgroundEmulator
from rxhubs.emulator._partition_key import partition_for_key
from tests.emulator._sdist import sdist_part

from ._sdk import SyncReceiver, close_all

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

HUB = "samples"
PARTITIONS = 2
SAMPLE_TIMEOUT = 60.0

# Why a sample cannot run against a local emulator, and what in its source shows it.
TLS = ("builds its clients from EVENT_HUB_HOSTNAME (fully_qualified_namespace), so the SDK speaks TLS to port "
       "5671 and checks the certificate against certifi's public CAs (_pyamqp/client.py, _connection.py); only a "
       "connection string with UseDevelopmentEmulator=true, or custom_endpoint_address, reaches a local "
       "plain-AMQP port", "EVENT_HUB_HOSTNAME")
ELSEWHERE = ("builds its clients from EVENT_HUB_HOSTNAME with a SAS key: it runs unmodified over TLS on port 5671 "
             "in test_official_live_tests.py (TLS_SAMPLES), not against this plain port", "EVENT_HUB_HOSTNAME")
AAD = ("authenticates with Azure AD (azure-identity); the emulator cannot issue or check Azure AD tokens",
       "azure.identity")
STORAGE = ("needs an Azure Storage account (AZURE_STORAGE_ACCOUNT) for its blob checkpoint store",
           "AZURE_STORAGE_ACCOUNT")
IOT = ("needs an IoT Hub connection string: it follows the IoT Hub's redirect to its Event Hubs endpoint",
       "IOTHUB_CONN_STR")
PROXY = ("needs an HTTP proxy (placeholder host in the sample)", "http_proxy")
CUSTOM = ("needs a real custom endpoint and CA bundle (placeholders in the sample)", "<custom_endpoint_hostname>")

EXCLUDED: dict[str, tuple[tuple[str, str], ...]] = {
    "authenticate_with_azure_named_key_credential": (ELSEWHERE,),
    "authenticate_with_azure_sas_credential": (ELSEWHERE,),
    "authenticate_with_sas_token": (ELSEWHERE,),
    "client_creation": (ELSEWHERE,),
    "client_identity_authentication": (TLS, AAD),
    "connection_to_custom_endpoint_address": (CUSTOM, AAD),
    "iot_hub_connection_string_receive": (IOT,),
    "proxy": (PROXY, AAD),
    "receive_batch_with_checkpoint": (STORAGE, AAD),
    "recv": (TLS, AAD),
    "recv_for_period": (TLS, AAD),
    "recv_track_last_enqueued_event_prop": (TLS, AAD),
    "recv_with_checkpoint_by_event_count": (STORAGE, AAD),
    "recv_with_checkpoint_by_time_interval": (STORAGE, AAD),
    "recv_with_checkpoint_store": (STORAGE, AAD),
    "recv_with_custom_starting_position": (TLS, AAD),
    "sample_code_eventhub": (TLS, AAD),
    "send_and_receive_amqp_annotated_message": (TLS, AAD),
    "send_buffered_mode": (TLS, AAD),
    "send_stream": (TLS, AAD),
}


@dataclass(frozen=True)
class Sample:
    """A sample that runs against the emulator, and what to check after it exited 0."""

    name: str
    check: Callable[[BackgroundEmulator, str], None]


def _no_check(_emulator: BackgroundEmulator, _stdout: str) -> None:
    """The sample only opens and closes a client: exiting 0 is the whole contract."""


def _received_everything_send_sent(emulator: BackgroundEmulator, stdout: str) -> None:
    """send.py / send_async.py: every batch they build arrived, where the service would have put it."""
    conn = emulator.connection_string(HUB)
    receivers = [SyncReceiver(conn, str(p), starting_position="-1") for p in range(PARTITIONS)]
    with contextlib.ExitStack() as stack:
        for receiver in receivers:
            stack.enter_context(receiver)
        counts = [emulator_count(emulator, str(p)) for p in range(PARTITIONS)]
        events = {str(p): r.wait_events(counts[p]) for p, r in enumerate(receivers)}
        close_all(receivers)
    bodies = {p: [e.body_as_str() for e in got] for p, got in events.items()}
    every = [b for got in bodies.values() for b in got]
    assert "failed" not in stdout and "error" not in stdout.lower(), stdout
    assert every.count("Single message") == 1
    assert every.count("Message inside EventBatchData") >= 10  # as many as fit in 1000 bytes
    assert bodies["0"].count("Message will be sent to target-id partition") == 1
    keyed = str(partition_for_key("pkey", PARTITIONS))
    assert bodies[keyed].count("Message will be sent to a partition determined by the partition key") == 1
    with_properties = [e for got in events.values() for e in got if e.body_as_str() == "Message with properties"]
    assert [e.properties for e in with_properties] == [{b"prop_key": b"prop_value"}]
    assert sorted(b for b in every if b.startswith("Event Data ")) == sorted(f"Event Data {i}" for i in range(10))
    assert len([b for b in every if b.startswith("Synchronized message from ")]) == 3
    assert stdout.count("sent synchronized message successfully") == 3


def emulator_count(emulator: BackgroundEmulator, partition_id: str) -> int:
    """Events in a partition, from the partition properties the SDK reads."""
    from azure.eventhub import EventHubProducerClient

    with EventHubProducerClient.from_connection_string(emulator.connection_string(HUB)) as producer:
        return int(producer.get_partition_properties(partition_id)["last_enqueued_sequence_number"]) + 1


RUNS = [
    Sample("sync_samples/send.py", _received_everything_send_sent),
    Sample("async_samples/send_async.py", _received_everything_send_sent),
    Sample("sync_samples/connection_string_authentication.py", _no_check),
    Sample("async_samples/connection_string_authentication_async.py", _no_check),
]


def _fetch_samples() -> Path:
    """The installed azure-eventhub version's samples, from its sdist; extracted once into ``.cache/``."""
    return sdist_part("samples", lambda name: "/samples/" in name)


@pytest.fixture(scope="module")
def samples() -> Path:
    return _fetch_samples()


def _stem(path: Path) -> str:
    name = path.stem
    return name[: -len("_async")] if name.endswith("_async") else name


def test_every_sample_is_run_or_excluded_for_a_reason_its_source_shows(samples: Path) -> None:
    found = sorted(str(p.relative_to(samples)) for p in samples.glob("*_samples/*.py"))
    assert len(found) >= 40, found  # the 5.15 sdist has 43
    runs = {s.name for s in RUNS}
    for path in found:
        if path in runs:
            continue
        stem = _stem(Path(path))
        assert stem in EXCLUDED, f"{path}: new sample, neither run nor excluded: classify it here and in docs"
        source = (samples / path).read_text()
        for reason, marker in EXCLUDED[stem]:
            assert marker in source, f"{path}: excluded because it {reason}, but {marker!r} is not in it"
    assert runs <= set(found)


@pytest.mark.parametrize("sample", RUNS, ids=[s.name for s in RUNS])
def test_sample_runs_against_the_emulator(samples: Path, sample: Sample, tmp_path: Path) -> None:
    with BackgroundEmulator({HUB: PARTITIONS}) as emulator:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("EVENT_HUB_", "AZURE_"))}
        env.update(EVENT_HUB_CONN_STR=emulator.connection_string(HUB), EVENT_HUB_NAME=HUB,
                   PYTHONWARNINGS="ignore")
        script = tmp_path / Path(sample.name).name
        shutil.copy(samples / sample.name, script)
        result = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True,
                                text=True, timeout=SAMPLE_TIMEOUT)
        assert result.returncode == 0, result.stderr[-3000:]
        assert "Traceback" not in result.stderr, result.stderr[-3000:]
        sample.check(emulator, result.stdout)
