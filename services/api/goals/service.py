"""Listing and stopping goals (sync, over the request's org-scoped session; never commits).

A goal runs in segments, one run each (docs/agent-context.md "Autonomous work"); stopping it
here is what ``/goal stop`` does from the business phone: the segment in flight finishes
(bounded by its own cost budget, and accounted: ``services.runner.slash_store.end_segment``)
and no next segment starts.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import select, tuple_, update
from sqlalchemy.orm import Session

from services.api.core.errors import Conflict, NotFound
from services.api.goals.schemas import GoalView
from switchboard.db.audit import record_audit
from switchboard.db.models.slash import ConversationGoal, GoalStatus


class GoalNotActive(Conflict):
    """Only an active goal can be stopped (a finished one stays as it ended)."""

    code = "goal_not_active"


def goals(
    session: Session,
    org_id: uuid.UUID,
    *,
    limit: int,
    before: tuple[datetime, uuid.UUID] | None = None,
    status: GoalStatus | None = None,
    conversation_id: uuid.UUID | None = None,
) -> list[ConversationGoal]:
    """Newest first; ``before`` is the (created_at, id) of the last goal of the previous page."""
    query = select(ConversationGoal).where(ConversationGoal.org_id == org_id)
    if before is not None:
        query = query.where(tuple_(ConversationGoal.created_at, ConversationGoal.id) < tuple_(*before))
    if status is not None:
        query = query.where(ConversationGoal.status == status.value)
    if conversation_id is not None:
        query = query.where(ConversationGoal.conversation_id == conversation_id)
    query = query.order_by(ConversationGoal.created_at.desc(), ConversationGoal.id.desc()).limit(limit)
    return list(session.scalars(query))


def stop(
    session: Session, org_id: uuid.UUID, goal_id: uuid.UUID, user_id: uuid.UUID | None, request_id: str
) -> GoalView:
    """Stop an active goal (its row locked, so a segment ending now either sees it stopped or
    ended it first: then ``409 goal_not_active``); audited ``goal.stopped``."""
    row = session.scalar(
        select(ConversationGoal)
        .where(ConversationGoal.org_id == org_id, ConversationGoal.id == goal_id)
        .with_for_update()
    )
    if row is None:
        raise NotFound("no such goal")
    if row.status != GoalStatus.ACTIVE.value:
        raise GoalNotActive(f"the goal is {row.status}", details={"status": row.status})
    stopped = session.scalars(
        update(ConversationGoal)
        .where(ConversationGoal.org_id == org_id, ConversationGoal.id == goal_id)
        .values(status=GoalStatus.STOPPED.value, end_reason="stopped through the API")
        .returning(ConversationGoal)
        .execution_options(populate_existing=True)
    ).one()
    record_audit(
        session,
        org_id=org_id,
        action="goal.stopped",
        actor_user_id=user_id,
        target_type="conversation_goal",
        target_id=str(goal_id),
        details={"conversation_id": str(stopped.conversation_id), "spent_micros": stopped.spent_micros},
        request_id=request_id,
    )
    return GoalView.model_validate(stopped)
