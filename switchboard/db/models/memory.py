"""Conversation memory (docs/memory.md): the rolling thread summary and long-term facts.

- ``conversation_summaries``: one row per conversation that outgrew its history window,
  rewritten in the background after a run (never before the reply); it records which
  messages it covers, so the next job only reads what came after.
- ``memory_facts``: short durable facts about a contact (``scope = contact``) or the
  whole organization (``scope = org``), retrieved by relevance with PostgreSQL full-text
  search (a stored ``tsvector`` and a GIN index; no extra service).
"""

from __future__ import annotations

import hashlib
import uuid
from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import CheckConstraint, Computed, ForeignKey, Index, UniqueConstraint
from sqlalchemy import text as sql_text
from sqlalchemy.dialects.postgresql import TSVECTOR
from sqlalchemy.orm import Mapped, mapped_column

from switchboard.db.base import Base, OrgScoped, Timestamps, UUIDPrimaryKey, check_in
from switchboard.db.enums import LlmProvider

# The text-search configuration of facts: 'simple' (no stemming, no stop words) because
# customers write Portuguese, Italian, English... and one language's stemmer would mangle the others.
FACT_TS_CONFIG = "simple"
MAX_FACT_CHARS = 500


def normalized_fact(fact: str) -> tuple[str, str]:
    """A fact as stored (single spaces) and its dedupe key (md5 of the case-folded text): the one
    rule of every writer (the agents' tool, the owner through the API), so the same fact said
    twice is one row. Empty or too long is the caller's error to raise."""
    text = " ".join(fact.split())
    return text, hashlib.md5(text.casefold().encode(), usedforsecurity=False).hexdigest()


class FactScope(StrEnum):
    CONTACT = "contact"
    ORG = "org"


class FactSource(StrEnum):
    # Written by an agent through the MCP tool ``memory_save_fact``.
    TOOL = "tool"
    # Written by a person or an integration (seeding, tests).
    API = "api"


class ConversationSummary(OrgScoped, Timestamps, Base):
    """The thread summary of one conversation and how far it reaches."""

    __tablename__ = "conversation_summaries"
    __table_args__ = (
        UniqueConstraint("org_id", "conversation_id"),
        CheckConstraint("messages_covered >= 0", name="messages_covered_nonnegative"),
        CheckConstraint("revision >= 1", name="revision_positive"),
        check_in("provider", LlmProvider),
    )

    conversation_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE"), primary_key=True
    )
    summary: Mapped[str]
    # The newest message the summary covers (keyset: occurred_at, id); later jobs start after it.
    through_occurred_at: Mapped[datetime]
    through_message_id: Mapped[uuid.UUID]
    messages_covered: Mapped[int]
    revision: Mapped[int] = mapped_column(server_default=sql_text("1"))
    # The run whose completion started the job (NULL once that run is deleted).
    source_run_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("ai_agent_runs.id", ondelete="SET NULL"), index=True
    )
    provider: Mapped[str]
    model: Mapped[str]
    tokens_in: Mapped[int] = mapped_column(server_default=sql_text("0"))
    tokens_out: Mapped[int] = mapped_column(server_default=sql_text("0"))


class MemoryFact(UUIDPrimaryKey, OrgScoped, Timestamps, Base):
    """A durable fact; ``search`` is computed by the database from ``fact``."""

    __tablename__ = "memory_facts"
    __table_args__ = (
        check_in("scope", FactScope),
        check_in("source", FactSource),
        CheckConstraint("(scope = 'org') = (contact_id IS NULL)", name="scope_matches_contact"),
        CheckConstraint(f"length(fact) BETWEEN 1 AND {MAX_FACT_CHARS}", name="fact_length"),
        # The same fact saved twice (a retried tool call, another run) is one row.
        UniqueConstraint("org_id", "contact_id", "fact_key", postgresql_nulls_not_distinct=True),
        Index("ix_memory_facts_search", "search", postgresql_using="gin"),
    )

    scope: Mapped[str]
    # NULL for an org-wide fact.
    contact_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("contacts.id", ondelete="CASCADE"), index=True)
    fact: Mapped[str]
    # md5 of the normalized text (lower case, single spaces): the dedupe key.
    fact_key: Mapped[str]
    source: Mapped[str]
    source_run_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("ai_agent_runs.id", ondelete="SET NULL"), index=True
    )
    conversation_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("conversations.id", ondelete="SET NULL"), index=True
    )
    search: Mapped[Any] = mapped_column(
        TSVECTOR, Computed(f"to_tsvector('{FACT_TS_CONFIG}'::regconfig, fact)", persisted=True)
    )


MAX_STATE_NOTE_CHARS = 2_000


class ConversationStateNote(OrgScoped, Timestamps, Base):
    """The conversation's state [003 "Lo stato del grafo"]: the conclusions so far, written by the model
    with the local ``state_note`` tool and shown in every later prompt; tool chatter stays in the trace."""

    __tablename__ = "conversation_state_notes"
    __table_args__ = (
        UniqueConstraint("org_id", "conversation_id"),
        CheckConstraint(f"length(note) BETWEEN 1 AND {MAX_STATE_NOTE_CHARS}", name="note_length"),
    )

    conversation_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE"), primary_key=True
    )
    note: Mapped[str]
    # The run that wrote the note last (NULL once that run is deleted).
    updated_by_run_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("ai_agent_runs.id", ondelete="SET NULL"), index=True
    )


# The runner's local tool that writes ``conversation_state_notes`` (services/runner/state.py); a version
# grants it by name in ``tool_ids`` like a catalog tool, so the API accepts it there too.
STATE_NOTE_TOOL = "state_note"
