"""The owner's view of the follow-ups agents promised, and cancelling one (docs/memory.md).

Agents schedule and cancel follow-ups through their tools; the owner needs to see what was
promised to whom and to take a promise back — a customer who already came back, a callback
that no longer makes sense. Sync functions over the request's org-scoped session.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from services.api.core.errors import Conflict, NotFound, ValidationFailed
from services.api.core.pagination import older_than
from services.api.followups.schemas import FollowupView
from switchboard.db.audit import record_audit
from switchboard.db.enums import FollowupStatus
from switchboard.db.models.followups import ScheduledFollowup


class UnknownFollowupFilter(ValidationFailed):
    code = "followup_filter_invalid"
    default_message = "status must be scheduled, fired, cancelled or failed"


class FollowupAlreadyDone(Conflict):
    code = "followup_not_scheduled"
    default_message = "The follow-up already fired or failed: nothing is left to cancel"


def list_followups(
    session: Session,
    org_id: uuid.UUID,
    *,
    status: str | None,
    conversation_id: uuid.UUID | None,
    limit: int,
    before: tuple[datetime, uuid.UUID] | None,
) -> list[ScheduledFollowup]:
    """Newest first (created_at desc, id desc); filter ``status=scheduled`` for what is still promised."""
    if status is not None and status not in {s.value for s in FollowupStatus}:
        raise UnknownFollowupFilter()
    query = select(ScheduledFollowup).where(ScheduledFollowup.org_id == org_id)
    if status is not None:
        query = query.where(ScheduledFollowup.status == status)
    if conversation_id is not None:
        query = query.where(ScheduledFollowup.conversation_id == conversation_id)
    if before is not None:
        query = query.where(older_than(ScheduledFollowup.created_at, ScheduledFollowup.id, before))
    order = (ScheduledFollowup.created_at.desc(), ScheduledFollowup.id.desc())
    return list(session.scalars(query.order_by(*order).limit(limit)).all())


def cancel(
    session: Session, org_id: uuid.UUID, followup_id: uuid.UUID, user_id: uuid.UUID | None, request_id: str
) -> FollowupView:
    """``scheduled`` → ``cancelled`` (idempotent); a fired or failed one is a 409. The row is locked,
    so a cancel and the scheduler firing it at the same moment serialize: one of them wins."""
    row = session.scalars(
        select(ScheduledFollowup)
        .where(ScheduledFollowup.org_id == org_id, ScheduledFollowup.id == followup_id)
        .with_for_update()
    ).one_or_none()
    if row is None:
        raise NotFound("No such follow-up")
    if row.status in {FollowupStatus.FIRED.value, FollowupStatus.FAILED.value}:
        raise FollowupAlreadyDone()
    if row.status == FollowupStatus.SCHEDULED.value:
        row.status = FollowupStatus.CANCELLED.value
        row.cancelled_at = datetime.now(UTC)
        record_audit(
            session,
            org_id=org_id,
            action="followup.cancelled",
            actor_user_id=user_id,
            target_type="scheduled_followup",
            target_id=row.id,
            details={"conversation_id": str(row.conversation_id), "due_at": row.due_at.isoformat()},
            request_id=request_id,
        )
        session.flush()
    return FollowupView.model_validate(row)
