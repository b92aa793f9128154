"""Issue 19, emulator conformance: the unmodified azure-eventhub client (sync and aio) pins each service behaviour.

Every test names the behaviour of the Event Hubs service it pins and where that behaviour is documented:
the service's documentation, the azure-eventhub 5.15.1 SDK's own tests and source (its sdist), or the
Microsoft.Azure.Amqp library the service is built on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import pytest
from azure.eventhub import EventData, EventHubConsumerClient, EventHubProducerClient, TransportType
from azure.eventhub.aio import EventHubConsumerClient as AioConsumer
from azure.eventhub.aio import EventHubProducerClient as AioProducer
from azure.eventhub.amqp import AmqpAnnotatedMessage
from azure.eventhub.exceptions import AuthenticationError, ConnectError

from rxhubs.emulator import BackgroundEmulator, Emulator
from rxhubs.emulator import _frames as fr

from ._raw import RawClient
from ._sdk import AioReceiver, SyncReceiver, asend, close_all, send

pytestmark = pytest.mark.timeout(90)

HUB = "telemetry"


# ------------------------------------------------------------------------------------- names ignore case
def test_consumer_group_and_hub_names_ignore_case_sync() -> None:
    """The service treats consumer group (and event hub) names without regard to case: ``$default`` is the
    ``$Default`` group. The SDK's own tests and samples use ``$default`` (tests/livetest/synctests/
    test_receive.py, test_negative.py; the AMQP addressing guide, azure.github.io/amqpnetlite
    articles/azure_eventhubs.html, spells it ``$default``); the SDK teams lower-case the names for that reason
    (Azure/azure-sdk-for-js#5348 "In Event Hubs, the consumerGroup name is treated as case insensitive",
    Azure/azure-sdk-for-net#7783, and Azure/azure-sdk-for-js#5572, which checked that other casings of event
    hub and consumer group names reach the same resource)."""
    with BackgroundEmulator({HUB: 1}, consumer_groups=("Analytics",)) as emulator:
        conn = emulator.connection_string(HUB)
        send(conn, ["a", "b", "c"])
        receivers = [SyncReceiver(conn, "0", consumer_group=group, starting_position="-1")
                     for group in ("$default", "$DEFAULT", "analytics")]
        with contextlib.ExitStack() as stack:
            for receiver in receivers:
                stack.enter_context(receiver)
            got = [r.wait_events(3) for r in receivers]
            errors = [r.errors for r in receivers]
            close_all(receivers)
        assert [[e.body_as_str() for e in events] for events in got] == [["a", "b", "c"]] * 3
        assert errors == [[], [], []]
        upper = conn.replace(f"EntityPath={HUB}", f"EntityPath={HUB.upper()}")
        with EventHubProducerClient.from_connection_string(upper) as producer:
            assert producer.get_eventhub_properties()["eventhub_name"] == HUB
            producer.send_event(EventData("d"))
            assert producer.get_partition_properties("0")["last_enqueued_sequence_number"] == 3


async def test_consumer_group_names_ignore_case_aio_one_group_for_owner_levels() -> None:
    """One group whatever the case: a receiver with a higher owner level on ``$DEFAULT`` takes the partition
    from one on ``$Default`` (the service detaches the older with ``amqp:link:stolen``, the SDK reports it:
    tests/livetest/synctests/test_receive.py::test_receive_owner_level)."""
    async with Emulator(hubs={HUB: 1}) as emulator:
        conn = emulator.connection_string(HUB)
        await asend(conn, ["x"])
        async with AioReceiver(conn, "0", consumer_group="$Default", starting_position="-1", owner_level=1) as old:
            assert [e.body_as_str() for e in await old.wait_events(1)] == ["x"]
            async with AioReceiver(conn, "0", consumer_group="$DEFAULT", starting_position="-1",
                                   owner_level=2) as new:
                assert [e.body_as_str() for e in await new.wait_events(1)] == ["x"]
                error = await old.wait_error()
        assert error is not None and "amqp:link:stolen" in str(error)


def test_configuration_and_command_line_accept_any_case() -> None:
    emulator = Emulator(hubs={HUB: 1}, consumer_groups=["$default", "Analytics", "ANALYTICS"])
    assert emulator.consumer_groups == ("$Default", "Analytics")


# ------------------------------------------------------------------------------- no filter: the beginning
def test_a_receiver_link_without_a_filter_starts_at_the_beginning_sync() -> None:
    """A receiver link without a position filter gets the partition from its beginning: the SDK's own
    AMQP-level test sends one message, then attaches without a filter and asserts it receives it
    (tests/pyamqp_tests/synctests/test_send_receive_pyamqp.py::test_event_hubs_client_amqp, and
    test_websocket.py). The SDK's clients always send a filter (``@latest`` when no position is given)."""
    from azure.eventhub._pyamqp import ReceiveClient, SendClient, authentication
    from azure.eventhub._pyamqp.message import Message

    with BackgroundEmulator({HUB: 2}) as emulator:
        host = f"127.0.0.1:{emulator.port}"
        uri = f"sb://{host}/{HUB}"
        auth = authentication.SASTokenAuth(uri=uri, audience=uri, username="RootManageSharedAccessKey",
                                           password="SAS_KEY_VALUE")
        with SendClient(host, f"amqps://{host}/{HUB}/Partitions/0", auth=auth, use_tls=False) as sender:
            sender.send_message(Message(value="Single Message"))
        with ReceiveClient(host, f"amqps://{host}/{HUB}/ConsumerGroups/$default/Partitions/0", auth=auth,
                           prefetch=1, use_tls=False) as receiver:
            messages = receiver.receive_message_batch(max_batch_size=1, timeout=20)
        assert [m.value for m in messages] == [b"Single Message"]


