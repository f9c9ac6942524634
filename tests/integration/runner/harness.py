"""The runner under test: a real broker and database, the real MCP tool server, a fake model server.

A :class:`RunnerHarness` starts, in the test's event loop, the fake provider
server (tests/support/fake_llm.py), the MCP tool server (services/api/mcp) and a
``Runner`` (services/runner/service.py) wired to this test module's topics. Tests
create org/agent/version rows directly with SQLAlchemy, send ``run_requested``
records to Kafka and read what the runner recorded: the run row and trace, the
outbox rows (``run_started``, ``run_completed``, ``handoff_triggered``), the
``run_events`` topic.

:class:`RunnerProcess` runs ``switchboard runner`` as a real subprocess instead (for
the SIGKILL test), with the dispatcher harness's process handling.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer
from sqlalchemy import Engine, select, text
from sqlalchemy.orm import Session

from services.api.mcp.server import McpToolServer
from services.runner.service import Runner, RunnerOverrides
from services.runner.settings import RunnerSettings
from switchboard.contracts import (
    InboundMessage,
    Record,
    RunEvent,
    RunRequested,
    Serde,
    SteeringMessage,
    Topics,
    WakeContext,
)
from switchboard.contracts.enums import MessageContentType, SteeringKind, WakeReason
from switchboard.credentials import ProviderSettings, seal_api_key
from switchboard.crypto import KeyRing
from switchboard.db.models import (
    AiAgent,
    AiAgentRun,
    AiAgentVersion,
    AiProviderCredential,
    ChannelSession,
    Contact,
    Conversation,
    Message,
    Organization,
    OutboxEvent,
    WorkspaceAutonomy,
)
from switchboard.db.session import create_engine, tenant_transaction
from switchboard.db.usage import UsageTotals, month_start, month_totals
from switchboard.kafka.producer import RecordProducer
from switchboard.run_tokens import RunTokenClaims, RunTokenSettings, mint_run_token
from switchboard.settings import DatabaseSettings, KafkaSettings
from switchboard.tool_catalog import gated_area
from tests.integration.dispatcher.harness import WorkerProcess
from tests.support.fake_llm import FakeLLM, ServedApp
from tests.support.stack import REPO_ROOT

TERMINAL = {"completed", "failed", "aborted", "handoff"}


@dataclass
class Agent:
    """The rows of one test scenario."""

    org_id: uuid.UUID
    channel_session_id: uuid.UUID
    contact_id: uuid.UUID
    conversation_id: uuid.UUID
    chat_id: str
    agent_id: uuid.UUID
    version_id: uuid.UUID
    credential_id: uuid.UUID | None = None


def _digits(n: int) -> str:
    return "".join(str(b % 10) for b in uuid.uuid4().bytes[:n])


def create_agent(
    engine: Engine,
    *,
    provider: str = "anthropic",
    model: str = "claude-haiku-4-5",
    api_key: str | None = "test-key-0000",
    base_url: str | None = None,
    credential_on_version: bool = True,
    tool_ids: Sequence[str] = (),
    max_steps: int = 10,
    token_budget: int = 50_000,
    cost_budget_micros: int = 500_000,
    handoff_keywords: Sequence[str] | None = None,
    handoff_tool_enabled: bool = False,
    followup: dict[str, Any] | None = None,
    silence_timeout_minutes: int = 15,
    system_prompt: str = "You are a helpful sales assistant.",
    contact_name: str = "Ana Souza",
    org_id: uuid.UUID | None = None,
) -> Agent:
    """An agent with a published version, a channel, a contact and a conversation; a new org unless
    ``org_id`` names an existing one."""
    new_org = org_id is None
    org_id = org_id or uuid.uuid4()
    keyring = KeyRing.from_settings()
    with Session(engine) as session, tenant_transaction(session, org_id):
        if new_org:
            session.add(Organization(id=org_id, name=f"Org {org_id.hex[:6]}", slug=f"org-{org_id.hex[:12]}"))
            session.flush()
        channel = ChannelSession(
            org_id=org_id, external_session=f"s-{uuid.uuid4().hex[:12]}", label="Main", status="working"
        )
        contact = Contact(
            org_id=org_id,
            external_id=f"55{_digits(11)}@c.us",
            display_name=contact_name,
            phone_number=f"+55{_digits(11)}",
        )
        session.add_all([channel, contact])
        session.flush()
        conversation = Conversation(
            org_id=org_id, channel_session_id=channel.id, contact_id=contact.id, chat_id=contact.external_id
        )
        agent = AiAgent(org_id=org_id, name="Pre-sales", priority=10)
        session.add_all([conversation, agent])
        session.flush()
        credential_id = None
        if api_key is not None and provider != "demo":
            credential_id = uuid.uuid4()
            sealed = seal_api_key(keyring, org_id=org_id, credential_id=credential_id, api_key=api_key)
            session.add(
                AiProviderCredential(
                    id=credential_id,
                    org_id=org_id,
                    provider=provider,
                    label="Production",
                    ciphertext=sealed.ciphertext,
                    iv=sealed.iv,
                    tag=sealed.tag,
                    key_id=sealed.key_id,
                    last4=api_key[-4:],
                    base_url=base_url,
                    is_default=not credential_on_version,
                )
            )
            session.flush()
        version = AiAgentVersion(
            org_id=org_id,
            agent_id=agent.id,
            version_number=1,
            system_prompt=system_prompt,
            provider=provider,
            model=model,
            credential_id=credential_id if credential_on_version else None,
            tool_ids=list(tool_ids),
            channel_session_id=channel.id,
            max_steps=max_steps,
            token_budget=token_budget,
            cost_budget_micros=cost_budget_micros,
            handoff_tool_enabled=handoff_tool_enabled,
            followup=followup or {},
            silence_timeout_minutes=silence_timeout_minutes,
            status="published",
            published_at=datetime.now(UTC),
        )
        if handoff_keywords is not None:
            version.handoff_keywords = list(handoff_keywords)
        session.add(version)
        session.flush()
        return Agent(
            org_id=org_id,
            channel_session_id=channel.id,
            contact_id=contact.id,
            conversation_id=conversation.id,
            chat_id=conversation.chat_id,
            agent_id=agent.id,
            version_id=version.id,
            credential_id=credential_id,
        )


def allow_auto(engine: Engine, agent: Agent, tool_id: str) -> None:
    """Let the org's agents execute ``tool_id`` (autonomy ``auto`` for its area; the default ``propose``
    only records the write for the owner's approval, docs/autonomy.md)."""
    with Session(engine) as session, tenant_transaction(session, agent.org_id):
        session.add(WorkspaceAutonomy(org_id=agent.org_id, area=gated_area(tool_id), mode="auto"))


