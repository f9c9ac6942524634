"""Messages for active runs from the ``steering`` topic, delivered at the next turn boundary.

Every runner process reads *every* steering partition with its own consumer
(no consumer group, from the end): the run a message is for may live on any
runner, since runs stay where they started while partitions move on
rebalances. Steering is low volume (one record per message for a busy
conversation), so each process reading all of it costs little; a process
keeps the messages of the runs it holds and ignores the rest. A message that
arrives before its run was taken (the dispatcher sends ``run_requested`` and
``steering`` on two topics) is kept for a few minutes and handed over when the
run starts. No offsets are committed: a message for a run lost in a crash is
re-sent with the dispatcher's recovery (which re-dispatches all the messages).
An undecodable record is logged and skipped (not dead-lettered: every runner
process reads it, and one dead letter per process would only be noise).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable

from aiokafka import AIOKafkaConsumer

from switchboard.contracts import ContractError, Serde, SteeringMessage, Topics
from switchboard.contracts.enums import SteeringKind
from switchboard.kafka.decoding import decode_waiting
from switchboard.observability.logging import get_logger
from switchboard.settings import KafkaSettings

log = get_logger(__name__)

EARLY_MESSAGE_TTL_S = 300.0


class RunSteering:
    """The steering inbox of one run (:class:`~services.runner.loop.SteeringInbox`)."""

    def __init__(self) -> None:
        self._guidance: list[tuple[str, uuid.UUID | None]] = []
        self._interrupted = False
        self._seen: set[uuid.UUID] = set()
        self._applied: list[uuid.UUID] = []

    def deliver(self, message: SteeringMessage) -> None:
        if message.event_id in self._seen:
            return
        self._seen.add(message.event_id)
        if message.kind is SteeringKind.INTERRUPT:
            self._interrupted = True
        elif message.text.strip():
            source = message.source_message.message_id if message.source_message else None
            self._guidance.append((message.text.strip(), source))

    def drain(self) -> list[str]:
        guidance, self._guidance = self._guidance, []
        self._applied.extend(source for _, source in guidance if source is not None and source not in self._applied)
        return [text for text, _ in guidance]

    @property
    def applied_message_ids(self) -> tuple[uuid.UUID, ...]:
        """Steered messages the run took in at a turn boundary: it answers them, so ``run_completed``
        lists them (docs/dispatcher.md, "Steered messages share their run's outcome"); one still
        waiting for a boundary when the run ended is not listed and goes to a follow-up run."""
        return tuple(self._applied)

    @property
    def interrupted(self) -> bool:
        return self._interrupted


class SteeringRouter:
    """Routes steering messages to the inbox of their run, keeping early ones for a while."""

    def __init__(self, inbox_of: Callable[[uuid.UUID], RunSteering | None]) -> None:
        self._inbox_of = inbox_of
        self._early: dict[uuid.UUID, list[tuple[float, SteeringMessage]]] = {}

    def route(self, message: SteeringMessage) -> None:
        inbox = self._inbox_of(message.run_id)
        if inbox is not None:
            inbox.deliver(message)
            return
        self._expire()
        self._early.setdefault(message.run_id, []).append((time.monotonic(), message))

    def adopt(self, run_id: uuid.UUID, inbox: RunSteering) -> None:
        """Hand messages that arrived before the run started to its new inbox."""
        for _, message in self._early.pop(run_id, []):
            inbox.deliver(message)

    def _expire(self) -> None:
        cutoff = time.monotonic() - EARLY_MESSAGE_TTL_S
        for run_id in [r for r, items in self._early.items() if items[-1][0] < cutoff]:
            del self._early[run_id]


class SteeringListener:
    """Reads every partition of ``steering`` from the end and routes what it reads."""

    def __init__(self, *, kafka: KafkaSettings, serde: Serde, router: SteeringRouter, client_id: str) -> None:
        self._kafka = kafka
        self._serde = serde
        self._router = router
        self._client_id = client_id
        self._ready = asyncio.Event()

    async def ready(self) -> bool:
        return self._ready.is_set()

    async def wait_ready(self, timeout_s: float) -> None:
        await asyncio.wait_for(self._ready.wait(), timeout_s)

    async def run(self, stop: asyncio.Event) -> None:
        consumer = AIOKafkaConsumer(
            Topics.STEERING.physical_name(self._kafka),
            **self._kafka.client_options(),
            client_id=f"{self._kafka.client_id}-{self._client_id}-steering",
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="latest",
        )
        await consumer.start()
        try:
            # Resolve the starting positions now, so anything sent from here on is seen.
            for _ in range(100):
                if consumer.assignment():
                    break
                await asyncio.sleep(0.05)
            for tp in consumer.assignment():
                await consumer.position(tp)
            self._ready.set()
            while not stop.is_set():
                batches = await consumer.getmany(timeout_ms=250, max_records=500)
                for records in batches.values():
                    for record in records:
                        await self._handle(record.value, record.topic, record.partition, record.offset)
        finally:
            await consumer.stop()

    async def _handle(self, value: bytes | None, topic: str, partition: int, offset: int) -> None:
        where = {"topic": topic, "partition": partition, "offset": offset}
        try:
            # The registry down: wait for it (skipped, the customer's steered message was lost).
            message = await decode_waiting(self._serde, Topics.STEERING, value, where)
        except ContractError as exc:
            log.warning(
                "undecodable steering record skipped",
                extra={"topic": topic, "partition": partition, "offset": offset, "error_code": str(exc.code)},
            )
            return
        self._router.route(message)
