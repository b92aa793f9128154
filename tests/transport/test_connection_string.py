"""Connection strings: parsing, validation, and secrets that never show."""

from __future__ import annotations

import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rxhubs.errors import ConfigurationError
from rxhubs.transport._connection_string import (
    ConnectionString,
    check_eventhub_name,
    parse_connection_string,
    redact,
)

KEY = "c2VjcmV0LWtleS1kby1ub3Qtc2hvdw+/=="
SAS = (
    "SharedAccessSignature sr=sb%3a%2f%2fns.servicebus.windows.net%2fhub"
    "&sig=U0lHTkFUVVJFLXNlY3JldA%3d&se=1999999999&skn=root"
)
AZURE = f"Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey={KEY}"


def test_parses_a_portal_connection_string() -> None:
    cs = parse_connection_string(AZURE + ";EntityPath=telemetry")
    assert cs.fully_qualified_namespace == "ns.servicebus.windows.net"
    assert cs.shared_access_key_name == "RootManageSharedAccessKey"
    assert cs.shared_access_key == KEY
    assert cs.shared_access_signature is None
    assert cs.eventhub_name == "telemetry"
    assert cs.use_development_emulator is False
    assert cs.endpoint == "sb://ns.servicebus.windows.net/"


def test_emulator_string_keeps_the_port_and_normalises_the_flag() -> None:
    cs = parse_connection_string(
        "Endpoint=sb://127.0.0.1:5673;SharedAccessKeyName=k;SharedAccessKey=v;EntityPath=h;UseDevelopmentEmulator=True"
    )
    assert cs.fully_qualified_namespace == "127.0.0.1:5673"
    assert cs.use_development_emulator is True
    # The SDK only honours the exact lowercase "true": the canonical form must carry it.
    assert cs.to_connection_string().endswith(";EntityPath=h;UseDevelopmentEmulator=true")


def test_setting_names_are_case_insensitive_and_values_keep_equals_signs() -> None:
    cs = parse_connection_string(
        f"endpoint=sb://ns.servicebus.windows.net;SHAREDACCESSKEYNAME=k;sharedaccesskey={KEY};"
    )
    assert cs.shared_access_key == KEY
    assert cs.shared_access_key_name == "k"


def test_sas_connection_string() -> None:
    cs = parse_connection_string(f"Endpoint=sb://ns.servicebus.windows.net/;SharedAccessSignature={SAS}")
    assert cs.shared_access_signature == SAS
    assert cs.secrets == (SAS,)
    assert cs.to_connection_string() == f"Endpoint=sb://ns.servicebus.windows.net/;SharedAccessSignature={SAS}"


def test_round_trip_through_the_canonical_form() -> None:
    cs = parse_connection_string(AZURE + ";EntityPath=telemetry")
    assert parse_connection_string(cs.to_connection_string()) == cs


def test_eventhub_name_argument_fills_in_or_must_agree() -> None:
    assert parse_connection_string(AZURE, eventhub_name="a").eventhub_name == "a"
    assert parse_connection_string(AZURE + ";EntityPath=a", eventhub_name="a").eventhub_name == "a"
    with pytest.raises(ConfigurationError, match="does not match"):
        parse_connection_string(AZURE + ";EntityPath=a", eventhub_name="b")
    assert parse_connection_string(AZURE).with_eventhub_name("z").eventhub_name == "z"


