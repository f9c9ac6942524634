"""All SQL of the home domain, filtered by org."""

from __future__ import annotations

import uuid
from datetime import date, datetime

from sqlalchemy import select, tuple_
from sqlalchemy.orm import Session

from switchboard.db.models.agents import AiAgent
from switchboard.db.models.autonomy import WorkspaceDailyBrief
from switchboard.db.models.budgets import BudgetIncident
from switchboard.db.models.channels import Conversation
from switchboard.db.usage import UsageTotals, agent_month_totals, month_totals


def daily_brief(session: Session, org_id: uuid.UUID, day: date) -> WorkspaceDailyBrief | None:
    """One primary-key read: the digest is materialized by the brief, never composed here."""
    return session.get(WorkspaceDailyBrief, (org_id, day))


def conversation_exists(session: Session, org_id: uuid.UUID, conversation_id: uuid.UUID) -> bool:
    found = session.scalar(
        select(Conversation.id).where(Conversation.org_id == org_id, Conversation.id == conversation_id)
    )
    return found is not None


def org_usage(session: Session, org_id: uuid.UUID, month: date) -> UsageTotals | None:
    """The month's counters plus the usage not folded into them yet (``switchboard.db.usage``)."""
    return month_totals(session, org_id, month)


def agent_usage(session: Session, org_id: uuid.UUID, month: date) -> list[tuple[uuid.UUID, UsageTotals, str | None]]:
    """Per agent, highest spend first."""
    totals = agent_month_totals(session, org_id, month)
    names = (
        dict(
            session.execute(
                select(AiAgent.id, AiAgent.name).where(AiAgent.org_id == org_id, AiAgent.id.in_(list(totals)))
            ).all()
        )
        if totals
        else {}
    )
    ranked = sorted(totals.items(), key=lambda item: (-item[1].cost_micros, str(item[0])))
    return [(agent_id, usage, names.get(agent_id)) for agent_id, usage in ranked]


def budget_incidents(
    session: Session, org_id: uuid.UUID, *, limit: int, before: tuple[datetime, uuid.UUID] | None
) -> list[BudgetIncident]:
    """Newest first; ``before`` is the (created_at, id) of the last incident of the previous page."""
    query = select(BudgetIncident).where(BudgetIncident.org_id == org_id)
    if before is not None:
        query = query.where(tuple_(BudgetIncident.created_at, BudgetIncident.id) < tuple_(*before))
    query = query.order_by(BudgetIncident.created_at.desc(), BudgetIncident.id.desc()).limit(limit)
    return list(session.scalars(query))
