"""The notifier against the real broker and database, with the local WAHA-compatible server.

``world`` is one org with a channel session pointing at the test's ``ChannelServer`` (its
API key sealed like the channels API does), a contact, a conversation and an agent version;
``world.run()`` inserts a run row and returns the ``run_completed`` the runner would publish.
``notifier`` runs the service in-process; ``crash()`` cancels it mid-record (nothing acked).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import httpx
import pytest
from aiohttp import web
from sqlalchemy import select

from scripts.channel_server import ChannelServer
from services.api.app import create_app
from services.api.settings import ApiSettings
from services.notifier.handlers import Hooks
from services.notifier.service import Notifier, NotifierOverrides
from services.notifier.settings import NotifierSettings
from switchboard.contracts import (
    HandoffTrigger,
    HandoffTriggered,
    Record,
    RunCompleted,
    RunStatus,
    SendTarget,
    Serde,
    TopicSpec,
    Urgency,
    Vitality,
    WakeReason,
)
from switchboard.crypto import KeyRing
from switchboard.db.models import AiAgentRun, ChannelSession, Contact, Conversation, Message
from switchboard.db.models.notifications import RunDelivery
from switchboard.kafka.producer import RecordProducer
from switchboard.rotation import channel_session_aad
from switchboard.settings import DatabaseSettings, KafkaSettings
from tests.integration.db.factories import create_agent_version
from tests.support.agents import tenant_session
from tests.support.api import OrgHandle, create_org
from tests.support.ports import free_port
from tests.support.stack import StackEndpoints

pytestmark = pytest.mark.integration

API_KEY = "waha-test-key"
T = TypeVar("T")


class World:
    """An org with a channel session (on ``channel_url``; None: the platform's WAHA), a contact,
    a conversation and an agent; ``api_key`` is the session's stored key (None: none stored)."""

    def __init__(
        self, org: OrgHandle, keyring: KeyRing, channel_url: str | None, api_key: str | None = API_KEY
    ) -> None:
        self.org = org
        with tenant_session(org) as session:
            channel = ChannelSession(
                org_id=org.org_id,
                external_session=f"s-{uuid.uuid4().hex[:12]}",
                label="Main number",
                status="working",
                base_url=channel_url,
            )
            session.add(channel)
            session.flush()
            if api_key is not None:
                sealed = keyring.seal(api_key.encode(), aad=channel_session_aad("api_key", org.org_id, channel.id))
                channel.api_key_ciphertext, channel.api_key_iv = sealed.ciphertext, sealed.iv
                channel.api_key_tag, channel.api_key_key_id = sealed.tag, sealed.key_id
            contact = Contact(org_id=org.org_id, external_id=f"55{uuid.uuid4().int % 10**11}@c.us")
            session.add(contact)
            session.flush()
            conversation = Conversation(
                org_id=org.org_id, channel_session_id=channel.id, contact_id=contact.id, chat_id=contact.external_id
            )
            session.add(conversation)
            version = create_agent_version(session, org.org_id)
            session.flush()
            self.channel_id, self.session_name = channel.id, channel.external_session
            self.contact_id, self.chat_id = contact.id, contact.external_id
            self.conversation_id = conversation.id
            self.agent_id, self.version_id = version.agent_id, version.id

    def run(
        self,
        *,
        status: RunStatus = RunStatus.COMPLETED,
        dry_run: bool = False,
        text: str | None = "Olá! Posso ajudar.",
        send_to: bool | None = None,
    ) -> RunCompleted:
        """A finished run row plus the run_completed the runner publishes with it.

        ``send_to``: whether it names a send target; by default as the runner does — a completed
        run does, any other does not (a handoff does only with its version's handoff message)."""
        target = status is RunStatus.COMPLETED if send_to is None else send_to
        run_id = uuid.uuid4()
        now = datetime.now(UTC)
        with tenant_session(self.org) as session:
            session.add(
                AiAgentRun(
                    id=run_id,
                    org_id=self.org.org_id,
                    agent_id=self.agent_id,
                    agent_version_id=self.version_id,
                    conversation_id=self.conversation_id,
                    contact_id=self.contact_id,
                    channel_session_id=self.channel_id,
                    status=status.value,
                    is_dry_run=dry_run,
                    final_text=text,
                    started_at=now,
                )
            )
        return RunCompleted(
            org_id=self.org.org_id,
            conversation_id=self.conversation_id,
            contact_id=self.contact_id,
            channel_session_id=self.channel_id,
            run_id=run_id,
            agent_id=self.agent_id,
            version_id=self.version_id,
            wake_reason=WakeReason.USER_MESSAGE,
            status=status,
            vitality=Vitality.COMPLETED,
            final_text=text,
            would_send_to=SendTarget(channel_session_id=self.channel_id, chat_id=self.chat_id) if target else None,
            provider="anthropic",
            model="claude-sonnet-4-6",
            tokens_in=10,
            tokens_out=5,
            cost_micro_usd=42,
            latency_ms=100,
            steps=1,
            dry_run=dry_run,
            started_at=now,
            completed_at=now,
        )

    def handoff(self, completed: RunCompleted, *, dry_run: bool = False) -> HandoffTriggered:
        return HandoffTriggered(
            org_id=self.org.org_id,
            conversation_id=self.conversation_id,
            contact_id=self.contact_id,
            channel_session_id=self.channel_id,
            run_id=completed.run_id,
            agent_id=self.agent_id,
            version_id=self.version_id,
            reason="the customer asked for a person",
            urgency=Urgency.HIGH,
            trigger=HandoffTrigger.KEYWORD,
            matched_keyword="humano",
            dry_run=dry_run,
        )

    def queue_intent(self, completed: RunCompleted, text: str, *, approved: bool = False) -> uuid.UUID:
        """What the MCP send tool records: a pending outbound message carrying the run id (and,
        when an owner's approval sent it, saying so)."""
        with tenant_session(self.org) as session:
            message = Message(
                org_id=self.org.org_id,
                conversation_id=self.conversation_id,
                channel_session_id=self.channel_id,
                direction="outbound",
                sender="agent",
                dedupe_key=f"agent-tool:{completed.run_id}:{uuid.uuid4().hex}",
                body=text,
                delivery_status="pending",
                run_id=completed.run_id,
                attributes={"intent": "crm_send_whatsapp_message", **({"approved": True} if approved else {})},
            )
            session.add(message)
            session.flush()
            return message.id

    def deliveries(self, run_id: uuid.UUID) -> list[RunDelivery]:
        with tenant_session(self.org) as session:
            return list(session.scalars(select(RunDelivery).where(RunDelivery.run_id == run_id)))

    def outbound(self, run_id: uuid.UUID) -> list[Message]:
        with tenant_session(self.org) as session:
            query = select(Message).where(Message.run_id == run_id).order_by(Message.created_at, Message.id)
            return list(session.scalars(query))

    def conversation(self) -> Conversation:
        with tenant_session(self.org) as session:
            return session.get_one(Conversation, self.conversation_id)


async def eventually(probe: Callable[[], T], check: Callable[[T], bool], *, timeout: float = 20.0) -> T:
    """Poll ``probe`` until ``check`` holds (deadline, no fixed sleep as synchronization)."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if check(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition never held; last value: {value!r}")
        await asyncio.sleep(0.1)


class RunningNotifier:
    """The service in this process; ``stop()`` is a graceful SIGTERM, ``crash()`` a kill mid-work."""

    def __init__(self, settings: NotifierSettings, keyring: KeyRing, hooks: Hooks | None = None) -> None:
        self.service = Notifier(settings, NotifierOverrides(keyring=keyring, hooks=hooks))
        self._stop = asyncio.Event()
        self._task = asyncio.create_task(self.service.serve(self._stop))

    async def wait_ready(self, timeout: float = 30.0) -> RunningNotifier:
        deadline = time.monotonic() + timeout
        while not await self.service.ready():
            assert not self._task.done(), self._task.exception()
            assert time.monotonic() < deadline, "notifier never became ready"
            await asyncio.sleep(0.05)
        return self

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.wait_for(self._task, 30)

    async def crash(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


@dataclass(frozen=True)
class Hit:
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class WebhookReceiver:
    """The org's side of the outgoing webhook: records every POST, can answer failures first."""

    def __init__(self) -> None:
        self.hits: list[Hit] = []
        self._failures: list[int] = []
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> WebhookReceiver:
        app = web.Application()
        app.router.add_post("/hooks/switchboard", self._receive)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        port = free_port()
        await web.TCPSite(self._runner, "127.0.0.1", port).start()
        self.url = f"http://127.0.0.1:{port}/hooks/switchboard"
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def fail_next(self, status: int, times: int = 1) -> None:
        self._failures.extend([status] * times)

    async def _receive(self, request: web.Request) -> web.Response:
        self.hits.append(Hit(dict(request.headers), await request.read()))
        return web.Response(status=self._failures.pop(0) if self._failures else 204)


@pytest.fixture
async def receiver() -> AsyncIterator[WebhookReceiver]:
    hooks = await WebhookReceiver().start()
    yield hooks
    await hooks.stop()


@pytest.fixture
async def api(stack: StackEndpoints, topics: KafkaSettings, migrated: None) -> AsyncIterator[httpx.AsyncClient]:
    """The real API app in-process (no outbox relay: tests read the outbox rows)."""
    settings = ApiSettings(
        database=DatabaseSettings(url=stack.database_url, owner_url=stack.database_owner_url),
        kafka=topics,
        outbox_relay=False,
    )
    app = create_app(settings)
    started, done = asyncio.Event(), asyncio.Event()

    async def _lifespan() -> None:
        # Entered and exited in one task: the mounted MCP server's task group requires it.
        async with app.router.lifespan_context(app):
            started.set()
            await done.wait()

    task = asyncio.create_task(_lifespan())
    await asyncio.wait_for(started.wait(), 30)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://api.test") as client:
        yield client
    done.set()
    await task


@pytest.fixture
def keyring() -> KeyRing:
    return KeyRing.from_settings()


@pytest.fixture
async def channel() -> AsyncIterator[ChannelServer]:
    server = await ChannelServer(api_key=API_KEY).start()
    yield server
    await server.stop()


@pytest.fixture
def world(stack: StackEndpoints, migrated: None, keyring: KeyRing, channel: ChannelServer) -> World:
    return World(create_org(stack.database_url), keyring, channel.url)


@pytest.fixture
def notifier_settings(stack: StackEndpoints, topics: KafkaSettings, group_id: str) -> NotifierSettings:
    return NotifierSettings(
        database=DatabaseSettings(url=stack.database_url),
        kafka=topics,
        group_id=group_id,
        send_timeout_s=2.0,
        send_max_attempts=4,
        send_backoff_initial_s=0.05,
        send_backoff_max_s=0.2,
        # Off: the morning push would tell any due org of the shared database, on the clock's
        # say (test_digest_push.py turns it on).
        digest_interval_s=0,
    )


@pytest.fixture
async def start_notifier(
    notifier_settings: NotifierSettings, keyring: KeyRing
) -> AsyncIterator[Callable[..., Awaitable[RunningNotifier]]]:
    started: list[RunningNotifier] = []

    async def _start(hooks: Hooks | None = None) -> RunningNotifier:
        running = RunningNotifier(notifier_settings, keyring, hooks)
        started.append(running)
        return await running.wait_ready()

    yield _start
    for running in started:
        await running.crash()


@pytest.fixture
async def publish(topics: KafkaSettings) -> AsyncIterator[Callable[[TopicSpec[Any], Record], Awaitable[None]]]:
    producer = RecordProducer(topics, service="test", serde=Serde.from_settings(topics))
    await producer.start()

    async def _publish(topic: TopicSpec[Any], record: Record) -> None:
        await producer.send(topic, record)

    yield _publish
    await producer.stop()