def test_repr_and_str_hide_key_and_signature() -> None:
    for text in (AZURE, f"Endpoint=sb://ns.servicebus.windows.net/;SharedAccessSignature={SAS}"):
        cs = parse_connection_string(text)
        for shown in (repr(cs), str(cs), f"{cs}", repr([cs])):
            assert KEY not in shown and SAS not in shown and "U0lHTkFUVVJF" not in shown
            assert "***" in shown


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no Endpoint"),
        ("   ;  ;", "no Endpoint"),
        (f"SharedAccessKeyName=k;SharedAccessKey={KEY}", "no Endpoint"),
        (f"Endpoint=ns.servicebus.windows.net;SharedAccessKeyName=k;SharedAccessKey={KEY}", "Endpoint must"),
        (f"Endpoint=http://ns.servicebus.windows.net;SharedAccessKeyName=k;SharedAccessKey={KEY}", "Endpoint must"),
        (f"Endpoint=sb://;SharedAccessKeyName=k;SharedAccessKey={KEY}", "Endpoint must"),
        (f"Endpoint=sb://ns:99999;SharedAccessKeyName=k;SharedAccessKey={KEY}", "Endpoint must"),
        (f"Endpoint=sb://ns/path;SharedAccessKeyName=k;SharedAccessKey={KEY}", "Endpoint must"),
        ("Endpoint=sb://ns.servicebus.windows.net/", "no credential"),
        (f"Endpoint=sb://ns/;SharedAccessKey={KEY}", "together"),
        ("Endpoint=sb://ns/;SharedAccessKeyName=k", "together"),
        ("Endpoint=sb://ns/;SharedAccessKeyName=k;SharedAccessKey=;EntityPath=h", "SharedAccessKey is empty"),
        (f"{AZURE};SharedAccessSignature={SAS}", "both"),
        (f"{AZURE};SharedAccessKey={KEY}", "given twice"),
        (f"{AZURE};SharedAcessKey={KEY}", "unknown setting 'SharedAcessKey'"),
        (f"{AZURE};{KEY}", "an unknown setting"),
        (f"{AZURE};justtext", "Key=Value"),
        (f"{AZURE};EntityPath=bad name", "event hub name"),
        (f"{AZURE};UseDevelopmentEmulator=yes", "true or false"),
        (f"Endpoint=sb://ns/;SharedAccessKeyName=bad name;SharedAccessKey={KEY}", "SharedAccessKeyName must"),
    ],
)
def test_malformed_strings_raise_one_line_configuration_errors_without_secrets(text: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message) as info:
        parse_connection_string(text)
    shown = str(info.value)
    assert "\n" not in shown
    assert KEY not in shown and SAS not in shown
    assert info.value.retriable is False


def test_non_string_input_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError):
        parse_connection_string(None)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError):
        check_eventhub_name(3)


def test_redact_removes_keys_and_signatures_from_any_text() -> None:
    text = (
        f"failed: {AZURE};EntityPath=h and then 'SharedAccessSignature={SAS}' "
        f"token {SAS} AccountKey=YWNjb3VudA== shared_access_key='{KEY}'"
    )
    out = redact(text)
    assert KEY not in out and "U0lHTkFUVVJF" not in out and "YWNjb3VudA" not in out
    assert "SharedAccessKeyName=RootManageSharedAccessKey" in out  # the policy name is not a secret
    assert "Endpoint=sb://ns.servicebus.windows.net/" in out
    assert "se=1999999999" in out


def test_redact_removes_exact_secrets_given() -> None:
    assert redact("the service said: bad token abc123xyz", "abc123xyz", None, "") == "the service said: bad token ***"


def test_redact_leaves_ordinary_text_alone() -> None:
    text = "receive from telemetry/$Default/0: link detached (signal lost, key ring empty)"
    assert redact(text) == text


# -- properties ------------------------------------------------------------------------------------------------

secrets_st = st.text(alphabet=string.ascii_letters + string.digits + "+/", min_size=12, max_size=60).map(
    lambda s: "K3y" + s + "="
)
settings_names = [
    "Endpoint",
    "SharedAccessKeyName",
    "SharedAccessKey",
    "SharedAccessSignature",
    "EntityPath",
    "UseDevelopmentEmulator",
    "Bogus",
    "endpoint",
    "",
]
segment_st = st.one_of(
    st.tuples(st.sampled_from(settings_names), st.sampled_from(["=", "", "= "]), st.text(max_size=30)).map("".join),
    st.text(max_size=40),
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(segment_st, max_size=8),
    secrets_st,
    st.sampled_from(["SharedAccessKey", "SharedAccessSignature"]),
    st.integers(min_value=0, max_value=8),
)
def test_random_strings_raise_only_configuration_error_and_never_echo_the_secret(
    segments: list[str], secret: str, secret_name: str, where: int
) -> None:
    segments.insert(min(where, len(segments)), f"{secret_name}={secret}")
    text = ";".join(segments)
    try:
        cs = parse_connection_string(text)
    except ConfigurationError as exc:
        assert secret not in str(exc)
        assert secret not in repr(exc)
        assert "\n" not in str(exc)
    else:
        assert isinstance(cs, ConnectionString)
        assert secret not in repr(cs) and secret not in str(cs)
        assert secret in cs.secrets


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_arbitrary_text_never_raises_anything_but_configuration_error(text: str) -> None:
    try:
        parse_connection_string(text)
    except ConfigurationError:
        pass


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40), secrets_st, st.text(max_size=40))
def test_redact_hides_a_key_wherever_it_sits_in_a_connection_string(before: str, secret: str, after: str) -> None:
    text = f"{before} Endpoint=sb://ns/;SharedAccessKeyName=k;SharedAccessKey={secret};EntityPath=h {after}"
    assert secret not in redact(text)
