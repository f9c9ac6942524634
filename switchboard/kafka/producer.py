"""An idempotent producer that takes records and knows each topic's contract.

``enable_idempotence`` + ``acks=all`` make the broker drop duplicates caused by
our own retries, so a retried send never writes a record twice. Keys come from
the record's key field (the topic registry says which), so all records of one
conversation land on one partition number across every conversation topic.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.partitioner import DefaultPartitioner, murmur2
from aiokafka.structs import RecordMetadata

from switchboard.contracts import Serde, TopicSpec, encode_key
from switchboard.observability.metrics import RECORDS_PRODUCED
from switchboard.settings import KafkaSettings


class CachingPartitioner:
    """aiokafka's default partitioner (murmur2 of the key) with the hashes of recent keys kept.

    aiokafka's murmur2 is pure Python (about 15 µs a key); a stream processor writes
    several records per conversation key (its state, a decision, a run request), so the
    same key is hashed again and again. The partition chosen is exactly the default one.
    """

    def __init__(self, size: int = 8192) -> None:
        self._size = size
        self._hashes: dict[bytes, int] = {}

    def __call__(self, key: bytes | None, all_partitions: list[int], available: list[int]) -> int:
        if key is None:
            return DefaultPartitioner()(key, all_partitions, available)  # type: ignore[no-any-return]
        hashed = self._hashes.get(key)
        if hashed is None:
            if len(self._hashes) >= self._size:
                self._hashes.clear()
            hashed = self._hashes[key] = murmur2(key) & 0x7FFFFFFF
        return all_partitions[hashed % len(all_partitions)]


class RecordProducer:
    """Start once per process, share it, stop it at shutdown."""

    def __init__(self, kafka: KafkaSettings, *, service: str, serde: Serde | None = None, linger_ms: int = 5) -> None:
        self._kafka = kafka
        self._serde = serde or Serde.from_settings(kafka)
        self._service = service
        self._partitioner = CachingPartitioner()
        self._producer = AIOKafkaProducer(
            **kafka.client_options(),
            client_id=f"{kafka.client_id}-{service}",
            enable_idempotence=True,
            acks="all",
            linger_ms=linger_ms,
            partitioner=self._partitioner,
        )
        self._produced: dict[str, Any] = {}
        self._partitions: dict[str, list[int]] = {}

    async def start(self) -> None:
        try:
            await self._producer.start()
        except BaseException:
            await self._producer.stop()  # nothing left open when the broker refuses us (a wrong password)
            raise

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
        counter = self._produced.get(topic.name)
        if counter is None:
            counter = self._produced[topic.name] = RECORDS_PRODUCED.labels(self._service, topic.name)
        counter.inc()
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

    def encode(self, topic: TopicSpec[Any], record: Any) -> tuple[str, bytes | None, bytes]:
        """``(physical topic name, key, value)`` of a record, for :meth:`send_many`."""
        counter = self._produced.get(topic.name)
        if counter is None:
            counter = self._produced[topic.name] = RECORDS_PRODUCED.labels(self._service, topic.name)
        counter.inc()
        return topic.physical_name(self._kafka), encode_key(topic, record), self._serde.encode(topic, record)

    async def send_many(self, items: Sequence[tuple[str, bytes | None, bytes | None]]) -> list[asyncio.Future[Any]]:
        """Send many already-encoded records as one producer batch per partition.

        Same partitions as one-by-one sends (murmur2 of the key), same order within a
        partition, but one future per batch instead of one per record: for a stream
        processor writing several records per event, the per-record bookkeeping of
        ``send`` was a large share of its CPU. Await the returned futures for the acks.
        """
        return await self._send_batches(items, None)

    async def send_many_placed(
        self, items: Sequence[tuple[str, bytes | None, bytes | None]]
    ) -> tuple[list[asyncio.Future[Any]], list[Placement]]:
        """:meth:`send_many`, and where each item went: one :class:`Placement` per item, in order.

        A batch's acknowledgment carries its first record's offset; an item's offset is that
        plus its place in the batch (exact: the producer is idempotent, not transactional).
        """
        placements: list[Placement | None] = [None] * len(items)
        futures = await self._send_batches(items, placements)
        return futures, [placement for placement in placements if placement is not None]

    async def _send_batches(
        self, items: Sequence[tuple[str, bytes | None, bytes | None]], placements: list[Placement | None] | None
    ) -> list[asyncio.Future[Any]]:
        by_partition: dict[tuple[str, int], list[tuple[int, bytes | None, bytes | None]]] = {}
        for position, (name, key, value) in enumerate(items):
            partitions = self._partitions.get(name)
            if partitions is None:
                partitions = self._partitions[name] = sorted(await self._producer.partitions_for(name))
            partition = self._partitioner(key, partitions, partitions)
            by_partition.setdefault((name, partition), []).append((position, key, value))
        futures: list[asyncio.Future[Any]] = []
        for (name, partition), records in by_partition.items():
            batch = self._producer.create_batch()
            in_batch: list[int] = []
            for position, key, value in records:
                if batch.append(key=key, value=value, timestamp=None) is None:
                    futures.append(await self._send_batch(batch, name, partition, in_batch, placements))
                    batch, in_batch = self._producer.create_batch(), []
                    if batch.append(key=key, value=value, timestamp=None) is None:
                        raise ValueError(f"a record of {len(value or b'')} bytes does not fit a batch")
                in_batch.append(position)
            futures.append(await self._send_batch(batch, name, partition, in_batch, placements))
        return futures

    async def _send_batch(
        self, batch: Any, name: str, partition: int, positions: list[int], placements: list[Placement | None] | None
    ) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = await self._producer.send_batch(batch, name, partition=partition)
        if placements is not None:
            for index, position in enumerate(positions):
                placements[position] = Placement(future, index)
        return future


@dataclass(frozen=True, slots=True)
class Placement:
    """Where one record of :meth:`RecordProducer.send_many_placed` went: its batch's future
    (a ``RecordMetadata`` with the batch's base offset once acknowledged) and its index in it."""

    batch: asyncio.Future[Any]
    index: int

    def position(self) -> tuple[int, int] | None:
        """(partition, offset) of the record once its batch was acknowledged; None before, or if it failed."""
        if not self.batch.done() or self.batch.cancelled() or self.batch.exception() is not None:
            return None
        metadata = self.batch.result()
        return None if metadata is None else (int(metadata.partition), int(metadata.offset) + self.index)