async def test_a_receiver_link_without_a_filter_starts_at_the_beginning_aio() -> None:
    """The aio twin (tests/pyamqp_tests/asynctests/test_send_receive_pyamqp_async.py)."""
    from azure.eventhub._pyamqp.aio import ReceiveClientAsync, SendClientAsync
    from azure.eventhub._pyamqp.aio._authentication_async import SASTokenAuthAsync
    from azure.eventhub._pyamqp.message import Message

    async with Emulator(hubs={HUB: 1}) as emulator:
        host = f"127.0.0.1:{emulator.port}"
        uri = f"sb://{host}/{HUB}"
        auth = SASTokenAuthAsync(uri=uri, audience=uri, username="k", password="v")
        async with SendClientAsync(host, f"amqps://{host}/{HUB}/Partitions/0", auth=auth, use_tls=False) as s:
            await s.send_message_async(Message(value="Single Message"))
        async with ReceiveClientAsync(host, f"amqps://{host}/{HUB}/ConsumerGroups/$Default/Partitions/0",
                                      auth=auth, prefetch=1, use_tls=False) as receiver:
            messages = await receiver.receive_message_batch_async(max_batch_size=1, timeout=20)
        assert [m.value for m in messages] == [b"Single Message"]


# ------------------------------------------------------------------------------- refusals come at attach
@pytest.mark.parametrize("keys", [None, {"RootManageSharedAccessKey": "s3cret"}])
def test_a_client_for_an_unknown_hub_is_refused_at_put_token_with_404_sync(keys: dict[str, str] | None) -> None:
    """The service refuses the CBS put-token for an entity that does not exist with status 404, before it looks
    at the token, in its wording ("The messaging entity 'sb://.../fakehub' could not be found. To know more visit
    https://aka.ms/sbResourceMgrExceptions. TrackingId:..."). The SDK raises that as an AuthenticationError (a
    ConnectError), from ``create_batch``, which opens the link: what the SDK's negative tests expect
    (tests/livetest/synctests/test_negative.py::test_client_invalid_credential, "fakehub": AuthenticationError).
    The same with and without keys; the consumer's ``on_error`` gets it too."""
    with BackgroundEmulator({HUB: 1}, keys=keys) as emulator:
        bad = emulator.connection_string(HUB).replace(f"EntityPath={HUB}", "EntityPath=fakehub")
        with (EventHubProducerClient.from_connection_string(bad, retry_total=0) as producer,
              pytest.raises(AuthenticationError) as refused):
            producer.create_batch()
        text = str(refused.value)
        assert isinstance(refused.value, ConnectError) and "Status code: 404" in text
        assert f"The messaging entity 'sb://127.0.0.1:{emulator.port}/fakehub' could not be found." in text
        with SyncReceiver(bad, "0", starting_position="-1") as receiver:
            error = receiver.wait_error()
        assert isinstance(error, AuthenticationError) and "404" in str(error), error
        send(emulator.connection_string(HUB), ["the hub that exists still works"])


