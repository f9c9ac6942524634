"""A broker that requires SASL: every client authenticates with ``KAFKA_SECURITY_PROTOCOL`` and the
``KAFKA_SASL_*`` settings, and a wrong password is a clear refusal that never shows the secret.

The local stack's broker has a SASL/PLAIN listener beside the plaintext one
(scripts/stack/kafka.sh); its address and credentials are in ``var/stack.env``.
"""

from __future__ import annotations

import logging
import uuid

import pytest
from aiokafka.errors import KafkaConnectionError
from pydantic import SecretStr

from switchboard.contracts import RunStarted, Topics
from switchboard.kafka import admin
from switchboard.kafka.consumer import Inbound
from switchboard.kafka.producer import RecordProducer
from switchboard.settings import KafkaSecurityProtocol, KafkaSettings
from tests.support.consumers import consume_run_started_until
from tests.support.stack import StackEndpoints

from .test_consumer_error_policy import _run_started

pytestmark = pytest.mark.integration


def sasl_settings(stack: StackEndpoints, topics: KafkaSettings, *, password: str | None = None) -> KafkaSettings:
    listener = stack.kafka_sasl
    assert listener is not None, "the local broker has no SASL listener: run `make up` (scripts/stack/kafka.sh)"
    return KafkaSettings(
        bootstrap_servers=listener.bootstrap_servers,
        topic_prefix=topics.topic_prefix,
        conversation_partitions=topics.conversation_partitions,
        security_protocol=KafkaSecurityProtocol.SASL_PLAINTEXT,
        sasl_username=listener.username,
        sasl_password=SecretStr(password or listener.password),
    )


async def test_producer_consumer_and_admin_authenticate_on_a_sasl_listener(
    stack: StackEndpoints, topics: KafkaSettings, group_id: str
) -> None:
    settings = sasl_settings(stack, topics)
    await admin.ensure_topics(settings)  # the admin client: topics listed (they exist) through SASL
    record = _run_started()
    async with RecordProducer(settings, service="test-sasl") as producer:
        await producer.send(Topics.RUN_STARTED, record)

    handled: list[uuid.UUID] = []

    async def handle(inbound: Inbound) -> None:
        if isinstance(inbound.value, RunStarted):
            handled.append(inbound.value.event_id)

    await consume_run_started_until(settings, group_id, handle, lambda: bool(handled))
    assert handled == [record.event_id]


async def test_a_wrong_password_is_refused_at_once_and_never_shown(
    stack: StackEndpoints, topics: KafkaSettings, caplog: pytest.LogCaptureFixture
) -> None:
    wrong = f"not-the-password-{uuid.uuid4().hex}"
    settings = sasl_settings(stack, topics, password=wrong)
    caplog.set_level(logging.DEBUG)
    with pytest.raises(KafkaConnectionError) as refused:
        async with RecordProducer(settings, service="test-sasl"):
            pass
    assert wrong not in str(refused.value) and wrong not in repr(refused.value)
    assert "Authentication failed" in caplog.text
    assert wrong not in caplog.text
    assert wrong not in repr(settings) and wrong not in str(settings.model_dump())


def test_sasl_without_credentials_is_a_settings_error_that_hides_what_was_given() -> None:
    with pytest.raises(ValueError, match="KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD") as caught:
        KafkaSettings(security_protocol=KafkaSecurityProtocol.SASL_SSL, sasl_password=SecretStr("s3cr3t-value"))
    assert "s3cr3t-value" not in str(caught.value)