def inbound(
    engine: Engine,
    agent: Agent,
    body: str,
    *,
    direction: str = "inbound",
    from_me: bool = False,
    content_type: MessageContentType = MessageContentType.TEXT,
) -> InboundMessage:
    """Store a message of the conversation (as ingest would) and return it as a run input.

    ``from_me``: the business wrote it from its own phone (an outbound message by a person).
    ``content_type``: an attachment, whose caption is ``body``."""
    now = datetime.now(UTC)
    if from_me:
        direction, sender = "outbound", "human"
    else:
        sender = "contact" if direction == "inbound" else "agent"
    with Session(engine) as session, tenant_transaction(session, agent.org_id):
        message = Message(
            org_id=agent.org_id,
            conversation_id=agent.conversation_id,
            channel_session_id=agent.channel_session_id,
            direction=direction,
            sender=sender,
            from_me=from_me,
            external_id=f"wamid.{uuid.uuid4().hex}",
            body=body,
            content_type=content_type.value,
            occurred_at=now,
        )
        session.add(message)
        session.flush()
        return InboundMessage(
            message_id=message.id,
            external_id=message.external_id or "",
            chat_id=agent.chat_id,
            text=body,
            received_at=now,
            from_me=from_me,
            content_type=content_type,
        )


def command(engine: Engine, agent: Agent, body: str) -> InboundMessage:
    """The business writing ``body`` from its own phone (``from_me``): how an operator commands the agent."""
    return inbound(engine, agent, body, from_me=True)


