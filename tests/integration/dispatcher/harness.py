"""Test harness for the dispatcher: real worker processes, a stand-in runner, an observer.

- :class:`WorkerProcess` runs ``switchboard dispatcher`` as a subprocess with the test's
  topic prefix, database and short timings, and waits for ``/readyz``.
- :class:`StandInRunner` plays the runner: it consumes ``run_requested`` (and
  ``steering``), sends ``run_started``, heartbeats and ``run_completed`` after a short
  random delay, and records when each run started and ended.
- :class:`Observer` reads what the dispatcher produced (run requests, decisions,
  steering, completions, dead letters) from the beginning of the test's topics.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from aiokafka import AIOKafkaConsumer, TopicPartition

from switchboard.contracts import (
    AgentPublished,
    AgentVersionSnapshot,
    AgentVersionStatus,
    ConcurrencyPolicy,
    ContractError,
    DeadLetter,
    DispatchDecided,
    DispatchRequested,
    FollowUpConfig,
    InboundMessage,
    PublishedChange,
    Record,
    RunCompleted,
    RunHeartbeat,
    RunRequested,
    RunStarted,
    RunStatus,
    Serde,
    SteeringKind,
    SteeringMessage,
    Topics,
    TopicSpec,
    TriggerConfig,
    Vitality,
    WakeContext,
    WakeReason,
)
from switchboard.kafka.producer import RecordProducer
from switchboard.settings import KafkaSettings
from tests.support.ports import free_port
from tests.support.stack import REPO_ROOT

# Timings for tests: short leases and windows, a fast timer.
FAST_ENV = {
    "DISPATCHER_LEASE_S": "20",
    "DISPATCHER_TICK_INTERVAL_S": "0.2",
    "DISPATCHER_REPLY_INTERVAL_S": "0",
    "DISPATCHER_SESSION_TIMEOUT_S": "6",
    "DISPATCHER_COMMIT_INTERVAL_S": "0.5",
    "DISPATCHER_BUDGET_REFRESH_S": "1",
    "DISPATCHER_DEFAULT_RATE_LIMIT": "100000",
    "SWITCHBOARD_LOG_LEVEL": "INFO",
}


# --------------------------------------------------------------------------- the worker


class WorkerProcess:
    """``switchboard dispatcher`` in a subprocess; logs go to a file of the test's tmp dir."""

    def __init__(self, kafka: KafkaSettings, database_url: str, log_dir: Path, **env: str) -> None:
        self.port = free_port()
        self.log_path = log_dir / f"dispatcher-{self.port}.log"
        self._env = {
            **os.environ,
            **FAST_ENV,
            "KAFKA_BOOTSTRAP_SERVERS": kafka.bootstrap_servers,
            "KAFKA_TOPIC_PREFIX": kafka.topic_prefix,
            "KAFKA_CONVERSATION_PARTITIONS": str(kafka.conversation_partitions),
            "DATABASE_URL": database_url,
            "DISPATCHER_HEALTH_PORT": str(self.port),
            **env,
        }
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> WorkerProcess:
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "services.cli", "dispatcher"], cwd=REPO_ROOT, env=self._env, stdout=log, stderr=log
        )
        return self

    async def wait_ready(self, timeout_s: float = 40.0) -> None:
        deadline = time.monotonic() + timeout_s
        async with httpx.AsyncClient() as client:
            while time.monotonic() < deadline:
                assert self.proc is not None and self.proc.poll() is None, f"worker exited:\n{self.logs()[-4000:]}"
                with contextlib.suppress(httpx.TransportError):
                    response = await client.get(f"http://127.0.0.1:{self.port}/readyz", timeout=1)
                    if response.status_code == 200:
                        return
                await asyncio.sleep(0.2)
        raise AssertionError(f"dispatcher never became ready:\n{self.logs()[-4000:]}")

    def kill(self) -> None:
        """SIGKILL: no graceful stop, nothing committed."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self, timeout_s: float = 30) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
            raise AssertionError(f"dispatcher did not stop on SIGTERM:\n{self.logs()[-4000:]}") from None

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    async def metrics(self) -> str:
        async with httpx.AsyncClient() as client:
            return (await client.get(f"http://127.0.0.1:{self.port}/metrics", timeout=2)).text


# --------------------------------------------------------------------------- records


def agent_snapshot(
    org_id: uuid.UUID,
    session_id: uuid.UUID,
    *,
    priority: int = 0,
    created_at: datetime | None = None,
    policy: ConcurrencyPolicy = ConcurrencyPolicy.ENQUEUE,
    trigger: TriggerConfig | None = None,
    name: str = "agent",
) -> AgentVersionSnapshot:
    created = created_at or datetime.now(UTC) - timedelta(days=1)
    return AgentVersionSnapshot(
        version_id=uuid.uuid4(),
        agent_id=uuid.uuid4(),
        version_number=1,
        agent_name=name,
        priority=priority,
        agent_created_at=created,
        system_prompt="You answer customers.",
        provider="demo",
        model="demo-1",
        tool_ids=(),
        trigger=trigger or TriggerConfig(event_types=("message",)),
        channel_session_id=session_id,
        max_steps=5,
        token_budget=10_000,
        cost_budget_cents=10,
        history_message_window=10,
        history_token_window=1000,
        handoff_keywords=(),
        followup=FollowUpConfig(),
        concurrency_policy=policy,
        status=AgentVersionStatus.PUBLISHED,
        created_at=created,
        published_at=created,
    )


def publish_record(
    org_id: uuid.UUID, snap: AgentVersionSnapshot, change: PublishedChange = PublishedChange.PUBLISHED
) -> AgentPublished:
    return AgentPublished(org_id=org_id, agent_id=snap.agent_id, change=change, version=snap)


def dispatch_record(
    org_id: uuid.UUID,
    conversation_id: uuid.UUID,
    session_id: uuid.UUID,
    text: str = "Oi, tudo bem?",
    *,
    dry_run: bool = False,
    from_me: bool = False,
) -> DispatchRequested:
    message = InboundMessage(
        message_id=uuid.uuid4(),
        external_id=f"wamid.{uuid.uuid4().hex[:12]}",
        chat_id="5511999999999@c.us",
        text=text,
        received_at=datetime.now(UTC),
        from_me=from_me,
    )
    return DispatchRequested(
        org_id=org_id,
        conversation_id=conversation_id,
        contact_id=uuid.uuid4(),
        channel_session_id=session_id,
        wake_reason=WakeReason.USER_MESSAGE,
        wake_context=WakeContext(message_id=message.message_id),
        message=message,
        dry_run=dry_run,
    )


# --------------------------------------------------------------------------- the observer


@dataclass
class Seen:
    record: Any
    at: float  # monotonic time it was read


class Observer:
    """Reads the dispatcher's outputs from the beginning of the test's topics, in the background."""

    TOPICS: tuple[TopicSpec[Any], ...] = (
        Topics.RUN_REQUESTED,
        Topics.DISPATCH_DECISIONS,
        Topics.STEERING,
        Topics.RUN_COMPLETED,
        Topics.DEAD_LETTER,
    )

    def __init__(self, kafka: KafkaSettings) -> None:
        self._kafka = kafka
        self._serde = Serde.from_settings(kafka)
        self.seen: dict[str, list[Seen]] = defaultdict(list)
        self._task: asyncio.Task[None] | None = None
        self._by_name = {t.physical_name(kafka): t for t in self.TOPICS}

    async def __aenter__(self) -> Observer:
        consumer = AIOKafkaConsumer(bootstrap_servers=self._kafka.bootstrap_servers, enable_auto_commit=False)
        await consumer.start()
        tps = [
            TopicPartition(name, p) for name, t in self._by_name.items() for p in range(t.partition_count(self._kafka))
        ]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        self._task = asyncio.create_task(self._read(consumer))
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    async def _read(self, consumer: AIOKafkaConsumer) -> None:
        try:
            while True:
                batches = await consumer.getmany(timeout_ms=100)
                now = time.monotonic()
                for tp, records in batches.items():
                    topic = self._by_name[tp.topic]
                    for raw in records:
                        try:
                            record = self._serde.decode(topic, raw.value)
                        except ContractError:
                            continue  # the poison the test planted: the dispatcher's business
                        self.seen[topic.name].append(Seen(record, now))
        finally:
            await consumer.stop()

    def records(self, topic: TopicSpec[Any]) -> list[Any]:
        return [s.record for s in self.seen[topic.name]]

    @property
    def run_requests(self) -> list[RunRequested]:
        return self.records(Topics.RUN_REQUESTED)

    @property
    def decisions(self) -> list[DispatchDecided]:
        return self.records(Topics.DISPATCH_DECISIONS)

    @property
    def steering(self) -> list[SteeringMessage]:
        return self.records(Topics.STEERING)

    @property
    def dead_letters(self) -> list[DeadLetter]:
        return self.records(Topics.DEAD_LETTER)

    async def wait_for(self, condition: Callable[[], bool], timeout_s: float = 30.0, what: str = "condition") -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            await asyncio.sleep(0.05)


# --------------------------------------------------------------------------- the stand-in runner


@dataclass(frozen=True)
class Behavior:
    """What the stand-in runner does with one run request."""

    delay_s: float = 0.05
    start: bool = True
    heartbeat: bool = True
    complete: bool = True
    status: RunStatus = RunStatus.COMPLETED


@dataclass
class RunInterval:
    run_id: uuid.UUID
    conversation_id: uuid.UUID
    started: float
    ended: float | None = None
    message_ids: tuple[uuid.UUID, ...] = ()
    status: RunStatus | None = None


@dataclass
class StandInRunner:
    """Consumes run requests and steering; answers with started, heartbeats and completed."""

    kafka: KafkaSettings
    behavior: Callable[[RunRequested], Behavior] = field(
        default=lambda rr: Behavior(delay_s=random.uniform(0.01, 0.08))
    )
    heartbeat_s: float = 0.5
    received: list[RunRequested] = field(default_factory=list)
    intervals: list[RunInterval] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._serde = Serde.from_settings(self.kafka)
        self._interrupts: dict[uuid.UUID, asyncio.Event] = {}
        self._steered: dict[uuid.UUID, list[uuid.UUID]] = defaultdict(list)
        self._taken: set[uuid.UUID] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._producer = RecordProducer(self.kafka, service="stand-in-runner", serde=self._serde, linger_ms=1)

    async def __aenter__(self) -> StandInRunner:
        await self._producer.start()
        self._consumer = AIOKafkaConsumer(
            Topics.RUN_REQUESTED.physical_name(self.kafka),
            Topics.STEERING.physical_name(self.kafka),
            bootstrap_servers=self.kafka.bootstrap_servers,
            group_id=f"stand-in-runner-{uuid.uuid4().hex[:8]}",
            auto_offset_reset="earliest",
        )
        await self._consumer.start()
        self._loop = asyncio.create_task(self._consume())
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._loop.cancel()
        for task in list(self._tasks):
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._loop
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._consumer.stop()
        await self._producer.stop()

    async def _consume(self) -> None:
        steering_name = Topics.STEERING.physical_name(self.kafka)
        while True:
            batches = await self._consumer.getmany(timeout_ms=50)
            for tp, records in batches.items():
                for raw in records:
                    if tp.topic == steering_name:
                        self._on_steering(self._serde.decode(Topics.STEERING, raw.value))
                    else:
                        request = self._serde.decode(Topics.RUN_REQUESTED, raw.value)
                        assert isinstance(request, RunRequested)
                        self.received.append(request)
                        if request.run_id in self._taken:
                            continue  # a run id runs once, as in the real runner (a re-sent request)
                        self._taken.add(request.run_id)
                        task = asyncio.create_task(self._run(request))
                        self._tasks.add(task)
                        task.add_done_callback(self._tasks.discard)

    def _on_steering(self, message: Record) -> None:
        assert isinstance(message, SteeringMessage)
        if message.kind is SteeringKind.INTERRUPT:
            self._interrupts.setdefault(message.run_id, asyncio.Event()).set()
        elif message.source_message is not None:
            self._steered[message.run_id].append(message.source_message.message_id)

    async def _run(self, request: RunRequested) -> None:
        behavior = self.behavior(request)
        if not behavior.start:
            return
        started_at = datetime.now(UTC)
        await self._producer.send(
            Topics.RUN_STARTED,
            RunStarted(
                org_id=request.org_id,
                conversation_id=request.conversation_id,
                run_id=request.run_id,
                agent_id=request.agent_id,
                version_id=request.version_id,
                attempt=request.attempt,
                parent_run_id=request.parent_run_id,
                wake_reason=request.wake_reason,
                provider="demo",
                model="demo-1",
                runner_id="stand-in",
                started_at=started_at,
                dry_run=request.dry_run,
            ),
        )
        interval = RunInterval(request.run_id, request.conversation_id, time.monotonic())
        self.intervals.append(interval)
        if not behavior.complete:
            return
        interrupted = self._interrupts.setdefault(request.run_id, asyncio.Event())
        beats = asyncio.create_task(self._heartbeats(request)) if behavior.heartbeat else None
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(interrupted.wait(), timeout=behavior.delay_s)
        if beats is not None:
            beats.cancel()
        status = RunStatus.ABORTED if interrupted.is_set() else behavior.status
        answered = (*(m.message_id for m in request.messages), *self._steered.get(request.run_id, ()))
        interval.ended = time.monotonic()
        interval.message_ids = answered
        interval.status = status
        await self._producer.send(
            Topics.RUN_COMPLETED,
            RunCompleted(
                org_id=request.org_id,
                conversation_id=request.conversation_id,
                contact_id=request.contact_id,
                channel_session_id=request.channel_session_id,
                run_id=request.run_id,
                agent_id=request.agent_id,
                version_id=request.version_id,
                attempt=request.attempt,
                parent_run_id=request.parent_run_id,
                wake_reason=request.wake_reason,
                message_ids=answered,
                dispatch_ids=request.dispatch_ids,
                status=status,
                vitality=Vitality.COMPLETED if status is RunStatus.COMPLETED else Vitality.ALIVE,
                abort_reason="interrupted" if status is RunStatus.ABORTED else None,
                provider="demo",
                model="demo-1",
                tokens_in=10,
                tokens_out=5,
                cost_micro_usd=0,
                latency_ms=int(behavior.delay_s * 1000),
                steps=1,
                dry_run=request.dry_run,
                started_at=started_at,
                completed_at=datetime.now(UTC),
            ),
        )

    async def _heartbeats(self, request: RunRequested) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_s)
            await self._producer.send(
                Topics.RUN_HEARTBEATS,
                RunHeartbeat(
                    org_id=request.org_id,
                    conversation_id=request.conversation_id,
                    run_id=request.run_id,
                    agent_id=request.agent_id,
                    attempt=request.attempt,
                    runner_id="stand-in",
                    dry_run=request.dry_run,
                ),
            )


def assert_no_overlap(intervals: Iterable[RunInterval]) -> None:
    """Per conversation, each run started after the previous one ended."""
    by_conversation: dict[uuid.UUID, list[RunInterval]] = defaultdict(list)
    for interval in intervals:
        by_conversation[interval.conversation_id].append(interval)
    for conversation, runs in by_conversation.items():
        runs.sort(key=lambda r: r.started)
        for before, after in itertools.pairwise(runs):
            assert before.ended is not None and after.started >= before.ended, (
                f"conversation {conversation}: run {after.run_id} started before {before.run_id} ended"
            )
