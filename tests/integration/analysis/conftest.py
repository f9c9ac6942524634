"""Fixtures of the scheduled analysis tests: the runner harness of tests/integration/runner (real broker,
database, MCP server, fake model) and the API app in-process (no relay, no MCP server, no scheduler: the
tests drive the scheduler themselves)."""

from __future__ import annotations

import pytest

from services.api.settings import ApiSettings
from switchboard.settings import DatabaseSettings, KafkaSettings
from tests.integration.api.conftest import client
from tests.integration.memory.conftest import dispatches, run_for
from tests.integration.runner.conftest import module_kafka, rh
from tests.support.stack import StackEndpoints

__all__ = ["api_settings", "client", "dispatches", "module_kafka", "rh", "run_for"]


@pytest.fixture
def api_settings(stack: StackEndpoints, kafka_settings: KafkaSettings, migrated: None) -> ApiSettings:
    database = DatabaseSettings(url=stack.database_url, owner_url=stack.database_owner_url)
    return ApiSettings(
        database=database, kafka=kafka_settings, outbox_relay=False, mcp_enabled=False, analysis_scheduler=False
    )
