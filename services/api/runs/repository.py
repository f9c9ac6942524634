"""All SQL of the runs domain (read only: runs are written by the dispatcher and the runner)."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import select, tuple_
from sqlalchemy.orm import Session

from services.api.runs.schemas import ReplyDelivery
from switchboard.db.models.agents import AiAgent
from switchboard.db.models.notifications import DeliveryKind, DeliveryState, RunDelivery
from switchboard.db.models.runs import AiAgentRun


def runs(
    session: Session,
    org_id: uuid.UUID,
    *,
    limit: int,
    before: tuple[datetime, uuid.UUID] | None = None,
    agent_id: uuid.UUID | None = None,
    status: str | None = None,
    conversation_id: uuid.UUID | None = None,
    created_from: datetime | None = None,
    created_to: datetime | None = None,
    dry_run: bool | None = None,
) -> list[AiAgentRun]:
    """Newest first by (created_at, id): a stable order, so keyset pages never skip or repeat a run."""
    query = select(AiAgentRun).where(AiAgentRun.org_id == org_id)
    if before is not None:
        query = query.where(tuple_(AiAgentRun.created_at, AiAgentRun.id) < tuple_(*before))
    if agent_id is not None:
        query = query.where(AiAgentRun.agent_id == agent_id)
    if status is not None:
        query = query.where(AiAgentRun.status == status)
    if conversation_id is not None:
        query = query.where(AiAgentRun.conversation_id == conversation_id)
    if created_from is not None:
        query = query.where(AiAgentRun.created_at >= created_from)
    if created_to is not None:
        query = query.where(AiAgentRun.created_at < created_to)
    if dry_run is not None:
        query = query.where(AiAgentRun.is_dry_run.is_(dry_run))
    query = query.order_by(AiAgentRun.created_at.desc(), AiAgentRun.id.desc()).limit(limit)
    return list(session.scalars(query))


def run(session: Session, org_id: uuid.UUID, run_id: uuid.UUID) -> AiAgentRun | None:
    return session.scalars(select(AiAgentRun).where(AiAgentRun.org_id == org_id, AiAgentRun.id == run_id)).one_or_none()


def agent_exists(session: Session, org_id: uuid.UUID, agent_id: uuid.UUID) -> bool:
    return (
        session.scalars(select(AiAgent.id).where(AiAgent.org_id == org_id, AiAgent.id == agent_id)).one_or_none()
        is not None
    )


def delivery_statuses(session: Session, org_id: uuid.UUID, run_ids: list[uuid.UUID]) -> dict[uuid.UUID, ReplyDelivery]:
    """The status of each run's reply delivery (written by the notifier); runs without one are absent.
    A reply ``claimed`` (waiting its turn behind the run's queued messages) is ``sending`` here: the
    notifier has it in hand (``ReplyDelivery``)."""
    if not run_ids:
        return {}
    rows = session.execute(
        select(RunDelivery.run_id, RunDelivery.status).where(
            RunDelivery.org_id == org_id,
            RunDelivery.run_id.in_(run_ids),
            RunDelivery.kind == DeliveryKind.REPLY.value,
        )
    )
    return {
        run_id: ReplyDelivery.SENDING if status == DeliveryState.CLAIMED else ReplyDelivery(status)
        for run_id, status in rows.all()
        if run_id is not None
    }
