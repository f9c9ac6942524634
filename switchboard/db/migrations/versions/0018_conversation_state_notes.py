"""Conversation state notes [003 "Lo stato del grafo"].

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-30

- ``conversation_state_notes``: one short note per conversation with the conclusions of earlier
  turns, written by the model through the runner's local ``state_note`` tool and injected as the
  "State" prompt layer (docs/memory.md "State"). A tenant table under forced row-level security.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from switchboard.db import tenancy

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TABLE = "conversation_state_notes"


def upgrade() -> None:
    op.create_table(
        _TABLE,
        sa.Column("org_id", sa.UUID(), nullable=False),
        sa.Column("conversation_id", sa.UUID(), nullable=False),
        sa.Column("note", sa.Text(), nullable=False),
        sa.Column("updated_by_run_id", sa.UUID(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint("length(note) BETWEEN 1 AND 2000", name=op.f("ck_conversation_state_notes_note_length")),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name=op.f("fk_conversation_state_notes_conversation_id_conversations"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["org_id"],
            ["organizations.id"],
            name=op.f("fk_conversation_state_notes_org_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["updated_by_run_id"],
            ["ai_agent_runs.id"],
            name=op.f("fk_conversation_state_notes_updated_by_run_id_ai_agent_runs"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("conversation_id", name=op.f("pk_conversation_state_notes")),
        sa.UniqueConstraint(
            "org_id", "conversation_id", name=op.f("uq_conversation_state_notes_org_id_conversation_id")
        ),
    )
    op.create_index(op.f("ix_conversation_state_notes_updated_by_run_id"), _TABLE, ["updated_by_run_id"], unique=False)
    for statement in tenancy.enable_rls_statements(_TABLE):
        op.execute(statement)


def downgrade() -> None:
    # Dropping the table drops its indexes, constraints and policies too.
    op.drop_table(_TABLE)
