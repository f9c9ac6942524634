"""``make bench-dispatch``: the dispatcher next to a plain aiokafka pipe and a PostgreSQL poller.

Measures, for each system, in one run:

- **max rate**: ``--messages`` dispatch requests are preloaded, then the system is started
  and timed from its first output to its last (start-up excluded): decisions per second;
- **fixed rate**: ``--rate`` requests per second for ``--duration`` seconds against a warm
  system: p50 / p99 latency from "request produced" to "run request consumed".

Systems (each in its own process, like a deployment):

1. ``dispatcher``: the real worker (``switchboard dispatcher``), one per run, with a fresh
   topic prefix; every request is a new conversation, so every one is dispatched. The
   decision sink is off (it is a separate consumer of the decisions topic; it would
   compete for the same CPU) and the org rate limit is set out of the way; the per-batch
   admission call to PostgreSQL and the budget view stay on.
2. ``pipe-serde``: plain aiokafka: consume ``dispatch_requested``, decode it, build and
   encode a ``run_requested``, produce, commit. The same contract work as the dispatcher,
   none of the state: the upper bound of a Python pipe doing this job.
3. ``pipe-raw``: plain aiokafka forwarding the bytes untouched: the bound of the client.
4. ``pg-poll-100ms`` / ``pg-poll-1s``: the seed's design [004 §5.2]: an ``event_log`` table
   in a scratch database, polled with ``SELECT ... FOR UPDATE SKIP LOCKED LIMIT 100``,
   each row decoded and marked processed in the same transaction; the poller sleeps the
   interval only when a poll came back short. Latency is ``processed_at - created_at``
   (both ``clock_timestamp()``), which spares the poller the extra hop the others pay.

Not a test: the numbers depend on the machine. docs/benchmarks.md records a run.
Results also go to ``var/bench/dispatch.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from sqlalchemy import text
from sqlalchemy.engine import make_url

from bench.report import Goal, Measurement, add_common_arguments, publish
from switchboard.contracts import (
    AgentPublished,
    AgentVersionSnapshot,
    AgentVersionStatus,
    DispatchRequested,
    FollowUpConfig,
    InboundMessage,
    PublishedChange,
    RunRequested,
    Serde,
    Topics,
    TriggerConfig,
    WakeContext,
    WakeReason,
    encode_key,
)
from switchboard.db.session import create_engine, normalize_url
from switchboard.kafka import admin
from switchboard.kafka.producer import RecordProducer
from switchboard.settings import REPO_ROOT, DatabaseSettings, KafkaSettings

RESULTS = REPO_ROOT / "var" / "bench" / "dispatch.json"
SESSION = uuid.UUID("b0000000-0000-4000-8000-00000000be7c")


@dataclass
class Result:
    system: str
    max_rate_per_s: float | None = None
    max_rate_messages: int = 0
    # CPU of the system's own process per message at max rate (broker and database not
    # counted): what the throughput would be on a core of its own, whatever else runs.
    cpu_ms_per_message: float | None = None
    p50_ms_at_rate: float | None = None
    p99_ms_at_rate: float | None = None
    rate_messages: int = 0
    note: str = ""


# --------------------------------------------------------------------------- records


def _snapshot(org: uuid.UUID) -> AgentVersionSnapshot:
    created = datetime.now(UTC) - timedelta(days=1)
    return AgentVersionSnapshot(
        version_id=uuid.uuid4(),
        agent_id=uuid.uuid4(),
        version_number=1,
        agent_name="bench",
        priority=0,
        agent_created_at=created,
        system_prompt="bench",
        provider="demo",
        model="demo-1",
        tool_ids=(),
        trigger=TriggerConfig(event_types=("message",)),
        channel_session_id=SESSION,
        max_steps=5,
        token_budget=10_000,
        cost_budget_cents=10,
        history_message_window=10,
        history_token_window=1000,
        handoff_keywords=(),
        followup=FollowUpConfig(),
        status=AgentVersionStatus.PUBLISHED,
        created_at=created,
        published_at=created,
    )


def _dispatch(org: uuid.UUID) -> DispatchRequested:
    message = InboundMessage(
        message_id=uuid.uuid4(),
        external_id=f"wamid.{uuid.uuid4().hex[:16]}",
        chat_id="5511999999999@c.us",
        text="Oi! Quero remarcar meu horário de amanhã para sexta, pode ser?",
        received_at=datetime.now(UTC),
    )
    return DispatchRequested(
        org_id=org,
        conversation_id=uuid.uuid4(),
        contact_id=uuid.uuid4(),
        channel_session_id=SESSION,
        wake_reason=WakeReason.USER_MESSAGE,
        wake_context=WakeContext(message_id=message.message_id),
        message=message,
    )


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux /proc), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


# --------------------------------------------------------------------------- Kafka systems


@dataclass
class KafkaRun:
    settings: KafkaSettings
    org: uuid.UUID


@contextlib.asynccontextmanager
async def kafka_topics(partitions: int) -> AsyncIterator[KafkaRun]:
    settings = KafkaSettings(topic_prefix=f"bench{uuid.uuid4().hex[:8]}.", conversation_partitions=partitions)
    await admin.ensure_topics(settings)
    org = uuid.uuid4()
    async with RecordProducer(settings, service="bench") as producer:
        snap = _snapshot(org)
        await producer.send(
            Topics.PUBLISHED,
            AgentPublished(org_id=org, agent_id=snap.agent_id, change=PublishedChange.PUBLISHED, version=snap),
        )
    try:
        yield KafkaRun(settings, org)
    finally:
        await admin.delete_topics(settings)


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class System:
    """A system under test started as a subprocess."""

    name: str

    def __init__(self, run: KafkaRun, log_dir: Path) -> None:
        self.run = run
        self.log_dir = log_dir
        self.proc: subprocess.Popen[bytes] | None = None

    def command(self) -> tuple[list[str], dict[str, str]]:
        raise NotImplementedError

    async def start(self) -> None:
        cmd, env = self.command()
        log = (self.log_dir / f"{self.name}.log").open("ab")
        self.proc = subprocess.Popen(cmd, cwd=REPO_ROOT, env={**os.environ, **env}, stdout=log, stderr=log)
        await self.ready()

    async def ready(self) -> None:
        await asyncio.sleep(1.0)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)

    def output_message_id(self, serde: Serde, value: bytes) -> uuid.UUID:
        record = serde.decode(Topics.RUN_REQUESTED, value)
        assert isinstance(record, RunRequested)
        return record.messages[0].message_id


class DispatcherSystem(System):
    name = "dispatcher"

    def __init__(self, run: KafkaRun, log_dir: Path, env: dict[str, str] | None = None) -> None:
        super().__init__(run, log_dir)
        self.port = _free_port()
        self.extra_env = env or {}

    def command(self) -> tuple[list[str], dict[str, str]]:
        s = self.run.settings
        return [sys.executable, "-m", "services.cli", "dispatcher"], {
            "KAFKA_BOOTSTRAP_SERVERS": s.bootstrap_servers,
            "KAFKA_TOPIC_PREFIX": s.topic_prefix,
            "KAFKA_CONVERSATION_PARTITIONS": str(s.conversation_partitions),
            "DISPATCHER_HEALTH_PORT": str(self.port),
            "DISPATCHER_DEFAULT_RATE_LIMIT": "1000000000",
            "DISPATCHER_DECISION_SINK_ENABLED": "false",
            "SWITCHBOARD_LOG_LEVEL": "WARNING",
            **self.extra_env,
        }

    async def ready(self) -> None:
        deadline = time.monotonic() + 60
        async with httpx.AsyncClient() as client:
            while time.monotonic() < deadline:
                assert self.proc is not None and self.proc.poll() is None, "dispatcher exited"
                with contextlib.suppress(httpx.TransportError):
                    if (await client.get(f"http://127.0.0.1:{self.port}/readyz", timeout=1)).status_code == 200:
                        return
                await asyncio.sleep(0.1)
        raise RuntimeError("dispatcher never became ready")


class PipeSystem(System):
    def __init__(self, run: KafkaRun, log_dir: Path, mode: str) -> None:
        super().__init__(run, log_dir)
        self.mode = mode
        self.name = f"pipe-{mode}"

    def command(self) -> tuple[list[str], dict[str, str]]:
        s = self.run.settings
        return [
            sys.executable,
            "-m",
            "bench.dispatch",
            "pipe",
            "--prefix",
            s.topic_prefix,
            "--partitions",
            str(s.conversation_partitions),
            "--mode",
            self.mode,
        ], {}

    def output_message_id(self, serde: Serde, value: bytes) -> uuid.UUID:
        if self.mode == "raw":
            record = serde.decode(Topics.DISPATCH_REQUESTED, value)
            assert isinstance(record, DispatchRequested) and record.message is not None
            return record.message.message_id
        return super().output_message_id(serde, value)


class OutputWatch:
    """Consumes run_requested from the beginning and notes when each message's run arrived."""

    def __init__(self, system: System) -> None:
        self.system = system
        self.settings = system.run.settings
        self.serde = Serde.from_settings(self.settings)
        self.arrived: dict[uuid.UUID, float] = {}
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> OutputWatch:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.settings.bootstrap_servers, enable_auto_commit=False, fetch_max_wait_ms=50
        )
        await consumer.start()
        name = Topics.RUN_REQUESTED.physical_name(self.settings)
        tps = [TopicPartition(name, p) for p in range(self.settings.conversation_partitions)]
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
                batches = await consumer.getmany(timeout_ms=20, max_records=5000)
                now = time.time()
                for records in batches.values():
                    for raw in records:
                        self.arrived.setdefault(self.system.output_message_id(self.serde, raw.value), now)
        finally:
            await consumer.stop()

    async def wait(self, expected: set[uuid.UUID], timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while not expected <= self.arrived.keys():
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.02)
        return True


