"""The brief process: consumes ``run_completed``, ``handoff_triggered`` and ``insights``
and materializes the Home digest per org and day, evaluating agent budgets after each run,
and composes each org's digest when its local day begins (docs/brief.md). Wiring and life
cycle only; the work is in ``handler`` and ``morning``."""

from __future__ import annotations

import asyncio
import contextlib

from services.brief.catalog import load_catalog
from services.brief.handler import BriefHandler
from services.brief.morning import run_mornings
from services.brief.settings import BriefSettings
from switchboard.contracts import Serde, Topics
from switchboard.db.session import create_async_engine, create_async_sessionmaker
from switchboard.kafka.consumer import RecordConsumer
from switchboard.kafka.dead_letter import DeadLetterPublisher
from switchboard.kafka.producer import RecordProducer
from switchboard.lifecycle import until_stopped
from switchboard.observability.logging import get_logger

log = get_logger(__name__)

SERVICE = "brief"
TOPICS = (Topics.RUN_COMPLETED, Topics.HANDOFF_TRIGGERED, Topics.INSIGHTS)
# A fetch is answered when it holds this much or BRIEF_BATCH_WAIT_MS passed, whichever is first.
FILL_BYTES = 1_048_576


class Brief:
    """Build with settings, then ``await serve(stop)``; ``ready()`` answers the readiness probe."""

    def __init__(self, settings: BriefSettings) -> None:
        self.settings = settings
        self._consumer: RecordConsumer | None = None
        self._started = asyncio.Event()

    async def ready(self) -> bool:
        return self._consumer is not None and await self._consumer.ready()

    async def wait_started(self, timeout_s: float = 30.0) -> None:
        await asyncio.wait_for(self._started.wait(), timeout_s)

    async def serve(self, stop: asyncio.Event) -> None:
        settings = self.settings
        catalog = load_catalog()
        engine = create_async_engine(
            settings.database.url.get_secret_value(),
            pool_size=settings.db_pool_size,
            max_overflow=0,
            prepared_statements=settings.database.prepared_statements,
        )
        sessions = create_async_sessionmaker(engine)
        serde = Serde.from_settings(settings.kafka)
        producer = RecordProducer(settings.kafka, service=SERVICE, serde=serde)
        await producer.start()
        group = settings.kafka.consumer_group(settings.group_id)  # scoped like the topics
        self._consumer = RecordConsumer(
            service=SERVICE,
            kafka=settings.kafka,
            topics=TOPICS,
            group_id=group,
            batch_handler=BriefHandler(sessions, serde, catalog),
            dead_letters=DeadLetterPublisher(producer, service=SERVICE, consumer_group=group),
            serde=serde,
            max_batch=settings.max_batch,
            consumer_options={"fetch_max_wait_ms": settings.batch_wait_ms, "fetch_min_bytes": FILL_BYTES},
            across_partitions=True,
        )
        task = asyncio.create_task(self._consumer.run(stop), name="brief-consumer")
        tasks = [task]
        if settings.morning_interval_s > 0:
            mornings = run_mornings(sessions, catalog, settings.morning_interval_s, stop, after=self.ready)
            tasks.append(asyncio.create_task(mornings, name="brief-mornings"))
        self._started.set()
        log.info("brief consuming", extra={"group_id": settings.group_id})
        try:
            await until_stopped(stop, task)
        finally:
            for running in tasks:
                with contextlib.suppress(Exception):
                    await running
            await producer.stop()
            await engine.dispose()