def run_request(
    agent: Agent,
    messages: Sequence[InboundMessage],
    *,
    dry_run: bool = False,
    attempt: int = 1,
    parent_run_id: uuid.UUID | None = None,
) -> RunRequested:
    return RunRequested(
        org_id=agent.org_id,
        request_id=f"req-{uuid.uuid4().hex[:8]}",
        conversation_id=agent.conversation_id,
        contact_id=agent.contact_id,
        channel_session_id=agent.channel_session_id,
        run_id=uuid.uuid4(),
        agent_id=agent.agent_id,
        version_id=agent.version_id,
        attempt=attempt,
        parent_run_id=parent_run_id,
        wake_reason=WakeReason.RECOVERY if parent_run_id else WakeReason.USER_MESSAGE,
        wake_context=WakeContext(message_id=messages[0].message_id if messages else None),
        messages=tuple(messages),
        dry_run=dry_run,
    )


def run_token(
    agent: Agent,
    tools: set[str],
    *,
    dry_run: bool = False,
    secret: bytes | None = None,
    rh: RunnerHarness | None = None,
) -> str:
    """A run token for ``agent``'s conversation granting ``tools``; with ``rh``, the run gets a row."""
    run_id = uuid.uuid4()
    if rh is not None:  # tools that write name their run (a foreign key): give it a row
        with Session(rh.db) as session, tenant_transaction(session, agent.org_id):
            session.add(
                AiAgentRun(
                    id=run_id,
                    org_id=agent.org_id,
                    agent_id=agent.agent_id,
                    agent_version_id=agent.version_id,
                    conversation_id=agent.conversation_id,
                    status="running",
                    is_dry_run=True,
                )
            )
    claims = RunTokenClaims(
        org_id=agent.org_id,
        run_id=run_id,
        agent_id=agent.agent_id,
        conversation_id=agent.conversation_id,
        contact_id=agent.contact_id,
        channel_session_id=agent.channel_session_id,
        tools=frozenset(tools),
        dry_run=dry_run,
        expires_at=int(time.time()) + 60,
    )
    return mint_run_token(secret or RunTokenSettings().secret(), claims)