async def _produce_all(settings: KafkaSettings, records: list[DispatchRequested]) -> None:
    async with RecordProducer(settings, service="bench", linger_ms=5) as producer:
        futures = [await producer.enqueue(Topics.DISPATCH_REQUESTED, r) for r in records]
        await asyncio.gather(*futures)


async def kafka_max_rate(
    make: Callable[[KafkaRun], System], messages: int, partitions: int
) -> tuple[float, int, float]:
    async with kafka_topics(partitions) as run:
        records = [_dispatch(run.org) for _ in range(messages)]
        await _produce_all(run.settings, records)
        system = make(run)
        async with OutputWatch(system) as watch:
            try:
                await system.start()
                assert system.proc is not None
                while not watch.arrived:
                    await asyncio.sleep(0.001)
                cpu_start = _cpu_seconds(system.proc.pid)
                done = await watch.wait({r.message.message_id for r in records if r.message}, timeout_s=300)
                cpu = _cpu_seconds(system.proc.pid) - cpu_start
            finally:
                system.stop()
        times = sorted(watch.arrived.values())
        if not done or len(times) < 2:
            raise RuntimeError(f"{system.name}: only {len(times)} of {messages} outputs")
        return (len(times) - 1) / (times[-1] - times[0]), len(times), cpu * 1000 / len(times)


