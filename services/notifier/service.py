"""The notifier process: wiring (settings, database, HTTP client, channel plugins, consumer) and its life cycle.

One ``RecordConsumer`` reads ``run_completed``, ``handoff_triggered`` and ``insights``
(error policy, dead letters, commits after handling); ``handlers.py`` does the work.
The partitions of a fetch are handled side by side, each in order; a send that failed
transiently is retried in the background (``retries.py``), so no record waits behind
another's retries. A sweep task marks claims a stopped notifier left ``sending`` as
``unknown`` (``NOTIFIER_STALE_CLAIM_S``), once at start and every ``NOTIFIER_SWEEP_INTERVAL_S``.
A third task sends each org's Home digest to its webhook in the morning (``digest_push.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

import httpx

from services.notifier.channels import ChannelRegistry
from services.notifier.digest_push import run_digest_pushes
from services.notifier.handlers import Hooks, NotifierHandlers
from services.notifier.retry import RetryPolicy
from services.notifier.settings import NotifierSettings
from services.notifier.store import NotifierStore
from switchboard.contracts import Serde, Topics
from switchboard.crypto import KeyRing
from switchboard.db.session import create_async_engine, create_async_sessionmaker
from switchboard.egress import GuardedTransport
from switchboard.kafka.consumer import RecordConsumer
from switchboard.kafka.dead_letter import DeadLetterPublisher
from switchboard.kafka.producer import RecordProducer
from switchboard.lifecycle import until_stopped
from switchboard.observability.logging import get_logger

log = get_logger(__name__)

SERVICE = "notifier"
TOPICS = (Topics.RUN_COMPLETED, Topics.HANDOFF_TRIGGERED, Topics.INSIGHTS, Topics.HUMAN_MESSAGES)


@dataclass
class NotifierOverrides:
    """What tests replace (everything else is the production wiring)."""

    keyring: KeyRing | None = None
    hooks: Hooks | None = None


class Notifier:
    """Build with settings, then ``await serve(stop)``; ``ready()`` answers the readiness probe."""

    def __init__(self, settings: NotifierSettings, overrides: NotifierOverrides | None = None) -> None:
        self.settings = settings
        self._overrides = overrides or NotifierOverrides()
        self._consumer: RecordConsumer | None = None
        self.handlers: NotifierHandlers | None = None  # tests: the retry queue

    async def ready(self) -> bool:
        return self._consumer is not None and await self._consumer.ready()

    async def serve(self, stop: asyncio.Event) -> None:
        settings = self.settings
        engine = create_async_engine(
            settings.database.url.get_secret_value(),
            pool_size=settings.db_pool_size,
            prepared_statements=settings.database.prepared_statements,
        )
        serde = Serde.from_settings(settings.kafka)
        producer = RecordProducer(settings.kafka, service=SERVICE, serde=serde)
        # Every call this client makes goes to a URL a tenant set, except the platform's own WAHA.
        policy = settings.egress.policy(trusted_urls=(settings.waha_base_url,))
        client = httpx.AsyncClient(follow_redirects=False, transport=GuardedTransport(policy))
        await producer.start()
        store = NotifierStore(
            create_async_sessionmaker(engine),
            self._overrides.keyring or KeyRing.from_settings(settings.runtime),
            waha_base_url=settings.waha_base_url,
            waha_api_key=settings.waha_api_key.get_secret_value() if settings.waha_api_key is not None else None,
        )
        handlers = NotifierHandlers(
            store,
            ChannelRegistry(client, timeout_s=settings.send_timeout_s),
            RetryPolicy(
                settings.send_max_attempts,
                settings.send_backoff_initial_s,
                settings.send_backoff_max_s,
                settings.send_echo_wait_s,
            ),
            self._overrides.hooks,
        )
        group = settings.kafka.consumer_group(settings.group_id)  # scoped like the topics
        self._consumer = RecordConsumer(
            service=SERVICE,
            kafka=settings.kafka,
            topics=TOPICS,
            group_id=group,
            handler=handlers.handle,
            dead_letters=DeadLetterPublisher(producer, service=SERVICE, consumer_group=group),
            serde=serde,
            # Sends wait on the channel: the partitions (conversations) of a fetch go side by side,
            # each partition still in order, so one slow channel answer does not hold up the rest.
            concurrent_partitions=True,
        )
        self.handlers = handlers
        consumer_task = asyncio.create_task(self._consumer.run(stop), name="notifier-consumer")
        tasks = [consumer_task, asyncio.create_task(self._sweep(store, handlers, stop), name="notifier-sweep")]
        if settings.digest_interval_s > 0:
            pushes = run_digest_pushes(store, handlers.notifications, settings.digest_interval_s, stop)
            tasks.append(asyncio.create_task(pushes, name="notifier-digest-push"))
        log.info("notifier delivering", extra={"group_id": settings.group_id, "waha_base_url": settings.waha_base_url})
        try:
            await until_stopped(stop, consumer_task)
            await consumer_task
        except asyncio.CancelledError:
            # This task cancelled (killed, or a crash in tests): no grace. Retries and sends in flight
            # stop where they are and their rows stay as a kill leaves them, for the next notifier's
            # sweep — with a grace they ran on while the consumer shut down and wrote outcomes a kill
            # never would. A consumer task that merely ended cancelled is not a kill: the stop's grace holds.
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                await handlers.abandon()
            raise
        finally:
            # Nothing past the last handled record is committed.
            for task in tasks:
                if not task.done():
                    task.cancel()
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    await task
            with contextlib.suppress(Exception):
                await handlers.close(settings.retry_grace_s)
            await client.aclose()
            await producer.stop()
            await engine.dispose()

    async def _sweep(self, store: NotifierStore, handlers: NotifierHandlers, stop: asyncio.Event) -> None:
        """Claims left ``sending`` by a notifier that stopped mid-retry become ``unknown`` (retries.py);
        notifications it left ``pending`` are sent again (notifications.py)."""
        while not stop.is_set():
            try:
                expired = await store.expire_stale_claims(self.settings.stale_claim_s)
                if expired:
                    log.warning("stale delivery claims marked unknown", extra={"count": expired})
                resent = await handlers.resend_stale_notifications(self.settings.stale_claim_s)
                if resent:
                    log.warning("pending notifications sent again", extra={"count": resent})
            except Exception as exc:  # the database away: the next sweep tries again
                log.warning("delivery claim sweep failed", extra={"error": type(exc).__name__})
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=self.settings.sweep_interval_s)


async def run(stop: asyncio.Event, settings: NotifierSettings) -> None:
    """Run until ``stop`` is set (``switchboard notifier``)."""
    await Notifier(settings).serve(stop)
