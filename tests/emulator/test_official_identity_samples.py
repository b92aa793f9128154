"""The official samples that authenticate with DefaultAzureCredential run unmodified against the emulator.

Nine samples (and their ``_async`` twins) build their clients from ``EVENT_HUB_HOSTNAME`` with azure-identity's
``DefaultAzureCredential``. With the emulator on 5671 (its authority in the run's certifi bundle, as for
``test_official_live_tests.py``), requiring a :class:`~rxhubs.emulator.LocalIdentity`'s tokens, and an
:class:`~rxhubs.emulator.IdentityEndpoint` giving them out by the App Service protocol (``IDENTITY_ENDPOINT`` /
``IDENTITY_HEADER``), each exits as it would against Azure: the bounded ones on their own, the ones that receive
until Ctrl-C after an event was received and SIGINT came. The emulator accepts no other token, so a sample that
got in got in with the endpoint's.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import certifi
import pytest

from tests.emulator._identity_sample_driver import UNTIL_CTRL_C
from tests.emulator.test_official_live_tests import REPO, _ports_for_this_run

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

IDENTITY_SAMPLES = ["recv", "recv_for_period", "recv_track_last_enqueued_event_prop",
                    "recv_with_custom_starting_position", "send_and_receive_amqp_annotated_message",
                    "send_buffered_mode", "send_stream"]
#: The other two of the nine, and why they do not run (docs/emulator.md says so too).
NOT_RUN = {
    "client_identity_authentication": "EnvironmentCredential: a service principal's client secret or certificate, "
                                      "which only Entra ID's token endpoint takes (AZURE_CLIENT_ID/SECRET/TENANT_ID)",
    "sample_code_eventhub": "fails on its own before connecting: UnboundLocalError for EventHubProducerClient "
                            "(imported later in the same function), in azure-eventhub 5.15.1's sdist",
}


def test_the_official_samples_that_use_default_azure_credential_run_unmodified(tmp_path: Path) -> None:
    from tests.emulator.test_official_samples import EXCLUDED, _fetch_samples

    assert all(name in EXCLUDED for name in [*IDENTITY_SAMPLES, *NOT_RUN])  # (not run on the plain port: TLS)
    samples = _fetch_samples()
    paths = [samples / f"sync_samples/{name}.py" for name in IDENTITY_SAMPLES]
    paths += [samples / f"async_samples/{name}_async.py" for name in IDENTITY_SAMPLES]
    shadow = tmp_path / "shadow"
    shutil.copytree(Path(certifi.__file__).parent, shadow / "certifi", ignore=shutil.ignore_patterns("__pycache__"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EVENT_HUB", "AZURE_", "PYTEST_", "IDENTITY_"))}
    env.update(PYTHONPATH=os.pathsep.join([str(shadow), str(REPO)]), PYTHONWARNINGS="ignore",
               RXHUBS_CERTIFI_BUNDLE=str(shadow / "certifi" / "cacert.pem"), RXHUBS_CERTIFI_ORIGINAL=certifi.where())
    with _ports_for_this_run() as prefix:
        env["RXHUBS_BRING_LO_UP"] = "1" if prefix else "0"
        done = subprocess.run([*prefix, sys.executable, "-m", "tests.emulator._identity_sample_driver",
                               *map(str, paths)], cwd=REPO, env=env, capture_output=True, text=True, timeout=540)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    results = report["results"]
    assert [Path(r["sample"]).stem.removesuffix("_async") for r in results] == IDENTITY_SAMPLES * 2
    failed = [r for r in results if not _exited_as_it_says(r)]
    if failed:
        pytest.fail("\n\n".join(f"{Path(r['sample']).name}: exit {r['returncode']}\n{r['stderr'][-800:]}\n"
                                f"stdout: {r['stdout'][-300:]}" for r in failed))
    for result in results:
        name = Path(result["sample"]).stem.removesuffix("_async")
        if name in UNTIL_CTRL_C:  # it received what the hub held before Ctrl-C stopped it
            assert result["interrupted"] and "Received event" in result["stdout"], result
    assert report["issued"] >= len(results)  # every sample's credential asked the endpoint (one process each)


def _exited_as_it_says(result: dict[str, Any]) -> bool:
    """Exit 0 with no traceback; or, for a sample that receives until Ctrl-C, what Ctrl-C does to it: the sync ones
    catch KeyboardInterrupt and print "Stopped receiving."; under ``asyncio.run`` (Python 3.11) the async ones' main
    task is cancelled and the KeyboardInterrupt ends the process (the same against Azure)."""
    if "DefaultAzureCredential failed" in result["stderr"] + result["stdout"]:
        return False
    name = Path(result["sample"]).name
    if result["interrupted"] and name.endswith("_async.py"):
        return bool(result["returncode"] in (-2, 130, 0) and result["stderr"].rstrip().splitlines()[-1:] != []
                    and "KeyboardInterrupt" in result["stderr"])
    if result["interrupted"]:
        return bool(result["returncode"] == 0 and "Stopped receiving." in result["stdout"])
    return bool(result["returncode"] == 0 and "Traceback" not in result["stderr"])
