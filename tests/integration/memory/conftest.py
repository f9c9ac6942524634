"""The runner harness of tests/integration/runner (real broker, database, MCP server, fake model) for the
memory and wake tests, plus helpers they share."""

from __future__ import annotations

import uuid
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from switchboard.contracts import DispatchRequested, RunRequested, Serde, Topics
from switchboard.db.models import OutboxEvent
from tests.integration.runner.conftest import api, module_kafka, rh
from tests.integration.runner.harness import RunnerHarness

__all__ = ["api", "dispatches", "module_kafka", "rh", "run_for"]


def dispatches(rh: RunnerHarness, conversation_id: uuid.UUID) -> list[tuple[bytes, DispatchRequested]]:
    """``(raw payload, record)`` of the conversation's ``dispatch_requested`` outbox rows, in order."""
    serde = Serde.from_settings(rh.kafka)
    with Session(rh.db) as session:
        rows = session.execute(
            select(OutboxEvent.payload)
            .where(
                OutboxEvent.topic == Topics.DISPATCH_REQUESTED.name,
                OutboxEvent.key == str(conversation_id).encode(),
            )
            .order_by(OutboxEvent.id)
        ).all()
    out: list[tuple[bytes, DispatchRequested]] = []
    for row in rows:
        record: Any = serde.decode(Topics.DISPATCH_REQUESTED, row.payload)
        out.append((bytes(row.payload), record))
    return out


def run_for(dispatch: DispatchRequested, agent_id: uuid.UUID, version_id: uuid.UUID) -> RunRequested:
    """The ``run_requested`` the dispatcher makes of a wake (the dispatcher is tested on its own)."""
    return RunRequested(
        org_id=dispatch.org_id,
        request_id=dispatch.request_id,
        conversation_id=dispatch.conversation_id,
        contact_id=dispatch.contact_id,
        channel_session_id=dispatch.channel_session_id,
        run_id=uuid.uuid4(),
        agent_id=agent_id,
        version_id=version_id,
        wake_reason=dispatch.wake_reason,
        wake_context=dispatch.wake_context,
        dispatch_ids=(dispatch.event_id,),
    )
