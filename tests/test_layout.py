"""The package's shape, as docs/architecture.md draws it: imports flow one way, and modules stay small.

These read the source (``ast``), run nothing, and fail with the offending module and import named.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "rxhubs"

#: Each unit of the package (a subpackage or a top-level module) and its floor: a unit imports only units on
#: lower floors (or itself). The rows of docs/architecture.md, with the top-level modules placed where they sit.
FLOORS = {
    "errors": 0, "_capture_format": 0,
    "_extensions": 1,
    "_models": 1, "_retry": 1, "_rx": 1, "_shutdown": 1, "_siblings": 1, "emulator": 1, "_apidoc": 1,
    "_batch": 2, "_run": 2,
    "_telemetry": 3, "state": 3,  # event time and operator state: batches carry it, balancing restores it
    "_worker_process": 3,  # inside a run_workers process: its pipeline under arun
    "transport": 4, "stores": 4, "_workers": 4,
    "sources": 5,
    "balancing": 6,
    "operators": 7,
    "spark": 8, "processor": 8, "testing": 8, "windows": 8, "operate": 8,
    "tables": 9,  # builds on spark (the Delta sink writes the Spark sink's Arrow rows)
    "__init__": 9,  # the package's own top: what `import rxhubs` gives
    "schemas": 8,
    "otel": 10, "demo": 10, "bench": 10,
    "chaos": 11,  # the seeded chaos run: a bench scenario of its own (it prints the bench's figures)
    "cli": 12,
}  # fmt: skip

#: The AMQP codec is one table-driven module on purpose; everything else stays readable in one sitting.
MAX_LINES = 420
LONGER_ALLOWED: set[str] = set()


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "_discovery" not in p.parts)


def _unit(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "__init__"
    return parts[1]


def _unit_of(path: Path) -> str:
    relative = path.relative_to(PACKAGE)
    return relative.parts[0].removesuffix(".py")


def _imports(path: Path) -> list[tuple[int, str]]:
    """``(line, unit)`` for every rxhubs import outside ``if TYPE_CHECKING:`` blocks."""
    tree = ast.parse(path.read_text(), str(path))
    typing_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            typing_only.update(id(child) for stmt in node.body for child in ast.walk(stmt))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found += [(node.lineno, _unit(a.name)) for a in node.names if a.name.split(".")[0] == "rxhubs"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "rxhubs":  # from rxhubs import _telemetry, operators, Event ...
                for alias in node.names:
                    exists = (PACKAGE / alias.name).is_dir() or (PACKAGE / f"{alias.name}.py").exists()
                    found.append((node.lineno, alias.name if exists else "__init__"))
            elif node.module.split(".")[0] == "rxhubs":
                found.append((node.lineno, _unit(node.module)))
    return found


def test_every_unit_of_the_package_has_a_floor() -> None:
    units = {_unit_of(p) for p in _modules()}
    assert units == set(FLOORS), f"place new units in FLOORS (and docs/architecture.md): {units ^ set(FLOORS)}"


def test_imports_flow_one_way_down_the_layers() -> None:
    upward = []
    for path in _modules():
        source = _unit_of(path)
        for line, target in _imports(path):
            if target != source and FLOORS[target] >= FLOORS[source]:
                upward.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {target} ({source} is not above it)")
    assert not upward, "\n".join(upward)


def test_no_module_is_longer_than_a_reader_takes_in_at_once() -> None:
    long = {
        str(p.relative_to(PACKAGE)): n
        for p in _modules()
        if (n := len(p.read_text().splitlines())) > MAX_LINES and str(p.relative_to(PACKAGE)) not in LONGER_ALLOWED
    }
    assert not long, f"split these by concern (docs/architecture.md): {long}"


def test_only_the_bench_tests_import_the_bench() -> None:
    """A helper that tests share lives in rxhubs.testing or tests/, not in a benchmark's module.

    tests/bench/ tests the benchmarks themselves, so it imports them; no other test does.
    """
    tests = PACKAGE.parent / "tests"
    found = [
        f"{path.relative_to(tests.parent)}:{line}"
        for path in sorted(tests.rglob("*.py"))
        if "bench" not in path.relative_to(tests).parts[:1]
        for line, unit in _imports(path)
        if unit == "bench"
    ]
    assert not found, f"tests importing rxhubs.bench (move the helper to rxhubs.testing or tests/): {found}"


def test_architecture_md_draws_every_unit_on_its_floor() -> None:
    """docs/architecture.md's diagram: one band per floor, top floor first, every unit in the band of its floor."""
    page = (PACKAGE.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    diagram = page.split("## The layers", 1)[1].split("```", 2)[1]
    bands = [band for band in diagram.split("───") if band.strip("─ \n")]
    drawn: dict[str, int] = {}
    floors = []
    for index, band in enumerate(bands):
        # units are drawn in the left column (`name/`, `name.py`); from column 38 on, prose about them
        names = {
            word.removesuffix("/").removesuffix(".py")
            for line in band.splitlines()
            for word in line[:38].split()
            if word.endswith(("/", ".py"))
        }
        for name in names:
            assert name in FLOORS, f"docs/architecture.md draws {name!r}, which tests/test_layout.py does not place"
            drawn[name] = index
        floors.append({FLOORS[n] for n in names})
    assert set(drawn) == set(FLOORS) - {"__init__"}, f"units not drawn: {set(FLOORS) - {'__init__'} - set(drawn)}"
    assert all(len(f) == 1 for f in floors), f"a band holds units of several floors: {floors}"
    levels = [next(iter(f)) for f in floors]
    assert levels == sorted(levels, reverse=True) and len(set(levels)) == len(levels), levels


def test_stores_are_typed_where_they_are_probed() -> None:
    """No ``store: object``: a capability probe takes a CheckpointStore and narrows it with a TypeGuard.

    (``is_fenced``, ``is_stateful``, ``takes_hands`` in rxhubs/stores/_contract.py.)
    """
    untyped = [
        f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {arg.arg}"
        for path in _modules()
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        for arg in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
        if "store" in arg.arg and arg.annotation is not None and ast.unparse(arg.annotation) == "object"
    ]
    assert not untyped, f"type these with rxhubs.stores' protocols: {untyped}"


def test_the_checker_sees_an_upward_import(tmp_path: Path) -> None:
    """The import reader itself: an import of a higher floor is found, a TYPE_CHECKING one is not."""
    module = tmp_path / "m.py"
    module.write_text(
        "from typing import TYPE_CHECKING\n"
        "from rxhubs.balancing import consume\n"
        "from rxhubs import operators as hops, Event\n"
        "if TYPE_CHECKING:\n"
        "    from rxhubs.cli import main\n"
    )
    assert _imports(module) == [(2, "balancing"), (3, "operators"), (3, "__init__")]
