"""Fixtures of tests/operators: publishes (and receivers) must run on the native path unless a test asks otherwise."""

from tests.support.native import native_receive_path  # noqa: F401  (autouse fixture)
