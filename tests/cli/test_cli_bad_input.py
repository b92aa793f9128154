"""Bad input at the command line: each case prints one line on stderr, exits 2, has no traceback, leaks no secret.

Every connection string here carries a recognisable key; it must never reach stdout or stderr, whatever
fails (a malformed string, a closed port, an unknown hub or consumer group, an unwritable output folder).
"""

from __future__ import annotations

import contextlib
import io
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from rxhubs.cli import main

SECRET = "U3VwZXJTZWNyZXRLZXlWYWx1ZTEyMzQ1Njc4OTA="
STORAGE_SECRET = "U3RvcmFnZUFjY291bnRTZWNyZXRLZXk5ODc2NTQzMjE="
ROOT = Path(__file__).resolve().parents[2]


def rxhubs_cli(*args: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    unset = ("EVENTHUB_CONNECTION_STRING", "AZURE_STORAGE_CONNECTION_STRING")
    env = {k: v for k, v in os.environ.items() if k not in unset}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run(
        [sys.executable, "-m", "rxhubs.cli", *args],
        capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
    )


def assert_one_line_error(result: subprocess.CompletedProcess[str], command: str, *, fragment: str = "") -> str:
    output = result.stdout + result.stderr
    assert SECRET not in output and STORAGE_SECRET not in output, output
    assert "Traceback" not in result.stderr, result.stderr
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"rxhubs {command}: error: "), lines[0]
    assert fragment.lower() in lines[0].lower(), lines[0]
    return lines[0]


def connection_string(endpoint: str, hub: str | None = "telemetry", *, emulator: bool = True) -> str:
    parts = [f"Endpoint={endpoint}", "SharedAccessKeyName=RootManageSharedAccessKey", f"SharedAccessKey={SECRET}"]
    if hub is not None:
        parts.append(f"EntityPath={hub}")
    if emulator:
        parts.append("UseDevelopmentEmulator=true")
    return ";".join(parts)


