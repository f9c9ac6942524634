"""An idempotent producer that takes records and knows each topic's contract.

``enable_idempotence`` + ``acks=all`` make the broker drop duplicates caused by
our own retries, so a retried send never writes a record twice. Keys come from
the record's key field (the topic registry says which), so all records of one
conversation land on one partition number across every conversation topic.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.structs import RecordMetadata

from switchboard.contracts import Serde, TopicSpec, encode_key
from switchboard.observability.metrics import RECORDS_PRODUCED
from switchboard.settings import KafkaSettings


class RecordProducer:
    """Start once per process, share it, stop it at shutdown."""

    def __init__(self, kafka: KafkaSettings, *, service: str, serde: Serde | None = None, linger_ms: int = 5) -> None:
        self._kafka = kafka
        self._serde = serde or Serde.from_settings(kafka)
        self._service = service
        self._producer = AIOKafkaProducer(
            bootstrap_servers=kafka.bootstrap_servers,
            client_id=f"{kafka.client_id}-{service}",
            enable_idempotence=True,
            acks="all",
            linger_ms=linger_ms,
        )

    async def start(self) -> None:
        await self._producer.start()

    async def stop(self) -> None:
        await self._producer.stop()

    async def __aenter__(self) -> RecordProducer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def send(
        self, topic: TopicSpec[Any], record: Any, *, headers: Sequence[tuple[str, bytes]] = ()
    ) -> RecordMetadata:
        """Encode ``record`` with ``topic``'s contract and wait until the broker acknowledged it."""
        return await self.send_raw(
            topic, key=encode_key(topic, record), value=self._serde.encode(topic, record), headers=headers
        )

    async def enqueue(
        self, topic: TopicSpec[Any], record: Any, *, headers: Sequence[tuple[str, bytes]] = ()
    ) -> asyncio.Future[RecordMetadata]:
        """Encode ``record`` and add it to the producer's batch without waiting for the broker.

        Returns the delivery future. For high-volume, best-effort streams (live run
        events): records enqueued one after another by one task keep their order, and
        the caller does not pay a broker round trip per record.
        """
        future: asyncio.Future[RecordMetadata] = await self._producer.send(
            topic.physical_name(self._kafka),
            value=self._serde.encode(topic, record),
            key=encode_key(topic, record),
            headers=list(headers),
        )
        RECORDS_PRODUCED.labels(self._service, topic.name).inc()
        return future

    async def flush(self) -> None:
        """Wait until every enqueued record was sent (or failed)."""
        await self._producer.flush()

    async def send_raw(
        self, topic: TopicSpec[Any], *, key: bytes | None, value: bytes, headers: Sequence[tuple[str, bytes]] = ()
    ) -> RecordMetadata:
        """Send already-encoded bytes (the outbox relay and dead letters need this)."""
        metadata = await self._producer.send_and_wait(
            topic.physical_name(self._kafka), value=value, key=key, headers=list(headers)
        )
        RECORDS_PRODUCED.labels(self._service, topic.name).inc()
        return metadata

    async def send_soon(
        self, topic: TopicSpec[Any], record: Any, *, headers: Sequence[tuple[str, bytes]] = ()
    ) -> asyncio.Future[RecordMetadata]:
        """Encode and hand ``record`` to the producer's batch; await the returned future for the ack.

        For callers that send many records and then wait once (``asyncio.gather``), which
        lets the producer batch them instead of one round trip per record.
        """
        future = await self._producer.send(
            topic.physical_name(self._kafka),
            value=self._serde.encode(topic, record),
            key=encode_key(topic, record),
            headers=list(headers),
        )
        RECORDS_PRODUCED.labels(self._service, topic.name).inc()
        return future

    async def send_bytes_soon(
        self, topic_name: str, *, key: bytes | None, value: bytes | None
    ) -> asyncio.Future[RecordMetadata]:
        """Hand raw bytes to a topic that is not a contract (a stream processor's own changelog).

        ``value=None`` writes a tombstone. The key decides the partition (murmur2, like
        every producer of ours), so a changelog stays co-partitioned with its source.
        """
        return await self._producer.send(topic_name, value=value, key=key)
