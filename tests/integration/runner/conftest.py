"""One runner harness per test module: its own topics, the real MCP server, a fake model server.

Tests share it and stay independent by creating their own org, conversation and
run ids; each test scripts the fake model for itself (tests run one at a time).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import httpx
import pytest

from services.api.app import create_app
from services.api.settings import ApiSettings
from switchboard.kafka import admin
from switchboard.settings import DatabaseSettings, KafkaSettings
from tests.integration.runner.harness import RunnerHarness, harness
from tests.support.fake_llm import ServedApp
from tests.support.stack import StackEndpoints

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
async def module_kafka(stack: StackEndpoints) -> AsyncIterator[KafkaSettings]:
    settings = KafkaSettings(
        bootstrap_servers=stack.kafka_bootstrap_servers,
        topic_prefix=f"r{uuid.uuid4().hex[:10]}.",
        conversation_partitions=3,
    )
    await admin.ensure_topics(settings)
    yield settings
    await admin.delete_topics(settings)


@pytest.fixture(scope="module")
async def rh(stack: StackEndpoints, migrated: None, module_kafka: KafkaSettings) -> AsyncIterator[RunnerHarness]:
    async with harness(stack.database_url, module_kafka) as h:
        yield h


@pytest.fixture
async def api(stack: StackEndpoints, module_kafka: KafkaSettings) -> AsyncIterator[httpx.AsyncClient]:
    """The API app on this module's topics (no outbox relay: the tests read the outbox themselves)."""
    settings = ApiSettings(
        database=DatabaseSettings(url=stack.database_url, owner_url=stack.database_owner_url),
        kafka=module_kafka,
        outbox_relay=False,
    )
    # Served for real (uvicorn): httpx's in-process transport cannot stream a response.
    served = await ServedApp(create_app(settings)).start()
    try:
        async with httpx.AsyncClient(base_url=served.url, timeout=60) as http:
            yield http
    finally:
        await served.stop()