async def kafka_fixed_rate(
    make: Callable[[KafkaRun], System], rate: float, duration_s: float, partitions: int
) -> tuple[float, float, int]:
    async with kafka_topics(partitions) as run:
        system = make(run)
        async with OutputWatch(system) as watch, RecordProducer(run.settings, service="bench", linger_ms=0) as producer:
            try:
                await system.start()
                warmup = [_dispatch(run.org) for _ in range(200)]
                await _paced(producer, warmup, rate, {})
                await watch.wait({r.message.message_id for r in warmup if r.message}, timeout_s=60)
                records = [_dispatch(run.org) for _ in range(int(rate * duration_s))]
                sent: dict[uuid.UUID, float] = {}
                await _paced(producer, records, rate, sent)
                await watch.wait(set(sent), timeout_s=60)
            finally:
                system.stop()
        latencies = [(watch.arrived[m] - t) * 1000 for m, t in sent.items() if m in watch.arrived]
        return _percentile(latencies, 0.50), _percentile(latencies, 0.99), len(latencies)


async def _paced(
    producer: RecordProducer, records: list[DispatchRequested], rate: float, sent: dict[uuid.UUID, float]
) -> None:
    """Send at ``rate`` per second on a fixed schedule (catching up in bursts if late)."""
    start = time.perf_counter()
    futures = []
    for i, record in enumerate(records):
        due = start + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        assert record.message is not None
        sent[record.message.message_id] = time.time()
        futures.append(await producer.enqueue(Topics.DISPATCH_REQUESTED, record))
    await asyncio.gather(*futures)


