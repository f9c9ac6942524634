"""Reading, teaching and forgetting long-term facts (docs/memory.md "Long-term facts").

Agents save facts with their ``memory_save_fact`` tool and read them back by relevance; until
now nobody else could see them. The people who answer for what the agents say need to: to
check what is remembered about a customer, to correct it by deleting a wrong fact, and to
teach the business's own facts ("we close on Sundays") once instead of in every prompt.
Sync functions over the request's org-scoped session; they never commit.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from enum import StrEnum

from sqlalchemy import delete, func, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from services.api.contacts.service import ContactErased, get_contact
from services.api.conversations.service import get_conversation
from services.api.core.errors import NotFound
from services.api.core.pagination import older_than
from switchboard.db.audit import record_audit
from switchboard.db.models import Conversation
from switchboard.db.models.memory import (
    ConversationStateNote,
    ConversationSummary,
    FactScope,
    FactSource,
    MemoryFact,
    normalized_fact,
)

Cursor = tuple[datetime, uuid.UUID] | None


def list_facts(
    session: Session,
    org_id: uuid.UUID,
    *,
    contact_id: uuid.UUID | None,
    scope: FactScope | None,
    limit: int,
    before: Cursor,
) -> list[MemoryFact]:
    """Newest first (by the last time a fact was saved), optionally one contact's or one scope's."""
    statement = select(MemoryFact).where(MemoryFact.org_id == org_id)
    if contact_id is not None:
        statement = statement.where(MemoryFact.contact_id == contact_id)
    if scope is not None:
        statement = statement.where(MemoryFact.scope == scope.value)
    if before is not None:
        statement = statement.where(older_than(MemoryFact.updated_at, MemoryFact.id, before))
    return list(session.scalars(statement.order_by(MemoryFact.updated_at.desc(), MemoryFact.id.desc()).limit(limit)))


def teach_fact(
    session: Session,
    org_id: uuid.UUID,
    fact: str,
    contact_id: uuid.UUID | None,
    *,
    actor_user_id: uuid.UUID | None,
    request_id: str,
) -> MemoryFact:
    """Save a fact as a person (``source = api``); the same fact again is the same row, refreshed."""
    if contact_id is not None:
        contact = get_contact(session, org_id, contact_id)  # 404 for another org's or an unknown contact
        if contact.erased_at is not None:
            raise ContactErased()
    text, key = normalized_fact(fact)
    scope = FactScope.CONTACT if contact_id is not None else FactScope.ORG
    statement = insert(MemoryFact).values(
        org_id=org_id, scope=scope.value, contact_id=contact_id, fact=text, fact_key=key, source=FactSource.API.value
    )
    fact_id = session.scalar(
        statement.on_conflict_do_update(
            constraint="uq_memory_facts_org_id_contact_id_fact_key", set_={"updated_at": func.now()}
        ).returning(MemoryFact.id)
    )
    record_audit(
        session,
        org_id=org_id,
        action="memory_fact.saved",
        actor_user_id=actor_user_id,
        target_type="memory_fact",
        target_id=fact_id,
        # The scope and contact, never the text: a fact about a customer is personal data.
        details={"scope": scope.value, "contact_id": None if contact_id is None else str(contact_id)},
        request_id=request_id,
    )
    session.flush()
    return session.get_one(MemoryFact, fact_id, populate_existing=True)


def forget_fact(
    session: Session, org_id: uuid.UUID, fact_id: uuid.UUID, *, actor_user_id: uuid.UUID | None, request_id: str
) -> None:
    """Delete a fact: the agents stop reading it at their next run."""
    row = session.scalars(
        select(MemoryFact).where(MemoryFact.org_id == org_id, MemoryFact.id == fact_id).with_for_update()
    ).one_or_none()
    if row is None:
        raise NotFound("No such fact")
    record_audit(
        session,
        org_id=org_id,
        action="memory_fact.deleted",
        actor_user_id=actor_user_id,
        target_type="memory_fact",
        target_id=fact_id,
        details={"scope": row.scope, "source": row.source},
        request_id=request_id,
    )
    session.delete(row)
    session.flush()


def conversation_memory(
    session: Session, org_id: uuid.UUID, conversation_id: uuid.UUID
) -> tuple[ConversationSummary | None, ConversationStateNote | None]:
    """The thread summary and the state note a run of the conversation reads (404 for another org's)."""
    get_conversation(session, org_id=org_id, conversation_id=conversation_id)
    summary = session.scalars(
        select(ConversationSummary).where(
            ConversationSummary.org_id == org_id, ConversationSummary.conversation_id == conversation_id
        )
    ).one_or_none()
    note = session.scalars(
        select(ConversationStateNote).where(
            ConversationStateNote.org_id == org_id, ConversationStateNote.conversation_id == conversation_id
        )
    ).one_or_none()
    return summary, note


class MemoryPart(StrEnum):
    """What of a conversation's memory a person can clear (the path's last segment)."""

    SUMMARY = "summary"
    STATE_NOTE = "state-note"


def clear_memory(
    session: Session,
    org_id: uuid.UUID,
    conversation_id: uuid.UUID,
    part: MemoryPart,
    *,
    actor_user_id: uuid.UUID | None,
    request_id: str,
) -> bool:
    """Delete the conversation's thread summary or its state note; False when there was none.

    Why: both carry conclusions into every later run of the conversation — the summary is the
    model's paraphrase of older messages, the note what earlier turns concluded ("quote sent,
    awaiting OK") — and a wrong one misleads them all. A cleared summary is not read until a
    summary job folds the older messages again from the first one; a job already under way that
    extends the cleared text does not store it (``services/runner/summary.py``). A run under way
    may write a new note afterwards: that one holds its own, newer conclusions. The summary is
    cleared under the conversation's lock, the order of the summary job and the erasure.
    """
    # The conversation first (404 for another org's), then its memory: every writer's lock order.
    locked = session.scalar(
        select(Conversation.id)
        .where(Conversation.org_id == org_id, Conversation.id == conversation_id)
        .with_for_update(key_share=True)
    )
    if locked is None:
        raise NotFound("No such conversation")
    details: dict[str, object]
    if part is MemoryPart.SUMMARY:
        summary = session.execute(
            delete(ConversationSummary)
            .where(ConversationSummary.org_id == org_id, ConversationSummary.conversation_id == conversation_id)
            .returning(ConversationSummary.messages_covered, ConversationSummary.revision)
        ).one_or_none()
        session.execute(
            update(Conversation)
            .where(Conversation.org_id == org_id, Conversation.id == conversation_id, Conversation.summary.is_not(None))
            .values(summary=None)
        )
        if summary is None:
            return False
        # How much it covered, never the text: a summary quotes the customer.
        details = {"messages_covered": summary[0], "revision": summary[1]}
        action = "conversation_summary.cleared"
    else:
        note = session.execute(
            delete(ConversationStateNote)
            .where(ConversationStateNote.org_id == org_id, ConversationStateNote.conversation_id == conversation_id)
            .returning(ConversationStateNote.updated_by_run_id)
        ).one_or_none()
        if note is None:
            return False
        details = {"written_by_run_id": None if note[0] is None else str(note[0])}
        action = "conversation_state_note.cleared"
    record_audit(
        session,
        org_id=org_id,
        action=action,
        actor_user_id=actor_user_id,
        target_type="conversation",
        target_id=conversation_id,
        details=details,
        request_id=request_id,
    )
    return True