@dataclass
class RunnerHarness:
    database_url: str
    kafka: KafkaSettings
    fake: FakeLLM = field(default_factory=FakeLLM)
    settings_overrides: dict[str, Any] = field(default_factory=dict)
    mcp: ServedApp | None = None
    runner: Runner | None = None
    engine: Engine | None = None
    _mcp_server: McpToolServer | None = None
    _stop: asyncio.Event = field(default_factory=asyncio.Event)
    _task: asyncio.Task[None] | None = None
    _producer: RecordProducer | None = None

    @property
    def db(self) -> Engine:
        assert self.engine is not None
        return self.engine

    def settings(self) -> RunnerSettings:
        assert self.mcp is not None
        values: dict[str, Any] = {
            "kafka": self.kafka,
            "database": DatabaseSettings(url=self.database_url),
            "providers": ProviderSettings(
                anthropic_base_url=self.fake.url, openai_base_url=self.fake.openai_url, google_base_url=self.fake.url
            ),
            "group_id": f"runner-{uuid.uuid4().hex[:8]}",
            "mcp_url": f"{self.mcp.url}/mcp",
            "heartbeat_s": 1.0,
            "provider_backoff_initial_s": 0.05,
            "provider_backoff_max_s": 0.2,
            "model_call_timeout_s": 10.0,
            "tool_call_timeout_s": 5.0,
            "max_in_flight": 400,
            "db_pool_size": 30,
            "stale_run_after_s": 5.0,
            "shutdown_grace_s": 5.0,
        }
        values.update(self.settings_overrides)
        return RunnerSettings(**values)

    async def start(self) -> RunnerHarness:
        self.engine = create_engine(self.database_url, pool_size=5)
        await self.fake.start()
        await self.start_mcp()
        await self.start_runner()
        self._producer = RecordProducer(self.kafka, service="test")
        await self._producer.start()
        return self

    async def stop_mcp(self) -> None:
        if self.mcp is not None:
            await self.mcp.stop()
        if self._mcp_server is not None:
            await self._mcp_server.dispose()

    async def start_mcp(self) -> None:
        """(Re)start the tool server on the same port (an SDK session manager runs only once)."""
        port = self.mcp.port if self.mcp is not None else None
        self._mcp_server = McpToolServer(
            database=DatabaseSettings(url=self.database_url), secret=RunTokenSettings().secret()
        )
        served = ServedApp(self._mcp_server.app)
        if port is not None:
            served.port = port
        self.mcp = await served.start()

    async def start_runner(self, overrides: RunnerOverrides | None = None) -> Runner:
        self._stop = asyncio.Event()
        self.runner = Runner(self.settings(), overrides)
        self._task = asyncio.create_task(self.runner.serve(self._stop))
        await self.runner.wait_started()
        return self.runner

    async def stop_runner(self) -> None:
        self._stop.set()
        if self._task is not None:
            await asyncio.wait_for(self._task, 60)
            self._task = None

    async def stop(self) -> None:
        await self.stop_runner()
        if self._producer is not None:
            await self._producer.stop()
        await self.stop_mcp()
        await self.fake.stop()
        if self.engine is not None:
            self.engine.dispose()

    # ------------------------------------------------------------------ driving

    async def submit(self, request: RunRequested) -> None:
        assert self._producer is not None
        await self._producer.send(Topics.RUN_REQUESTED, request)

    async def submit_steering(
        self, request: RunRequested, kind: SteeringKind, text: str, *, source: InboundMessage | None = None
    ) -> None:
        assert self._producer is not None
        await self._producer.send(
            Topics.STEERING,
            SteeringMessage(
                org_id=request.org_id,
                conversation_id=request.conversation_id,
                run_id=request.run_id,
                kind=kind,
                text=text,
                source_message=source,
            ),
        )

    async def run(self, request: RunRequested, *, timeout_s: float = 30.0) -> AiAgentRun:
        await self.submit(request)
        return await self.wait_run(request, timeout_s=timeout_s)

    async def wait_run(self, request: RunRequested, *, timeout_s: float = 30.0) -> AiAgentRun:
        deadline = time.monotonic() + timeout_s
        while True:
            # In a thread: a blocking query must not stall the event loop the runner lives in.
            row = await asyncio.to_thread(self.run_row, request)
            if row is not None and row.status in TERMINAL:
                return row
            if time.monotonic() > deadline:
                raise AssertionError(f"run {request.run_id} not terminal after {timeout_s}s: {row and row.status}")
            await asyncio.sleep(0.1)

    async def wait_runs(self, requests: Sequence[RunRequested], *, timeout_s: float = 60.0) -> dict[uuid.UUID, str]:
        """Terminal status of many runs, polled with one query per org."""
        by_org: dict[uuid.UUID, set[uuid.UUID]] = {}
        for r in requests:
            by_org.setdefault(r.org_id, set()).add(r.run_id)

        def poll() -> dict[uuid.UUID, str]:
            found: dict[uuid.UUID, str] = {}
            with Session(self.db) as session:
                for org_id, ids in by_org.items():
                    with tenant_transaction(session, org_id):
                        rows = session.execute(
                            select(AiAgentRun.id, AiAgentRun.status).where(
                                AiAgentRun.id.in_(ids), AiAgentRun.status.in_(TERMINAL)
                            )
                        )
                        found.update({row.id: row.status for row in rows})
            return found

        deadline = time.monotonic() + timeout_s
        while True:
            found = await asyncio.to_thread(poll)
            if len(found) == len(requests) or time.monotonic() > deadline:
                return found
            await asyncio.sleep(0.5)

    def run_row(self, request: RunRequested) -> AiAgentRun | None:
        with Session(self.db, expire_on_commit=False) as session, tenant_transaction(session, request.org_id):
            return session.scalar(select(AiAgentRun).where(AiAgentRun.id == request.run_id))

    def outbox(self, conversation_id: uuid.UUID) -> list[tuple[str, Record]]:
        """``(topic, record)`` of the conversation's outbox rows, in order."""
        serde = Serde.from_settings(self.kafka)
        with Session(self.db) as session:
            rows = session.execute(
                select(OutboxEvent.topic, OutboxEvent.payload)
                .where(OutboxEvent.key == str(conversation_id).encode())
                .order_by(OutboxEvent.id)
            ).all()
        topics = {t.name: t for t in (Topics.RUN_STARTED, Topics.RUN_COMPLETED, Topics.HANDOFF_TRIGGERED)}
        return [(r.topic, serde.decode(topics[r.topic], r.payload)) for r in rows if r.topic in topics]

    def outbox_raw(self, conversation_id: uuid.UUID) -> list[bytes]:
        with Session(self.db) as session:
            return [
                bytes(p)
                for p in session.scalars(
                    select(OutboxEvent.payload).where(OutboxEvent.key == str(conversation_id).encode())
                )
            ]

    def usage(self, org_id: uuid.UUID) -> UsageTotals | None:
        """The org's usage this month, as every reader sees it (counters plus unfolded entries)."""
        with Session(self.db) as session, tenant_transaction(session, org_id):
            return month_totals(session, org_id, month_start())

    def scalar(self, org_id: uuid.UUID, sql: str, **params: Any) -> Any:
        with Session(self.db) as session, tenant_transaction(session, org_id):
            return session.execute(text(sql), params).scalar()

    async def topic_records(
        self, topic: Any, *, run_id: uuid.UUID | None = None, min_count: int = 1, timeout_s: float = 10.0
    ) -> list[tuple[bytes, Any]]:
        """``(raw value, decoded record)`` of a topic (optionally one run's), waiting for ``min_count``."""
        serde = Serde.from_settings(self.kafka)
        consumer = AIOKafkaConsumer(
            topic.physical_name(self.kafka),
            bootstrap_servers=self.kafka.bootstrap_servers,
            group_id=None,
            auto_offset_reset="earliest",
        )
        await consumer.start()
        found: list[tuple[bytes, Any]] = []
        try:
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                batch = await consumer.getmany(timeout_ms=200)
                for records in batch.values():
                    for r in records:
                        value = serde.decode(topic, r.value)
                        if run_id is None or getattr(value, "run_id", None) == run_id:
                            found.append((r.value, value))
                if len(found) >= min_count and not batch:
                    break
        finally:
            await consumer.stop()
        return found

    async def events(self, run_id: uuid.UUID, *, until_done: bool = True, timeout_s: float = 10.0) -> list[RunEvent]:
        deadline = time.monotonic() + timeout_s
        while True:
            records = [r for _, r in await self.topic_records(Topics.RUN_EVENTS, run_id=run_id, timeout_s=2.0)]
            if not until_done or any(e.type == "done" for e in records) or time.monotonic() > deadline:
                return sorted(records, key=lambda e: e.seq)


@contextlib.asynccontextmanager
async def harness(database_url: str, kafka: KafkaSettings, **overrides: Any) -> AsyncIterator[RunnerHarness]:
    h = RunnerHarness(database_url=database_url, kafka=kafka, settings_overrides=overrides)
    await h.start()
    try:
        yield h
    finally:
        await h.stop()


class RunnerProcess(WorkerProcess):
    """``switchboard runner`` in a subprocess on the test's topics and database (``RUNNER_*`` as keywords);
    readiness, SIGKILL, SIGTERM and logs as for a dispatcher worker."""

    def __init__(self, kafka: KafkaSettings, database_url: str, log_dir: Path, **env: str) -> None:
        super().__init__(kafka, database_url, log_dir, **env)
        self.log_path = log_dir / f"runner-{self.port}.log"
        self._env["RUNNER_HEALTH_PORT"] = str(self.port)

    def start(self) -> RunnerProcess:
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "services.cli", "runner"], cwd=REPO_ROOT, env=self._env, stdout=log, stderr=log
        )
        return self