# --------------------------------------------------------------------------- the plain pipe (subprocess)


async def pipe_main(prefix: str, partitions: int, mode: str) -> None:
    settings = KafkaSettings(topic_prefix=prefix, conversation_partitions=partitions)
    serde = Serde.from_settings(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    consumer = AIOKafkaConsumer(
        Topics.DISPATCH_REQUESTED.physical_name(settings),
        bootstrap_servers=settings.bootstrap_servers,
        group_id=f"{prefix}bench-pipe",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=50,
        max_poll_records=500,
    )
    producer = AIOKafkaProducer(
        bootstrap_servers=settings.bootstrap_servers, enable_idempotence=True, acks="all", linger_ms=1
    )
    await consumer.start()
    await producer.start()
    out = Topics.RUN_REQUESTED.physical_name(settings)
    try:
        while not stop.is_set():
            batches = await consumer.getmany(timeout_ms=5, max_records=500)
            futures = []
            for records in batches.values():
                for raw in records:
                    if mode == "raw":
                        futures.append(await producer.send(out, value=raw.value, key=raw.key))
                        continue
                    request = serde.decode(Topics.DISPATCH_REQUESTED, raw.value)
                    assert isinstance(request, DispatchRequested)
                    run = RunRequested(
                        org_id=request.org_id,
                        conversation_id=request.conversation_id,
                        contact_id=request.contact_id,
                        channel_session_id=request.channel_session_id,
                        run_id=uuid.uuid4(),
                        agent_id=SESSION,
                        version_id=SESSION,
                        wake_reason=request.wake_reason,
                        wake_context=request.wake_context,
                        messages=(request.message,) if request.message else (),
                        dispatch_ids=(request.event_id,),
                    )
                    futures.append(
                        await producer.send(
                            out,
                            value=serde.encode(Topics.RUN_REQUESTED, run),
                            key=encode_key(Topics.RUN_REQUESTED, run),
                        )
                    )
            if futures:
                await asyncio.gather(*futures)
                await consumer.commit()
    finally:
        await producer.stop()
        await consumer.stop()


# --------------------------------------------------------------------------- the PostgreSQL poller


_EVENT_LOG = """
CREATE TABLE event_log (
    id bigserial PRIMARY KEY,
    event_type text NOT NULL,
    payload bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    processed_at timestamptz,
    outcome text
);
CREATE INDEX event_log_unprocessed ON event_log (id) WHERE processed_at IS NULL;
"""


@contextlib.contextmanager
def scratch_database() -> Any:
    settings = DatabaseSettings()
    owner = normalize_url(settings.migration_url)
    name = f"sb_bench_{uuid.uuid4().hex[:12]}"
    admin_engine = create_engine(owner, isolation_level="AUTOCOMMIT", pool_size=1)
    with admin_engine.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = owner.set(database=name)
    engine = create_engine(url, pool_size=2)
    with engine.begin() as conn:
        conn.exec_driver_sql(_EVENT_LOG)
    try:
        yield url
    finally:
        engine.dispose()
        with admin_engine.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin_engine.dispose()


async def poller_main(url: str, interval_s: float, batch: int) -> None:
    import psycopg

    serde = Serde.from_settings(KafkaSettings())
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    async with await psycopg.AsyncConnection.connect(dsn) as conn:
        while not stop.is_set():
            async with conn.transaction():
                cursor = await conn.execute(
                    "SELECT id, payload FROM event_log WHERE processed_at IS NULL AND event_type = 'dispatch_requested'"
                    " ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED",
                    (batch,),
                )
                rows = await cursor.fetchall()
                ids = []
                for row_id, payload in rows:
                    serde.decode(Topics.DISPATCH_REQUESTED, bytes(payload))  # the same contract work
                    ids.append(row_id)
                if ids:
                    await conn.execute(
                        "UPDATE event_log SET processed_at = clock_timestamp(), outcome = 'dispatched'"
                        " WHERE id = ANY(%s)",
                        (ids,),
                    )
            if len(rows) < batch:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=interval_s)


