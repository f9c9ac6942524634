"""The faust app: one agent over the co-partitioned conversation topics, one table, one timer.

- **Group and names.** The app id (also the consumer group and the prefix of the
  changelog topic) is ``KAFKA_TOPIC_PREFIX + "switchboard-dispatcher"``, so each test's
  prefix gets its own group and its own state.
- **Source.** ``dispatch_requested``, ``run_started``, ``run_heartbeats``,
  ``run_completed`` and ``dispatcher_ticks``, all keyed by conversation id with one
  partition count: faust's assignor gives partition *p* of every one of them, and of the
  changelog, to the same worker. Raw serializers: records are decoded by our ``Serde``
  in the processor, so an undecodable record is dead-lettered instead of crashing the
  agent (faust's own serializers would).
- **Table.** ``conversations``: bytes -> bytes (JSON ``ConversationState``), in memory,
  recovered from its compacted changelog (no standby replicas). Its partition count is
  the conversation topics' count. The processor writes the local store and the
  changelog itself through our idempotent producer and waits for the acknowledgments
  before sending run requests (docs/dispatcher.md); faust's ``table[key] = value`` would
  only buffer the changelog record, with no way to know it was written.
- **Batches (group commit).** The agent only collects events (faust's own acking is
  off); a drain task processes them in arrival order, up to ``DISPATCHER_BATCH_SIZE``
  at a time, and acknowledges a batch's events only after the processor committed it,
  so faust commits only processed offsets. While one batch waits for the broker the
  next one fills: batches grow with the load and a lone event is processed at once
  (``DISPATCHER_BATCH_WAIT_MS`` adds an optional linger). faust's ``take()`` was the
  first version: it blocks the stream while a batch is processed, so batches stayed
  at a handful of events and every one paid the full round trips (docs/benchmarks.md).
  Exactly-once mode is off: duplicates are handled by idempotency.
- **No faust web server**: the service's own health server answers probes and metrics,
  including ``switchboard_consumer_lag`` of the source partitions after each batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any, Final

import faust

from services.dispatcher.processor import InEvent
from services.dispatcher.settings import DispatcherSettings
from switchboard.contracts import Topics, TopicSpec
from switchboard.observability.logging import get_logger
from switchboard.observability.metrics import CONSUMER_LAG
from switchboard.settings import KafkaSettings

log = get_logger(__name__)

APP_NAME: Final = "switchboard-dispatcher"
SERVICE_LABEL: Final = "dispatcher"  # the ``service`` label of the metrics
TABLE_NAME: Final = "conversations"
SOURCE_TOPICS: Final[tuple[TopicSpec[Any], ...]] = (
    Topics.DISPATCH_REQUESTED,
    Topics.RUN_STARTED,
    Topics.RUN_HEARTBEATS,
    Topics.RUN_COMPLETED,
    Topics.DISPATCHER_TICKS,
)

BatchCallback = Callable[[Sequence[InEvent]], Awaitable[None]]


def app_id(kafka: KafkaSettings) -> str:
    """Consumer group and changelog prefix: per environment (and per test) through the topic prefix."""
    return f"{kafka.topic_prefix}{APP_NAME}"


def broker_url(bootstrap_servers: str) -> str:
    """faust's broker URL for a Kafka bootstrap list (``h1:9092,h2:9092``)."""
    return ";".join(f"kafka://{host.strip()}" for host in bootstrap_servers.split(",") if host.strip())


def broker_credentials(kafka: KafkaSettings) -> faust.types.auth.CredentialsT | None:
    """faust's form of ``KAFKA_SECURITY_PROTOCOL`` and its SASL/TLS settings (the other services'
    clients take ``KafkaSettings.client_options``); None for plaintext."""
    context = kafka.ssl_context()
    if kafka.security_protocol.uses_sasl:
        assert kafka.sasl_password is not None  # KafkaSettings checks it
        return faust.SASLCredentials(
            username=kafka.sasl_username,
            password=kafka.sasl_password.get_secret_value(),
            ssl_context=context,
            mechanism=kafka.sasl_mechanism.value,
        )
    if context is not None:
        return faust.SSLCredentials(context)
    return None


