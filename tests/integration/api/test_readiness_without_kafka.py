"""A Kafka outage leaves the API ready: its requests only write PostgreSQL, and the outbox keeps
the records until the broker is back (docs/deploy.md). WhatsApp's deliveries keep being stored."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Callable

import httpx
import pytest
from sqlalchemy.orm import Session

from services.api.settings import ApiSettings
from tests.integration.api.conftest import serve
from tests.integration.api.test_webhook import connect_channel, deliver, dispatch_rows, encode, message_event, messages
from tests.support.api import OrgHandle
from tests.support.ports import free_port


@pytest.fixture
async def kafka_down_client(api_settings: ApiSettings) -> AsyncIterator[httpx.AsyncClient]:
    unreachable = api_settings.kafka.model_copy(update={"bootstrap_servers": f"127.0.0.1:{free_port()}"})
    async with serve(api_settings.model_copy(update={"kafka": unreachable})) as http:
        yield http


async def test_the_api_stays_ready_and_stores_webhooks_while_kafka_is_down(
    kafka_down_client: httpx.AsyncClient, org: OrgHandle, db: Callable[[uuid.UUID], Session]
) -> None:
    started = time.monotonic()
    ready = await kafka_down_client.get("/readyz")
    assert time.monotonic() - started < 2.0, "answered within the probe's 2 s timeout"
    assert ready.status_code == 200, ready.text
    assert ready.json()["checks"] == {"database": True, "kafka": False, "webhook_writer": True}

    channel = await connect_channel(kafka_down_client, org)
    event = message_event(channel, body="Vocês abrem amanhã?")
    delivered = await deliver(kafka_down_client, encode(event), channel.secret)
    assert delivered.status_code == 200, delivered.text
    assert delivered.json()["data"]["dispatched"] is True
    session = db(org.org_id)
    (stored,) = messages(session, channel, event["payload"]["id"])
    assert len(dispatch_rows(session, stored.conversation_id)) == 1, "queued in the outbox for when Kafka is back"
