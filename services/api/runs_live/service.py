"""The dry-run test and the live event stream: what they read and write.

**Dry run** [004 §4.4 ``:test``, D5]. The sample message goes the way a real one
goes — a ``dispatch_requested`` (``dry_run=true``, aimed at the version under
test) through the outbox to the dispatcher, then the runner — so what is tested
is what will run. It is stored as an inbound message of a *test conversation*
(one per channel session and caller, chat id ``switchboard-test-<caller>``), so
it never lands in a customer's conversation, and nothing is ever sent: the
runner executes no write tool in a dry run and the notifier never sends a dry
run's reply. The endpoint then waits, bounded, for the run to finish.

**Live events** [002 "Streaming"]. ``run_events`` is keyed by conversation, so a
run's events are all in one partition: the stream reads that partition from a
little before the run was created (``offsets_for_times``), so a client that
connects late still gets everything from the start (replay), keeps only the
run's events, and ends with its ``done`` event. If the events aged out of the
topic (3 days), the stream ends with a ``done`` built from the run row.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.partitioner import murmur2
from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from services.api.core.errors import Conflict, NotFound, ValidationFailed
from switchboard.contracts import DispatchRequested, InboundMessage, RunEvent, Serde, Topics, WakeContext
from switchboard.contracts.enums import DispatchOutcome, RunEventType, WakeReason
from switchboard.db.audit import record_audit
from switchboard.db.enums import ACTIVE_RUN_STATUSES
from switchboard.db.models import AiAgent, AiAgentRun, AiAgentVersion, Contact, Conversation, DispatchDecision, Message
from switchboard.db.outbox import enqueue_record
from switchboard.db.session import async_tenant_transaction
from switchboard.internal_chats import TEST_CHAT_PREFIX
from switchboard.observability.scrubbing import scrub
from switchboard.settings import KafkaSettings

_ACTIVE = {s.value for s in ACTIVE_RUN_STATUSES}


@dataclass(frozen=True)
class DryRunRequest:
    org_id: uuid.UUID
    agent_id: uuid.UUID
    version_id: uuid.UUID
    caller: str
    sample_message: str
    contact_name: str | None
    request_id: str | None
    # The sample contact's phone, stored on the test contact as a customer's would be.
    contact_phone: str | None = None
    # Who asked, for the audit log (None: an API token).
    actor_user_id: uuid.UUID | None = None


@dataclass(frozen=True)
class DryRunTicket:
    message_id: uuid.UUID
    conversation_id: uuid.UUID
    dispatch_event_id: uuid.UUID


class DryRunRefused(Conflict):
    """The dispatcher decided not to run the test (the org's monthly budget is spent, the version
    is gone...): said at once with its decision, instead of waiting out the deadline."""

    code = "dry_run_refused"


async def request_dry_run(
    sessions: async_sessionmaker[AsyncSession], serde: Serde, request: DryRunRequest
) -> DryRunTicket:
    """Store the sample message in the caller's test conversation and ask for a dry run (one transaction)."""
    async with sessions() as session, async_tenant_transaction(session, request.org_id):
        version = await session.scalar(
            select(AiAgentVersion)
            .join(AiAgent, AiAgent.id == AiAgentVersion.agent_id)
            .where(
                AiAgentVersion.org_id == request.org_id,
                AiAgentVersion.id == request.version_id,
                AiAgentVersion.agent_id == request.agent_id,
                AiAgent.archived_at.is_(None),
            )
        )
        if version is None:
            raise NotFound("No such version of this agent")
        if version.channel_session_id is None:
            raise ValidationFailed(
                "The version has no channel session to test on", details={"field": "channel_session_id"}
            )
        chat_id = f"{TEST_CHAT_PREFIX}{request.caller}"
        contact_id = await session.scalar(
            insert(Contact)
            .values(
                org_id=request.org_id,
                external_id=chat_id,
                display_name=request.contact_name or "Test contact",
                phone_number=request.contact_phone,
            )
            .on_conflict_do_update(
                index_elements=[Contact.org_id, Contact.external_id],
                set_={
                    "display_name": request.contact_name or Contact.display_name,
                    "phone_number": request.contact_phone or Contact.phone_number,
                },
            )
            .returning(Contact.id)
        )
        conversation_id = await session.scalar(
            insert(Conversation)
            .values(
                org_id=request.org_id,
                channel_session_id=version.channel_session_id,
                contact_id=contact_id,
                chat_id=chat_id,
            )
            .on_conflict_do_update(
                index_elements=[Conversation.channel_session_id, Conversation.chat_id],
                set_={"last_message_at": datetime.now(UTC)},
            )
            .returning(Conversation.id)
        )
        assert contact_id is not None and conversation_id is not None
        # Serialize with other writers of this conversation's outbox events (ordering per key).
        await session.execute(select(Conversation.id).where(Conversation.id == conversation_id).with_for_update())
        now = datetime.now(UTC)
        message = Message(
            org_id=request.org_id,
            conversation_id=conversation_id,
            channel_session_id=version.channel_session_id,
            direction="inbound",
            sender="contact",
            external_id=f"test.{uuid.uuid4().hex}",
            body=request.sample_message,
            occurred_at=now,
            attributes={"dry_run": True, "requested_by": request.caller},
        )
        session.add(message)
        await session.flush()
        record = DispatchRequested(
            org_id=request.org_id,
            request_id=request.request_id,
            conversation_id=conversation_id,
            contact_id=contact_id,
            channel_session_id=version.channel_session_id,
            wake_reason=WakeReason.USER_MESSAGE,
            wake_context=WakeContext(message_id=message.id),
            message=InboundMessage(
                message_id=message.id,
                external_id=message.external_id or "",
                chat_id=chat_id,
                text=request.sample_message,
                received_at=now,
            ),
            target_agent_id=request.agent_id,
            target_version_id=request.version_id,
            dry_run=True,
        )
        await session.run_sync(enqueue_record, Topics.DISPATCH_REQUESTED, record, serde=serde)
        # A test spends the org's provider money like a customer's message: who ran which version is audited.
        await session.run_sync(
            lambda s: record_audit(
                s,
                org_id=request.org_id,
                action="ai_agent_version.tested",
                actor_user_id=request.actor_user_id,
                target_type="ai_agent_version",
                target_id=request.version_id,
                details={
                    "agent_id": str(request.agent_id),
                    "conversation_id": str(conversation_id),
                    "message_id": str(message.id),
                },
                request_id=request.request_id,
            )
        )
        return DryRunTicket(message_id=message.id, conversation_id=conversation_id, dispatch_event_id=record.event_id)


