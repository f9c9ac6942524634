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

**Partitions.** By default the partitions of one fetch are handled one after another.
``across_partitions`` (batch handlers) gives the whole fetch to one handler call, for a
handler whose cost is per call (the brief recomposes a digest per call);
``concurrent_partitions`` handles them side by side, each still in offset order, for a
handler that waits on I/O per record (the notifier's sends). Either way every partition's
offset is committed once its records are done.

**Flow control.** A handler that hands work to background tasks (the runner:
a run lasts minutes, far beyond ``max.poll.interval.ms``) returns at once and
passes a :class:`FlowControl`. Before each fetch the consumer asks it how many
more records it may take: the fetch is capped to that number, and at zero every
assigned partition is *paused* while the loop keeps polling — so the group
never sees a stalled member, nothing is fetched that cannot be started, and
fetching resumes as soon as there is room again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, ConsumerRecord, TopicPartition
from aiokafka.errors import CommitFailedError, IllegalStateError, KafkaError

from switchboard.contracts import ContractError, Serde, TopicSpec
from switchboard.kafka.errors import SIZE_ERRORS, PermanentRecordError, is_transient
from switchboard.kafka.lag import LAG_REFRESH_S, LagGauge
from switchboard.observability.logging import get_logger
from switchboard.observability.metrics import HANDLER_SECONDS, RECORDS_CONSUMED, RECORDS_DEAD_LETTERED
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
# Handles every decoded record of one partition batch at once (e.g. one database
# transaction per batch); see ``RecordConsumer(batch_handler=...)``.
BatchHandler = Callable[[Sequence[Inbound]], Awaitable[None]]


@dataclass(frozen=True)
class Failure:
    """Why a record is being dead-lettered."""

    code: str
    message: str
    attempts: int


class FlowControl(Protocol):
    """Back-pressure for handlers that start background work (see the module docstring)."""

    def room(self) -> int:
        """How many more records may be fetched now (<= 0: pause every partition)."""
        ...

    async def wait_for_room(self, timeout_s: float) -> None:
        """Return when there may be room again, or after ``timeout_s``."""
        ...


class DeadLetterSink(Protocol):
    async def publish(
        self, record: ConsumerRecord[bytes, bytes], failure: Failure, *, omit_value: bool = False
    ) -> None: ...


class _JoinWatch(ConsumerRebalanceListener):  # type: ignore[misc]
    """Sets ``joined`` once the group gave this member its share (possibly none): only then ready;
    the lag series of partitions it no longer owns go (``lag.py``)."""

    def __init__(self, lag: LagGauge | None = None) -> None:
        self.joined = asyncio.Event()
        self._lag = lag

    async def on_partitions_revoked(self, revoked: Sequence[TopicPartition]) -> None:
        del revoked

    async def on_partitions_assigned(self, assigned: Sequence[TopicPartition]) -> None:
        if self._lag is not None:
            self._lag.assigned(assigned)
        self.joined.set()


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
        handler: Handler | None = None,
        dead_letters: DeadLetterSink,
        batch_handler: BatchHandler | None = None,
        policy: ErrorPolicy = ErrorPolicy(),
        max_batch: int = 100,
        consumer_options: Mapping[str, Any] | None = None,
        serde: Serde | None = None,
        flow: FlowControl | None = None,
        across_partitions: bool = False,
        concurrent_partitions: bool = False,
        lag_refresh_s: float = LAG_REFRESH_S,
    ) -> None:
        self._service = service
        self._kafka = kafka
        self._serde = serde or Serde.from_settings(kafka)
        self._topics = {spec.physical_name(kafka): spec for spec in topics}
        self._group_id = group_id
        if (handler is None) == (batch_handler is None):
            raise ValueError("give exactly one of handler and batch_handler")
        self._batch_handler = batch_handler
        self._handler: Handler = handler if handler is not None else self._one_record_batch
        self._dead_letters = dead_letters
        self._policy = policy
        self._max_batch = max_batch
        self._options = dict(consumer_options or {})
        self._consumer: AIOKafkaConsumer | None = None
        self._lag = LagGauge(service, lag_refresh_s)
        self._join = _JoinWatch(self._lag)
        self._stop = asyncio.Event()
        self._flow = flow
        self._paused = False
        # One batch handler call for everything a fetch returned, all partitions together (a handler
        # whose cost is per call, not per record: the brief recomposes a digest per call).
        self._across_partitions = across_partitions and batch_handler is not None
        # The partitions of one fetch handled side by side, each in order (a handler that waits on
        # I/O per record: the notifier's sends); offsets committed once all are done.
        self._concurrent_partitions = concurrent_partitions

    async def ready(self) -> bool:
        """Ready once the group's first join completed: partitions assigned (or none left for us).

        Before that a record published now would wait for the join (seconds, more under
        load), so a readiness probe, ``make demo`` and the end-to-end tests wait for this.
        """
        return self._consumer is not None and self._join.joined.is_set()

    async def run(self, stop: asyncio.Event) -> None:
        """Consume until ``stop`` is set; commits what was handled before returning."""
        self._stop = stop
        consumer = AIOKafkaConsumer(
            **self._kafka.client_options(),
            client_id=f"{self._kafka.client_id}-{self._service}",
            group_id=self._group_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
            **self._options,
        )
        self._join = _JoinWatch(self._lag)
        consumer.subscribe(list(self._topics), listener=self._join)
        self._consumer = consumer
        await consumer.start()
        log.info("consumer started", extra={"group_id": self._group_id, "topics": sorted(self._topics)})
        try:
            while not stop.is_set():
                self._lag.maybe_refresh(consumer)
                limit = await self._fetch_limit(consumer)
                batches = await consumer.getmany(timeout_ms=250, max_records=limit)
                if self._across_partitions and len(batches) > 1 and await self._process_across(consumer, batches):
                    continue
                if self._concurrent_partitions and len(batches) > 1:
                    await self._process_concurrently(consumer, batches)
                    continue
                for tp, records in batches.items():
                    await self._process_partition_batch(consumer, tp, records)
                    if stop.is_set():
                        break
        finally:
            await self._lag.close()
            await consumer.stop()
            self._lag.forget_all()  # a stopped member reports nothing
            self._consumer = None
            log.info("consumer stopped", extra={"group_id": self._group_id})

    async def _fetch_limit(self, consumer: AIOKafkaConsumer) -> int:
        """How many records the next fetch may return; pauses/resumes partitions for the flow control.

        While paused the loop still calls ``getmany`` (which then returns nothing), so the
        member keeps polling within ``max.poll.interval.ms``. Partitions assigned by a
        rebalance come unpaused, hence the pause is re-applied on every turn.
        """
        if self._flow is None:
            return self._max_batch
        room = self._flow.room()
        if room <= 0:
            assigned = consumer.assignment()
            if assigned:
                consumer.pause(*assigned)
            if not self._paused:
                self._paused = True
                log.info("consumer paused: no room", extra={"group_id": self._group_id})
            await self._flow.wait_for_room(0.25)
            room = self._flow.room()
            if room <= 0:
                return 1
        if self._paused:
            consumer.resume(*consumer.assignment())
            self._paused = False
            log.info("consumer resumed", extra={"group_id": self._group_id, "room": room})
        return max(1, min(self._max_batch, room))

    async def _one_record_batch(self, inbound: Inbound) -> None:
        assert self._batch_handler is not None
        await self._batch_handler([inbound])

    async def _process_partition_batch(
        self, consumer: AIOKafkaConsumer, tp: TopicPartition, records: list[ConsumerRecord[bytes, bytes]]
    ) -> None:
        next_offset: int | None = None
        try:
            next_offset = await self._handle_partition(records)
        finally:
            if next_offset is not None:
                await self._commit(consumer, tp, next_offset)
        self._report_lag(consumer, tp, next_offset)

    async def _handle_partition(self, records: list[ConsumerRecord[bytes, bytes]]) -> int | None:
        """Handle one partition's records in order; the offset to commit after them (None: nothing done)."""
        next_offset: int | None = None
        try:
            if self._batch_handler is not None and len(records) > 1 and await self._process_batch(records):
                next_offset = records[-1].offset + 1
            else:
                for record in records:
                    if self._stop.is_set():
                        break
                    await self._process(record)
                    next_offset = record.offset + 1
        except _Stopping:
            pass
        return next_offset

    async def _process_concurrently(
        self, consumer: AIOKafkaConsumer, batches: Mapping[TopicPartition, list[ConsumerRecord[bytes, bytes]]]
    ) -> None:
        """Each partition's records in order, the partitions side by side; then one commit of them all."""
        partitions = list(batches)
        done = await asyncio.gather(*(self._handle_partition(batches[tp]) for tp in partitions), return_exceptions=True)
        offsets = {tp: offset for tp, offset in zip(partitions, done, strict=True) if isinstance(offset, int)}
        if offsets:
            try:
                await consumer.commit(offsets)
            except (CommitFailedError, IllegalStateError) as exc:
                log.warning(
                    "commit skipped after rebalance", extra={"partitions": len(offsets), "error": type(exc).__name__}
                )
        for tp, offset in offsets.items():
            self._report_lag(consumer, tp, offset)
        failures = [outcome for outcome in done if isinstance(outcome, BaseException)]
        if failures:
            raise failures[0]  # what the partition-by-partition path would have raised (e.g. cancellation)

    def _report_lag(self, consumer: AIOKafkaConsumer, tp: TopicPartition, next_offset: int | None) -> None:
        self._lag.report(consumer, tp, next_offset)

    async def _process_across(
        self, consumer: AIOKafkaConsumer, batches: Mapping[TopicPartition, list[ConsumerRecord[bytes, bytes]]]
    ) -> bool:
        """Every partition's records in one batch handler call, then one commit of every offset.
        False when the handler failed: the caller goes partition by partition (record by record)."""
        records = [record for partition in batches.values() for record in partition]
        if not await self._process_batch(records):
            return False
        offsets = {tp: partition[-1].offset + 1 for tp, partition in batches.items() if partition}
        try:
            await consumer.commit(offsets)
        except (CommitFailedError, IllegalStateError) as exc:
            log.warning(
                "commit skipped after rebalance", extra={"partitions": len(offsets), "error": type(exc).__name__}
            )
        for tp, offset in offsets.items():
            self._report_lag(consumer, tp, offset)
        return True

    async def _process_batch(self, records: list[ConsumerRecord[bytes, bytes]]) -> bool:
        """Decode the batch and hand it to the batch handler in one call.

        True when the whole batch is done (handled, or undecodable records dead-lettered).
        False when the batch handler failed: the caller then goes record by record, with
        the retries and dead-lettering of the error policy, so one bad record cannot hold
        back the others.
        """
        assert self._batch_handler is not None
        decoded: list[Inbound] = []
        undecodable: list[tuple[ConsumerRecord[bytes, bytes], ContractError]] = []
        for record in records:
            spec = self._topics[record.topic]
            try:
                value = await self._serde.decode_async(spec, record.value)
            except ContractError as exc:
                if exc.retryable:
                    return False  # the registry is down: the per-record path waits for it
                undecodable.append((record, exc))
                continue
            decoded.append(self._inbound(spec, record, value))
        started = time.perf_counter()
        try:
            if decoded:
                await self._batch_handler(decoded)
        except Exception:
            log.warning(
                "batch handler failed, retrying record by record",
                extra={"topic": records[0].topic, "partition": records[0].partition, "records": len(records)},
                exc_info=True,
            )
            return False
        elapsed = time.perf_counter() - started
        for inbound in decoded:
            HANDLER_SECONDS.labels(self._service, inbound.topic.name).observe(elapsed / len(decoded))
            RECORDS_CONSUMED.labels(self._service, inbound.topic.name, "handled").inc()
        for record, error in undecodable:
            log.warning(
                "undecodable record",
                extra={
                    "topic": record.topic,
                    "partition": record.partition,
                    "offset": record.offset,
                    "error_code": str(error.code),
                },
            )
            await self._dead_letter(record, Failure(str(error.code), error.message, attempts=1))
            RECORDS_CONSUMED.labels(self._service, record.topic, "undecodable").inc()
        return True

    @staticmethod
    def _inbound(spec: TopicSpec[Any], record: ConsumerRecord[bytes, bytes], value: Any) -> Inbound:
        return Inbound(
            topic=spec,
            partition=record.partition,
            offset=record.offset,
            key=record.key,
            value=value,
            headers=tuple((k, v) for k, v in (record.headers or ())),
            timestamp_ms=record.timestamp,
        )

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
                value = await self._serde.decode_async(spec, record.value)
                break
            except ContractError as exc:
                if exc.retryable:
                    # The schema registry is unreachable or refuses our credentials; the record is
                    # fine. Wait, do not dead-letter.
                    log.warning(
                        "schema registry unavailable",
                        extra={**where, "attempt": decode_attempt, "error_code": str(exc.code)},
                    )
                    await self._sleep_or_stop(self._policy.backoff(min(decode_attempt, 8)))
                    continue
                log.warning("undecodable record", extra={**where, "error_code": str(exc.code)})
                await self._dead_letter(record, Failure(str(exc.code), exc.message, attempts=1))
                RECORDS_CONSUMED.labels(self._service, record.topic, "undecodable").inc()
                return
        inbound = self._inbound(spec, record, value)
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
                transient = is_transient(exc)
                if attempt >= self._policy.max_attempts and not transient:
                    log.error(
                        "handler failed, dead-lettering",
                        extra={**where, "error_code": code, "attempts": attempt},
                        exc_info=True,
                    )
                    await self._dead_letter(record, Failure(code, f"{type(exc).__name__}: {exc}", attempt))
                    RECORDS_CONSUMED.labels(self._service, record.topic, "failed").inc()
                    return
                # A transient failure waits for what failed to come back, in place (the partition's
                # order holds; a rebalance meanwhile hands the uncommitted record to another member).
                delay = self._policy.backoff(min(attempt, 8))
                log.warning(
                    "handler failed, retrying",
                    extra={
                        **where,
                        "error_code": code,
                        "attempt": attempt,
                        "retry_in_s": delay,
                        "transient": transient,
                        "error_type": type(exc).__name__,
                    },
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
        oversized = False
        while True:
            attempt += 1
            try:
                await self._dead_letters.publish(record, failure, omit_value=oversized)
                spec = self._topics.get(record.topic)
                RECORDS_DEAD_LETTERED.labels(
                    self._service, spec.name if spec is not None else record.topic, failure.code
                ).inc()
                return
            except SIZE_ERRORS:
                # The record plus the letter's wrapping is over the broker's limit: never retried as
                # is (it wedged the partition for good), the letter goes without the original bytes.
                oversized = True
                log.error("dead letter too large; sending it without the record's value", extra={"topic": record.topic})
            except (KafkaError, ContractError) as exc:
                if isinstance(exc, ContractError) and not exc.retryable:
                    raise
                # The broker, or the schema registry the letter's schema id comes from, is down: wait
                # for it (the registry's outage killed the consumer task here before).
                log.error(
                    "dead-letter publish failed",
                    extra={"topic": record.topic, "offset": record.offset, "attempt": attempt},
                    exc_info=True,
                )
                await self._sleep_or_stop(self._policy.backoff(min(attempt, 8)))

    async def _sleep_or_stop(self, delay: float) -> None:
        if self._consumer is not None:
            # A partition held by a retry (a database that is down, a dead-letter topic away) is when
            # the lag matters most: refreshed while it waits, not only at the loop's top, where it froze.
            self._lag.maybe_refresh(self._consumer)
        try:
            await asyncio.wait_for(self._stop.wait(), timeout=delay)
        except TimeoutError:
            return
        raise _Stopping()
