"""Run official samples that build clients from a host name against an emulator on 5671 (a subprocess's main).

``python -m tests.emulator._tls_sample_driver SAMPLE...``: started by tests/emulator/test_official_live_tests.py
in a network namespace of its own (``RXHUBS_BRING_LO_UP=1``), with ``RXHUBS_CERTIFI_BUNDLE`` /
``RXHUBS_CERTIFI_ORIGINAL`` as for the live tests. It starts one emulator with ``tls_port=5671`` and SAS keys
checked, appends its authority to the per-run certifi bundle, runs each sample unmodified with the environment
the samples read (``EVENT_HUB_HOSTNAME=127.0.0.1``, the hub, the SAS policy and key, and a service-form
connection string), then prints one JSON line: each sample's exit code, its stderr's tail, and the bodies every
partition of its hub holds afterwards.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from rxhubs.emulator import BackgroundEmulator
from tests.emulator._official_live_plugin import KEY, KEY_NAME, bring_loopback_up
from tests.emulator._sdk import SyncReceiver


def _bodies(conn: str, options: dict[str, str], partitions: int) -> list[str]:
    """Every body the hub's partitions hold, read back over TLS."""
    from azure.eventhub import EventHubProducerClient

    with EventHubProducerClient.from_connection_string(conn, **options) as producer:
        counts = [producer.get_partition_properties(str(p))["last_enqueued_sequence_number"] + 1
                  for p in range(partitions)]
    out: list[str] = []
    for partition, count in enumerate(counts):
        if count:
            with SyncReceiver(conn, str(partition), starting_position="-1", client_options=options) as receiver:
                out.extend(e.body_as_str() for e in receiver.wait_events(count))
    return out


def main(samples: list[str]) -> int:
    if os.environ.get("RXHUBS_BRING_LO_UP") == "1":
        bring_loopback_up()
    hubs = {f"sample{i}": 2 for i in range(len(samples))}
    results = []
    with BackgroundEmulator(hubs, keys={KEY_NAME: KEY}, tls=True, tls_port=5671) as emulator:
        ca = Path(emulator.tls_client_options()["connection_verify"])
        original = Path(os.environ["RXHUBS_CERTIFI_ORIGINAL"]).read_bytes()
        Path(os.environ["RXHUBS_CERTIFI_BUNDLE"]).write_bytes(original + b"\n" + ca.read_bytes())
        for i, sample in enumerate(samples):
            hub = f"sample{i}"
            conn = emulator.tls_connection_string(hub)
            env = {k: v for k, v in os.environ.items() if not k.startswith(("EVENT_HUB_", "AZURE_"))}
            env.update(EVENT_HUB_HOSTNAME="127.0.0.1", EVENT_HUB_NAME=hub, EVENT_HUB_SAS_POLICY=KEY_NAME,
                       EVENT_HUB_SAS_KEY=KEY, EVENT_HUB_CONN_STR=conn, PYTHONWARNINGS="ignore")
            done = subprocess.run([sys.executable, sample], env=env, capture_output=True, text=True, timeout=120,
                                  cwd=Path(sample).parent)
            results.append({"sample": sample, "returncode": done.returncode, "stderr": done.stderr[-2000:],
                            "bodies": _bodies(conn, {"connection_verify": str(ca)}, 2)})
    print(json.dumps(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