async def test_a_client_for_an_unknown_hub_is_refused_at_put_token_with_404_aio() -> None:
    async with Emulator(hubs={HUB: 1}) as emulator:
        bad = emulator.connection_string(HUB).replace(f"EntityPath={HUB}", "EntityPath=fakehub")
        async with AioProducer.from_connection_string(bad, retry_total=0) as producer:
            with pytest.raises(AuthenticationError, match="could not be found"):
                await producer.create_batch(partition_id="0")
            with pytest.raises(AuthenticationError, match="Status code: 404"):
                await producer.get_eventhub_properties()


@pytest.mark.parametrize("refuse_consumers_at_attach", [False, True])
async def test_refused_links_have_no_source_nor_target(refuse_consumers_at_attach: bool) -> None:
    """Producer links are always refused at attach; consumer links too with ``refuse_consumers_at_attach``
    (the service's form, which the SDK's consumer does not report: see docs/emulator.md)."""
    async with Emulator(hubs={HUB: 1}, refuse_consumers_at_attach=refuse_consumers_at_attach) as emulator:
        client = await RawClient.connect(emulator.port)
        client.attach_sender(1, f"amqps://127.0.0.1/{HUB}/Partitions/7")
        attach = await client.expect(fr.ATTACH)
        assert attach.field(5) is None and attach.field(6) is None
        assert (await client.expect(fr.DETACH)).field(2).value[0] == "amqp:not-found"
        client.attach_receiver(2, f"amqps://127.0.0.1/{HUB}/ConsumerGroups/nobody/Partitions/0")
        attach = await client.expect(fr.ATTACH)
        if refuse_consumers_at_attach:
            assert attach.field(5) is None and attach.field(6) is None
        else:
            assert attach.field(5) is not None and attach.field(6) is not None
        assert (await client.expect(fr.DETACH)).field(2).value[0] == "amqp:not-found"
        await client.close()


# ------------------------------------------------------------------------------------------- SAS keys
def test_keys_require_sas_tokens_sync(caplog: pytest.LogCaptureFixture) -> None:
    """With keys the emulator checks shared access signatures as the service does: a token signed with
    another key, or naming an unknown key, is refused by the CBS put-token with status 401 and the service's
    wording ("InvalidSignature: The token has an invalid signature."), which the SDK raises as
    AuthenticationError (_pyamqp/cbs.py -> TokenAuthFailure; its negative tests expect AuthenticationError /
    ConnectError: test_negative.py::test_send_batch_with_invalid_key, test_client_invalid_credential).
    Neither a key nor a signature ever reaches the logs."""
    caplog.set_level(logging.DEBUG)
    with BackgroundEmulator({HUB: 1}, keys={"owner": "0wner-K3y", "listener": "l1sten-K3y"}) as emulator:
        conn = emulator.connection_string(HUB)
        assert "SharedAccessKeyName=owner;SharedAccessKey=0wner-K3y;" in conn
        send(conn, ["ok"])
        with EventHubConsumerClient.from_connection_string(emulator.connection_string(HUB, "listener"),
                                                           consumer_group="$Default") as consumer:
            assert consumer.get_partition_properties("0")["last_enqueued_sequence_number"] == 0
        for wrong, description in [(conn.replace("0wner-K3y", "guess"), "InvalidSignature"),
                                   (conn.replace("SharedAccessKeyName=owner", "SharedAccessKeyName=x"),
                                    "InvalidIssuer")]:
            with (EventHubProducerClient.from_connection_string(wrong, retry_total=0) as producer,
                  pytest.raises(AuthenticationError) as info):
                producer.create_batch()
            assert isinstance(info.value, ConnectError) and "401" in str(info.value)
            assert description in str(info.value)
    logged = "\n".join(r.getMessage() for r in caplog.records if r.name.startswith("rxhubs"))
    assert "refused a token" in logged
    assert "0wner-K3y" not in logged and "l1sten-K3y" not in logged and "sig=" not in logged