@pytest.fixture(scope="module")
def closed_port() -> int:
    """A loopback port nobody listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def emulator_endpoint(emulator: Any) -> str:
    return f"sb://127.0.0.1:{emulator.port}"


MALFORMED = [
    "garbage",
    "Endpoint=sb://127.0.0.1:1",  # no key
    f"SharedAccessKeyName=k;SharedAccessKey={SECRET};EntityPath=h",  # no endpoint
    f"Endpoint=;SharedAccessKeyName=k;SharedAccessKey={SECRET};EntityPath=h",
    f"Endpoint=sb://127.0.0.1:1;SharedAccessKeyName=k;SharedAccessKey={SECRET}",  # no hub name
    f"Endpoint=sb://127.0.0.1:1;SharedAccessKey={SECRET};EntityPath=h",  # key without a key name
    f"Endpoint=sb://127.0.0.1:1;SharedAccessKeyName=k;SharedAccessKey={SECRET};SharedAccessSignature=x;EntityPath=h",
    f"Endpoint=sb://127.0.0.1:1;SharedAccessKeyName=k;SharedAccessKey={SECRET};EntityPath=h;Endpoint=sb://b",
    f"Endpoint=sb://127.0.0.1:1;SharedAccessKeyName=k;SharedAccessKey={SECRET};EntityPath=h;;;==",
    f"Endpoint=sb://127.0.0.1:notaport;SharedAccessKeyName=k;SharedAccessKey={SECRET};EntityPath=h",
]


@pytest.mark.parametrize("command", ["consume", "checkpoints"])
@pytest.mark.parametrize("conn", MALFORMED)
def test_malformed_connection_string(command: str, conn: str, tmp_path: Path) -> None:
    result = rxhubs_cli(command, "-c", conn, "--store", "memory:", cwd=tmp_path)
    assert_one_line_error(result, command)


@pytest.mark.parametrize("command", ["consume", "checkpoints"])
def test_no_connection_string(command: str, tmp_path: Path) -> None:
    result = rxhubs_cli(command, "--store", "memory:", cwd=tmp_path)
    assert_one_line_error(result, command, fragment="connection string")


@pytest.mark.parametrize("command", ["consume", "checkpoints"])
def test_unreachable_endpoint(command: str, closed_port: int, tmp_path: Path) -> None:
    conn = connection_string(f"sb://127.0.0.1:{closed_port}")
    # --duration bounds a consume that would (wrongly) keep retrying: it must fail, not run and exit 0
    extra = ["--duration", "20"] if command == "consume" else []
    result = rxhubs_cli(command, "-c", conn, "--store", "memory:", *extra, cwd=tmp_path)
    assert_one_line_error(result, command)


@pytest.mark.parametrize("command", ["consume", "checkpoints"])
def test_unknown_hub(command: str, eventhubs_emulator: Any, tmp_path: Path) -> None:
    conn = connection_string(emulator_endpoint(eventhubs_emulator), "no-such-hub")
    extra = ["--duration", "20"] if command == "consume" else []
    result = rxhubs_cli(command, "-c", conn, "--store", "memory:", *extra, cwd=tmp_path)
    assert_one_line_error(result, command, fragment="no-such-hub")


def test_eventhub_option_contradicts_entity_path(eventhubs_emulator: Any, tmp_path: Path) -> None:
    conn = connection_string(emulator_endpoint(eventhubs_emulator), "telemetry")
    result = rxhubs_cli("checkpoints", "-c", conn, "--eventhub", "other", "--store", "memory:", cwd=tmp_path)
    assert_one_line_error(result, "checkpoints", fragment="other")


def test_consume_unknown_consumer_group_stops_with_one_error(eventhubs_emulator: Any, tmp_path: Path) -> None:
    conn = connection_string(emulator_endpoint(eventhubs_emulator))
    result = rxhubs_cli(
        "consume", "-c", conn, "-g", "no-such-group", "--store", "memory:", "--duration", "30", cwd=tmp_path
    )
    output = result.stdout + result.stderr
    assert SECRET not in output
    assert "Traceback" not in result.stderr
    assert result.returncode == 2, result.stderr[-2000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("rxhubs consume: error: ")]
    assert len(errors) == 1 and "no-such-group" in errors[0], result.stderr
    # before it, at most rxhubs' own warning about the failed reader (the SDK's retry noise is silenced)
    others = [line for line in result.stderr.strip().splitlines() if line not in errors]
    assert all(" rxhubs." in line for line in others), others


@pytest.mark.parametrize(
    ("sink", "fragment"),
    [("jsonl:/proc/x/y", "/proc/x/y"), ("parquet:/proc/x/y", "/proc/x/y"), ("nosuch", "unknown sink"), ("jsonl:", "")],
)
def test_consume_unwritable_or_unknown_sink(sink: str, fragment: str, closed_port: int, tmp_path: Path) -> None:
    conn = connection_string(f"sb://127.0.0.1:{closed_port}")
    result = rxhubs_cli("consume", "-c", conn, "--store", "memory:", "--sink", sink, cwd=tmp_path)
    assert_one_line_error(result, "consume", fragment=fragment)


@pytest.mark.parametrize(
    ("store", "fragment"),
    [
        ("bogus://x", "bogus://x"),
        ("sqlite:////proc/nope/cp.sqlite", "/proc/nope"),
        ("blob://checkpoints", "storage connection string"),
    ],
)
def test_bad_store(store: str, fragment: str, eventhubs_emulator: Any, tmp_path: Path) -> None:
    conn = connection_string(emulator_endpoint(eventhubs_emulator))
    result = rxhubs_cli("checkpoints", "-c", conn, "--store", store, cwd=tmp_path)
    assert_one_line_error(result, "checkpoints", fragment=fragment)


@pytest.mark.parametrize(
    "storage",
    [
        f"AccountKey={STORAGE_SECRET};garbage",
        f"DefaultEndpointsProtocol=http;AccountName=x;AccountKey={STORAGE_SECRET};BlobEndpoint=http://127.0.0.1:{{port}}/x",
    ],
)
def test_bad_or_unreachable_storage_account(
    storage: str, eventhubs_emulator: Any, closed_port: int, tmp_path: Path
) -> None:
    conn = connection_string(emulator_endpoint(eventhubs_emulator))
    result = rxhubs_cli(
        "checkpoints", "-c", conn, "--store", "blob://checkpoints",
        "--storage-connection-string", storage.format(port=closed_port), cwd=tmp_path,
    )
    assert_one_line_error(result, "checkpoints")


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("--out", "/proc/nope", "--no-spark", "--duration", "5"), "/proc/nope"),
        (("--partitions", "0"), "--partitions"),
        (("--rate", "-5"), "--rate"),
        (("--duration", "0"), "--duration"),
        (("--consumers", "0"), "--consumers"),
    ],
)
def test_demo_bad_options(args: tuple[str, ...], fragment: str, tmp_path: Path) -> None:
    result = rxhubs_cli("demo", "--plain", *args, cwd=tmp_path)
    assert_one_line_error(result, "demo", fragment=fragment)


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("--hub", "bad:x"), "bad:x"),
        (("--hub", ":3"), ":3"),
        (("--hub", "a:0"), "'a'"),
        (("--hub", "a:2", "--hub", "a:3"), "twice"),
        (("--port", "99999"), "99999"),
        (("--data-dir", "/proc/nope"), "/proc/nope"),
    ],
)
def test_emulator_bad_options(args: tuple[str, ...], fragment: str, tmp_path: Path) -> None:
    result = rxhubs_cli("emulator", *args, cwd=tmp_path, timeout=30)
    assert_one_line_error(result, "emulator", fragment=fragment)


def test_emulator_port_in_use(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        result = rxhubs_cli("emulator", "--port", str(port), cwd=tmp_path, timeout=30)
    assert_one_line_error(result, "emulator")


@pytest.mark.parametrize("args", [("soak", "--duration", "-1"), ("soak", "--duration", "0")])
def test_bench_bad_duration(args: tuple[str, ...], tmp_path: Path) -> None:
    result = rxhubs_cli("bench", *args, cwd=tmp_path)
    assert_one_line_error(result, "bench", fragment="--duration")


# -- in process, many generated inputs ------------------------------------------------------------------------

_VALUE = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters=";\x00"), max_size=12)


@st.composite
def broken_connection_strings(draw: st.DrawFn) -> str:
    """A connection string with the secret key and at least one fatal defect before any network call."""
    settings_ = {
        "Endpoint": draw(st.sampled_from(["sb://127.0.0.1:1", "", "http://x", "sb://", "127.0.0.1"])),
        "SharedAccessKeyName": draw(st.sampled_from(["k", ""])),
        "SharedAccessKey": SECRET,
        "EntityPath": draw(st.one_of(st.none(), st.just(""), _VALUE)),
    }
    defect = draw(st.sampled_from(["no-endpoint", "no-key-name", "bad-pair", "no-hub", "bad-scheme"]))
    if defect == "no-endpoint":
        del settings_["Endpoint"]
    elif defect == "no-key-name":
        del settings_["SharedAccessKeyName"]
    elif defect == "no-hub":
        settings_["EntityPath"] = None
    elif defect == "bad-scheme":
        settings_["Endpoint"] = "http://127.0.0.1:1"
    pairs = [f"{k}={v}" for k, v in settings_.items() if v is not None]
    if defect == "bad-pair":
        pairs.insert(draw(st.integers(0, len(pairs))), draw(_VALUE.filter(lambda v: "=" not in v and v.strip())))
    order = draw(st.permutations(pairs))
    return ";".join(order)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(conn=broken_connection_strings())
@example(conn=f"-;Endpoint=sb://127.0.0.1:1;SharedAccessKeyName=k;SharedAccessKey={SECRET};EntityPath=h")
def test_generated_broken_connection_strings_never_leak_the_key(conn: str) -> None:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        # the "=" form: a generated value may start with "-", which argparse would take for an option after "-c"
        code = main(["checkpoints", f"--connection-string={conn}", "--store", "memory:"])
    assert code == 2, (conn, err.getvalue())
    assert SECRET not in out.getvalue() + err.getvalue()
    lines = err.getvalue().strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rxhubs checkpoints: error: "), lines
