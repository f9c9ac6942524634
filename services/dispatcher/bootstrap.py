"""The one place where the dispatcher's settings, clients and handlers are wired.

``Dispatcher.run(stop)`` starts, in order: the producer, the published-agent feed, the
budget watcher, the faust app (agent, table, timer) and the decision sink; it returns
after ``stop`` is set and everything finished what it held. ``Dispatcher.ready()`` is the
readiness probe: the published index caught up and the faust worker has its partitions
(table recovered).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import time
from collections.abc import Coroutine, Sequence
from typing import Any

from aiokafka import ConsumerRecord

from services.dispatcher.agents import AgentIndex
from services.dispatcher.app import SOURCE_TOPICS, DispatcherApp, TableStore, app_id
from services.dispatcher.metrics import NoMatchWatch
from services.dispatcher.policy import PolicyConfig
from services.dispatcher.postgres import BudgetWatcher, PostgresAdmission
from services.dispatcher.processor import BatchProcessor, InEvent
from services.dispatcher.published_feed import PublishedFeed
from services.dispatcher.run_queue import CommittedOffsets, RunQueue
from services.dispatcher.settings import DispatcherSettings
from services.dispatcher.sink import DecisionSink
from services.dispatcher.ticker import Ticker
from switchboard.contracts import Serde, Topics, utc_now
from switchboard.db.session import create_async_engine
from switchboard.kafka import admin
from switchboard.kafka.consumer import Failure, RecordConsumer
from switchboard.kafka.dead_letter import DeadLetterPublisher
from switchboard.kafka.producer import RecordProducer
from switchboard.observability.logging import get_logger

log = get_logger(__name__)

SERVICE = "dispatcher"
SINK_GROUP = "switchboard-dispatcher-decisions"
# Everything the worker reads or writes.
REQUIRED_TOPICS = (
    *SOURCE_TOPICS,
    Topics.PUBLISHED,
    Topics.RUN_REQUESTED,
    Topics.STEERING,
    Topics.DISPATCH_DECISIONS,
    Topics.DEAD_LETTER,
)
# Exit code of a crash-only stop (EX_SOFTWARE): the orchestrator restarts the worker.
FATAL_EXIT_CODE = 70


class StreamDeadLetters:
    """The processor's dead-letter port on the shared ``DeadLetterPublisher``."""

    def __init__(self, publisher: DeadLetterPublisher, settings: DispatcherSettings) -> None:
        self._publisher = publisher
        self._kafka = settings.kafka

    async def publish(self, event: InEvent, code: str, message: str) -> None:
        record = ConsumerRecord(
            topic=event.topic.physical_name(self._kafka),
            partition=event.partition,
            offset=event.offset,
            timestamp=event.timestamp_ms,
            timestamp_type=0,
            key=event.key,
            value=event.value,
            checksum=None,
            serialized_key_size=len(event.key or b""),
            serialized_value_size=len(event.value or b""),
            headers=list(event.headers),
        )
        await self._publisher.publish(record, Failure(code, message[:4000], attempts=1))


