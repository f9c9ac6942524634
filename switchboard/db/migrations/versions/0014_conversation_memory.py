"""Conversation memory: thread summaries and long-term facts.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-30

- ``conversation_summaries``: the rolling thread summary of a conversation that outgrew its
  history window, with the keyset of the newest message it covers (docs/memory.md).
- ``memory_facts``: durable facts per contact or per org; ``search`` is a stored
  ``to_tsvector('simple', fact)`` with a GIN index, so retrieval by relevance is PostgreSQL's
  own full-text search.

Both are tenant tables under forced row-level security.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from switchboard.db import tenancy

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TABLES = ("conversation_summaries", "memory_facts")


def _timestamps() -> list[sa.Column[object]]:
    return [
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
    ]


def upgrade() -> None:
    op.create_table(
        "conversation_summaries",
        sa.Column("org_id", sa.UUID(), nullable=False),
        sa.Column("conversation_id", sa.UUID(), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("through_occurred_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("through_message_id", sa.UUID(), nullable=False),
        sa.Column("messages_covered", sa.Integer(), nullable=False),
        sa.Column("revision", sa.Integer(), server_default=sa.text("1"), nullable=False),
        sa.Column("source_run_id", sa.UUID(), nullable=True),
        sa.Column("provider", sa.Text(), nullable=False),
        sa.Column("model", sa.Text(), nullable=False),
        sa.Column("tokens_in", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("tokens_out", sa.Integer(), server_default=sa.text("0"), nullable=False),
        *_timestamps(),
        sa.CheckConstraint(
            "messages_covered >= 0", name=op.f("ck_conversation_summaries_messages_covered_nonnegative")
        ),
        sa.CheckConstraint("revision >= 1", name=op.f("ck_conversation_summaries_revision_positive")),
        sa.CheckConstraint(
            "provider IN ('anthropic', 'openai', 'google', 'demo')", name=op.f("ck_conversation_summaries_provider")
        ),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name=op.f("fk_conversation_summaries_conversation_id_conversations"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["org_id"],
            ["organizations.id"],
            name=op.f("fk_conversation_summaries_org_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["source_run_id"],
            ["ai_agent_runs.id"],
            name=op.f("fk_conversation_summaries_source_run_id_ai_agent_runs"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("conversation_id", name=op.f("pk_conversation_summaries")),
        sa.UniqueConstraint("org_id", "conversation_id", name=op.f("uq_conversation_summaries_org_id_conversation_id")),
    )
    op.create_index(
        op.f("ix_conversation_summaries_source_run_id"), "conversation_summaries", ["source_run_id"], unique=False
    )
    op.create_table(
        "memory_facts",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("org_id", sa.UUID(), nullable=False),
        sa.Column("scope", sa.Text(), nullable=False),
        sa.Column("contact_id", sa.UUID(), nullable=True),
        sa.Column("fact", sa.Text(), nullable=False),
        sa.Column("fact_key", sa.Text(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("source_run_id", sa.UUID(), nullable=True),
        sa.Column("conversation_id", sa.UUID(), nullable=True),
        sa.Column(
            "search",
            postgresql.TSVECTOR(),
            sa.Computed("to_tsvector('simple'::regconfig, fact)", persisted=True),
            nullable=False,
        ),
        *_timestamps(),
        sa.CheckConstraint("scope IN ('contact', 'org')", name=op.f("ck_memory_facts_scope")),
        sa.CheckConstraint("source IN ('tool', 'api')", name=op.f("ck_memory_facts_source")),
        sa.CheckConstraint(
            "(scope = 'org') = (contact_id IS NULL)", name=op.f("ck_memory_facts_scope_matches_contact")
        ),
        sa.CheckConstraint("length(fact) BETWEEN 1 AND 500", name=op.f("ck_memory_facts_fact_length")),
        sa.ForeignKeyConstraint(
            ["contact_id"], ["contacts.id"], name=op.f("fk_memory_facts_contact_id_contacts"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name=op.f("fk_memory_facts_conversation_id_conversations"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["org_id"], ["organizations.id"], name=op.f("fk_memory_facts_org_id_organizations"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["source_run_id"],
            ["ai_agent_runs.id"],
            name=op.f("fk_memory_facts_source_run_id_ai_agent_runs"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_memory_facts")),
        sa.UniqueConstraint(
            "org_id",
            "contact_id",
            "fact_key",
            name=op.f("uq_memory_facts_org_id_contact_id_fact_key"),
            postgresql_nulls_not_distinct=True,
        ),
    )
    op.create_index("ix_memory_facts_search", "memory_facts", ["search"], unique=False, postgresql_using="gin")
    op.create_index(op.f("ix_memory_facts_contact_id"), "memory_facts", ["contact_id"], unique=False)
    op.create_index(op.f("ix_memory_facts_conversation_id"), "memory_facts", ["conversation_id"], unique=False)
    op.create_index(op.f("ix_memory_facts_source_run_id"), "memory_facts", ["source_run_id"], unique=False)
    for table in _TABLES:
        for statement in tenancy.enable_rls_statements(table):
            op.execute(statement)


def downgrade() -> None:
    # Dropping a table drops its indexes, constraints and policies too.
    for table in reversed(_TABLES):
        op.drop_table(table)
