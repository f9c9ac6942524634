"""Session-wide fixtures: a real Kafka broker and PostgreSQL (see tests/support/stack.py)."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest

from switchboard.settings import KafkaSettings
from tests.support.stack import StackEndpoints, acquire_stack

# No test may reach a real LLM provider: unless a test points a provider at its own fake
# server, every provider URL leads to a closed local port (the official SDKs and the
# credential validation read these settings; subprocesses inherit them).
for _provider in ("ANTHROPIC", "OPENAI", "GOOGLE"):
    os.environ.setdefault(f"PROVIDERS_{_provider}_BASE_URL", "http://127.0.0.1:9")


@pytest.fixture(scope="session")
def stack() -> Iterator[StackEndpoints]:
    endpoints, containers = acquire_stack()
    yield endpoints
    for container in containers:
        container.stop()  # type: ignore[attr-defined]


@pytest.fixture(scope="session")
def migrated(stack: StackEndpoints) -> None:
    """The stack's database at the head revision (idempotent; ``make up`` normally did it)."""
    from switchboard.db.migrate import upgrade

    upgrade(stack.database_owner_url)


@pytest.fixture
def kafka_settings(stack: StackEndpoints) -> KafkaSettings:
    """Settings whose topic names are unique to this test (a uuid prefix)."""
    return KafkaSettings(
        bootstrap_servers=stack.kafka_bootstrap_servers,
        topic_prefix=f"t{uuid.uuid4().hex[:10]}.",
        conversation_partitions=3,
    )


@pytest.fixture
async def topics(kafka_settings: KafkaSettings) -> AsyncIterator[KafkaSettings]:
    """Create every registered topic under this test's prefix; delete them afterwards."""
    from switchboard.kafka import admin

    await admin.ensure_topics(kafka_settings)
    yield kafka_settings
    await admin.delete_topics(kafka_settings)


@pytest.fixture
def group_id() -> str:
    return f"test-group-{uuid.uuid4().hex[:10]}"
