"""With a real ``switchboard dispatcher`` process: after a handoff, new inbound messages of the
conversation are not dispatched (each gets a recorded ``conv_busy`` decision) until the API
hands the conversation back; the handback's outbox record wakes the agent and clears the flag."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select, update

from services.dispatcher.policy import HANDED_OFF_REASON
from switchboard.contracts import DispatchOutcome, RunRequested, RunStatus, Topics, TriggerConfig, WakeReason
from switchboard.db.enums import Role
from switchboard.db.models import Conversation
from switchboard.db.models.outbox import OutboxEvent
from switchboard.kafka.producer import RecordProducer
from switchboard.settings import KafkaSettings
from tests.integration.dispatcher.harness import (
    Behavior,
    Observer,
    StandInRunner,
    WorkerProcess,
    agent_snapshot,
    dispatch_record,
    publish_record,
)
from tests.integration.notifier.conftest import World
from tests.support.agents import tenant_session
from tests.support.stack import StackEndpoints

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


@pytest.fixture
async def dispatcher(topics: KafkaSettings, stack: StackEndpoints, tmp_path: Path) -> AsyncIterator[WorkerProcess]:
    worker = WorkerProcess(topics, stack.database_url, tmp_path).start()
    try:
        await worker.wait_ready()
        yield worker
    finally:
        worker.stop()


def first_run_hands_off(request: RunRequested) -> Behavior:
    handoff = request.wake_reason is WakeReason.USER_MESSAGE and request.messages[0].text == "quero um humano"
    return Behavior(delay_s=0.05, status=RunStatus.HANDOFF if handoff else RunStatus.COMPLETED)


async def test_no_dispatch_after_a_handoff_until_the_handback(
    world: World, topics: KafkaSettings, api: httpx.AsyncClient, dispatcher: WorkerProcess
) -> None:
    org, conversation, session = world.org.org_id, world.conversation_id, world.channel_id
    agent = agent_snapshot(org, session, trigger=TriggerConfig(event_types=("message", "assignment")))
    async with (
        RecordProducer(topics, service="test", linger_ms=1) as producer,
        Observer(topics) as observer,
        StandInRunner(topics, behavior=first_run_hands_off) as runner,
    ):
        await producer.send(Topics.PUBLISHED, publish_record(org, agent))
        await producer.send(Topics.DISPATCH_REQUESTED, dispatch_record(org, conversation, session, "quero um humano"))
        await observer.wait_for(
            lambda: any(i.status is RunStatus.HANDOFF for i in runner.intervals), what="the run ended in a handoff"
        )
        # What the notifier does on handoff_triggered (its own tests cover that path).
        with tenant_session(world.org) as db:
            db.execute(update(Conversation).where(Conversation.id == conversation).values(status="handoff"))

        waiting = [dispatch_record(org, conversation, session, f"alô? {n}") for n in range(3)]
        for record in waiting:
            await producer.send(Topics.DISPATCH_REQUESTED, record)
        ids = {r.event_id for r in waiting}

        def decided() -> list[Any]:
            return [d for d in observer.decisions if d.dispatch_event_id in ids]

        def refused() -> set[uuid.UUID]:
            return {d.dispatch_event_id for d in decided() if d.outcome is DispatchOutcome.CONV_BUSY}

        await observer.wait_for(lambda: refused() == ids, what="a conv_busy decision for every waiting message")
        # A message that reached the dispatcher before the handoff's run_completed was first queued
        # behind the active run, then refused with the others when the handoff arrived.
        assert {d.outcome for d in decided()} <= {DispatchOutcome.CONV_BUSY, DispatchOutcome.QUEUED}
        assert {d.reason for d in decided() if d.outcome is DispatchOutcome.CONV_BUSY} == {HANDED_OFF_REASON}
        assert len(observer.run_requests) == 1, "nothing was dispatched to an agent"

        back = await api.post(f"/api/v1/conversations/{conversation}:handback", headers=world.org.headers(Role.MANAGER))
        assert back.status_code == 200, back.text
        with tenant_session(world.org) as db:
            [row] = db.scalars(
                select(OutboxEvent).where(
                    OutboxEvent.topic == Topics.DISPATCH_REQUESTED.name, OutboxEvent.key == str(conversation).encode()
                )
            )
        # What the outbox relay does with the row (the test API runs no relay: the outbox is shared).
        await producer.send_raw(Topics.DISPATCH_REQUESTED, key=row.key, value=row.payload)
        await observer.wait_for(
            lambda: any(r.wake_reason is WakeReason.ASSIGNMENT for r in observer.run_requests),
            what="the handback woke the agent",
        )
        await observer.wait_for(lambda: len(runner.intervals) == 2 and runner.intervals[-1].ended is not None)

        after = dispatch_record(org, conversation, session, "obrigado, voltei")
        await producer.send(Topics.DISPATCH_REQUESTED, after)
        await observer.wait_for(
            lambda: any(m.message_id == after.message.message_id for r in observer.run_requests for m in r.messages),  # type: ignore[union-attr]
            what="a new message is dispatched again",
        )
        waiting_ids = {r.message.message_id for r in waiting if r.message}
        assert not any(m.message_id in waiting_ids for r in observer.run_requests for m in r.messages)
