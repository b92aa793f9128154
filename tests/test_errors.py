"""The exception tree: one root, a retriable flag, semantic subclasses."""

from __future__ import annotations

import pytest

from rxhubs import errors


@pytest.mark.parametrize(
    ("cls", "retriable"),
    [
        (errors.ConfigurationError, False),
        (errors.NotFoundError, False),
        (errors.AuthenticationError, False),
        (errors.TransportError, True),
        (errors.ReceiverClosedError, False),
        (errors.OwnershipLostError, False),
        (errors.StoreError, True),
        (errors.OwnershipConflictError, False),
        (errors.CorruptRecordError, False),
        (errors.SinkError, False),
        (errors.QuotaExceededError, False),
    ],
)
def test_every_error_has_the_root_and_a_default_retriable_flag(
    cls: type[errors.RxHubsError], retriable: bool
) -> None:
    exc = cls("what went wrong")
    assert isinstance(exc, errors.RxHubsError)
    assert exc.retriable is retriable
    assert cls("x", retriable=not retriable).retriable is (not retriable)
    assert "what went wrong" in repr(exc)


def test_configuration_errors_are_also_value_errors_and_not_found_a_lookup_error() -> None:
    assert issubclass(errors.ConfigurationError, ValueError)
    assert issubclass(errors.NotFoundError, LookupError)


def test_all_lists_every_public_error() -> None:
    public = {n for n in dir(errors) if n.endswith("Error") and not n.startswith("_")}
    assert public == set(errors.__all__)