async def test_keys_require_sas_tokens_aio() -> None:
    async with Emulator(hubs={HUB: 1}, keys={"RootManageSharedAccessKey": "s3cret"}) as emulator:
        conn = emulator.connection_string(HUB)
        async with AioProducer.from_connection_string(conn) as producer:
            await producer.send_event(EventData("ok"))
        async with AioProducer.from_connection_string(conn.replace("s3cret", "nope"), retry_total=0) as producer:
            with pytest.raises(AuthenticationError, match="InvalidSignature"):
                await producer.send_event(EventData("no"))
        async with AioReceiver(conn.replace("s3cret", "nope"), "0", starting_position="-1") as receiver:
            error = await receiver.wait_error()
        assert isinstance(error, AuthenticationError)


async def test_keys_refuse_expired_tokens_and_tokens_for_another_hub() -> None:
    """A token is good until its expiry (``se``) and only for resources under its ``sr``: the service refuses an
    expired one ("ExpiredToken: ...") and one for another entity, with status 401. The tokens here are made by
    the SDK's own signer (_pyamqp/utils.py ``generate_sas_token``) and sent with ``AzureSasCredential``."""
    from azure.core.credentials import AzureSasCredential
    from azure.eventhub._pyamqp.utils import generate_sas_token

    async with Emulator(hubs={HUB: 1, "other": 1}, keys={"k": "s3cret"}) as emulator:
        host = f"127.0.0.1:{emulator.port}"
        cases = [(f"sb://{host}/{HUB}", int(time.time()) - 60, "ExpiredToken"),
                 (f"sb://{host}/other", int(time.time()) + 3600, "InvalidAudience"),
                 (f"sb://{host}/", int(time.time()) + 3600, None)]  # a namespace token covers every hub
        for audience, expiry, refusal in cases:
            token = generate_sas_token(audience, "k", "s3cret", expiry)
            async with AioProducer(fully_qualified_namespace=host, eventhub_name=HUB, use_tls=False,
                                   credential=AzureSasCredential(token), retry_total=0) as producer:
                if refusal is None:
                    await producer.send_event(EventData("namespace token"))
                else:
                    with pytest.raises(AuthenticationError, match=refusal):
                        await producer.send_event(EventData("refused"))


def _sample_token(uri: str, key_name: str, key: str, expiry: int) -> str:
    """A token made as the SDK's ``authenticate_with_sas_token.py`` sample makes it: the resource URI signed and
    carried as written (not URL-encoded), the signature URL-quoted."""
    import base64
    import hashlib
    import hmac
    from urllib.parse import quote

    signed = hmac.new(key.encode("utf-8"), f"{uri}\n{expiry}".encode(), hashlib.sha256).digest()
    signature = quote(base64.b64encode(signed))
    return f"SharedAccessSignature sr={uri}&sig={signature}&se={expiry}&skn={key_name}"


