"""Entra ID for the Spark source and sink: options checked at planning, and a real read and write.

The end-to-end test runs a batch write and a batch read through a real local SparkSession against an
emulator that accepts only a local identity's bearer tokens: executors build the credential themselves
from ``credentialFactory`` (credentials do not pickle); a SAS connection string is refused by that emulator.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rxhubs.emulator import BackgroundEmulator, LocalIdentity, LocalIdentityCredential
from rxhubs.errors import ConfigurationError
from rxhubs.spark._connection import Connection
from rxhubs.spark._datasource import EventHubsDataSource

pytestmark = pytest.mark.spark

NS = {"fullyqualifiednamespace": "ns.servicebus.windows.net", "eventhubname": "h"}


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"credential": "password"}, "unknown credential 'password': use default, managedIdentity"),
        ({}, "needs credential"),
        ({"credential": "servicePrincipal", "tenantId": "t"}, "needs tenantId and clientId"),
        ({"credential": "servicePrincipal", "tenantId": "t", "clientId": "c", "clientSecret": "s3cret"},
         "would put a secret where Spark logs it"),
        ({"credential": "default", "credentialFactory": "rxhubs.emulator:credential_from_file"}, "not both"),
        ({"credentialFactory": "rxhubs.emulator"}, "must be module:function"),
        ({"credentialFactory": "rxhubs.emulator:no_such_function"}, "cannot be loaded"),
        ({"credential": "default", "connectionString": "Endpoint=sb://x/;SharedAccessKeyName=k;SharedAccessKey=s"},
         "not both"),
        ({"eventhubs.useAadAuth": "true", "eventhubs.aadAuthCallback": "com.example.Callback"},
         "credentialFactory=module:function"),
    ],
)
def test_bad_credential_options_fail_at_planning_with_one_line(options: dict[str, str], fragment: str) -> None:
    raw = {"fullyQualifiedNamespace": "ns.servicebus.windows.net", "eventHubName": "h", **options}
    with pytest.raises(ConfigurationError, match=fragment) as info:
        EventHubsDataSource(raw).reader(None)
    assert "\n" not in str(info.value) and "s3cret" not in str(info.value)


def test_a_service_principal_secret_comes_from_an_env_var_or_a_file_never_an_option(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sp = {**NS, "credential": "servicePrincipal", "tenantid": "t", "clientid": "c"}
    monkeypatch.setenv("MY_SP_SECRET", "from-env ")
    assert Connection({**sp, "clientsecretenv": "MY_SP_SECRET"})._secret() == "from-env"
    (tmp_path / "secret").write_text("from-file\n")
    assert Connection({**sp, "clientsecretfile": str(tmp_path / "secret")})._secret() == "from-file"
    monkeypatch.delenv("AZURE_CLIENT_SECRET", raising=False)
    with pytest.raises(ConfigurationError, match=r"AZURE_CLIENT_SECRET .* is not set on this machine"):
        Connection(sp)._secret()
    with pytest.raises(ConfigurationError, match="cannot read clientSecretFile"):
        Connection({**sp, "clientsecretfile": str(tmp_path / "missing")})._secret()
    connection = Connection({**sp, "clientsecretenv": "MY_SP_SECRET"})
    assert "from-env" not in repr(connection) and connection.credential_kind == "servicePrincipal"
    try:
        import azure.identity  # noqa: F401
    except ImportError:  # without the identity extra: one clear line, not an ImportError in every task
        with pytest.raises(ConfigurationError, match=r"needs azure-identity: pip install 'rxhubs\[identity\]'"):
            connection.credential()


@pytest.mark.parametrize(
    ("options", "kind"),
    [
        ({"credential": "default"}, "DefaultAzureCredential"),
        ({"credential": "managedIdentity"}, "ManagedIdentityCredential"),
        ({"credential": "managedIdentity", "managedidentityclientid": "11111111-2222-3333-4444-555555555555"},
         "ManagedIdentityCredential"),
        ({"credential": "servicePrincipal", "tenantid": "tenant", "clientid": "client",
          "clientsecretenv": "MY_SP_SECRET"}, "ClientSecretCredential"),
    ],
)
def test_the_built_in_credential_kinds_are_azure_identitys_async_credentials(
    options: dict[str, str], kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each built-in kind is constructed as the executors construct it (azure-identity's aio credentials, the
    arguments by name): a renamed or misplaced argument fails here, not in a cluster's first task."""
    import asyncio
    import inspect

    from azure.identity import aio as identity

    monkeypatch.setenv("MY_SP_SECRET", "s3cret")
    connection = Connection({**NS, **{k.lower(): v for k, v in options.items()}})
    made = connection.credential()
    assert type(made) is getattr(identity, kind)
    assert inspect.iscoroutinefunction(made.get_token)  # an async credential: what EventHub's aio client awaits
    assert "s3cret" not in repr(connection)
    asyncio.run(made.close())


def test_a_factory_gets_its_own_options_and_builds_on_each_call(tmp_path: Path) -> None:
    path = LocalIdentity("app").save(tmp_path / "id.json")
    connection = Connection({**NS, "credentialfactory": "rxhubs.emulator:credential_from_file",
                             "credentialfactory.file": str(path)})
    first, second = connection.credential(), connection.credential()
    assert isinstance(first, LocalIdentityCredential) and first is not second
    assert connection.factory_params == {"file": str(path)}


@pytest.mark.timeout(300)
def test_spark_writes_and_reads_with_entra_id_tokens_built_on_the_executors(
    spark: Any, emulator_factory: Any, tmp_path: Path
) -> None:
    identity = LocalIdentity("spark-app")
    emulator: BackgroundEmulator = emulator_factory(hubs={"secure": 2}, identities=[identity])
    options = {
        "fullyQualifiedNamespace": f"127.0.0.1:{emulator.port}",
        "eventHubName": "secure",
        "useDevelopmentEmulator": "true",
        "credentialFactory": "rxhubs.emulator:credential_from_file",
        "credentialFactory.file": str(identity.save(tmp_path / "identity.json")),
    }
    df = spark.createDataFrame([(f"e{i}", str(i % 2)) for i in range(50)], "body string, partitionId string")
    df.write.format("eventhubs").options(**options).mode("append").save()
    back = spark.read.format("eventhubs").options(**options).load()
    got = sorted((r.partition, r.body.decode()) for r in back.select("partition", "body").collect())
    assert got == sorted((str(i % 2), f"e{i}") for i in range(50))

    sas = spark.read.format("eventhubs").option("connectionString", emulator.connection_string("secure")).load()
    with pytest.raises(Exception, match=r"(?i)unauthori|authentication|401"):
        sas.count()  # the emulator takes only the identity's tokens
