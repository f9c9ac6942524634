"""All SQL of the conversations domain (sync Session; the API calls it through ``run_sync``)."""

from __future__ import annotations

import uuid

from sqlalchemy import select
from sqlalchemy.orm import Session

from switchboard.db.enums import ACTIVE_RUN_STATUSES
from switchboard.db.models.channels import Conversation, Message
from switchboard.db.models.runs import AiAgentRun


def by_id(
    session: Session, org_id: uuid.UUID, conversation_id: uuid.UUID, *, for_update: bool = False
) -> Conversation | None:
    query = select(Conversation).where(Conversation.org_id == org_id, Conversation.id == conversation_id)
    if for_update:
        query = query.with_for_update()
    return session.scalars(query).one_or_none()


def active_run_id(session: Session, org_id: uuid.UUID, conversation_id: uuid.UUID) -> uuid.UUID | None:
    """The conversation's one active (not dry) run, if any: the unique index allows one."""
    return session.scalars(
        select(AiAgentRun.id).where(
            AiAgentRun.org_id == org_id,
            AiAgentRun.conversation_id == conversation_id,
            AiAgentRun.status.in_(ACTIVE_RUN_STATUSES),
            AiAgentRun.is_dry_run.is_(False),
        )
    ).first()


def message_by_dedupe_key(
    session: Session, org_id: uuid.UUID, channel_session_id: uuid.UUID, dedupe_key: str
) -> Message | None:
    """The message an earlier request with the same ``Idempotency-Key`` stored (a person's reply, a command)."""
    return session.scalars(
        select(Message).where(
            Message.org_id == org_id,
            Message.channel_session_id == channel_session_id,
            Message.dedupe_key == dedupe_key,
        )
    ).one_or_none()
