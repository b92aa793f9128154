"""The operators' docs stay true: their commands parse, their loggers and errors are the package's.

``docs/logging.md`` must list exactly the loggers the package creates, ``docs/troubleshooting.md`` every
error type of :mod:`rxhubs.errors`, and every ``rxhubs ...`` / ``make ...`` command in those pages, in
``CONTRIBUTING.md`` and in ``docs/operations.md`` must be accepted by the real command line or Makefile.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import rxhubs.errors
from rxhubs.cli import build_parser

ROOT = Path(__file__).parent.parent
PAGES = [ROOT / "docs" / "logging.md", ROOT / "docs" / "troubleshooting.md", ROOT / "CONTRIBUTING.md",
         ROOT / "docs" / "operations.md", ROOT / "README.md"]


def blocks(page: Path, *languages: str) -> list[str]:
    """The fenced code blocks of ``page`` whose info string is one of ``languages`` ("" for none)."""
    found, current, language = [], [], None
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            if language is None:
                language, current = line[3:].strip(), []
            else:
                if language in languages:
                    found.append("\n".join(current))
                language = None
        elif language is not None:
            current.append(line)
    return found


def commands(prefix: str) -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        for block in blocks(page, "sh", ""):
            for line in block.splitlines():
                line = line.split("  #")[0].strip()
                if line.startswith(prefix):
                    found.append((page.name, line))
    return found


@pytest.mark.parametrize(("page", "line"), commands("rxhubs "), ids=lambda v: str(v)[:60])
def test_every_rxhubs_command_in_the_docs_parses(page: str, line: str) -> None:
    args = shlex.split(line)[1:]
    try:
        parsed = build_parser().parse_args(args)
    except SystemExit as exc:  # argparse's way of refusing
        pytest.fail(f"{page}: {line!r} is refused by the command line (exit {exc.code})")
    assert parsed.command, line


def test_there_are_commands_to_check() -> None:
    assert len(commands("rxhubs ")) >= 10
    assert commands("make ")


@pytest.mark.parametrize(("page", "line"), commands("make "), ids=lambda v: str(v)[:60])
def test_every_make_target_in_the_docs_exists(page: str, line: str) -> None:
    makefile = (ROOT / "Makefile").read_text()
    for target in [word for word in shlex.split(line)[1:] if "=" not in word]:
        assert re.search(rf"^{re.escape(target)}:", makefile, flags=re.MULTILINE), f"{page}: make {target}"


def test_pytest_commands_in_contributing_name_real_paths_and_markers() -> None:
    lines = [line for _, line in commands(".venv/bin/python -m pytest")]
    assert lines
    declared = {"spark", "azurite", "slow"}
    for line in lines:
        for word in shlex.split(line)[3:]:
            if word.startswith("tests"):
                assert (ROOT / word).exists(), word
        marker = re.search(r'-m "([^"]+)"', line)
        if marker:
            assert set(re.findall(r"\w+", marker.group(1))) - {"not", "and", "or"} <= declared, line


def test_the_python_examples_in_the_operators_docs_compile_and_logging_setup_runs() -> None:
    for page in (ROOT / "docs" / "logging.md", ROOT / "docs" / "troubleshooting.md"):
        for block in blocks(page, "python"):
            compile(block, str(page), "exec")
    [setup] = blocks(ROOT / "docs" / "logging.md", "python")
    result = subprocess.run(
        [sys.executable, "-c", setup + "\nassert logging.getLogger('rxhubs.sources').getEffectiveLevel() == 20"],
        capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stderr


def test_logging_md_lists_exactly_the_packages_loggers() -> None:
    in_code = set()
    for path in (ROOT / "rxhubs").rglob("*.py"):
        if "bench" in path.parts:
            continue  # benchmarks only quiet the "rxhubs" logger
        in_code |= set(re.findall(r"""logging\.getLogger\(["'](rxhubs[\w.]*)["']\)""", path.read_text()))
    table = (ROOT / "docs" / "logging.md").read_text().split("## The loggers", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"^\| `(rxhubs[\w.]*)` \|", table, flags=re.MULTILINE))
    assert documented == in_code


def test_troubleshooting_md_covers_every_error_type() -> None:
    page = (ROOT / "docs" / "troubleshooting.md").read_text()
    rows = set(re.findall(r"^\| `(\w+)` \|", page, flags=re.MULTILINE))
    assert rows == set(rxhubs.errors.__all__)
    for problem in ("consumer group", "SAS", "unreachable store", "clock skew", "retention"):
        assert problem.lower() in page.lower(), problem
