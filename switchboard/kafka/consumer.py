"""The one way services consume a topic: decode, handle, retry, dead-letter, commit.

Delivery is at-least-once. The checkpoint order per batch is:

1. decode each record with its topic's contract;
2. call the handler; on failure apply the :class:`ErrorPolicy` — retry with
   exponential backoff, then publish a dead-letter record (the original bytes,
   the error code and message, topic, partition, offset);
3. only after every record up to an offset was handled *or* dead-lettered,
   commit that offset.

So a crash between 2 and 3 redelivers records: handlers must be idempotent
(every event carries an ``event_id`` for that). A record is never skipped
silently, and a bad record never stops the loop: it is dead-lettered and the
next one is processed. If even the dead-letter topic cannot be written, the
offset is not committed and the record will come back.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.errors import CommitFailedError, IllegalStateError, KafkaError

from switchboard.contracts import ContractError, Serde, TopicSpec
from switchboard.kafka.errors import PermanentRecordError
from switchboard.observability.logging import get_logger
from switchboard.observability.metrics import CONSUMER_LAG, HANDLER_SECONDS, RECORDS_CONSUMED
from switchboard.observability.scrubbing import scrub_text
from switchboard.settings import KafkaSettings

log = get_logger(__name__)


@dataclass(frozen=True)
class ErrorPolicy:
    """What to do when a handler fails (decoding failures are never retried: they cannot heal)."""

    max_attempts: int = 4
    initial_backoff_s: float = 0.2
    max_backoff_s: float = 10.0

    def backoff(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        return float(min(self.max_backoff_s, self.initial_backoff_s * (2 ** (attempt - 1))))


@dataclass(frozen=True)
class Inbound:
    """A decoded record with where it came from."""

    topic: TopicSpec[Any]
    partition: int
    offset: int
    key: bytes | None
    value: Any
    headers: tuple[tuple[str, bytes], ...] = field(default=())
    timestamp_ms: int = 0


Handler = Callable[[Inbound], Awaitable[None]]


@dataclass(frozen=True)
class Failure:
    """Why a record is being dead-lettered."""

    code: str
    message: str
    attempts: int


class DeadLetterSink(Protocol):
    async def publish(self, record: ConsumerRecord[bytes, bytes], failure: Failure) -> None: ...


class _Stopping(Exception):
    """Raised inside processing when shutdown interrupts a retry: leave the offset uncommitted."""


class RecordConsumer:
    """Consumes registered topics with a handler and an error policy; see the module docstring."""

    def __init__(
        self,
        *,
        service: str,
        kafka: KafkaSettings,
        topics: Sequence[TopicSpec[Any]],
        group_id: str,
        handler: Handler,
        dead_letters: DeadLetterSink,
        policy: ErrorPolicy = ErrorPolicy(),
        max_batch: int = 100,
        consumer_options: Mapping[str, Any] | None = None,
        serde: Serde | None = None,
    ) -> None:
        self._service = service
        self._kafka = kafka
        self._serde = serde or Serde.from_settings(kafka)
        self._topics = {spec.physical_name(kafka): spec for spec in topics}
        self._group_id = group_id
        self._handler = handler
        self._dead_letters = dead_letters
        self._policy = policy
        self._max_batch = max_batch
        self._options = dict(consumer_options or {})
        self._consumer: AIOKafkaConsumer | None = None
        self._stop = asyncio.Event()

    async def ready(self) -> bool:
        """Ready once the group assigned us partitions (or the group simply has none for us)."""
        return self._consumer is not None and self._consumer.assignment() is not None

    async def run(self, stop: asyncio.Event) -> None:
        """Consume until ``stop`` is set; commits what was handled before returning."""
        self._stop = stop
        consumer = AIOKafkaConsumer(
            *self._topics,
            bootstrap_servers=self._kafka.bootstrap_servers,
            client_id=f"{self._kafka.client_id}-{self._service}",
            group_id=self._group_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
            **self._options,
        )
        self._consumer = consumer
        await consumer.start()
        log.info("consumer started", extra={"group_id": self._group_id, "topics": sorted(self._topics)})
        try:
            while not stop.is_set():
                batches = await consumer.getmany(timeout_ms=250, max_records=self._max_batch)
                for tp, records in batches.items():
                    await self._process_partition_batch(consumer, tp, records)
                    if stop.is_set():
                        break
        finally:
            await consumer.stop()
            self._consumer = None
            log.info("consumer stopped", extra={"group_id": self._group_id})

    async def _process_partition_batch(
        self, consumer: AIOKafkaConsumer, tp: TopicPartition, records: list[ConsumerRecord[bytes, bytes]]
    ) -> None:
        next_offset: int | None = None
        try:
            for record in records:
                if self._stop.is_set():
                    break
                await self._process(record)
                next_offset = record.offset + 1
        except _Stopping:
            pass
        finally:
            if next_offset is not None:
                await self._commit(consumer, tp, next_offset)
        highwater = consumer.highwater(tp)
        if highwater is not None and next_offset is not None:
            CONSUMER_LAG.labels(self._service, tp.topic, str(tp.partition)).set(max(0, highwater - next_offset))

    async def _commit(self, consumer: AIOKafkaConsumer, tp: TopicPartition, offset: int) -> None:
        try:
            await consumer.commit({tp: offset})
        except (CommitFailedError, IllegalStateError) as exc:
            # The partition moved to another member mid-batch: it re-reads from the last
            # committed offset. Handlers are idempotent, so that is a duplicate, not a loss.
            log.warning(
                "commit skipped after rebalance",
                extra={"topic": tp.topic, "partition": tp.partition, "offset": offset, "error": type(exc).__name__},
            )

    async def _process(self, record: ConsumerRecord[bytes, bytes]) -> None:
        spec = self._topics[record.topic]
        where = {"topic": record.topic, "partition": record.partition, "offset": record.offset}
        decode_attempt = 0
        while True:
            decode_attempt += 1
            try:
                value = self._serde.decode(spec, record.value)
                break
            except ContractError as exc:
                if exc.retryable:
                    # The schema registry is unreachable; the record is fine. Wait, do not dead-letter.
                    log.warning("schema registry unavailable", extra={**where, "attempt": decode_attempt})
                    await self._sleep_or_stop(self._policy.backoff(min(decode_attempt, 8)))
                    continue
                log.warning("undecodable record", extra={**where, "error_code": str(exc.code)})
                await self._dead_letter(record, Failure(str(exc.code), exc.message, attempts=1))
                RECORDS_CONSUMED.labels(self._service, record.topic, "undecodable").inc()
                return
        inbound = Inbound(
            topic=spec,
            partition=record.partition,
            offset=record.offset,
            key=record.key,
            value=value,
            headers=tuple((k, v) for k, v in (record.headers or ())),
            timestamp_ms=record.timestamp,
        )
        attempt = 0
        while True:
            attempt += 1
            started = time.perf_counter()
            try:
                await self._handler(inbound)
            except PermanentRecordError as exc:
                log.warning("record rejected by handler", extra={**where, "error_code": exc.code})
                await self._dead_letter(record, Failure(exc.code, exc.message, attempt))
                RECORDS_CONSUMED.labels(self._service, record.topic, "rejected").inc()
                return
            except Exception as exc:
                code = str(getattr(exc, "code", "") or "handler_failed")
                if attempt >= self._policy.max_attempts:
                    log.error(
                        "handler failed, dead-lettering",
                        extra={**where, "error_code": code, "attempts": attempt},
                        exc_info=True,
                    )
                    await self._dead_letter(record, Failure(code, f"{type(exc).__name__}: {exc}", attempt))
                    RECORDS_CONSUMED.labels(self._service, record.topic, "failed").inc()
                    return
                delay = self._policy.backoff(attempt)
                log.warning(
                    "handler failed, retrying",
                    extra={**where, "error_code": code, "attempt": attempt, "retry_in_s": delay},
                )
                await self._sleep_or_stop(delay)
            else:
                HANDLER_SECONDS.labels(self._service, record.topic).observe(time.perf_counter() - started)
                RECORDS_CONSUMED.labels(self._service, record.topic, "handled").inc()
                return

    async def _dead_letter(self, record: ConsumerRecord[bytes, bytes], failure: Failure) -> None:
        """Publish to the dead-letter topic; keep trying until it works or we are stopping."""
        failure = Failure(failure.code, scrub_text(failure.message)[:4000], failure.attempts)
        attempt = 0
        while True:
            attempt += 1
            try:
                await self._dead_letters.publish(record, failure)
                return
            except KafkaError:
                log.error(
                    "dead-letter publish failed",
                    extra={"topic": record.topic, "offset": record.offset, "attempt": attempt},
                    exc_info=True,
                )
                await self._sleep_or_stop(self._policy.backoff(min(attempt, 8)))

    async def _sleep_or_stop(self, delay: float) -> None:
        try:
            await asyncio.wait_for(self._stop.wait(), timeout=delay)
        except TimeoutError:
            return
        raise _Stopping()
