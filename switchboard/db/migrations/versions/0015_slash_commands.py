"""Slash commands: conversation modes, autonomous goals, skill bodies (issue 6 item 4).

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-30

- ``conversation_modes``: a conversation switched to a non-default run mode (``/plan``);
  no row means the default ``reply`` mode (docs/agent-context.md "Slash commands").
- ``conversation_goals``: autonomous work started by ``/goal`` or ``/loop``, carried
  across runs (segments) with its cost budget and what it spent; at most one active goal
  per conversation.
- ``agent_skills``: the body of a skill, by name, per org; a version grants skills by name
  (``ai_agent_versions.skills``) and ``/skill:<name>`` makes the body the turn's directive.

All three are tenant tables under forced row-level security.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from switchboard.db import tenancy

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TABLES = ("conversation_modes", "conversation_goals", "agent_skills")


def _timestamps() -> list[sa.Column[object]]:
    return [
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
    ]


def _fk(table: str, column: str, target: str, ondelete: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        [column], [f"{target}.id"], name=op.f(f"fk_{table}_{column}_{target}"), ondelete=ondelete
    )


def upgrade() -> None:
    op.create_table(
        "conversation_modes",
        sa.Column("org_id", sa.UUID(), nullable=False),
        sa.Column("conversation_id", sa.UUID(), nullable=False),
        sa.Column("mode", sa.Text(), nullable=False),
        sa.Column("set_by_run_id", sa.UUID(), nullable=True),
        *_timestamps(),
        sa.CheckConstraint("mode IN ('plan')", name=op.f("ck_conversation_modes_mode")),
        _fk("conversation_modes", "conversation_id", "conversations", "CASCADE"),
        _fk("conversation_modes", "org_id", "organizations", "CASCADE"),
        _fk("conversation_modes", "set_by_run_id", "ai_agent_runs", "SET NULL"),
        sa.PrimaryKeyConstraint("conversation_id", name=op.f("pk_conversation_modes")),
        sa.UniqueConstraint("org_id", "conversation_id", name=op.f("uq_conversation_modes_org_id_conversation_id")),
    )
    op.create_index(op.f("ix_conversation_modes_set_by_run_id"), "conversation_modes", ["set_by_run_id"])
    op.create_table(
        "conversation_goals",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("org_id", sa.UUID(), nullable=False),
        sa.Column("conversation_id", sa.UUID(), nullable=False),
        sa.Column("agent_id", sa.UUID(), nullable=False),
        sa.Column("version_id", sa.UUID(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("goal", sa.Text(), nullable=False),
        sa.Column("status", sa.Text(), server_default=sa.text("'active'"), nullable=False),
        sa.Column("budget_micros", sa.BigInteger(), nullable=False),
        sa.Column("segment_budget_micros", sa.BigInteger(), nullable=False),
        sa.Column("spent_micros", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("segments", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("started_by_run_id", sa.UUID(), nullable=False),
        sa.Column("last_run_id", sa.UUID(), nullable=True),
        sa.Column("end_reason", sa.Text(), nullable=True),
        *_timestamps(),
        sa.CheckConstraint("kind IN ('goal', 'loop')", name=op.f("ck_conversation_goals_kind")),
        sa.CheckConstraint(
            "status IN ('active', 'done', 'budget_spent', 'stopped')", name=op.f("ck_conversation_goals_status")
        ),
        sa.CheckConstraint(
            "budget_micros > 0 AND segment_budget_micros > 0 AND spent_micros >= 0 AND segments >= 0",
            name=op.f("ck_conversation_goals_amounts"),
        ),
        sa.CheckConstraint("length(goal) BETWEEN 1 AND 4000", name=op.f("ck_conversation_goals_goal_length")),
        _fk("conversation_goals", "agent_id", "ai_agents", "CASCADE"),
        _fk("conversation_goals", "conversation_id", "conversations", "CASCADE"),
        _fk("conversation_goals", "org_id", "organizations", "CASCADE"),
        _fk("conversation_goals", "version_id", "ai_agent_versions", "CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_conversation_goals")),
        sa.UniqueConstraint("started_by_run_id", name=op.f("uq_conversation_goals_started_by_run_id")),
    )
    op.create_index(
        op.f("ix_conversation_goals_org_id_conversation_id"), "conversation_goals", ["org_id", "conversation_id"]
    )
    op.create_index(op.f("ix_conversation_goals_agent_id"), "conversation_goals", ["agent_id"])
    op.create_index(op.f("ix_conversation_goals_version_id"), "conversation_goals", ["version_id"])
    op.create_index(op.f("ix_conversation_goals_conversation_id"), "conversation_goals", ["conversation_id"])
    op.create_index(
        "uq_conversation_goals_one_active",
        "conversation_goals",
        ["conversation_id"],
        unique=True,
        postgresql_where=sa.text("status = 'active'"),
    )
    op.create_table(
        "agent_skills",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("org_id", sa.UUID(), nullable=False),
        sa.Column("name", sa.Text(), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        *_timestamps(),
        sa.CheckConstraint("length(body) BETWEEN 1 AND 20000", name=op.f("ck_agent_skills_body_length")),
        sa.CheckConstraint("name ~ '^[a-z0-9][a-z0-9_.\\-]{0,63}$'", name=op.f("ck_agent_skills_name_format")),
        _fk("agent_skills", "org_id", "organizations", "CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_agent_skills")),
        sa.UniqueConstraint("org_id", "name", name=op.f("uq_agent_skills_org_id_name")),
    )
    for table in _TABLES:
        for statement in tenancy.enable_rls_statements(table):
            op.execute(statement)


def downgrade() -> None:
    for table in reversed(_TABLES):
        op.drop_table(table)
