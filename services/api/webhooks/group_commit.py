"""Group commit of webhook deliveries: deliveries that arrive together share one transaction.

Why: a delivery's own work is small; what it costs is its transaction — the round trips to
route it, set the tenant, read the secret, and the commit (docs/benchmarks.md "API"). WAHA
sends many small deliveries at once (a message, its echo, two receipts per reply), so
sharing those fixed costs is what lets one API process ingest several times more.

How: a request queues its delivery and waits. Each of ``writers`` tasks takes everything
waiting (up to ``max_batch``), runs ``service.handle_deliveries`` in one transaction and
answers every request of the batch after the commit, so an acknowledged delivery is as
durable as before (WAHA does not send it again). Nothing waits for a batch to fill: a
lone delivery goes at once, and a batch is whatever arrived while the previous one was
being written, so the batches grow with the load and latency does not.

When a batch's transaction fails (a database error, a deadlock between replicas, a bug
hit by one delivery), it is rolled back and each of its deliveries is written again in a
transaction of its own: one bad delivery fails alone, with the error it would have had
without batching, and the others are stored.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field

from prometheus_client import Counter, Histogram
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from services.api.webhooks import service
from services.api.webhooks.schemas import WebhookResult
from switchboard.contracts import Serde
from switchboard.crypto import KeyRing
from switchboard.observability.logging import get_logger

log = get_logger(__name__)

BATCH_SIZE = Histogram(
    "switchboard_webhook_batch_size",
    "Webhook deliveries written in one transaction",
    buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256),
)
BATCH_RETRIES = Counter(
    "switchboard_webhook_batch_retries_total",
    "Batches whose shared transaction failed and whose deliveries were written one by one",
)


class WriterStopped(RuntimeError):
    """A delivery reached a group commit that is not running (shutdown): the request fails, WAHA retries."""


@dataclass(slots=True)
class _Pending:
    delivery: service.Delivery
    answer: asyncio.Future[WebhookResult] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


@dataclass
class BatchStats:
    """What the writers did since start (tests and the benchmark read it)."""

    batches: int = 0
    largest_batch: int = 0
    retried_batches: int = 0


class WebhookGroupCommit:
    """The API's webhook writer: ``submit`` a delivery, get its answer once it is committed."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        *,
        keyring: KeyRing,
        serde: Serde,
        writers: int = 2,
        max_batch: int = 64,
        on_commit: Callable[[], None] | None = None,
    ) -> None:
        self._sessions = sessions
        self._keyring = keyring
        self._serde = serde
        self._writers = writers
        self._max_batch = max_batch
        # Called after a commit that wrote outbox records (the in-process relay's ``wake``).
        self._on_commit = on_commit
        self._queue: asyncio.Queue[_Pending] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []
        self.stats = BatchStats()

    @property
    def running(self) -> bool:
        """Every writer task is alive (the API's readiness says so)."""
        return bool(self._tasks) and not any(task.done() for task in self._tasks)

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._write_forever(), name=f"webhook-writer-{number}")
            for number in range(self._writers)
        ]

    async def stop(self) -> None:
        """Write what is queued, then stop (the server has stopped taking requests by now)."""
        while not self._queue.empty() and any(not task.done() for task in self._tasks):
            await asyncio.sleep(0.01)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        while not self._queue.empty():
            self._queue.get_nowait().answer.set_exception(WriterStopped("the webhook writer stopped"))

    async def submit(self, delivery: service.Delivery) -> WebhookResult:
        """The delivery's answer once committed; its ``ApiError`` when refused."""
        if not self._tasks:
            raise WriterStopped("the webhook writer is not running")
        pending = _Pending(delivery)
        self._queue.put_nowait(pending)
        return await pending.answer

    async def _write_forever(self) -> None:
        while True:
            batch = [await self._queue.get()]
            while len(batch) < self._max_batch and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            try:
                await self._write(batch)
            except asyncio.CancelledError:
                for pending in batch:
                    _answer(pending, WriterStopped("the webhook writer stopped"))
                raise
            except Exception as exc:  # a writer must not die: every later delivery would wait forever
                log.exception("webhook writer failed", extra={"deliveries": len(batch)})
                for pending in batch:
                    _answer(pending, exc)

    async def _write(self, batch: list[_Pending]) -> None:
        self._count(len(batch))
        try:
            outcomes = await self._transaction([pending.delivery for pending in batch])
        except Exception as exc:  # the whole batch is rolled back: write each alone
            if len(batch) == 1:
                _answer(batch[0], exc)
                return
            self.stats.retried_batches += 1
            BATCH_RETRIES.inc()
            log.warning(
                "webhook batch failed; writing its deliveries one by one",
                extra={"deliveries": len(batch), "error_type": type(exc).__name__},
            )
            for pending in batch:
                await self._write_alone(pending)
            return
        self._committed(outcomes)
        for pending, outcome in zip(batch, outcomes, strict=True):
            _answer(pending, outcome)

    async def _write_alone(self, pending: _Pending) -> None:
        outcome: WebhookResult | BaseException
        try:
            (outcome,) = await self._transaction([pending.delivery])
            self._committed([outcome])
        except Exception as exc:
            outcome = exc
        _answer(pending, outcome)

    def _committed(self, outcomes: list[service.Outcome]) -> None:
        if self._on_commit is not None and any(isinstance(o, WebhookResult) and o.dispatched for o in outcomes):
            self._on_commit()

    async def _transaction(self, deliveries: list[service.Delivery]) -> list[service.Outcome]:
        async with self._sessions() as session, session.begin():
            return await session.run_sync(
                lambda sync: service.handle_deliveries(
                    sync, keyring=self._keyring, serde=self._serde, deliveries=deliveries
                )
            )

    def _count(self, size: int) -> None:
        BATCH_SIZE.observe(size)
        self.stats.batches += 1
        self.stats.largest_batch = max(self.stats.largest_batch, size)


def _answer(pending: _Pending, outcome: WebhookResult | BaseException) -> None:
    if pending.answer.done():  # the request went away (client disconnected)
        return
    if isinstance(outcome, BaseException):
        pending.answer.set_exception(outcome)
    else:
        pending.answer.set_result(outcome)