async def wait_for_run(
    sessions: async_sessionmaker[AsyncSession],
    org_id: uuid.UUID,
    ticket: DryRunTicket,
    *,
    timeout_s: float,
    draining: asyncio.Event | None = None,
) -> AiAgentRun | None:
    """The dry run answering the ticket's message once terminal; the run as it is at the deadline,
    or when the API starts stopping (``draining``: answered, not cut by the rollout), otherwise.

    Raises :class:`DryRunRefused` as soon as the dispatcher's recorded decision about the test is
    anything but ``dispatched`` (its sink writes ``dispatch_decisions``)."""
    deadline = time.monotonic() + timeout_s
    delay = 0.1
    run: AiAgentRun | None = None
    while True:
        refusal: DispatchDecision | None = None
        async with sessions() as session, async_tenant_transaction(session, org_id):
            run = await session.scalar(
                select(AiAgentRun)
                .where(
                    AiAgentRun.org_id == org_id,
                    AiAgentRun.conversation_id == ticket.conversation_id,
                    AiAgentRun.inbound_message_id == ticket.message_id,
                    AiAgentRun.is_dry_run.is_(True),
                )
                .order_by(AiAgentRun.created_at.desc())
                .limit(1)
            )
            if run is None:
                refusal = await session.scalar(
                    select(DispatchDecision)
                    .where(
                        DispatchDecision.org_id == org_id,
                        DispatchDecision.dispatch_event_id == ticket.dispatch_event_id,
                        DispatchDecision.outcome != DispatchOutcome.DISPATCHED.value,
                    )
                    .limit(1)
                )
        if refusal is not None:
            reason = refusal.details.get("reason") if isinstance(refusal.details, dict) else None
            raise DryRunRefused(
                f"The dispatcher did not run the test: {reason or refusal.outcome}",
                details={"outcome": refusal.outcome, "reason": reason},
            )
        stopping = draining is not None and draining.is_set()
        if (run is not None and run.status not in _ACTIVE) or time.monotonic() >= deadline or stopping:
            return run
        await _sleep_unless(draining, delay)
        delay = min(1.0, delay * 1.5)