class PollerSystem:
    def __init__(self, url: Any, interval_s: float, log_dir: Path, batch: int = 100) -> None:
        self.url = url
        self.interval_s = interval_s
        self.batch = batch
        self.name = f"pg-poll-{int(interval_s * 1000)}ms"
        self.log_dir = log_dir
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = (self.log_dir / f"{self.name}.log").open("ab")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench.dispatch",
                "poller",
                "--url",
                self.url.render_as_string(hide_password=False),
                "--interval",
                str(self.interval_s),
                "--batch",
                str(self.batch),
            ],
            cwd=REPO_ROOT,
            stdout=log,
            stderr=log,
        )

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=30)


async def _insert_all(url: Any, payloads: list[bytes]) -> None:
    engine = create_engine(url, pool_size=1)
    with engine.begin() as conn:
        conn.execute(
            text("INSERT INTO event_log (event_type, payload) VALUES ('dispatch_requested', :p)"),
            [{"p": p} for p in payloads],
        )
    engine.dispose()


def _wait_processed(url: Any, expected: int, timeout_s: float) -> None:
    engine = create_engine(url, pool_size=1)
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            with engine.connect() as conn:
                done = conn.execute(text("SELECT count(*) FROM event_log WHERE processed_at IS NOT NULL")).scalar_one()
            if done >= expected:
                return
            time.sleep(0.2)
        raise RuntimeError(f"poller processed {done} of {expected}")
    finally:
        engine.dispose()


def _poll_stats(url: Any, since_id: int) -> tuple[float, float, float, int]:
    engine = create_engine(url, pool_size=1)
    try:
        with engine.connect() as conn:
            row = conn.execute(
                text(
                    "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM processed_at - created_at)),"
                    " percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM processed_at - created_at)),"
                    " extract(epoch FROM max(processed_at) - min(processed_at)), count(*)"
                    " FROM event_log WHERE id > :since AND processed_at IS NOT NULL"
                ),
                {"since": since_id},
            ).one()
        return float(row[0]) * 1000, float(row[1]) * 1000, float(row[2] or 0), int(row[3])
    finally:
        engine.dispose()


def _max_id(url: Any) -> int:
    engine = create_engine(url, pool_size=1)
    try:
        with engine.connect() as conn:
            return int(conn.execute(text("SELECT coalesce(max(id), 0) FROM event_log")).scalar_one())
    finally:
        engine.dispose()


async def poller_benchmark(interval_s: float, messages: int, rate: float, duration_s: float, log_dir: Path) -> Result:
    import psycopg

    serde = Serde.from_settings(KafkaSettings())
    org = uuid.uuid4()
    result = Result(system=f"pg-poll-{int(interval_s * 1000)}ms")
    with scratch_database() as url:
        # Max rate: preload, then start the poller.
        payloads = [serde.encode(Topics.DISPATCH_REQUESTED, _dispatch(org)) for _ in range(messages)]
        await _insert_all(url, payloads)
        poller = PollerSystem(url, interval_s, log_dir)
        poller.start()
        try:
            assert poller.proc is not None
            await asyncio.to_thread(_wait_processed, url, messages, 600)
            cpu = _cpu_seconds(poller.proc.pid)  # includes its start-up: an upper bound
        finally:
            poller.stop()
        _, _, span, count = _poll_stats(url, 0)
        result.max_rate_per_s, result.max_rate_messages = (count - 1) / span if span else None, count
        result.cpu_ms_per_message = cpu * 1000 / count
        # Fixed rate: a warm poller, one committed insert per request (as an outbox write would be).
        since = _max_id(url)
        poller = PollerSystem(url, interval_s, log_dir)
        poller.start()
        dsn = make_url(url.render_as_string(hide_password=False)).set(drivername="postgresql")
        try:
            await asyncio.sleep(1.0)
            total = int(rate * duration_s)
            async with await psycopg.AsyncConnection.connect(
                dsn.render_as_string(hide_password=False), autocommit=True
            ) as conn:
                start = time.perf_counter()
                for i in range(total):
                    delay = start + i / rate - time.perf_counter()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    await conn.execute(
                        "INSERT INTO event_log (event_type, payload) VALUES ('dispatch_requested', %s)",
                        (serde.encode(Topics.DISPATCH_REQUESTED, _dispatch(org)),),
                    )
            await asyncio.to_thread(_wait_processed, url, messages + total, 120)
        finally:
            poller.stop()
        p50, p99, _, count = _poll_stats(url, since)
        result.p50_ms_at_rate, result.p99_ms_at_rate, result.rate_messages = p50, p99, count
    return result