class Dispatcher:
    """Everything the dispatcher process runs, wired from its settings."""

    def __init__(self, settings: DispatcherSettings) -> None:
        self.settings = settings
        kafka = settings.kafka
        self.worker_id = settings.worker_id or f"{socket.gethostname()}-{os.getpid()}"
        self.serde = Serde.from_settings(kafka)
        self.producer = RecordProducer(kafka, service=SERVICE, serde=self.serde, linger_ms=1)
        self.output_producer = RecordProducer(kafka, service=SERVICE, serde=self.serde, linger_ms=1)
        self.engine = create_async_engine(
            settings.database.url.get_secret_value(),
            pool_size=settings.database.pool_size,
            prepared_statements=settings.database.prepared_statements,
        )
        self.index = AgentIndex()
        self.feed = PublishedFeed(kafka, self.serde, self.index)
        self.budgets = BudgetWatcher(self.engine, refresh_s=settings.budget_refresh_s)
        self.config = PolicyConfig(
            lease_s=settings.lease_s,
            start_lease_s=settings.start_lease_s,
            max_attempts=settings.max_attempts,
            reply_interval_s=settings.reply_interval_s,
            state_ttl_s=settings.state_ttl_s,
            max_queued_s=settings.max_queued_s,
            # Unique per start (a restarted pod keeps its host name and pid 1).
            incarnation=f"{self.worker_id}/{secrets.token_hex(4)}",
        )
        self.ticker = Ticker(
            emitter=self.producer,
            worker_id=self.worker_id,
            interval_s=settings.tick_interval_s,
            state_ttl_s=settings.state_ttl_s,
            clock=utc_now,
            incarnation=self.config.incarnation,
        )
        self.admission = PostgresAdmission(
            settings.database.url.get_secret_value(),
            window_s=settings.rate_window_s,
            default_limit=settings.default_rate_limit,
            prepared_statements=settings.database.prepared_statements,
        )
        self.faust = DispatcherApp(
            settings, on_batch=self._on_batch, on_timer=self._on_timer, on_rebalanced=self._on_rebalanced
        )
        self.faust.on_fatal = lambda: _exit_now(FATAL_EXIT_CODE)  # type: ignore[method-assign]
        self.store = TableStore(self.faust.table)
        dead_letters = DeadLetterPublisher(self.producer, service=SERVICE, consumer_group=app_id(kafka))
        self.run_queue: RunQueue | None = None
        self.runner_offsets: CommittedOffsets | None = None
        if settings.runner_group:
            self.run_queue = RunQueue(
                settings.runner_offsets_refresh_s,
                horizon_s=settings.max_queued_s + max(settings.start_lease_s, settings.lease_s),
            )
            self.runner_offsets = CommittedOffsets(
                kafka, kafka.consumer_group(settings.runner_group), Topics.RUN_REQUESTED.physical_name(kafka)
            )
        self.processor = BatchProcessor(
            store=self.store,
            emitter=self.producer,
            output_emitter=self.output_producer,
            admission=self.admission,
            dead_letters=StreamDeadLetters(dead_letters, settings),
            index=self.index,
            budgets=self.budgets.current,
            config=self.config,
            serde=self.serde,
            due=self.ticker,
            no_match=NoMatchWatch(
                window_s=settings.no_match_window_s,
                threshold=settings.no_match_threshold,
                min_dispatches=settings.no_match_min_dispatches,
            ),
            run_queue=self.run_queue,
            clock=utc_now,
        )
        self.sink: RecordConsumer | None = None
        if settings.decision_sink_enabled:
            group = f"{kafka.topic_prefix}{SINK_GROUP}"
            self.sink = RecordConsumer(
                service=f"{SERVICE}-sink",
                kafka=kafka,
                topics=[Topics.DISPATCH_DECISIONS],
                group_id=group,
                batch_handler=DecisionSink(self.engine).write,
                dead_letters=DeadLetterPublisher(self.producer, service=f"{SERVICE}-sink", consumer_group=group),
                max_batch=500,
                serde=self.serde,
                # The table is for people and reports, not on any reply's path: fewer, fuller batches
                # (one insert per batch) under load; a decision lands at most this much later.
                consumer_options={"fetch_max_wait_ms": settings.sink_batch_wait_ms, "fetch_min_bytes": 1_048_576},
                across_partitions=True,
            )
        self._rebuild_due = False
        self._stopping = asyncio.Event()

    # --------------------------------------------------------------------------- callbacks

    async def _on_batch(self, events: Sequence[InEvent]) -> None:
        if not self.feed.caught_up.is_set():
            # Never judge a message against a half-read index. Stopping meanwhile: exit
            # without acknowledging the batch (nothing was done; it is replayed).
            waiter = asyncio.ensure_future(self.feed.caught_up.wait())
            stopping = asyncio.ensure_future(self._stopping.wait())
            await asyncio.wait({waiter, stopping}, return_when=asyncio.FIRST_COMPLETED)
            stopping.cancel()
            if not self.feed.caught_up.is_set():
                waiter.cancel()
                log.warning("stopping before the published index caught up; batch left for replay")
                _exit_now(0)
        try:
            await self.processor.process(events)
        except Exception:
            # Only the commit path can get here (handling errors are dead-lettered): the
            # local state may be ahead of what the broker acknowledged. Crash, do not go
            # on: returning or raising would let faust acknowledge the batch, a graceful
            # stop would commit it; the restart recovers from the changelog and replays.
            log.critical("batch commit failed; exiting so the batch is replayed", exc_info=True)
            _exit_now(FATAL_EXIT_CODE)

    async def _on_timer(self) -> None:
        if not self.faust.ready:
            return
        if self._rebuild_due:
            self._rebuild_due = False
            held = self.ticker.rebuild(self.store.items())
            log.info("conversation table recovered", extra={"conversations": held})
        try:
            await self.ticker.tick()
        except Exception:
            log.error("sending ticks failed; retrying at the next interval", exc_info=True)
        self.processor.expire_watch(utc_now())

    def _on_rebalanced(self) -> None:
        self._rebuild_due = True

    # --------------------------------------------------------------------------- life cycle

    async def ready(self) -> bool:
        sink_ready = self.sink is None or await self.sink.ready()
        return self.feed.caught_up.is_set() and self.faust.serving and sink_ready

    async def _topics_ready(self, stop: asyncio.Event) -> bool:
        """Wait until every topic the dispatcher touches exists with its registered shape.

        Creating topics is the operator's step (``switchboard topics create``); a worker
        started before it stays unready and says what is missing, rather than letting
        faust subscribe to half of its sources.
        """
        kafka = self.settings.kafka
        wanted = {t.physical_name(kafka): t.partition_count(kafka) for t in REQUIRED_TOPICS}
        last_warning = 0.0
        while not stop.is_set():
            try:
                listing = await admin.describe_topics(kafka, wait_s=2)
                have = {t["topic"]: t["on_broker"] for t in listing}
            except Exception:
                have = {}
            problems = {name: have.get(name) for name, count in wanted.items() if have.get(name) != count}
            if not problems:
                return True
            if time.monotonic() - last_warning > 10:
                last_warning = time.monotonic()
                log.warning("waiting for topics (name: partitions on the broker)", extra={"topics": problems})
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=1.0)
        return False

    async def run(self, stop: asyncio.Event) -> None:
        if not await self._topics_ready(stop):
            await self.engine.dispose()
            return
        await self.producer.start()
        await self.output_producer.start()
        background: list[asyncio.Task[None]] = []
        try:
            background.append(_task(self.feed.run(stop), "published-feed"))
            background.append(_task(self.budgets.run(stop), "budget-watcher"))
            if self.sink is not None:
                background.append(_task(self.sink.run(stop), "decision-sink"))
            if self.run_queue is not None and self.runner_offsets is not None:
                background.append(_task(self.run_queue.run(stop, self.runner_offsets), "runner-offsets"))
            await self.faust.start()
            log.info(
                "dispatcher started",
                extra={"app_id": app_id(self.settings.kafka), "worker_id": self.worker_id},
            )
            await stop.wait()
        finally:
            log.info("dispatcher stopping")
            self._stopping.set()
            try:
                await asyncio.wait_for(self.faust.stop(), timeout=25)
            except Exception:
                log.error("faust did not stop cleanly", exc_info=True)
            stop.set()
            if background:
                await asyncio.wait(background, timeout=30)
            if self.runner_offsets is not None:
                await self.runner_offsets.close()
            await self.output_producer.stop()
            await self.producer.stop()
            await self.admission.close()
            await self.engine.dispose()


def _exit_now(code: int) -> None:
    """Leave at once: no graceful stop, so faust commits nothing more (crash-only)."""
    for handler in logging.getLogger().handlers:
        handler.flush()
    os._exit(code)


def _task(coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
    task = asyncio.create_task(coro, name=name)

    def _done(t: asyncio.Task[None]) -> None:
        if not t.cancelled() and t.exception() is not None:
            log.error("background task failed", extra={"task": name}, exc_info=t.exception())

    task.add_done_callback(_done)
    return task
