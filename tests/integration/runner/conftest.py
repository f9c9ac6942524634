"""One runner harness per test module: its own topics, the real MCP server, a fake model server.

Tests share it and stay independent by creating their own org, conversation and
run ids; each test scripts the fake model for itself (tests run one at a time).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from switchboard.kafka import admin
from switchboard.settings import KafkaSettings
from tests.integration.runner.harness import RunnerHarness, harness
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
