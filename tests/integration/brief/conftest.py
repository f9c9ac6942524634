"""The API tests' in-process app (``client``), with settings of our own: the Home endpoints
need neither the outbox relay (the shared outbox) nor the MCP tool server."""

from __future__ import annotations

import pytest

from services.api.settings import ApiSettings
from switchboard.settings import DatabaseSettings, KafkaSettings
from tests.integration.api.conftest import client  # noqa: F401 - re-exported fixture
from tests.support.stack import StackEndpoints


@pytest.fixture
def api_settings(stack: StackEndpoints, kafka_settings: KafkaSettings, migrated: None) -> ApiSettings:
    database = DatabaseSettings(url=stack.database_url, owner_url=stack.database_owner_url)
    return ApiSettings(database=database, kafka=kafka_settings, outbox_relay=False, mcp_enabled=False)