async def test_keys_check_the_signature_over_the_resource_as_the_token_writes_it() -> None:
    """The service verifies a SAS token's signature over its ``sr`` exactly as the token carries it: the SDK
    URL-encodes the resource (``generate_sas_token``) and signs that; the SDK's ``authenticate_with_sas_token``
    sample signs and carries the plain URI. Both are accepted; a wrong key is still InvalidSignature. The sample's
    token goes in as ``AzureSasCredential`` and as a connection string's ``SharedAccessSignature``."""
    from azure.core.credentials import AzureSasCredential
    from azure.eventhub._pyamqp.utils import generate_sas_token

    async with Emulator(hubs={HUB: 1}, keys={"k": "s3cret"}) as emulator:
        host = f"127.0.0.1:{emulator.port}"
        expiry = int(time.time()) + 3600
        tokens = [_sample_token(f"sb://{host}/{HUB}", "k", "s3cret", expiry),
                  generate_sas_token(f"sb://{host}/{HUB}", "k", "s3cret", expiry)]
        assert "sr=sb://" in tokens[0] and "sr=sb%3A%2F%2F" in tokens[1]
        for token in tokens:
            async with AioProducer(fully_qualified_namespace=host, eventhub_name=HUB, use_tls=False,
                                   credential=AzureSasCredential(token), retry_total=0) as producer:
                await producer.send_event(EventData("signed as written"))
        conn = f"Endpoint=sb://{host};SharedAccessSignature={tokens[0]};EntityPath={HUB};UseDevelopmentEmulator=true"
        async with AioProducer.from_connection_string(conn, retry_total=0) as producer:
            assert (await producer.get_partition_properties("0"))["last_enqueued_sequence_number"] == 1
        forged = _sample_token(f"sb://{host}/{HUB}", "k", "guess", expiry)
        async with AioProducer(fully_qualified_namespace=host, eventhub_name=HUB, use_tls=False,
                               credential=AzureSasCredential(forged), retry_total=0) as producer:
            with pytest.raises(AuthenticationError, match="InvalidSignature"):
                await producer.send_event(EventData("refused"))


async def test_keys_refuse_links_and_reads_without_a_token() -> None:
    """Without a valid token a connection may neither attach to a hub nor read its properties: the service
    answers ``amqp:unauthorized-access`` ("Unauthorized access. 'Send' claim(s) are required ...")."""
    async with Emulator(hubs={HUB: 1}, keys={"k": "v"}) as emulator:
        client = await RawClient.connect(emulator.port)  # SASL ANONYMOUS, no put-token
        client.attach_sender(1, f"amqps://127.0.0.1/{HUB}")
        attach = await client.expect(fr.ATTACH)
        assert attach.field(5) is None and attach.field(6) is None
        detach = await client.expect(fr.DETACH)
        assert detach.field(2).value[0] == "amqp:unauthorized-access"
        assert "'Send' claim(s) are required" in detach.field(2).value[1]
        client.attach_receiver(2, f"amqps://127.0.0.1/{HUB}/ConsumerGroups/$Default/Partitions/0")
        await client.expect(fr.ATTACH)
        assert (await client.expect(fr.DETACH)).field(2).value[0] == "amqp:unauthorized-access"
        await client.close()


# ----------------------------------------------------------------------------------- delivery annotations
def _annotated(i: int) -> AmqpAnnotatedMessage:
    return AmqpAnnotatedMessage(data_body=[b"aa", b"bb", str(i).encode()], header={"priority": 10},
                                delivery_annotations={"delann_key": "delann_value"},
                                annotations={"ann_key": "ann_value"}, application_properties={"body_type": "data"})


def test_delivery_annotations_arrive_intact_sync() -> None:
    """The service hands consumers the delivery annotations the sender set, beside the message annotations
    and application properties (tests/livetest/synctests/test_send.py::
    test_send_and_receive_amqp_annotated_message asserts ``delivery_annotations[b"delann_key"]``)."""
    with BackgroundEmulator({HUB: 1}) as emulator:
        conn = emulator.connection_string(HUB)
        with EventHubProducerClient.from_connection_string(conn) as producer:
            batch = producer.create_batch()
            batch.add(_annotated(0))
            producer.send_batch(batch)
            producer.send_event(_annotated(1))
        with SyncReceiver(conn, "0", starting_position="-1") as receiver:
            events = receiver.wait_events(2)  # returns what arrived when it times out: check both did
    assert [event.sequence_number for event in events] == [0, 1]
    for i, event in enumerate(events):
        raw = event.raw_amqp_message
        assert raw.delivery_annotations == {b"delann_key": b"delann_value"}
        assert raw.annotations[b"ann_key"] == b"ann_value" and event.sequence_number == i
        assert raw.application_properties == {b"body_type": b"data"}
        assert event.body_as_str() == f"aabb{i}"


