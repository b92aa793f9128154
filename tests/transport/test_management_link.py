"""The kept management link (``rxhubs/transport/_management_link.py``) against the emulator with the unmodified SDK:
one link answers a run of management calls exactly as the SDK's own calls do; anything it cannot answer cleanly
(an error status, a link the service closed, an SDK without the parts it uses) goes to the SDK's call instead."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import pytest

from rxhubs.emulator import BackgroundEmulator
from rxhubs.emulator.pytest_plugin import (
    EmulatorFactory,
    emulator_factory,  # noqa: F401  (fixture)
)
from rxhubs.errors import NotFoundError
from rxhubs.transport import EventHub
from rxhubs.transport._management_link import MAX_IDLE, ManagementLink, partition_properties
from tests.transport.test_azure_hub import KEY


@pytest.fixture
def emulator(emulator_factory: EmulatorFactory) -> BackgroundEmulator:  # noqa: F811
    return emulator_factory(hubs={"telemetry": 3}, shared_access_key=KEY, verify_tokens=True)


@pytest.fixture
async def hubs(emulator: BackgroundEmulator) -> AsyncIterator[tuple[EventHub, EventHub]]:
    conn = emulator.connection_string("telemetry")
    async with EventHub.from_connection_string(conn) as plain, EventHub.from_connection_string(conn) as linked:
        linked._management_link = ManagementLink()
        yield plain, linked


async def test_one_kept_link_answers_a_run_of_calls_as_the_sdk_does(hubs: tuple[EventHub, EventHub]) -> None:
    plain, linked = hubs
    await plain.send([b"a", b"b"], partition_id="1")
    link = linked._management_link
    assert link is not None
    assert await linked.get_partition_ids() == await plain.get_partition_ids() == ["0", "1", "2"]
    for pid in ("0", "1", "2"):
        assert await linked.get_partition_properties(pid) == await plain.get_partition_properties(pid)
    assert (await linked.get_properties()).partition_ids == ("0", "1", "2")
    assert (link.requests, link.opened) == (5, 1)  # every call on the one link


async def test_what_the_link_cannot_answer_goes_to_the_sdk(hubs: tuple[EventHub, EventHub]) -> None:
    plain, linked = hubs
    link = linked._management_link
    assert link is not None
    client = linked._producer_client()
    assert await partition_properties(link, client, "7") is None  # an error status: the SDK raises its own error
    assert link.requests == 0
    with pytest.raises(NotFoundError, match="no partition '7'"):
        await linked.get_partition_properties("7")

    assert (await linked.get_partition_properties("0")).partition_id == "0"
    assert link._mgmt is not None
    await link._mgmt.close_async()  # the link's connection goes away underneath it
    assert (await linked.get_partition_properties("1")) == await plain.get_partition_properties("1")  # by the SDK
    assert link._mgmt is None and link.opened == 1  # the failed link was dropped...
    answered = link.requests
    await linked.get_partition_properties("2")
    assert (link.opened, link.requests) == (2, answered + 1)  # ...and the next call opened a new one

    link._used = time.monotonic() - MAX_IDLE - 1  # idle too long: reopened before use, not used
    await linked.get_partition_properties("2")
    assert link.opened == 3


async def test_an_sdk_without_the_parts_it_uses_turns_it_off_for_good() -> None:
    link = ManagementLink()
    assert await link.request(object(), {"name": "h"}, b"com.microsoft:eventhub") is None
    assert link.off is not None and "client has no" in link.off
    assert await link.request(object(), {"name": "h"}, b"com.microsoft:eventhub") is None
    assert link.opened == 0
