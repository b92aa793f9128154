"""docs/observability.md stays true: its console program runs and prints rxhubs' spans and metrics, every
Python block compiles, and its tables name exactly the metrics, span operations and attributes rxhubs emits."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from rxhubs.otel import _names
from tests.test_operator_docs import blocks

PAGE = Path(__file__).parent.parent.parent / "docs" / "observability.md"


def section(title: str) -> str:
    return PAGE.read_text().split(f"### {title}\n", 1)[1].split("\n#", 1)[0]


def test_the_console_program_runs_and_prints_the_batch_span_and_the_metrics(tmp_path: Path) -> None:
    console = blocks(PAGE, "python")[0]
    assert "ConsoleSpanExporter" in console
    result = subprocess.run(
        [sys.executable, "-c", console], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "2 events" in result.stdout
    for name in ('"name": "process telemetry"', '"name": "checkpoint telemetry"', '"name": "claim telemetry"',
                 '"messaging.batch.message_count": 2', '"name": "messaging.client.consumed.messages"',
                 '"name": "rxhubs.events.processed"'):
        assert name in result.stdout, name


def test_every_python_block_compiles() -> None:
    found = blocks(PAGE, "python")
    assert len(found) >= 4  # console, OTLP, traced(), testing
    for block in found:
        compile(block, str(PAGE), "exec")


def test_the_metrics_table_lists_exactly_the_metrics_emitted() -> None:
    emitted = {getattr(_names, name) for name in _names.__all__ if name.isupper()}
    documented = set(re.findall(r"^\| `([\w.]+)` \|", section("Metrics"), flags=re.MULTILINE))
    assert documented == emitted


def test_the_span_table_names_every_operation_and_the_page_every_attribute() -> None:
    spans = section("Spans")
    operations = set(re.findall(r"^\| `(\w+) <hub>` \|", spans, flags=re.MULTILINE))
    assert operations == {"process", "checkpoint", "claim", "release", "lose"}
    documented = set(re.findall(r"`([a-z_]+(?:\.[a-z_]+)+)`", PAGE.read_text()))
    attributes = {
        value for name, value in vars(_names).items()
        if name.isupper() and isinstance(value, str) and "." in value and name not in _names.__all__
    }
    assert attributes - documented == set()
