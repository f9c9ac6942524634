"""The readiness probe's broker check lets go of its client when the broker is too slow to answer."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka.admin import AIOKafkaAdminClient

from switchboard.kafka.admin import broker_answers
from switchboard.settings import KafkaSettings

pytestmark = pytest.mark.integration


async def test_a_probe_cut_short_by_its_timeout_closes_its_client(
    kafka_settings: KafkaSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Connected to the real broker, then its metadata answer does not come in time (a broker
    under load): the probe says "not ready" and closes the client it opened. Cancelled by the
    timeout, the client stayed open with its connections and metadata task — one more per probe,
    every few seconds, for as long as the broker was slow."""
    opened: list[AIOKafkaAdminClient] = []

    async def slow_list_topics(self: AIOKafkaAdminClient) -> list[str]:
        opened.append(self)
        await asyncio.sleep(3600)
        return []

    monkeypatch.setattr(AIOKafkaAdminClient, "list_topics", slow_list_topics)
    assert await broker_answers(kafka_settings, timeout_s=1.0) is False
    [client] = opened
    assert client._closed, "the probe's client was left open"
    assert not client._client._conns, "its broker connections were left open"
