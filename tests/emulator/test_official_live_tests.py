"""azure-eventhub's own live tests, unmodified, against the emulator over TLS (AMQPS on 5671, wss on 443).

The SDK's ``tests/livetest`` reach a namespace the way every application does: TLS to port 5671 (or WebSockets
over TLS to 443) of the host name, the certificate checked against certifi's bundle. They come from the sdist of
the installed azure-eventhub version (fetched with pip into the git-ignored ``.cache/``, never vendored) and run
in a pytest subprocess whose fixtures (``tests/emulator/_official_live_plugin.py``, in place of the SDK's
``conftest.py``, which creates hubs through Azure Resource Manager) point them at an emulator started with
``tls=True, tls_port=5671, tls_websocket_port=443`` in that subprocess.

Nothing in the SDK or the installed certifi is changed: the subprocess has a copy of the certifi package first on
``PYTHONPATH`` whose ``cacert.pem`` is certifi's bundle plus the emulator's authority (the plugin appends it once
the emulator made it). The ports are the service's, so the subprocess runs in a private network namespace
(``unshare --net``, its own loopback) when the machine allows one; else on this machine's loopback, one run at a
time (a lock file). docs/emulator.md lists what runs and why the rest does not.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import certifi
import pytest

from tests.emulator._sdist import sdist_part

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]

# The official tests run here, by file: each needs TLS (the SDK speaks TLS to every host name but an emulator's
# development connection string); together they cover every way to authenticate (connection string, SAS token,
# AzureSasCredential, AzureNamedKeyCredential, a token credential), a caller's ssl_context built on certifi,
# AMQP and AMQP over WebSockets, properties, sending, receiving and the service's refusals.
# They run side by side in seven subprocesses: the tests mostly wait (on the SDK's own receive timeouts and retries),
# so the run takes as long as its longest part, about 70 s (test_client_with_ssl_context_async alone took 66 s a
# transport; in two subprocesses, sync and async, the whole took 258 s of a quiet suite run and held its worker).
# RXHUBS_OFFICIAL_LIVE_TESTS=all runs every file instead (about 40 minutes; docs/emulator.md has that run's outcome,
# test by test).
_SSL, _SSL_ASYNC = "livetest/synctests/test_auth.py::test_client_with_ssl_context", \
    "livetest/asynctests/test_auth_async.py::test_client_with_ssl_context_async"
RUNS = [["livetest/synctests/test_auth.py", "--deselect", _SSL], [_SSL], ["livetest/synctests/test_properties.py"],
        ["livetest/asynctests/test_auth_async.py", "--deselect", _SSL_ASYNC], [f"{_SSL_ASYNC}[ws]"],
        [f"{_SSL_ASYNC}[amqp]"], ["livetest/asynctests/test_properties_async.py"]]
if os.environ.get("RXHUBS_OFFICIAL_LIVE_TESTS") == "all":
    RUNS = [["livetest/synctests"], ["livetest/asynctests"]]


def _fetch_tests() -> Path:
    """The installed azure-eventhub version's ``tests/`` (livetest and their helper), from its sdist, once."""
    return sdist_part("tests", lambda name: "/tests/livetest/" in name or name.endswith("/tests/tracing_common.py"))


def _private_network() -> list[str] | None:
    """The command prefix that runs a process in a network namespace of its own, or None where none can be made."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return None
    for prefix in ([unshare, "--net"], [unshare, "--user", "--map-root-user", "--net"]):
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            if subprocess.run([*prefix, "true"], capture_output=True, timeout=20).returncode == 0:
                return prefix
    return None


@contextlib.contextmanager
def _ports_for_this_run() -> Iterator[list[str]]:
    """A private network namespace, else this machine's 5671 and 443 held by one run at a time."""
    prefix = _private_network()
    if prefix is not None:
        yield prefix
        return
    with open(Path(tempfile.gettempdir()) / "rxhubs-official-live-tests.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield []


def run_official(tests: Path, work: Path, selection: list[str], *, trust: bool = True) -> dict[str, str]:
    """Run ``selection`` (paths or node ids under ``tests``) in a subprocess; each test id -> its outcome.

    The outcome is ``passed``, ``skipped`` or ``failed: <the failure's text>``.
    """
    work.mkdir(parents=True, exist_ok=True)
    shadow = work / "shadow"
    shutil.copytree(Path(certifi.__file__).parent, shadow / "certifi", ignore=shutil.ignore_patterns("__pycache__"))
    report = work / "report.xml"
    (work / "pytest.ini").write_text("[pytest]\nasyncio_mode = strict\nasyncio_default_fixture_loop_scope = function\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EVENT_HUB", "AZURE_", "PYTEST_"))}
    env.update(PYTHONPATH=os.pathsep.join([str(shadow), str(REPO), str(tests)]), PYTHONWARNINGS="ignore",
               RXHUBS_CERTIFI_BUNDLE=str(shadow / "certifi" / "cacert.pem"), RXHUBS_CERTIFI_ORIGINAL=certifi.where(),
               RXHUBS_TRUST_EMULATOR="1" if trust else "0")
    with _ports_for_this_run() as prefix:
        env["RXHUBS_BRING_LO_UP"] = "1" if prefix else "0"
        result = subprocess.run([*prefix, sys.executable, "-m", "pytest", "-p", "tests.emulator._official_live_plugin",
                                 "-p", "no:randomly", "-p", "no:cacheprovider", "-c", str(work / "pytest.ini"),
                                 "--rootdir", str(tests), "-q", "--timeout", "240", f"--junitxml={report}",
                                 *selection], cwd=tests, env=env, capture_output=True, text=True, timeout=840)
    if not report.exists():
        raise AssertionError(f"the official tests did not run: {result.stdout[-3000:]}{result.stderr[-3000:]}")
    outcomes: dict[str, str] = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        kinds = {child.tag: f"{child.get('message', '')} {child.text or ''}" for child in case}
        bad = [text for tag, text in kinds.items() if tag in ("failure", "error")]
        outcomes[name] = f"failed: {bad[0]}" if bad else "skipped" if "skipped" in kinds else "passed"
    return outcomes


