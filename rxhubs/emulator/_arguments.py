"""What :class:`~rxhubs.emulator.Emulator` checks in its arguments before it binds anything.

Names as the service takes them (hubs of letters, digits, ``.``, ``_`` and ``-``, whose names ignore case; consumer
groups), partition counts up to a Dedicated hub's 1,024, ports, the message size, and SAS key names and keys that
must fit in a connection string. Each failure is a :class:`~rxhubs.errors.ConfigurationError` naming the argument;
one about a key names the key, never shows it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from rxhubs.errors import ConfigurationError

__all__ = [
    "DEFAULT_KEY",
    "DEFAULT_KEY_NAME",
    "MAX_PARTITIONS",
    "check_groups",
    "check_hubs",
    "check_key",
    "check_message_size",
    "check_ports",
]

DEFAULT_KEY_NAME = "RootManageSharedAccessKey"
DEFAULT_KEY = "SAS_KEY_VALUE"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,255}$")
_GROUP = re.compile(r"^(\$default|[a-z0-9][a-z0-9._-]{0,49})$", re.IGNORECASE)
MAX_PARTITIONS = 1024
_KEY_NAME = re.compile(r"^[A-Za-z0-9._-]{1,256}$")


def check_hubs(hubs: Mapping[str, int]) -> None:
    """At least one hub; valid names, distinct ignoring case; partition counts from 1 to :data:`MAX_PARTITIONS`.

    Example:
        >>> check_hubs({"telemetry": 2048})
        Traceback (most recent call last):
        ...
        rxhubs.errors.ConfigurationError: event hub 'telemetry' needs a partition count between 1 and 1024, got 2048
    """
    if not hubs:
        raise ConfigurationError("the emulator needs at least one event hub, e.g. hubs={'telemetry': 4}")
    seen: dict[str, str] = {}
    for name, count in hubs.items():
        if not isinstance(name, str) or not _NAME.match(name):
            raise ConfigurationError(f"invalid event hub name {name!r}: use letters, digits, '.', '_' or '-'")
        if name.casefold() in seen:
            raise ConfigurationError(f"event hubs {seen[name.casefold()]!r} and {name!r} are the same hub: "
                                     "Event Hubs names ignore case")
        seen[name.casefold()] = name
        if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_PARTITIONS:
            raise ConfigurationError(
                f"event hub {name!r} needs a partition count between 1 and {MAX_PARTITIONS}, got {count!r}")


def check_groups(consumer_groups: Iterable[str]) -> tuple[str, ...]:
    """The consumer groups, each a valid name."""
    groups = tuple(consumer_groups)
    for group in groups:
        if not isinstance(group, str) or not _GROUP.match(group):
            raise ConfigurationError(f"invalid consumer group name {group!r}")
    return groups


def check_ports(**ports: int | None) -> None:
    """Each port from 0 (a free one) to 65535; None means the listener is off."""
    for name, port in ports.items():
        if port is not None and not 0 <= port <= 65535:
            raise ConfigurationError(f"{name} must be between 0 and 65535, got {port}")


def check_message_size(size: int) -> int:
    """The largest message a producer may send: from 1 KiB to 256 MiB."""
    if isinstance(size, bool) or not isinstance(size, int) or not 1024 <= size <= 256 * 1024 * 1024:
        raise ConfigurationError(f"max_message_size must be from 1024 bytes to 256 MiB, got {size!r}")
    return size


def check_key(name: object, key: object) -> None:
    """A key name and key must fit in a connection string; the error names the key, never shows it."""
    if not isinstance(name, str) or not _KEY_NAME.match(name):
        raise ConfigurationError(f"invalid key name {name!r}: use 1-256 letters, digits, '.', '_' or '-'")
    if not isinstance(key, str) or not key or any(c in key for c in "; \t\r\n"):
        raise ConfigurationError(f"the key of {name!r} must be non-empty text without ';' or spaces")