async def test_delivery_annotations_merge_with_runtime_metrics_aio() -> None:
    """With last-enqueued-event tracking the service adds its runtime metrics to the delivery annotations;
    the sender's own keys stay beside them (one delivery annotations section per message)."""
    async with Emulator(hubs={HUB: 1}) as emulator:
        conn = emulator.connection_string(HUB)
        async with AioProducer.from_connection_string(conn) as producer:
            await producer.send_event(_annotated(7))
        client = AioConsumer.from_connection_string(conn, consumer_group="$default")
        seen: list[tuple[EventData, object]] = []
        done = asyncio.Event()

        async def on_event(ctx: object, event: EventData | None) -> None:
            if event is not None:
                seen.append((event, ctx.last_enqueued_event_properties))  # type: ignore[attr-defined]
                done.set()

        task = asyncio.create_task(client.receive(on_event=on_event, partition_id="0", starting_position="-1",
                                                  track_last_enqueued_event_properties=True))
        try:
            await asyncio.wait_for(done.wait(), 30)
        finally:
            await client.close()
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    event, last = seen[0]
    annotations = event.raw_amqp_message.delivery_annotations
    assert annotations[b"delann_key"] == b"delann_value"
    assert annotations[b"last_enqueued_sequence_number"] == 0
    assert isinstance(last, dict) and last["sequence_number"] == 0


# ------------------------------------------------------------------------------------ AMQP over WebSockets
def test_amqp_over_websockets_sync() -> None:
    """``TransportType.AmqpOverWebsocket`` reaches the service at ``wss://HOST:443/$servicebus/websocket`` with
    the ``AMQPWSB10`` subprotocol (_pyamqp/_transport.py WebSocketTransport, constants.py); pointed at the
    emulator with ``custom_endpoint_address`` (_configuration.py). The SDK's own tests receive over
    WebSockets the same way (tests/livetest/synctests/test_receive.py::test_receive_over_websocket_sync)."""
    with BackgroundEmulator({HUB: 2}, websocket_port=0) as emulator:
        conn = emulator.connection_string(HUB)
        assert emulator.websocket_endpoint == f"sb://127.0.0.1:{emulator.websocket_port}"
        options = {"transport_type": TransportType.AmqpOverWebsocket,
                   "custom_endpoint_address": emulator.websocket_endpoint}
        with EventHubProducerClient.from_connection_string(conn, **options) as producer:
            batch = producer.create_batch(partition_id="1")
            for body in (b"ws-1", b"w" * 700_000, b"ws-3"):
                batch.add(EventData(body))
            producer.send_batch(batch)
            assert producer.get_partition_properties("1")["last_enqueued_sequence_number"] == 2
        with SyncReceiver(conn, "1", starting_position="-1", client_options=options) as receiver:
            events = receiver.wait_events(3)
    assert [len(e.body_as_str()) for e in events] == [4, 700_000, 4]


# The SDK's aio WebSocket transport passes ssl=None to aiohttp's ws_connect, deprecated since aiohttp 3.14.
@pytest.mark.filterwarnings("ignore:ssl=None is deprecated:DeprecationWarning")
async def test_amqp_over_websockets_aio() -> None:
    async with Emulator(hubs={HUB: 1}, websocket_port=0, keys={"k": "s3cret"}) as emulator:
        conn = emulator.connection_string(HUB)
        options = {"transport_type": TransportType.AmqpOverWebsocket,
                   "custom_endpoint_address": emulator.websocket_endpoint}
        async with AioProducer.from_connection_string(conn, **options) as producer:
            await producer.send_event(EventData("over websockets"))
        async with AioReceiver(conn, "0", starting_position="-1", client_options=options) as receiver:
            (event,) = await receiver.wait_events(1)
        assert event.body_as_str() == "over websockets"
        async with AioProducer.from_connection_string(conn.replace("s3cret", "x"), retry_total=0,
                                                      **options) as producer:
            with pytest.raises(AuthenticationError):
                await producer.send_event(EventData("refused"))


async def test_websockets_are_off_unless_asked() -> None:
    async with Emulator(hubs={HUB: 1}) as emulator:
        assert emulator.websocket_port is None and emulator.websocket_endpoint is None
