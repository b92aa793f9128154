"""The package builds (``python -m build``) into a wheel and an sdist that install into a clean virtual
environment and run an example; the wheel carries the modules through which Spark finds the source.

The venv has no system site-packages and gets rxhubs without the ``spark`` extra (pyspark alone is ~450 MB);
that Spark really discovers the source from the built wheel is tested in ``tests/spark/test_discovery.py``.
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.support.package import DISCOVERY_MODULES, ROOT, Distributions, build_distributions

# the build compiles the frame reader (Cython, then the C compiler): well past the default timeout when busy
pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

EXAMPLE = ROOT / "examples" / "telemetry_pipeline.py"


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> Distributions:
    return build_distributions(tmp_path_factory)


def test_the_build_has_no_deprecation_warning(dists: Distributions) -> None:
    assert "deprecat" not in dists.log.lower(), dists.log[-3000:]  # e.g. project.license as a TOML table
    assert "successfully built" in dists.log.lower()


def test_the_wheel_holds_the_package_and_the_spark_discovery_modules_at_top_level(dists: Distributions) -> None:
    with zipfile.ZipFile(dists.wheel) as wheel:
        names = wheel.namelist()
        metadata = wheel.read("rxhubs-0.1.0.dist-info/METADATA").decode()
        entry_points = wheel.read("rxhubs-0.1.0.dist-info/entry_points.txt").decode()
    assert {name.split("/")[0] for name in names} == {"rxhubs", "rxhubs-0.1.0.dist-info", *DISCOVERY_MODULES}
    for module in DISCOVERY_MODULES:
        assert f"{module}/__init__.py" in names
    assert not [n for n in names if "_discovery" in n]  # mapped to the top level, not shipped twice
    assert {"rxhubs/__init__.py", "rxhubs/py.typed", "rxhubs/spark/_source.py", "rxhubs/cli/__main__.py"} <= set(names)
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    # the compiled frame reader, built from the one Python source (this machine has a compiler)
    assert [n for n in names if n.startswith("rxhubs/transport/_frames_c.") and n.endswith(".so")], names
    assert {"rxhubs/transport/_frames_py.py", "rxhubs/transport/_frames_c.pxd"} <= set(names)
    assert not [n for n in names if n.endswith(".c")]  # generated C stays out
    assert "License-Expression: MIT" in metadata  # an SPDX expression, not the deprecated TOML table
    assert "Provides-Extra: spark" in metadata
    assert "rxhubs = rxhubs.cli:entry" in entry_points


def test_the_sdist_holds_the_sources_and_no_local_clutter(dists: Distributions) -> None:
    with tarfile.open(dists.sdist) as sdist:
        names = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    assert {
        "pyproject.toml",
        "setup.py",
        "README.md",
        "rxhubs/transport/_frames_py.py",
        "rxhubs/transport/_frames_c.py",
        "rxhubs/transport/_frames_c.pxd",
        "rxhubs/__init__.py",
        "rxhubs/spark/_discovery/pyspark_rxhubs/__init__.py",
        "rxhubs/spark/_discovery/pyspark_rxhubs_eventhubs/__init__.py",
    } <= names
    for clutter in (".venv", "node_modules", "__pycache__", ".git/", ".pytest_cache", ".mypy_cache"):
        assert not [n for n in names if clutter in n], clutter


def run(venv_python: Path, *args: str, cwd: Path, **extra_env: str) -> subprocess.CompletedProcess[str]:
    # no PYTHONPATH: the venv's rxhubs (not this work tree's) must be what runs
    env = {"PATH": f"{venv_python.parent}:/usr/bin:/bin", "PIP_DISABLE_PIP_VERSION_CHECK": "1", "HOME": str(cwd),
           **extra_env}
    return subprocess.run(
        [str(venv_python), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


@pytest.mark.timeout(600)  # two installs (the sdist's runs Cython): minutes when the machine is busy
def test_wheel_and_sdist_install_into_a_clean_venv_and_run_an_example(dists: Distributions, tmp_path: Path) -> None:
    """The wheel installs and reads on the native path; the sdist installs without a C compiler, on the pure one.

    The sdist is not also installed with a compiler: that would compile every module a second time to prove what
    the wheel already proves, since ``python -m build`` builds the wheel from the sdist (tests/support/package.py),
    in an isolated environment as pip does. What only the sdist can show is the machine without a C compiler.
    """
    subprocess.run([sys.executable, "-m", "venv", str(tmp_path / "venv")], check=True, timeout=120)
    python = tmp_path / "venv" / "bin" / "python"
    pip_cache = Path.home() / ".cache" / "pip"  # reuse the machine's cache: the dependencies, not rxhubs
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    native = f"receive path: native (compiled frame reader: _frames_c{suffix})"
    pure = "receive path: pure-Python (the compiled frame reader was not built (no C compiler or Cython at install))"
    # the wheel brings the dependencies; the sdist replaces rxhubs alone (reinstalling every dependency again took
    # half the test), and pip check then holds what is installed to the sdist's requirements. CC=/bin/false: a
    # machine without a C compiler, where the sdist still installs and rxhubs says it reads on the pure path
    for dist, deps, extra_env, path in ((dists.wheel, [], {}, native),
                                        (dists.sdist, ["--no-deps"], {"CC": "/bin/false"}, pure)):
        installed = run(
            python, "-m", "pip", "install", "--quiet", "--force-reinstall", *deps, "--cache-dir", str(pip_cache),
            str(dist), cwd=tmp_path, **extra_env,
        )
        assert installed.returncode == 0, f"{dist.name}: {installed.stderr[-3000:]}"
        consistent = run(python, "-m", "pip", "check", cwd=tmp_path)
        assert consistent.returncode == 0, f"{dist.name}: {consistent.stdout[-3000:]}"

        check = run(
            python, "-c",
            "import importlib.util, pkgutil, sys, rxhubs; print(rxhubs.__file__); print(rxhubs.__version__); "
            "print(sorted(m.name for m in pkgutil.iter_modules() if m.name.startswith('pyspark_'))); "
            "print(importlib.util.find_spec('pyspark') is None, sys.prefix != sys.base_prefix)",
            cwd=tmp_path,
        )
        assert check.returncode == 0, check.stderr
        location, version, discovered, isolated = check.stdout.splitlines()
        assert location.startswith(str(tmp_path / "venv")), location
        assert version == "0.1.0"
        assert discovered == str(sorted(DISCOVERY_MODULES))  # what Spark's lookup iterates over
        assert isolated == "True True"  # no pyspark: the base install stays light

        example = run(python, str(EXAMPLE), cwd=tmp_path)
        assert example.returncode == 0, f"{dist.name}: {example.stdout[-2000:]}\n{example.stderr[-3000:]}"
        assert "written: [21.5, 22.0]" in example.stdout

        cli = run(tmp_path / "venv" / "bin" / "rxhubs", "--version", cwd=tmp_path)
        assert cli.stdout.splitlines() == ["rxhubs 0.1.0", path], (dist.name, cli.stderr)