@pytest.fixture(scope="module")
def official_tests() -> Path:
    return _fetch_tests()


def test_the_official_live_tests_that_need_tls_pass_unmodified_against_the_emulator(official_tests: Path,
                                                                                     tmp_path: Path) -> None:
    with ThreadPoolExecutor(len(RUNS)) as pool:
        runs = [pool.submit(run_official, official_tests, tmp_path / str(i), selection)
                for i, selection in enumerate(RUNS)]
        outcomes = {name: outcome for run in runs for name, outcome in run.result().items()}
    assert len(outcomes) >= 22, outcomes  # every test of those files, each transport and credential
    failed = {name: outcome for name, outcome in outcomes.items() if outcome != "passed"}
    assert not failed, failed
    assert any("test_client_with_ssl_context" in name and "ws" in name for name in outcomes)  # wss on 443 ran


def test_without_the_emulators_authority_in_the_bundle_the_same_tests_fail_at_the_handshake(official_tests: Path,
                                                                                            tmp_path: Path) -> None:
    # The fault is felt: the clients really check the emulator's certificate against certifi's bundle.
    outcomes = run_official(official_tests, tmp_path, ["livetest/synctests/test_properties.py::test_get_properties"],
                            trust=False)
    assert len(outcomes) == 1, outcomes
    (outcome,) = outcomes.values()
    assert outcome.startswith("failed") and "CERTIFICATE_VERIFY_FAILED" in outcome, outcome[:3000]


# The official samples that build their clients from EVENT_HUB_HOSTNAME with a SAS key (no Azure AD): with the
# emulator on 5671 and its authority in the run's certifi bundle they run unmodified. (test_official_samples.py
# runs the connection-string samples against the plain port; its table points here for these.)
TLS_SAMPLES = ["authenticate_with_azure_named_key_credential", "authenticate_with_azure_sas_credential",
               "authenticate_with_sas_token", "client_creation"]


def test_the_official_samples_that_need_tls_run_unmodified_against_the_emulator(tmp_path: Path) -> None:
    from tests.emulator.test_official_samples import _fetch_samples

    samples = _fetch_samples()
    paths = [samples / f"sync_samples/{name}.py" for name in TLS_SAMPLES]
    paths += [samples / f"async_samples/{name}_async.py" for name in TLS_SAMPLES]
    shadow = tmp_path / "shadow"
    shutil.copytree(Path(certifi.__file__).parent, shadow / "certifi", ignore=shutil.ignore_patterns("__pycache__"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EVENT_HUB", "AZURE_", "PYTEST_"))}
    env.update(PYTHONPATH=os.pathsep.join([str(shadow), str(REPO)]), PYTHONWARNINGS="ignore",
               RXHUBS_CERTIFI_BUNDLE=str(shadow / "certifi" / "cacert.pem"), RXHUBS_CERTIFI_ORIGINAL=certifi.where())
    with _ports_for_this_run() as prefix:
        env["RXHUBS_BRING_LO_UP"] = "1" if prefix else "0"
        done = subprocess.run([*prefix, sys.executable, "-m", "tests.emulator._tls_sample_driver", *map(str, paths)],
                              cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(done.stdout.strip().splitlines()[-1])
    assert [Path(r["sample"]).stem.removesuffix("_async") for r in results] == TLS_SAMPLES * 2
    for result in results:
        assert result["returncode"] == 0 and "Traceback" not in result["stderr"], result
        if "client_creation" in result["sample"]:
            assert result["bodies"] == [], result  # it only opens clients and reads the hub's properties
        else:  # each sends one event; it arrived, over TLS, where the sample sent it
            assert result["bodies"] == ["Single message"], result
