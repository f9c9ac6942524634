"""Every Kafka client is built from ``KafkaSettings.client_options`` (and faust from its credentials):
a client written with a bare ``bootstrap_servers`` would connect in plaintext to a secured cluster.

The check reads the source, so a new client anywhere in the services or the shared package that
forgets the settings fails here, before it reaches a cluster that requires TLS or SASL.
"""

from __future__ import annotations

import ast
import ssl
from pathlib import Path

import pytest
from pydantic import SecretStr

from services.dispatcher.app import broker_credentials
from switchboard.settings import KafkaSaslMechanism, KafkaSecurityProtocol, KafkaSettings

REPO_ROOT = Path(__file__).resolve().parents[3]
CLIENTS = {"AIOKafkaProducer", "AIOKafkaConsumer", "AIOKafkaAdminClient"}


def _client_calls() -> list[tuple[Path, ast.Call]]:
    found = []
    for package in ("services", "switchboard"):
        for path in sorted((REPO_ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in CLIENTS:
                    found.append((path, node))
    return found


def _uses_client_options(call: ast.Call) -> bool:
    return any(
        keyword.arg is None
        and isinstance(keyword.value, ast.Call)
        and isinstance(keyword.value.func, ast.Attribute)
        and keyword.value.func.attr == "client_options"
        for keyword in call.keywords
    )


def test_every_kafka_client_is_built_from_the_settings_client_options() -> None:
    calls = _client_calls()
    assert len(calls) >= 8, "the scan found the clients (producer, consumers, admin)"
    bare = [f"{path.relative_to(REPO_ROOT)}:{call.lineno}" for path, call in calls if not _uses_client_options(call)]
    assert bare == []


def test_client_options_carry_sasl_and_tls_only_when_asked() -> None:
    assert KafkaSettings(bootstrap_servers="b:9092").client_options() == {
        "bootstrap_servers": "b:9092",
        "security_protocol": "PLAINTEXT",
    }
    secured = KafkaSettings(
        bootstrap_servers="b:9096",
        security_protocol=KafkaSecurityProtocol.SASL_SSL,
        sasl_mechanism=KafkaSaslMechanism.SCRAM_SHA_512,
        sasl_username="svc",
        sasl_password=SecretStr("pw"),
    )
    options = secured.client_options()
    assert (options["security_protocol"], options["sasl_mechanism"]) == ("SASL_SSL", "SCRAM-SHA-512")
    assert (options["sasl_plain_username"], options["sasl_plain_password"]) == ("svc", "pw")
    assert isinstance(options["ssl_context"], ssl.SSLContext)
    assert "pw" not in repr(secured)


def test_faust_gets_the_same_security() -> None:
    assert broker_credentials(KafkaSettings()) is None
    sasl = broker_credentials(
        KafkaSettings(
            security_protocol=KafkaSecurityProtocol.SASL_PLAINTEXT, sasl_username="svc", sasl_password=SecretStr("pw")
        )
    )
    assert sasl is not None and sasl.protocol.value == "SASL_PLAINTEXT"
    tls = broker_credentials(KafkaSettings(security_protocol=KafkaSecurityProtocol.SSL))
    assert tls is not None and tls.protocol.value == "SSL"


def test_a_client_certificate_needs_its_key() -> None:
    with pytest.raises(ValueError, match="go together"):
        KafkaSettings(security_protocol=KafkaSecurityProtocol.SSL, ssl_certfile=Path("/tmp/client.pem"))


def test_an_empty_value_is_unset_so_sasl_without_a_password_is_refused_at_startup() -> None:
    """config.env and compose list every setting, empty when unused: empty is "not set"."""
    plain = KafkaSettings(ssl_cafile="", sasl_username="", sasl_password="")  # type: ignore[arg-type]
    assert (plain.ssl_cafile, plain.sasl_username, plain.sasl_password) == (None, None, None)
    with pytest.raises(ValueError, match="KAFKA_SASL_PASSWORD"):
        KafkaSettings(security_protocol=KafkaSecurityProtocol.SASL_SSL, sasl_username="svc", sasl_password="")  # type: ignore[arg-type]
