"""Entra ID bearer tokens: the unmodified azure-eventhub client authenticates with a local identity's tokens.

An emulator given :class:`LocalIdentity` objects requires authentication and accepts exactly their unexpired
tokens (CBS put-token type ``jwt``), as the service accepts Entra ID tokens.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

import rxhubs
from rxhubs.emulator import Emulator, LocalIdentity
from rxhubs.emulator._identity import check_jwt, credential_from_file
from rxhubs.errors import AuthenticationError, ConfigurationError


async def _round_trip(emulator: Emulator, credential: Any) -> list[bytes]:
    async with rxhubs.EventHub(f"127.0.0.1:{emulator.port}", "t", credential, use_development_emulator=True,
                               retry_total=0) as hub:
        await hub.send([b"one", b"two"], partition_id="0")
        async with hub.receiver("0", start=rxhubs.Position.earliest()) as receiver:
            return [e.body for e in await receiver.receive_batch(2, max_wait=5.0)]


async def test_the_sdk_authenticates_with_a_local_identitys_tokens_and_others_are_refused(tmp_path: Path) -> None:
    trusted, stranger = LocalIdentity("app"), LocalIdentity("app")  # same name, another key
    async with Emulator(hubs={"t": 1}, identities=[trusted]) as emulator:
        credential = credential_from_file({"file": str(trusted.save(tmp_path / "id.json"))})
        assert await _round_trip(emulator, credential) == [b"one", b"two"]
        assert credential.issued >= 1  # the SDK asked it for tokens
        with pytest.raises(AuthenticationError):
            await _round_trip(emulator, stranger.credential())
        with pytest.raises(AuthenticationError):  # a SAS connection string no longer passes
            async with rxhubs.EventHub.from_connection_string(emulator.connection_string("t"), retry_total=0) as hub:
                await hub.get_partition_ids()
    assert (tmp_path / "id.json").stat().st_mode & 0o077 == 0  # the key file is its owner's only


def test_tokens_are_checked_for_signature_audience_expiry_and_form() -> None:
    identity = LocalIdentity("app", key="k" * 32, lifetime=60)
    now = time.time()
    assert check_jwt([identity], identity.token(now=now))[0] == 202
    assert check_jwt([identity], identity.token(now=now - 120))[1].startswith("ExpiredToken")
    assert check_jwt([identity], identity.token("https://storage.azure.com/", now=now))[1].startswith(
        "InvalidAudience")
    assert check_jwt([LocalIdentity("other")], identity.token(now=now))[1].startswith("InvalidIssuer")
    assert check_jwt([identity], "not.a.token")[1].startswith("InvalidToken")
    assert "k" * 32 not in repr(identity) and "k" * 32 not in repr(identity.credential())
    with pytest.raises(ConfigurationError, match=r"credentialFactory\.file"):
        credential_from_file({})
    with pytest.raises(ConfigurationError, match="identities must be"):
        Emulator(hubs={"t": 1}, identities=["app"])  # type: ignore[list-item]


def test_a_token_is_valid_json_web_token_shape() -> None:
    token = LocalIdentity("app").token()
    assert token.count(".") == 2 and asyncio.iscoroutinefunction(LocalIdentity("a").credential().get_token)
