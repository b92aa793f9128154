"""A local Event Hubs emulator: an AMQP 1.0 server for the unmodified azure-eventhub client.

:class:`Emulator` is an async context manager; :class:`BackgroundEmulator` runs one on a private event loop
thread for synchronous code and test fixtures (see :mod:`rxhubs.emulator.pytest_plugin`).

Example:
    >>> import asyncio
    >>> from rxhubs.emulator import Emulator
    >>> async def main() -> bool:
    ...     async with Emulator(hubs={"telemetry": 4}) as emulator:
    ...         return emulator.port > 0
    >>> asyncio.run(main())
    True
"""

from rxhubs.emulator._background import BackgroundEmulator
from rxhubs.emulator._emulator import Emulator
from rxhubs.emulator._fault_state import LinkRecord
from rxhubs.emulator._faults import EmulatorFaults
from rxhubs.emulator._identity import LocalIdentity, LocalIdentityCredential, credential_from_file
from rxhubs.emulator._identity_endpoint import IdentityEndpoint

__all__ = [
    "BackgroundEmulator",
    "Emulator",
    "EmulatorFaults",
    "IdentityEndpoint",
    "LinkRecord",
    "LocalIdentity",
    "LocalIdentityCredential",
    "credential_from_file",
]
