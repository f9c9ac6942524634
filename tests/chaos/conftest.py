"""The whole pipeline as processes for the chaos and poison tests, on a broker of their own.

Per module: a private Kafka broker (tests/chaos/broker.py: restarting it must not disturb
anyone on the shared one), a migrated scratch database (the outbox relay's advisory
lock is per database), a topic prefix, free ports, and the five services plus the
channel server started exactly as ``make demo`` starts them (scripts/demo/processes.py),
with short leases and heartbeats so a recovery takes seconds. The model is the fake
OpenAI server of tests/support/fake_llm.py, in this event loop, answering every call
with a reply numbered once: each run's final text is unique, so each reply the channel
received names the one run it came from.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import httpx
import pytest
from sqlalchemy import update

from scripts.demo import bootstrap, processes
from scripts.demo.bootstrap import DemoOrg
from switchboard.db.models import Organization
from switchboard.db.session import normalize_url, tenant_transaction
from switchboard.kafka import admin
from switchboard.settings import KafkaSettings
from tests.chaos.broker import PrivateBroker
from tests.integration.db.conftest import MigratedDatabase, PgServer, scratch_database
from tests.support.fake_llm import FakeLLM, Reply
from tests.support.stack import StackEndpoints

PARTITIONS = 3
FAKE_KEY = "sk-chaos-fake"
# A model call takes this long: runs are in flight (a few at a time) when the runner is killed.
MODEL_DELAY_S = 1.5

# Short enough that a SIGKILLed runner's run is recovered in seconds; a lease still spans several
# heartbeats, and attempts x lease outlast the runner group's failure detection (aiokafka's 10 s
# session): a re-dispatch that waits for the partition to move is not declared lost.
SERVICE_ENV = {
    "DISPATCHER_LEASE_S": "10",
    # A run no runner acknowledged yet (its runner killed before it took it) waits this long.
    "DISPATCHER_START_LEASE_S": "25",
    "DISPATCHER_MAX_ATTEMPTS": "10",
    "DISPATCHER_TICK_INTERVAL_S": "0.5",
    "DISPATCHER_SESSION_TIMEOUT_S": "6",
    "DISPATCHER_REPLY_INTERVAL_S": "0.2",
    "RUNNER_HEARTBEAT_S": "1",
    "RUNNER_STALE_RUN_AFTER_S": "5",
    "RUNNER_SHUTDOWN_GRACE_S": "2",
    "RUNNER_CLAIM_WAIT_S": "30",
    "RUNNER_MODEL_CALL_TIMEOUT_S": "20",
    "NOTIFIER_SEND_BACKOFF_INITIAL_S": "0.2",
    "NOTIFIER_SEND_BACKOFF_MAX_S": "2",
    "SWITCHBOARD_LOG_LEVEL": "INFO",
}


@dataclass
class Pipeline:
    group: processes.ProcessGroup
    topology: processes.Topology
    broker: PrivateBroker
    kafka: KafkaSettings
    database: MigratedDatabase
    org: DemoOrg
    model: FakeLLM

    @property
    def channel_url(self) -> str:
        assert self.topology.channel_url is not None, "scripts/channel_server.py is needed"
        return self.topology.channel_url


@pytest.fixture(scope="module")
def chaos_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateBroker]:
    broker = PrivateBroker.create(tmp_path_factory.mktemp("chaos-kafka"))
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="module")
def chaos_database(stack: StackEndpoints) -> Iterator[MigratedDatabase]:
    server = PgServer(owner_url=normalize_url(stack.database_owner_url), app_url=normalize_url(stack.database_url))
    with scratch_database(server) as database:
        assert isinstance(database, MigratedDatabase)
        yield database


@pytest.fixture(scope="module")
async def chaos_topics(chaos_broker: PrivateBroker) -> KafkaSettings:
    settings = KafkaSettings(
        bootstrap_servers=chaos_broker.bootstrap_servers,
        topic_prefix=f"chaos{uuid.uuid4().hex[:8]}.",
        conversation_partitions=PARTITIONS,
    )
    await admin.ensure_topics(settings)
    return settings


@pytest.fixture(scope="module")
async def fake_model() -> AsyncIterator[FakeLLM]:
    numbers = itertools.count(1)
    fake = FakeLLM(
        lambda _: Reply(text=f"chaos reply #{next(numbers)}", input_tokens=12, output_tokens=4, delay_s=MODEL_DELAY_S)
    )
    await fake.start()
    try:
        yield fake
    finally:
        await fake.stop()


def _raise_rate_limit(database: MigratedDatabase, org_id: str) -> None:
    """The org's run rate limit (60 a minute by default) would defer most runs of the chaos load."""
    with database.owner_session() as session, tenant_transaction(session, org_id):
        session.execute(
            update(Organization).where(Organization.id == uuid.UUID(org_id)).values(rate_limit_runs_per_minute=100_000)
        )


def start_with_retry(group: processes.ProcessGroup, api_key: str, attempts: int = 3) -> processes.Topology:
    """``start_topology``, again on new ports when a process lost its free port to someone else meanwhile
    (the ports are picked before the processes bind them; other engineers' tests pick ports too)."""
    for attempt in range(attempts):
        try:
            return processes.start_topology(group, channel_api_key=api_key, preferred=False, timeout_s=90)
        except RuntimeError as exc:
            group.stop_all()
            if "address already in use" not in str(exc) or attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")


@pytest.fixture(scope="module")
async def pipeline(
    chaos_broker: PrivateBroker,
    chaos_topics: KafkaSettings,
    chaos_database: MigratedDatabase,
    fake_model: FakeLLM,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[Pipeline]:
    env = {
        **os.environ,
        **SERVICE_ENV,
        "DATABASE_URL": chaos_database.app_url.render_as_string(hide_password=False),
        "KAFKA_BOOTSTRAP_SERVERS": chaos_topics.bootstrap_servers,
        "KAFKA_TOPIC_PREFIX": chaos_topics.topic_prefix,
        "KAFKA_CONVERSATION_PARTITIONS": str(PARTITIONS),
        "PROVIDERS_OPENAI_BASE_URL": fake_model.openai_url,
        "RUNNER_OPENAI_API_KEY": FAKE_KEY,
    }
    for key in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GOOGLE_API_KEY"):
        env.pop(key, None)
    group = processes.ProcessGroup(tmp_path_factory.mktemp("chaos-run"), env)
    api_key = f"chaos-{uuid.uuid4().hex[:8]}"
    try:
        topology = await asyncio.to_thread(start_with_retry, group, api_key)
        assert topology.channel_url is not None, "scripts/channel_server.py is needed for the chaos tests"
        async with httpx.AsyncClient(base_url=topology.api_url, timeout=30) as api:
            # The OpenAI key in ``environ`` makes the bootstrap choose OpenAI's default model: the fake.
            org = await bootstrap.bootstrap(
                api,
                env,
                channel_url=topology.channel_url,
                channel_api_key=api_key,
                label="Chaos",
                environ={"OPENAI_API_KEY": FAKE_KEY},
                dispatcher_metrics_url=topology.metrics_urls["dispatcher"],
            )
        await asyncio.to_thread(_raise_rate_limit, chaos_database, org.org_id)
        yield Pipeline(group, topology, chaos_broker, chaos_topics, chaos_database, org, fake_model)
    finally:
        # Shown by pytest only when a test of the module failed.
        for proc in group.procs.values():
            print(f"--- {proc.name} ({proc.log_path}) ---\n{processes.tail(proc.log_path, 40)}")
        codes = await asyncio.to_thread(group.stop_all)
        print(f"exit codes: {codes}")
