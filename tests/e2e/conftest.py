"""The whole product as processes for the end-to-end tests: the demo's own topology and bootstrap.

One topology per module (starting seven processes costs ~15 s; the scenarios use
separate conversations, so they cannot see each other): a scratch database — the
outbox relay's advisory lock is per database, so on the shared stack database another
API process (a running ``make demo``, another test) could publish our outbox rows
to its own topics — its own topic prefix and free ports, the services started
exactly as ``make demo`` starts them (scripts/demo/processes.py), the org made by the
same bootstrap (CLI + API).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from scripts.demo import bootstrap, processes
from scripts.demo.report import Report
from scripts.demo.scenario import Stage
from switchboard.db.session import normalize_url
from switchboard.kafka import admin
from switchboard.settings import KafkaSettings
from tests.integration.db.conftest import MigratedDatabase, PgServer, scratch_database
from tests.support.stack import StackEndpoints

PARTITIONS = 3


@pytest.fixture(scope="module")
def e2e_database(stack: StackEndpoints) -> Iterator[str]:
    """The application-role URL of a migrated scratch database of this module."""
    server = PgServer(owner_url=normalize_url(stack.database_owner_url), app_url=normalize_url(stack.database_url))
    with scratch_database(server) as database:
        assert isinstance(database, MigratedDatabase)
        yield database.app_url.render_as_string(hide_password=False)


@pytest.fixture(scope="module")
async def e2e_topics(stack: StackEndpoints) -> AsyncIterator[KafkaSettings]:
    settings = KafkaSettings(
        bootstrap_servers=stack.kafka_bootstrap_servers,
        topic_prefix=f"e2e{uuid.uuid4().hex[:10]}.",
        conversation_partitions=PARTITIONS,
    )
    await admin.ensure_topics(settings)
    yield settings
    await admin.delete_topics(settings)


@pytest.fixture(scope="module")
def e2e_processes(
    e2e_database: str, e2e_topics: KafkaSettings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[processes.ProcessGroup, processes.Topology, str]]:
    """The five services, the channel server (and the MCP server if the API does not mount it)."""
    import os

    env = {
        **os.environ,
        "DATABASE_URL": e2e_database,
        "KAFKA_BOOTSTRAP_SERVERS": e2e_topics.bootstrap_servers,
        "KAFKA_TOPIC_PREFIX": e2e_topics.topic_prefix,
        "KAFKA_CONVERSATION_PARTITIONS": str(PARTITIONS),
        "SWITCHBOARD_LOG_LEVEL": "INFO",
        # The burst's follow-up run need not wait the production 5 s between two runs of one agent.
        "DISPATCHER_REPLY_INTERVAL_S": "0.5",
        "DISPATCHER_SESSION_TIMEOUT_S": "6",
    }
    for key in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GOOGLE_API_KEY"):
        env.pop(key, None)  # the deterministic demo model, always
    run_dir: Path = tmp_path_factory.mktemp("e2e-demo")
    group = processes.ProcessGroup(run_dir, env)
    api_key = f"e2e-{uuid.uuid4().hex[:8]}"
    try:
        topology = processes.start_topology(group, channel_api_key=api_key, preferred=False, timeout_s=60)
        yield group, topology, api_key
    except Exception:
        for proc in group.procs.values():
            print(f"--- {proc.name} ---\n{processes.tail(proc.log_path, 30)}")
        raise
    finally:
        codes = group.stop_all()
        print(f"exit codes: {codes}")


@pytest.fixture(scope="module")
async def stage(
    e2e_processes: tuple[processes.ProcessGroup, processes.Topology, str], e2e_database: str
) -> AsyncIterator[Stage]:
    """A bootstrapped org (CLI + API, like ``make demo``) and clients for the scenarios."""
    group, topology, api_key = e2e_processes
    assert topology.channel_url is not None, "scripts/channel_server.py is needed for the end-to-end tests"
    async with (
        httpx.AsyncClient(base_url=topology.api_url, timeout=30) as api,
        httpx.AsyncClient(base_url=topology.channel_url, timeout=10) as channel,
    ):
        org = await bootstrap.bootstrap(
            api,
            group.env,
            channel_url=topology.channel_url,
            channel_api_key=api_key,
            label="E2E",
            environ={},
            dispatcher_metrics_url=topology.metrics_urls["dispatcher"],
            owner_webhook=True,
        )
        yield Stage(api, channel, org, Report(), e2e_database, timeout_s=30, settle_s=1.5)
