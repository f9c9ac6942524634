"""The brief's tables: the per-day fact table the Home digest is recomputed from, and ``/todo`` items.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-30

- ``brief_facts``: one row per fact the brief consumed (a run, a handoff, an insight), keyed
  by (org, kind, fact key: the run id or the insight key). Upserted, so a redelivered or
  replayed record lands on the same row; the digest of a day is recomputed from the day's
  rows (docs/brief.md "Idempotency").
- ``workspace_todos``: the owner's own to-do items (``/todo <text>`` or the API), listed in
  the digest's ``todo[]`` until marked done.

Both are tenant tables under forced row-level security.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from switchboard.db import tenancy

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TABLES = ("brief_facts", "workspace_todos")


def upgrade() -> None:
    op.create_table(
        "brief_facts",
        sa.Column("org_id", sa.UUID(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("fact_key", sa.Text(), nullable=False),
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("occurred_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("payload", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint("kind IN ('run', 'handoff', 'insight')", name=op.f("ck_brief_facts_kind")),
        sa.CheckConstraint("jsonb_typeof(payload) = 'object'", name=op.f("ck_brief_facts_payload_object")),
        sa.ForeignKeyConstraint(
            ["org_id"], ["organizations.id"], name=op.f("fk_brief_facts_org_id_organizations"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("org_id", "kind", "fact_key", name=op.f("pk_brief_facts")),
    )
    op.create_index(op.f("ix_brief_facts_org_id_day"), "brief_facts", ["org_id", "day"], unique=False)
    op.create_table(
        "workspace_todos",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("org_id", sa.UUID(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("conversation_id", sa.UUID(), nullable=True),
        sa.Column("status", sa.Text(), server_default=sa.text("'open'"), nullable=False),
        sa.Column("done_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint("source IN ('slash_command', 'api')", name=op.f("ck_workspace_todos_source")),
        sa.CheckConstraint("status IN ('open', 'done')", name=op.f("ck_workspace_todos_status")),
        sa.CheckConstraint(
            "(status = 'done') = (done_at IS NOT NULL)", name=op.f("ck_workspace_todos_done_has_timestamp")
        ),
        sa.CheckConstraint("length(text) BETWEEN 1 AND 2000", name=op.f("ck_workspace_todos_text_length")),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name=op.f("fk_workspace_todos_conversation_id_conversations"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["org_id"], ["organizations.id"], name=op.f("fk_workspace_todos_org_id_organizations"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_workspace_todos")),
    )
    op.create_index(
        op.f("ix_workspace_todos_org_id_status_created_at"),
        "workspace_todos",
        ["org_id", "status", "created_at"],
        unique=False,
    )
    op.create_index(op.f("ix_workspace_todos_conversation_id"), "workspace_todos", ["conversation_id"], unique=False)
    for table in _TABLES:
        for statement in tenancy.enable_rls_statements(table):
            op.execute(statement)


def downgrade() -> None:
    # Dropping a table drops its indexes, constraints and policies too.
    for table in reversed(_TABLES):
        op.drop_table(table)
