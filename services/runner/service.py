"""The runner process: wiring (the one place settings, clients and handlers meet) and its life cycle.

Tasks of a running process:

- the ``run_requested`` consumer (shared ``RecordConsumer``: error policy, dead
  letters, commits) whose handler only hands runs to the supervisor, with the
  supervisor as its flow control (back-pressure);
- one task per run in flight (``services.runner.execution``);
- the steering listener, the heartbeater, the run-event publisher and the usage fold
  (``services.runner.usage_fold``).

Stopping (SIGTERM): the consumer stops and commits, in-flight runs finish or
are handed back (``services.runner.runtime``), then the background tasks, the
producer, the provider connections and the database pool are closed.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

from services.runner.autonomy_store import AutonomyPreload, AutonomyStore
from services.runner.clock import ClockPreload, with_clock
from services.runner.compact import Compactor
from services.runner.context import default_builders
from services.runner.credentials import CredentialResolver
from services.runner.events import RunEventPublisher
from services.runner.execution import RunExecutor, RunnerDeps, ToolBoxFactory
from services.runner.heartbeats import Heartbeater
from services.runner.memory import FactRetriever, FactsPreload, with_memory
from services.runner.providers import ProviderRegistry, build_providers
from services.runner.runtime import RunSupervisor
from services.runner.settings import RunnerSettings
from services.runner.slash_store import ModePreload, SlashStore
from services.runner.state import StateNotePreload, StateStore, with_state
from services.runner.steering import SteeringListener
from services.runner.store import RunStore
from services.runner.summary import ThreadSummarizer
from services.runner.sweep import StaleRunSweeper
from services.runner.tools import ToolCatalog
from services.runner.turns import TurnPlanner
from services.runner.usage_fold import UsageFolder
from services.runner.wake import FollowupLinker, with_followup_context
from switchboard.contracts import Serde, Topics
from switchboard.crypto import KeyRing
from switchboard.db.session import create_async_engine, create_async_sessionmaker
from switchboard.kafka.consumer import RecordConsumer
from switchboard.kafka.dead_letter import DeadLetterPublisher
from switchboard.kafka.producer import RecordProducer
from switchboard.lifecycle import until_stopped
from switchboard.observability.logging import get_logger
from switchboard.run_tokens import RunTokenSettings

log = get_logger(__name__)

SERVICE = "runner"


@dataclass
class RunnerOverrides:
    """What tests and the benchmark replace (everything else is the production wiring)."""

    providers: ProviderRegistry | None = None
    toolbox_factory: ToolBoxFactory | None = None
    keyring: KeyRing | None = None


class Runner:
    """Build with settings, then ``await serve(stop)``; ``ready()`` answers the readiness probe."""

    def __init__(self, settings: RunnerSettings, overrides: RunnerOverrides | None = None) -> None:
        self.settings = settings
        self._overrides = overrides or RunnerOverrides()
        self.supervisor: RunSupervisor | None = None
        self._consumer: RecordConsumer | None = None
        self._steering: SteeringListener | None = None
        self._started = asyncio.Event()
        self.summarizer: ThreadSummarizer | None = None

    async def ready(self) -> bool:
        return (
            self._consumer is not None
            and await self._consumer.ready()
            and self._steering is not None
            and await self._steering.ready()
        )

    async def wait_started(self, timeout_s: float = 30.0) -> None:
        """Tests: until the consumer and the steering listener run."""
        await asyncio.wait_for(self._started.wait(), timeout_s)
        assert self._steering is not None
        await self._steering.wait_ready(timeout_s)

    async def serve(self, stop: asyncio.Event) -> None:
        settings = self.settings
        engine = create_async_engine(
            settings.database.url.get_secret_value(),
            pool_size=settings.db_pool_size,
            max_overflow=settings.db_pool_size,
            prepared_statements=settings.database.prepared_statements,
        )
        serde = Serde.from_settings(settings.kafka)
        producer = RecordProducer(settings.kafka, service=SERVICE, serde=serde)
        providers = self._overrides.providers or build_providers(settings.providers)
        await producer.start()
        memory_sessions = create_async_sessionmaker(engine)
        facts = FactRetriever(memory_sessions)
        store = RunStore(
            create_async_sessionmaker(engine),
            serde,
            runner_id=settings.runner_id,
            # Per-run context read in the claim transaction (services/runner/preload.py).
            preloads=(ModePreload(), StateNotePreload(), FactsPreload(), AutonomyPreload(), ClockPreload()),
        )
        publisher = RunEventPublisher(producer, maxsize=settings.event_queue_size)
        summarizer = self.summarizer = ThreadSummarizer(
            memory_sessions,
            providers,
            price=store.price,
            call_timeout_s=settings.model_call_timeout_s,
            reasoning_allowance_tokens=settings.reasoning_allowance_tokens,
        )
        linker = FollowupLinker(memory_sessions)
        state = StateStore(memory_sessions)
        deps = RunnerDeps(
            settings=settings,
            store=store,
            providers=providers,
            credentials=CredentialResolver(
                keyring=self._overrides.keyring or KeyRing.from_settings(settings.runtime),
                platform_keys=settings.platform_keys(),
                provider_settings=settings.providers,
            ),
            publisher=publisher,
            egress=settings.egress.policy(
                trusted_urls=tuple(settings.providers.base_url(p) for p in ("anthropic", "openai", "google"))
            ),
            tool_catalog=ToolCatalog(),
            token_secret=RunTokenSettings().secret(settings.runtime),
            toolbox_factory=self._overrides.toolbox_factory,
            autonomy=AutonomyStore(create_async_sessionmaker(engine), serde),  # issue 6, docs/autonomy.md
            # Issue 6, docs/memory.md: long-term facts in the prompt; summary and follow-up link after a run.
            builders=lambda _store: with_followup_context(
                with_clock(with_state(with_memory(default_builders(), facts), state)), memory_sessions
            ),
            state=state,  # issue 6, docs/memory.md "State": conclusions kept, tool chatter left in the trace
            after_run=(summarizer.after_run, linker.after_run),
            # Issue 6 item 4, docs/agent-context.md "Slash commands".
            turns=TurnPlanner(SlashStore(memory_sessions, serde)),
            compact=Compactor(summarizer),
        )
        supervisor = RunSupervisor(RunExecutor(deps), max_in_flight=settings.max_in_flight)
        self.supervisor = supervisor
        group = settings.kafka.consumer_group(settings.group_id)  # scoped like the topics
        self._consumer = RecordConsumer(
            service=SERVICE,
            kafka=settings.kafka,
            topics=[Topics.RUN_REQUESTED],
            group_id=group,
            handler=supervisor.accept,
            dead_letters=DeadLetterPublisher(producer, service=SERVICE, consumer_group=group),
            serde=serde,
            flow=supervisor,
        )
        self._steering = SteeringListener(
            kafka=settings.kafka, serde=serde, router=supervisor.router, client_id=settings.runner_id
        )
        background_stop = asyncio.Event()
        heartbeater = Heartbeater(
            producer=producer,
            store=store,
            runner_id=settings.runner_id,
            interval_s=settings.heartbeat_s,
            beats=supervisor.beats,
        )
        background = [
            asyncio.create_task(publisher.run(background_stop), name="run-events"),
            asyncio.create_task(self._steering.run(background_stop), name="steering"),
            asyncio.create_task(heartbeater.run(background_stop), name="heartbeats"),
            asyncio.create_task(
                UsageFolder(engine, interval_s=settings.usage_fold_s).run(background_stop), name="usage-fold"
            ),
            asyncio.create_task(
                StaleRunSweeper(
                    store, interval_s=settings.stale_sweep_interval_s, older_than_s=settings.stale_sweep_after_s
                ).run(background_stop),
                name="stale-run-sweep",
            ),
        ]
        consumer_task = asyncio.create_task(self._consumer.run(stop), name="run-requested")
        self._started.set()
        log.info(
            "runner taking runs",
            extra={
                "runner_id": settings.runner_id,
                "max_in_flight": settings.max_in_flight,
                "mcp_url": settings.mcp_url,
            },
        )
        try:
            await until_stopped(stop, consumer_task)
        finally:
            await self._stop(consumer_task, supervisor, background_stop, background)
            await producer.stop()
            await summarizer.close()
            await linker.close()
            await providers.aclose()
            await engine.dispose()

    async def _stop(
        self,
        consumer_task: asyncio.Task[None],
        supervisor: RunSupervisor,
        background_stop: asyncio.Event,
        background: list[asyncio.Task[None]],
    ) -> None:
        # 1. stop taking runs (the consumer commits what it handed over and leaves the group).
        with contextlib.suppress(Exception):
            await consumer_task
        # 2. finish or hand back what is in flight.
        await supervisor.shutdown(self.settings.shutdown_grace_s)
        # 3. the background tasks: events are flushed last.
        background_stop.set()
        results = await asyncio.gather(*background, return_exceptions=True)
        for task, result in zip(background, results, strict=True):
            if isinstance(result, Exception):
                log.warning(
                    "background task ended with an error", extra={"task": task.get_name(), "error": repr(result)}
                )


async def run(stop: asyncio.Event, settings: RunnerSettings) -> None:
    """Run until ``stop`` is set (``switchboard runner``)."""
    await Runner(settings).serve(stop)
