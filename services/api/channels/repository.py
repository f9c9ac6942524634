"""All SQL of the channel sessions domain (sync Session; the API calls it through ``run_sync``)."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import and_, func, or_, select, update
from sqlalchemy.orm import Session

from switchboard.db.enums import FollowupStatus
from switchboard.db.models.channels import ChannelSession, Conversation
from switchboard.db.models.followups import ScheduledFollowup


def by_id(
    session: Session, org_id: uuid.UUID, session_id: uuid.UUID, *, for_update: bool = False
) -> ChannelSession | None:
    query = select(ChannelSession).where(ChannelSession.org_id == org_id, ChannelSession.id == session_id)
    if for_update:
        query = query.with_for_update()
    return session.scalars(query).one_or_none()


def page(
    session: Session,
    org_id: uuid.UUID,
    *,
    limit: int,
    after: tuple[datetime, uuid.UUID] | None,
    archived: bool = False,
) -> list[ChannelSession]:
    """The live sessions (or the archived ones), oldest first (the order they were connected),
    keyset-paged on (created_at, id)."""
    archived_filter = ChannelSession.archived_at.is_not(None) if archived else ChannelSession.archived_at.is_(None)
    query = select(ChannelSession).where(ChannelSession.org_id == org_id, archived_filter)
    if after is not None:
        created_at, row_id = after
        query = query.where(
            or_(
                ChannelSession.created_at > created_at,
                and_(ChannelSession.created_at == created_at, ChannelSession.id > row_id),
            )
        )
    return list(session.scalars(query.order_by(ChannelSession.created_at, ChannelSession.id).limit(limit)))


def cancel_followups_of_session(session: Session, org_id: uuid.UUID, session_id: uuid.UUID, *, reason: str) -> int:
    """Cancel the scheduled follow-ups of the session's conversations (``error = reason``); how many."""
    conversations = select(Conversation.id).where(
        Conversation.org_id == org_id, Conversation.channel_session_id == session_id
    )
    cancelled = session.scalars(
        update(ScheduledFollowup)
        .where(
            ScheduledFollowup.org_id == org_id,
            ScheduledFollowup.conversation_id.in_(conversations),
            ScheduledFollowup.status == FollowupStatus.SCHEDULED.value,
        )
        .values(status=FollowupStatus.CANCELLED.value, cancelled_at=func.now(), error=reason)
        .returning(ScheduledFollowup.id)
    )
    return len(cancelled.all())
