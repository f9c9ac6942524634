"""A Kafka outage leaves the API ready: its requests only write PostgreSQL, and the outbox keeps
the records until the broker is back (docs/deploy.md). WhatsApp's deliveries keep being stored."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable

import httpx
import pytest
from sqlalchemy.orm import Session

from services.api.app import create_app
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


async def test_the_api_stays_ready_while_its_request_pool_is_busy(api_settings: ApiSettings) -> None:
    """Every pooled connection in use (a burst of deliveries): PostgreSQL still answers, so the pod
    is ready. The probe checked a connection out of the request pool and waited up to 30 s for one:
    a busy pod failed its probe, left its Service, and its traffic then filled the others."""
    small = api_settings.model_copy(update={"database": api_settings.database.model_copy(update={"pool_size": 1})})
    app = create_app(small)
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://api.test") as http,
        app.state.database.engine.connect() as first,
        app.state.database.engine.connect() as second,  # the pool (1) and its overflow (1): all taken
    ):
        assert first is not second
        ready = await asyncio.wait_for(http.get("/readyz"), 3.0)
    assert ready.status_code == 200, ready.text
    assert ready.json()["checks"]["database"] is True
