"""Fixtures for the outbox relay tests: a scratch database of their own, events, a topic reader.

The outbox is one global table per database and the relay's advisory lock is per
database, so these tests use a scratch database (created and migrated like the
database tests do) instead of the stack's: rows and relays of other tests can
neither be published by ours nor steal our lock. Each test starts with an empty
outbox and its own topic prefix.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from sqlalchemy import text

from switchboard.contracts import RunStarted, Serde, Topics, WakeReason, topic_named, utc_now
from switchboard.db.outbox import enqueue_record
from switchboard.db.session import normalize_url
from switchboard.kafka.outbox_relay import APPLICATION_NAME, LOCK_KEY, OutboxRelay, OutboxRelaySettings
from switchboard.settings import DatabaseSettings, KafkaSettings
from tests.integration.db.conftest import MigratedDatabase, PgServer, scratch_database
from tests.support.ports import free_port
from tests.support.stack import REPO_ROOT, StackEndpoints

ORG = uuid.UUID("6f1d2c3b-4a59-4687-9a0b-1c2d3e4f5a6b")


@pytest.fixture(scope="module")
def outbox_db(stack: StackEndpoints) -> Iterator[MigratedDatabase]:
    server = PgServer(owner_url=normalize_url(stack.database_owner_url), app_url=normalize_url(stack.database_url))
    with scratch_database(server) as database:
        assert isinstance(database, MigratedDatabase)
        yield database


@pytest.fixture(autouse=True)
def empty_outbox(outbox_db: MigratedDatabase) -> None:
    with outbox_db.owner_engine.begin() as conn:
        conn.execute(text("TRUNCATE outbox"))


def app_url(db: MigratedDatabase) -> str:
    return db.app_url.render_as_string(hide_password=False)


def relay_settings(db: MigratedDatabase, kafka: KafkaSettings, **overrides: Any) -> OutboxRelaySettings:
    """Settings for an in-process relay on the scratch database, quick to notice things."""
    values: dict[str, Any] = {
        "kafka": kafka,
        "database": DatabaseSettings(url=app_url(db)),
        "idle_poll_max_s": 0.05,
        "lock_retry_s": 0.2,
        "retry_backoff_s": 0.05,
        "retry_backoff_max_s": 0.5,
        "metadata_timeout_s": 0.5,
        "metrics_interval_s": 0.2,
        **overrides,
    }
    return OutboxRelaySettings(**values)


@asynccontextmanager
async def running_relay(settings: OutboxRelaySettings) -> AsyncIterator[OutboxRelay]:
    relay = OutboxRelay(settings, service="outbox-test")
    relay.start()
    try:
        yield relay
    finally:
        await relay.stop(timeout_s=10)


@dataclass(frozen=True)
class Event:
    """What a test enqueued: which key, its position in the key, the bytes expected on the topic."""

    event_id: str
    key: uuid.UUID
    seq: int


class Writer:
    """Enqueues ``run_started`` records through ``switchboard.db.outbox`` as the app role."""

    def __init__(self, db: MigratedDatabase, kafka: KafkaSettings) -> None:
        self._session = db.app_session
        self._serde = Serde.from_settings(kafka)
        self.events: list[Event] = []
        self._seq: dict[uuid.UUID, int] = {}

    def record(self, key: uuid.UUID) -> RunStarted:
        return RunStarted(
            org_id=ORG,
            conversation_id=key,
            run_id=uuid.uuid4(),
            agent_id=uuid.uuid4(),
            version_id=uuid.uuid4(),
            wake_reason=WakeReason.USER_MESSAGE,
            provider="demo",
            model="demo-1",
            runner_id="test",
            started_at=utc_now(),
        )

    def commit(self, keys: list[uuid.UUID], *, rollback: bool = False) -> list[Event]:
        """One transaction with one event per key (in that order); rolled back if asked."""
        written: list[Event] = []
        with self._session() as session, session.begin():
            for key in keys:
                record = self.record(key)
                enqueue_record(session, Topics.RUN_STARTED, record, serde=self._serde)
                session.flush()
                seq = self._seq.get(key, 0)
                written.append(Event(str(record.event_id), key, seq))
                if not rollback:
                    self._seq[key] = seq + 1
            if rollback:
                session.rollback()
                return written
        self.events.extend(written)
        return written

    def per_key(self) -> dict[uuid.UUID, list[str]]:
        order: dict[uuid.UUID, list[str]] = {}
        for event in self.events:
            order.setdefault(event.key, []).append(event.event_id)
        return order


@dataclass(frozen=True)
class Consumed:
    key: bytes | None
    value: bytes
    headers: dict[str, bytes]
    partition: int
    offset: int


async def read_topic(kafka: KafkaSettings, topic_name: str) -> list[Consumed]:
    """Every record of the physical topic, from the start to the current end, in offset order per partition."""
    physical = f"{kafka.topic_prefix}{topic_name}"
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka.bootstrap_servers, enable_auto_commit=False)
    await consumer.start()
    try:
        count = topic_named(topic_name).partition_count(kafka)
        partitions = [TopicPartition(physical, p) for p in range(count)]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        end = await consumer.end_offsets(partitions)
        out: list[Consumed] = []
        deadline = time.monotonic() + 30
        while [tp for tp in partitions if await consumer.position(tp) < end[tp]]:
            assert time.monotonic() < deadline, "topic not read to its end in 30 s"
            batch = await consumer.getmany(timeout_ms=200)
            for records in batch.values():
                out.extend(Consumed(r.key, r.value, dict(r.headers or ()), r.partition, r.offset) for r in records)
        return out
    finally:
        await consumer.stop()


def pending_count(db: MigratedDatabase) -> int:
    with db.owner_engine.connect() as conn:
        return int(
            conn.execute(
                text("SELECT count(*) FROM outbox WHERE published_at IS NULL AND dead_lettered_at IS NULL")
            ).scalar_one()
        )


def published_count(db: MigratedDatabase) -> int:
    with db.owner_engine.connect() as conn:
        return int(conn.execute(text("SELECT count(*) FROM outbox WHERE published_at IS NOT NULL")).scalar_one())


def lock_holder_pid(db: MigratedDatabase) -> int | None:
    """The OS pid of the relay holding the advisory lock (from its connection's application_name)."""
    with db.owner_engine.connect() as conn:
        name = conn.execute(
            text(
                "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
                " WHERE l.locktype = 'advisory' AND l.granted"
                " AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
                " AND l.objsubid = 1 AND ((l.classid::bigint << 32) | l.objid::bigint) = :key"
            ),
            {"key": LOCK_KEY},
        ).scalar_one_or_none()
    if name is None or not name.startswith(f"{APPLICATION_NAME}:"):
        return None
    return int(name.rsplit(":", 1)[1])


async def wait_until(condition: Callable[[], bool], *, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for: {what}")
        await asyncio.sleep(0.05)


@dataclass
class RelayProcess:
    """``switchboard outbox-relay`` as a child process, with its /metrics port."""

    proc: subprocess.Popen[bytes]
    health_port: int

    @property
    def pid(self) -> int:
        return self.proc.pid

    def metric(self, name: str, labels: dict[str, str] | None = None) -> float:
        """Sum of the samples of ``name`` (matching ``labels``) on the process's /metrics; 0 if absent."""
        from prometheus_client.parser import text_string_to_metric_families

        body = httpx.get(f"http://127.0.0.1:{self.health_port}/metrics", timeout=5).text
        total = 0.0
        for family in text_string_to_metric_families(body):
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v for k, v in (labels or {}).items()):
                    total += sample.value
        return total


@contextmanager
def relay_processes(
    db: MigratedDatabase, kafka: KafkaSettings, count: int = 1, **env: str
) -> Iterator[list[RelayProcess]]:
    """Start ``count`` relays as separate processes; kill whatever is still running afterwards."""
    started: list[RelayProcess] = []
    base_env = {
        **os.environ,
        "KAFKA_BOOTSTRAP_SERVERS": kafka.bootstrap_servers,
        "KAFKA_TOPIC_PREFIX": kafka.topic_prefix,
        "DATABASE_URL": app_url(db),
        "SWITCHBOARD_LOG_LEVEL": "INFO",
        "OUTBOX_RELAY_LOCK_RETRY_S": "0.2",
        "OUTBOX_RELAY_IDLE_POLL_MAX_S": "0.05",
        **env,
    }
    try:
        for _ in range(count):
            port = free_port()
            proc = subprocess.Popen(
                [sys.executable, "-m", "services.cli", "outbox-relay"],
                cwd=REPO_ROOT,
                env={**base_env, "OUTBOX_RELAY_HEALTH_PORT": str(port)},
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            started.append(RelayProcess(proc, port))
        yield started
    finally:
        for relay in started:
            if relay.proc.poll() is None:
                relay.proc.kill()
            relay.proc.wait(timeout=10)


def wait_healthy(relay: RelayProcess, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        assert relay.proc.poll() is None, f"relay {relay.pid} exited with {relay.proc.returncode}"
        try:
            if httpx.get(f"http://127.0.0.1:{relay.health_port}/healthz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, f"relay {relay.pid} not healthy in {timeout_s} s"
        time.sleep(0.1)