# --------------------------------------------------------------------------- orchestration


async def kafka_benchmark(
    name: str, make: Callable[[KafkaRun], System], args: argparse.Namespace, note: str = ""
) -> Result:
    result = Result(system=name, note=note)
    rate, count, cpu = await kafka_max_rate(make, args.messages, args.partitions)
    result.max_rate_per_s, result.max_rate_messages, result.cpu_ms_per_message = rate, count, cpu
    p50, p99, n = await kafka_fixed_rate(make, args.rate, args.duration, args.partitions)
    result.p50_ms_at_rate, result.p99_ms_at_rate, result.rate_messages = p50, p99, n
    return result


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def report(results: list[Result], args: argparse.Namespace) -> str:
    by_name = {r.system: r for r in results}
    at = str(int(args.rate))
    lines = [f"{'system':<16} {'max rate /s':>12} {'CPU ms/msg':>11} {'p50 ms @' + at:>12} {'p99 ms @' + at:>12}"]
    for r in results:
        lines.append(
            f"{r.system:<16} {_fmt(r.max_rate_per_s, 0):>12} {_fmt(r.cpu_ms_per_message, 3):>11}"
            f" {_fmt(r.p50_ms_at_rate, 2):>12} {_fmt(r.p99_ms_at_rate, 2):>12}"
        )
    dispatcher, pipe, poll = by_name.get("dispatcher"), by_name.get("pipe-serde"), by_name.get("pg-poll-100ms")
    if dispatcher and pipe and dispatcher.max_rate_per_s and pipe.max_rate_per_s:
        share = dispatcher.max_rate_per_s / pipe.max_rate_per_s
        lines.append(f"throughput dispatcher / pipe-serde: {share:.0%} (goal >= 50%)")
    raw = by_name.get("pipe-raw")
    if dispatcher and raw and dispatcher.max_rate_per_s and raw.max_rate_per_s:
        lines.append(f"throughput dispatcher / pipe-raw:   {dispatcher.max_rate_per_s / raw.max_rate_per_s:.0%}")
    if dispatcher and poll and dispatcher.p99_ms_at_rate and poll.p99_ms_at_rate:
        lines.append(
            f"p99 dispatcher / pg-poll-100ms: {dispatcher.p99_ms_at_rate / poll.p99_ms_at_rate:.2f} (goal <= 0.10)"
        )
    return "\n".join(lines)


SMOKE = {"messages": 300, "rate": 100.0, "duration": 2.0}
PIPE_BASELINE = "plain aiokafka pipe (pipe-serde)"
POLLER_BASELINE = "PostgreSQL poller, 100 ms (pg-poll-100ms)"


