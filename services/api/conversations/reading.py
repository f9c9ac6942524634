"""Reading the inbox: conversations, their messages and the dispatcher's decisions on them.

The owner's questions are "who waits for a human?" (``status=handoff``), "what was said?"
and "why did no agent answer?" — a message that got ``no_match``, ``conv_busy``,
``budget_exceeded`` or ``rate_limited`` has no run, so only its decisions tell. All lists are
keyset-paged, newest first. Sync functions over the request's org-scoped session.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from services.api.conversations import repository
from services.api.core.errors import NotFound, ValidationFailed
from services.api.core.pagination import older_than
from switchboard.contracts.enums import DispatchOutcome
from switchboard.db.enums import ConversationStatus
from switchboard.db.models.channels import Conversation, Message
from switchboard.db.models.runs import DispatchDecision
from switchboard.internal_chats import INTERNAL_CHAT_PREFIX

Cursor = tuple[datetime, uuid.UUID] | None


class UnknownDecisionFilter(ValidationFailed):
    code = "decision_filter_invalid"
    default_message = "outcome must be one of the dispatcher's outcomes"


class UnknownConversationFilter(ValidationFailed):
    code = "conversation_filter_invalid"
    default_message = "status must be open, handoff or closed"


def activity(row: Conversation) -> datetime:
    """What the inbox is ordered by: the last message, else the conversation's creation."""
    return row.last_message_at or row.created_at


def list_conversations(
    session: Session,
    org_id: uuid.UUID,
    *,
    status: str | None,
    channel_session_id: uuid.UUID | None,
    limit: int,
    before: Cursor,
) -> list[Conversation]:
    """Customer conversations, most recent activity first. The order key moves when a message arrives:
    a conversation that gets one while someone pages jumps above the cursor — on the first page, not
    on the later ones (docs/api.md, the inbox's paging)."""
    if status is not None and status not in {s.value for s in ConversationStatus}:
        raise UnknownConversationFilter()
    key = func.coalesce(Conversation.last_message_at, Conversation.created_at)
    # Switchboard's own conversations (dry runs, the daily analysis) have no customer: not the inbox.
    query = select(Conversation).where(
        Conversation.org_id == org_id, Conversation.chat_id.not_like(f"{INTERNAL_CHAT_PREFIX}%")
    )
    if status is not None:
        query = query.where(Conversation.status == status)
    if channel_session_id is not None:
        query = query.where(Conversation.channel_session_id == channel_session_id)
    if before is not None:
        query = query.where(older_than(key, Conversation.id, before))
    return list(session.scalars(query.order_by(key.desc(), Conversation.id.desc()).limit(limit)).all())


def list_messages(
    session: Session, org_id: uuid.UUID, conversation_id: uuid.UUID, *, limit: int, before: Cursor
) -> list[Message]:
    """The conversation's messages, newest first (``occurred_at``, then id)."""
    _require(session, org_id, conversation_id)
    query = select(Message).where(Message.org_id == org_id, Message.conversation_id == conversation_id)
    if before is not None:
        query = query.where(older_than(Message.occurred_at, Message.id, before))
    return list(session.scalars(query.order_by(Message.occurred_at.desc(), Message.id.desc()).limit(limit)).all())


def list_decisions(
    session: Session,
    org_id: uuid.UUID,
    *,
    conversation_id: uuid.UUID | None,
    message_id: uuid.UUID | None,
    outcome: str | None,
    limit: int,
    before: Cursor,
) -> list[DispatchDecision]:
    """The dispatcher's decisions, newest first; for one conversation, one inbound message or one outcome."""
    if outcome is not None and outcome not in {o.value for o in DispatchOutcome}:
        raise UnknownDecisionFilter()
    if conversation_id is not None:
        _require(session, org_id, conversation_id)
    query = select(DispatchDecision).where(DispatchDecision.org_id == org_id)
    if conversation_id is not None:
        query = query.where(DispatchDecision.conversation_id == conversation_id)
    if message_id is not None:
        query = query.where(DispatchDecision.inbound_message_id == message_id)
    if outcome is not None:
        query = query.where(DispatchDecision.outcome == outcome)
    if before is not None:
        query = query.where(older_than(DispatchDecision.created_at, DispatchDecision.id, before))
    query = query.order_by(DispatchDecision.created_at.desc(), DispatchDecision.id.desc()).limit(limit)
    return list(session.scalars(query).all())


def _require(session: Session, org_id: uuid.UUID, conversation_id: uuid.UUID) -> None:
    if repository.by_id(session, org_id, conversation_id) is None:
        raise NotFound("No such conversation")