async def _sleep_unless(event: asyncio.Event | None, delay: float) -> None:
    """Sleep ``delay`` seconds, or less when ``event`` is set meanwhile."""
    if event is None:
        await asyncio.sleep(delay)
        return
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), timeout=delay)


# ---------------------------------------------------------------------------- live events


def partition_of(conversation_id: uuid.UUID, partitions: int) -> int:
    """Kafka's default partitioner on our key (the conversation id's text): where its events are."""
    return (murmur2(str(conversation_id).encode()) & 0x7FFFFFFF) % partitions


def sse(event: str, data: str, event_id: str | None = None) -> bytes:
    lines = [f"event: {event}"]
    if event_id is not None:
        lines.append(f"id: {event_id}")
    lines.extend(f"data: {line}" for line in data.splitlines() or [""])
    return ("\n".join(lines) + "\n\n").encode()


def event_json(event: RunEvent) -> dict[str, Any]:
    payload = event.model_dump(mode="json", exclude_none=True)
    payload.pop("org_id", None)
    return dict(scrub(payload))


async def run_events(
    *,
    kafka: KafkaSettings,
    serde: Serde,
    run_id: uuid.UUID,
    conversation_id: uuid.UUID,
    created_at: datetime,
    after_seq: int,
    run_finished: Any,
    keepalive_s: float = 15.0,
    idle_check_s: float = 2.0,
    stop: asyncio.Event | None = None,
) -> AsyncIterator[RunEvent | None]:
    """The run's events in order from ``after_seq``; ``None`` is a keep-alive tick. Ends early
    when ``stop`` is set (the API is stopping: the client reconnects elsewhere with ``Last-Event-ID``).

    ``run_finished()`` (async) is asked whenever the partition was idle for
    ``idle_check_s``: when the run is over and its ``done`` is not coming (aged
    out, or a run that died), the stream ends.
    """
    topic = Topics.RUN_EVENTS.physical_name(kafka)
    consumer = AIOKafkaConsumer(
        **kafka.client_options(),
        client_id=f"{kafka.client_id}-sse",
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    try:
        partitions = consumer.partitions_for_topic(topic)
        if not partitions:
            await consumer.topics()  # fetches the cluster metadata
            partitions = consumer.partitions_for_topic(topic) or set()
        tp = TopicPartition(topic, partition_of(conversation_id, len(partitions) or kafka.conversation_partitions))
        consumer.assign([tp])
        since_ms = int(created_at.timestamp() * 1000) - 5_000
        offsets = await consumer.offsets_for_times({tp: since_ms})
        found = offsets.get(tp)
        if found is None:
            await consumer.seek_to_end(tp)
        else:
            consumer.seek(tp, found.offset)
        idle_since = time.monotonic()
        last_tick = time.monotonic()
        while stop is None or not stop.is_set():
            batch = await consumer.getmany(tp, timeout_ms=500, max_records=200)
            got = False
            for record in batch.get(tp, []):
                try:
                    event = await serde.decode_async(Topics.RUN_EVENTS, record.value)
                except Exception:  # an undecodable record is not this stream's business
                    continue
                if event.run_id != run_id or event.seq <= after_seq:
                    continue
                got = True
                yield event
                if event.type is RunEventType.DONE:
                    return
            now = time.monotonic()
            if got:
                idle_since = now
            elif now - idle_since >= idle_check_s:
                idle_since = now
                if await run_finished():
                    return
            if now - last_tick >= keepalive_s:
                last_tick = now
                yield None
    finally:
        await consumer.stop()
