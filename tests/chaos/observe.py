"""What the chaos assertions look at: the run, decision and delivery tables, the channel server, the events.

Read through the application role under the org's row-level security (the way the
product reads them), the channel server's ``GET /api/received``, and the
``run_started`` / ``run_completed`` topics read whole from the private broker.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import httpx
from aiokafka import AIOKafkaConsumer, TopicPartition
from sqlalchemy import select
from sqlalchemy.orm import Session

from switchboard.contracts import DispatchDecided, RunCompleted, RunRequested, RunStarted, Serde, Topics, TopicSpec
from switchboard.db.models import AiAgentRun, Message
from switchboard.db.models.notifications import RunDelivery
from switchboard.db.models.runs import DispatchDecision
from switchboard.db.session import tenant_transaction
from switchboard.settings import KafkaSettings


@dataclass(frozen=True)
class RunRow:
    id: uuid.UUID
    conversation_id: uuid.UUID | None
    status: str
    error_family: str | None
    attempt: int
    parent_run_id: uuid.UUID | None
    message_ids: tuple[uuid.UUID, ...]
    final_text: str | None
    started_at: datetime | None
    completed_at: datetime | None
    is_dry_run: bool
    abort_reason: str | None = None


@dataclass(frozen=True)
class DecisionRow:
    message_id: uuid.UUID | None
    outcome: str
    run_id: uuid.UUID | None


@dataclass(frozen=True)
class DeliveryRow:
    run_id: uuid.UUID
    kind: str
    status: str
    attempts: int


@dataclass(frozen=True)
class Reply:
    chat_id: str
    text: str
    status: int


@dataclass(frozen=True)
class Snapshot:
    """Everything at one moment; the checks are pure functions of it."""

    messages: dict[uuid.UUID, tuple[uuid.UUID, datetime]]  # message -> (conversation, created_at)
    runs: list[RunRow]
    decisions: list[DecisionRow]
    deliveries: list[DeliveryRow]
    replies: list[Reply]


def read_tables(session_factory: Any, org_id: str, message_ids: list[str]) -> tuple[Any, ...]:
    wanted = [uuid.UUID(m) for m in message_ids]
    session: Session
    with session_factory() as session, tenant_transaction(session, org_id):
        messages = {
            row.id: (row.conversation_id, row.created_at)
            for row in session.execute(
                select(Message.id, Message.conversation_id, Message.created_at).where(Message.id.in_(wanted))
            )
        }
        runs = [
            RunRow(
                r.id,
                r.conversation_id,
                r.status,
                r.error_family,
                r.attempt,
                r.parent_run_id,
                tuple(r.inbound_message_ids or ()),
                r.final_text,
                r.started_at,
                r.completed_at,
                r.is_dry_run,
                r.abort_reason,
            )
            for r in session.scalars(select(AiAgentRun))
        ]
        decisions = [
            DecisionRow(d.inbound_message_id, d.outcome, d.run_id) for d in session.scalars(select(DispatchDecision))
        ]
        deliveries = [DeliveryRow(d.run_id, d.kind, d.status, d.attempts) for d in session.scalars(select(RunDelivery))]
    return messages, runs, decisions, deliveries


async def read_replies(channel_url: str) -> list[Reply]:
    async with httpx.AsyncClient(timeout=10) as client:
        response = await client.get(f"{channel_url}/api/received")
        response.raise_for_status()
    return [Reply(str(r["chat_id"]), str(r["text"]), int(r["status_returned"])) for r in response.json()]


async def read_topic(kafka: KafkaSettings, topic: TopicSpec[Any]) -> list[Any]:
    """Every record on ``topic`` up to its current end, decoded."""
    serde = Serde.from_settings(kafka)
    name = topic.physical_name(kafka)
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka.bootstrap_servers, enable_auto_commit=False)
    await consumer.start()
    try:
        partitions = [TopicPartition(name, p) for p in range(topic.partition_count(kafka))]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        ends = await consumer.end_offsets(partitions)
        records: list[Any] = []
        while [tp for tp, end in ends.items() if await consumer.position(tp) < end]:
            batches = await consumer.getmany(timeout_ms=500, max_records=2000)
            for batch in batches.values():
                records.extend(serde.decode(topic, r.value) for r in batch)
        return records
    finally:
        await consumer.stop()


@dataclass(frozen=True)
class RunEvents:
    started: list[RunStarted]
    completed: list[RunCompleted]
    parents: dict[uuid.UUID, uuid.UUID | None]  # run -> the attempt it replaces, from run_requested
    decisions: list[DispatchDecided]  # with every message of a run's decision (the table keeps the first)
    resent: int = 0  # run_requested records beyond the first of their run: re-sent by a dispatcher taking over


async def run_events(kafka: KafkaSettings) -> RunEvents:
    requested: list[RunRequested] = await read_topic(kafka, Topics.RUN_REQUESTED)
    return RunEvents(
        await read_topic(kafka, Topics.RUN_STARTED),
        await read_topic(kafka, Topics.RUN_COMPLETED),
        {r.run_id: r.parent_run_id for r in requested},
        await read_topic(kafka, Topics.DISPATCH_DECISIONS),
        len(requested) - len({r.run_id for r in requested}),
    )
