"""Run the official samples that authenticate with DefaultAzureCredential, unmodified (a subprocess's main).

``python -m tests.emulator._identity_sample_driver SAMPLE...``: started by test_official_identity_samples.py in a
network namespace of its own (``RXHUBS_BRING_LO_UP=1``), with ``RXHUBS_CERTIFI_BUNDLE`` /
``RXHUBS_CERTIFI_ORIGINAL`` as for the live tests. One emulator on 5671 (and wss on 443) requires a
:class:`LocalIdentity`'s tokens (SAS for seeding only); an :class:`IdentityEndpoint` serves them, and
each sample runs with ``IDENTITY_ENDPOINT`` / ``IDENTITY_HEADER`` set, as on App Service, a few at a time. Each
hub holds three events before its sample starts. A sample that receives until Ctrl-C gets SIGINT once it printed
an event it received (or after 40 s). Prints one JSON line: each sample's exit code, stdout and stderr tails, and
the tokens the endpoint issued.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from rxhubs.emulator import BackgroundEmulator, IdentityEndpoint, LocalIdentity
from tests.emulator._official_live_plugin import KEY, KEY_NAME, bring_loopback_up

#: Samples that receive until KeyboardInterrupt (the rest end on their own).
UNTIL_CTRL_C = {"recv", "recv_track_last_enqueued_event_prop", "recv_with_custom_starting_position",
                "send_and_receive_amqp_annotated_message"}


def _seed(conn: str) -> None:
    from azure.eventhub import EventData, EventHubProducerClient

    with EventHubProducerClient.from_connection_string(conn, connection_verify=os.environ["RXHUBS_CA"]) as producer:
        for partition in ("0", "1"):
            producer.send_batch([EventData(f"seed {partition}")], partition_id=partition)


def _run(sample: str, env: dict[str, str]) -> dict[str, Any]:
    name = Path(sample).stem.removesuffix("_async")
    # Ctrl-C must reach it: under pytest-xdist SIGINT is ignored, and an ignored signal stays ignored across exec
    proc = subprocess.Popen([sys.executable, "-u", sample], env=env, cwd=Path(sample).parent, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stdout is not None
    out: list[str] = []
    interrupted = False
    if name in UNTIL_CTRL_C:
        deadline = time.monotonic() + 40
        for line in iter(proc.stdout.readline, ""):
            out.append(line)
            if "Received event" in line or time.monotonic() > deadline:
                break
        time.sleep(1)
        proc.send_signal(signal.SIGINT)
        interrupted = True
    try:
        rest, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        rest, err = proc.communicate()
    return {"sample": sample, "returncode": proc.returncode, "interrupted": interrupted,
            "stdout": ("".join(out) + rest)[-3000:], "stderr": err[-3000:]}


def main(samples: list[str]) -> int:
    if os.environ.get("RXHUBS_BRING_LO_UP") == "1":
        bring_loopback_up()
    identity = LocalIdentity("samples-app-service")
    hubs = {f"sample{i}": 2 for i in range(len(samples))}
    with BackgroundEmulator(hubs, keys={KEY_NAME: KEY}, identities=[identity], tls=True, tls_port=5671,
                            tls_websocket_port=443) as emulator, \
            IdentityEndpoint(identity) as endpoint:
        ca = Path(emulator.tls_client_options()["connection_verify"])
        original = Path(os.environ["RXHUBS_CERTIFI_ORIGINAL"]).read_bytes()
        Path(os.environ["RXHUBS_CERTIFI_BUNDLE"]).write_bytes(original + b"\n" + ca.read_bytes())
        os.environ["RXHUBS_CA"] = str(ca)
        runs = []
        for i, sample in enumerate(samples):
            hub = f"sample{i}"
            _seed(emulator.tls_connection_string(hub))
            env = {k: v for k, v in os.environ.items() if not k.startswith(("EVENT_HUB_", "AZURE_", "MSI_"))}
            env.update(endpoint.environment())
            env.update(EVENT_HUB_HOSTNAME="127.0.0.1", EVENT_HUB_NAME=hub, EVENT_HUB_SAS_POLICY=KEY_NAME,
                       EVENT_HUB_SAS_KEY=KEY, EVENT_HUB_CONN_STR=emulator.tls_connection_string(hub),
                       PYTHONWARNINGS="ignore")
            runs.append((sample, env))
        with ThreadPoolExecutor(4) as pool:
            results = list(pool.map(lambda run: _run(*run), runs))
        print(json.dumps({"results": results, "issued": endpoint.issued}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
