"""The suite's class-data-sharing archive for its Spark JVMs (tests/support/spark_cds.py).

It is named for the Java, Spark, options and trainer it was made with (a new JDK or pyspark makes another), a
build that cannot finish leaves nothing behind, and the archive the suite made really maps Spark's classes.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support import spark_cds


def _fake_jdk(root: Path, version: str) -> Path:
    (root / "bin").mkdir(parents=True)
    (root / "release").write_text(f'JAVA_VERSION="{version}"\n')
    java = root / "bin" / "java"
    java.write_text("#!/bin/sh\nexit 1\n")  # a java that cannot start anything
    java.chmod(0o755)
    return java


def test_a_new_java_or_spark_names_another_archive(tmp_path: Path) -> None:
    java_a, java_b = _fake_jdk(tmp_path / "jdk-a", "17.0.15"), _fake_jdk(tmp_path / "jdk-b", "17.0.16")
    jars = tmp_path / "jars"
    jars.mkdir()
    (jars / "spark-core_2.13-4.3.0.jar").write_bytes(b"x" * 10)
    first = spark_cds.archive(tmp_path / "cds", java_a, jars)
    assert first is not None and first.parent == tmp_path / "cds" and first.suffix == ".jsa"
    assert spark_cds.archive(tmp_path / "cds", java_a, jars) == first  # the same parts: the same archive
    assert spark_cds.archive(tmp_path / "cds", java_b, jars) != first  # another JDK
    (jars / "spark-core_2.13-4.3.0.jar").rename(jars / "spark-core_2.13-4.3.1.jar")
    assert spark_cds.archive(tmp_path / "cds", java_a, jars) != first  # another Spark
    (jars / "spark-core_2.13-4.3.1.jar").rename(jars / "spark-core_2.13-4.3.0.jar")
    (jars / "spark-core_2.13-4.3.0.jar").write_bytes(b"y" * 11)
    assert spark_cds.archive(tmp_path / "cds", java_a, jars) != first  # the same name, another jar


def test_a_build_that_cannot_finish_leaves_no_archive_and_says_why(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_jdk(tmp_path / "jdk", "17.0.15")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))  # spark-submit runs this java: the trainer fails
    path = tmp_path / "cds" / "spark-x.jsa"
    why = spark_cds.build(path, timeout=300)
    assert why is not None and why.startswith("the trainer failed"), why
    assert sorted(p.name for p in path.parent.iterdir()) == [".lock"]  # no archive, no partial one


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.timeout(900)  # it makes the archive if the run's background build has not (about 45 s quiet)
def test_the_suites_archive_maps_sparks_classes(tmp_path: Path) -> None:
    path = spark_cds.archive()
    assert path is not None
    assert spark_cds.build(path) is None  # made here if the run's background build has not made it yet
    java, jars = spark_cds.java(), spark_cds.spark_jars()
    assert java is not None and jars is not None
    class_path = f"{jars.parent / 'conf'}:{next(jars.glob('slf4j-api-*.jar'))}:{jars}/*"  # as spark-submit's
    base = [str(java), *spark_cds.SUITE_JVM_OPTS.split(), "-cp", class_path]
    shared = subprocess.run([*base, *spark_cds.options(path).split(), "-Xlog:class+load=info",
                             "org.apache.spark.deploy.SparkSubmit", "--version"],
                            capture_output=True, text=True, timeout=300)
    loaded = [line for line in shared.stdout.splitlines() if "org.apache.spark.deploy.SparkSubmit " in line]
    assert loaded and "shared objects file (top)" in loaded[0], loaded  # from the archive, not the jar
    # and a JVM on another class path falls back, silently: nothing of CDS in its output
    other = subprocess.run([str(java), *spark_cds.SUITE_JVM_OPTS.split(), *spark_cds.options(path).split(),
                            "-cp", str(tmp_path), "-version"], capture_output=True, text=True, timeout=120)
    assert other.returncode == 0 and "cds" not in (other.stdout + other.stderr).lower(), other