class TableStore:
    """The processor's ``StateStore`` on the faust table (faust recovers it from the changelog)."""

    def __init__(self, table: Any) -> None:
        self._table = table

    @property
    def changelog_topic(self) -> str:
        return str(self._table.changelog_topic.get_topic_name())

    def get(self, key: bytes) -> bytes | None:
        value = self._table.data.get(key)
        return bytes(value) if value is not None else None

    def set(self, key: bytes, value: bytes | None, partition: int) -> None:
        """The local copy only: the processor writes the changelog record with its batch. The key's
        partition is recorded as faust's own changelog recovery does (``Store._key_partition``):
        after a rebalance faust drops the keys of the partitions this worker no longer holds by that
        map, and a key missing from it stayed — a stale copy of a conversation another worker now
        owns, ticked here after every rebalance, and back as the truth if the partition returned
        once its tombstone was compacted away."""
        store = self._table.data
        if value is None:
            store.pop(key, None)
            store._key_partition.pop(key, None)
        else:
            store[key] = value
            store._key_partition[key] = partition

    def items(self) -> Iterator[tuple[bytes, bytes]]:
        return iter(list(self._table.data.items()))

    def __len__(self) -> int:
        return len(self._table.data)


class DispatcherApp:
    """The faust app with its agent, table and timer, started and stopped inside our loop."""

    def __init__(
        self,
        settings: DispatcherSettings,
        *,
        on_batch: BatchCallback,
        on_timer: Callable[[], Awaitable[None]],
        on_rebalanced: Callable[[], None],
    ) -> None:
        kafka = settings.kafka
        partitions = kafka.conversation_partitions
        self._settings = settings
        self._on_batch = on_batch
        self._on_rebalanced = on_rebalanced
        self._specs = {spec.physical_name(kafka): spec for spec in SOURCE_TOPICS}
        self.rebalances = 0
        session_s = settings.session_timeout_s
        # faust wants a data directory even for in-memory tables; keep it out of the cwd.
        self._datadir = tempfile.TemporaryDirectory(prefix="switchboard-dispatcher-")
        self.app = faust.App(
            app_id(kafka),
            broker=broker_url(kafka.bootstrap_servers),
            broker_credentials=broker_credentials(kafka),
            datadir=self._datadir.name,
            store="memory://",
            autodiscover=False,
            web_enabled=False,
            key_serializer="raw",
            value_serializer="raw",
            topic_partitions=partitions,
            topic_replication_factor=kafka.replication_factor,
            topic_disable_leader=True,
            table_standby_replicas=0,
            consumer_auto_offset_reset="earliest",
            broker_client_id=f"{kafka.client_id}-dispatcher",
            broker_commit_interval=settings.commit_interval_s,
            broker_session_timeout=session_s,
            broker_heartbeat_interval=min(3.0, session_s / 3),
            broker_max_poll_records=settings.batch_size,
            stream_recovery_delay=0.0,
            stream_buffer_maxsize=max(4096, settings.batch_size * 4),
            producer_acks=-1,
        )
        self.source = self.app.topic(
            *self._specs,
            key_serializer="raw",
            value_serializer="raw",
            partitions=partitions,
        )
        self.table = self.app.Table(
            TABLE_NAME,
            default=None,
            partitions=partitions,
            key_type=bytes,
            value_type=bytes,
            help="Conversation state: active run, waiting dispatches, idempotency memory.",
        )
        self._batch_size = settings.batch_size
        self._linger_s = settings.batch_wait_ms / 1000.0
        self._buffer: list[Any] = []
        self._arrived = asyncio.Event()
        self._room = asyncio.Event()
        self._room.set()
        self._stream: Any = None
        self._drainer: asyncio.Task[None] | None = None
        self._stopping = False
        self._received = 0
        self._batch_running = False
        self._recovered_once = False

        async def dispatch(stream: Any) -> None:
            # Group commit: this agent only collects events; ``_drain`` processes them in
            # batches and acknowledges each batch after it is committed. While one batch
            # waits for the broker, the next one fills, so batches grow with the load and a
            # lone event is processed at once. faust acks nothing on its own here.
            self._stream = stream
            stream.enable_acks = False
            async for event in stream.events():
                if self._stopping:
                    # Neither processed nor acknowledged: dropped, so never committed.
                    del event
                    continue
                self._buffer.append(event)
                self._received += 1
                del event
                self._arrived.set()
                if len(self._buffer) >= self._batch_size * 2:
                    self._room.clear()
                    await self._room.wait()

        self.app.agent(self.source, name="dispatch", concurrency=1)(dispatch)

        async def tick() -> None:
            await on_timer()

        self.app.timer(settings.tick_interval_s, name="dispatcher-ticks")(tick)

        async def rebalanced(sender: Any, /, *args: Any, signal: Any, **kwargs: Any) -> None:
            self.rebalances += 1
            self._on_rebalanced()

        self.app.on_rebalance_complete.connect(rebalanced)

    def _in_event(self, event: Any) -> InEvent:
        message = event.message
        headers = message.headers
        pairs = tuple(headers.items()) if isinstance(headers, dict) else tuple(headers or ())
        return InEvent(
            topic=self._specs[message.topic],
            key=message.key,
            value=message.value,
            partition=message.partition,
            offset=message.offset,
            timestamp_ms=int((message.timestamp or 0) * 1000),
            headers=pairs,
        )

    async def _drain(self) -> None:
        """Process buffered events batch by batch, in arrival order; ack each batch once done."""
        while not self._stopping:
            await self._arrived.wait()
            if self._stopping:
                break
            if self._linger_s and len(self._buffer) < self._batch_size:
                await asyncio.sleep(self._linger_s)
            events = self._buffer[: self._batch_size]
            del self._buffer[: len(events)]
            if not self._buffer:
                self._arrived.clear()
            if len(self._buffer) < self._batch_size:
                self._room.set()
            if not events:
                continue
            self._batch_running = True
            try:
                await self._on_batch([self._in_event(e) for e in events])
                for event in events:
                    await self._stream.ack(event)
                self._report_lag(events)
            finally:
                self._batch_running = False

    def _report_lag(self, events: Sequence[Any]) -> None:
        """``switchboard_consumer_lag`` of the source partitions a batch touched: the partition's end
        minus the next offset to process (what the shared consumer reports for the other services)."""
        done: dict[Any, int] = {}
        for event in events:
            message = event.message
            done[message.tp] = max(done.get(message.tp, -1), message.offset)
        for tp, offset in done.items():
            try:
                highwater = self.app.consumer.highwater(tp)
            except Exception:  # a partition revoked meanwhile, a consumer restarting: no figure this time
                continue
            if highwater is not None:
                CONSUMER_LAG.labels(SERVICE_LABEL, tp.topic, str(tp.partition)).set(max(0, highwater - offset - 1))

    @property
    def ready(self) -> bool:
        """Partitions assigned and the table recovered, and no rebalance under way (the timer's
        condition: no ticks from a table being recovered)."""
        live = self.rebalances > 0 and not self.app.rebalancing
        if live:
            self._recovered_once = True
        return live

    @property
    def serving(self) -> bool:
        """The readiness probe's answer: latched once the table was first recovered. A later
        rebalance — every eviction or start of a peer causes one, and recovering a partition from
        its changelog can take longer than the probe's patience — must not mark every worker
        unready at once: with the PDB's ``AlwaysAllow`` for unhealthy pods, a drain could then
        evict them all (found in review, 2026-12-05)."""
        return self._recovered_once or self.ready

    async def start(self) -> None:
        await self.app.start()
        self._drainer = asyncio.create_task(self._drain(), name="dispatcher-drain")
        self._drainer.add_done_callback(self._drainer_done)

    def _drainer_done(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            # Without its drain the worker would hold its partitions and do nothing.
            log.critical("the batch loop died; exiting", exc_info=task.exception())
            self.on_fatal()

    def on_fatal(self) -> None:
        """Replaced by the bootstrap with a crash-only exit."""

    async def stop(self, quiet_s: float = 0.3, drain_timeout_s: float = 10.0) -> None:
        """Stop fetching, process what faust already handed out, then stop faust.

        faust's consumer waits, on stop, until every event it handed to the agent is
        acknowledged, and acknowledging an unprocessed event would commit it unprocessed.
        So the partitions are paused and the drain goes on until no event arrived for
        ``quiet_s``; whatever is left after ``drain_timeout_s`` is neither processed nor
        committed (the next owner replays it) and faust's stop is cut short.
        """
        consumer = self.app.consumer
        with contextlib.suppress(Exception):
            consumer.pause_partitions(consumer.assignment())
        deadline = time.monotonic() + drain_timeout_s
        quiet_since = time.monotonic()
        seen = -1
        while time.monotonic() < deadline and self._drainer is not None and not self._drainer.done():
            busy = bool(self._buffer) or self._batch_running
            if busy or self._received != seen:
                seen, quiet_since = self._received, time.monotonic()
            elif time.monotonic() - quiet_since >= quiet_s:
                break
            await asyncio.sleep(0.02)
        self._stopping = True
        self._arrived.set()
        if self._drainer is not None:
            await asyncio.wait({self._drainer}, timeout=30)
            if not self._drainer.done():
                self._drainer.cancel()
        self._buffer.clear()
        self._room.set()
        try:
            await asyncio.wait_for(self.app.stop(), timeout=max(1.0, deadline - time.monotonic() + 5))
        except TimeoutError:
            log.warning("faust did not stop in time; leaving unprocessed events uncommitted")
        self._datadir.cleanup()