def measurements(results: list[Result]) -> list[Measurement]:
    """The dispatcher's figures against its baselines (stable metric names: docs/benchmarks.md).

    Nothing when the dispatcher itself was not run (``--only`` without it); a missing baseline
    leaves ratio and verdict empty rather than guessing.
    """
    by_name = {r.system: r for r in results}
    dispatcher = by_name.get("dispatcher")
    if dispatcher is None:
        return []
    pipe, poll = by_name.get("pipe-serde", Result("pipe-serde")), by_name.get("pg-poll-100ms", Result("pg-poll-100ms"))
    return [
        Measurement.of(
            "dispatch.throughput",
            dispatcher.max_rate_per_s,
            "msg/s",
            baseline=PIPE_BASELINE,
            baseline_value=pipe.max_rate_per_s,
            goal=Goal("ratio", ">=", 0.5),
        ),
        Measurement.of(
            "dispatch.latency.p99",
            dispatcher.p99_ms_at_rate,
            "ms",
            baseline=POLLER_BASELINE,
            baseline_value=poll.p99_ms_at_rate,
            goal=Goal("ratio", "<=", 0.1),
        ),
        Measurement.of(
            "dispatch.latency.p50",
            dispatcher.p50_ms_at_rate,
            "ms",
            baseline=POLLER_BASELINE,
            baseline_value=poll.p50_ms_at_rate,
        ),
        Measurement.of(
            "dispatch.cpu_per_message",
            dispatcher.cpu_ms_per_message,
            "ms",
            baseline=PIPE_BASELINE,
            baseline_value=pipe.cpu_ms_per_message,
        ),
    ]


async def run_all(args: argparse.Namespace) -> list[Result]:
    log_dir = REPO_ROOT / "var" / "bench" / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    chosen = set(args.only.split(",")) if args.only else None
    results: list[Result] = []
    plans: list[tuple[str, Callable[[], Awaitable[Result]]]] = [
        ("dispatcher", lambda: kafka_benchmark("dispatcher", lambda run: DispatcherSystem(run, log_dir), args)),
        ("pipe-serde", lambda: kafka_benchmark("pipe-serde", lambda run: PipeSystem(run, log_dir, "serde"), args)),
        ("pipe-raw", lambda: kafka_benchmark("pipe-raw", lambda run: PipeSystem(run, log_dir, "raw"), args)),
        ("pg-poll-100ms", lambda: poller_benchmark(0.1, args.messages, args.rate, args.duration, log_dir)),
        ("pg-poll-1s", lambda: poller_benchmark(1.0, args.messages, args.rate, args.duration, log_dir)),
    ]
    for name, plan in plans:
        if chosen is not None and name not in chosen:
            continue
        print(f"-- {name} ...", flush=True)
        started = time.monotonic()
        result = await plan()
        print(f"   {asdict(result)} ({time.monotonic() - started:.0f} s)", flush=True)
        results.append(result)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    sub = parser.add_subparsers(dest="command")
    pipe = sub.add_parser("pipe", help="(internal) run the plain aiokafka pipe")
    pipe.add_argument("--prefix", required=True)
    pipe.add_argument("--partitions", type=int, required=True)
    pipe.add_argument("--mode", choices=("serde", "raw"), required=True)
    poller = sub.add_parser("poller", help="(internal) run the PostgreSQL poller")
    poller.add_argument("--url", required=True)
    poller.add_argument("--interval", type=float, required=True)
    poller.add_argument("--batch", type=int, default=100)
    parser.add_argument("--messages", type=int, default=20_000, help="requests for the max-rate run")
    parser.add_argument("--rate", type=float, default=1_000.0, help="requests per second of the latency run")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds of the latency run")
    parser.add_argument("--partitions", type=int, default=6, help="partitions of the conversation topics")
    parser.add_argument("--only", default="", help="comma-separated systems to run (default: all)")
    add_common_arguments(parser, argv, SMOKE)
    args = parser.parse_args(argv)
    if args.command == "pipe":
        asyncio.run(pipe_main(args.prefix, args.partitions, args.mode))
        return 0
    if args.command == "poller":
        asyncio.run(poller_main(args.url, args.interval, args.batch))
        return 0
    results = asyncio.run(run_all(args))
    text_report = report(results, args)
    print(text_report)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "at": datetime.now(UTC).isoformat(),
                "machine": {
                    "python": platform.python_version(),
                    "cpus": os.cpu_count(),
                    "platform": platform.platform(),
                },
                "args": {k: (str(v) if k == "report" else v) for k, v in vars(args).items() if k != "command"},
                "results": [asdict(r) for r in results],
                "report": text_report,
            },
            indent=2,
        )
    )
    print(f"results written to {RESULTS.relative_to(REPO_ROOT)}")
    publish(measurements(results), args.report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
