"""Scheduled analysis: one claim per org and org-local day (docs/analysis.md).

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-30

``analysis_claims`` is what makes the daily fan-out fire exactly once per org and day with
any number of API replicas: the scheduler inserts ``(org_id, day)`` with ``ON CONFLICT DO
NOTHING`` in the same transaction as the ``dispatch_requested`` outbox rows, so only the
instance whose insert created the row dispatches. A tenant table under forced RLS.

``list_due_analyses(now, local_hour, limit)`` is a narrow SECURITY DEFINER lookup (ids and
days only, like ``list_due_followups``): the orgs whose local hour reached ``local_hour`` and
whose local day has no claim yet, so a scheduler pass costs one query when nothing is due.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from switchboard.db import tenancy

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


_LOOKUP = "list_due_analyses(timestamptz, integer, integer)"
# An unknown zone counts as UTC (as in the brief and the scheduler).
_LOOKUP_SQL = """
CREATE FUNCTION list_due_analyses(p_now timestamptz, p_local_hour integer, p_limit integer)
RETURNS TABLE (org_id uuid, day date)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
    WITH local AS (
        SELECT o.id, o.created_at, p_now AT TIME ZONE coalesce(z.name, 'UTC') AS stamp
        FROM public.organizations AS o
        LEFT JOIN pg_catalog.pg_timezone_names AS z ON z.name = o.time_zone
    )
    SELECT l.id, l.stamp::date
    FROM local AS l
    WHERE extract(hour FROM l.stamp) >= p_local_hour
      AND NOT EXISTS (
          SELECT 1 FROM public.analysis_claims AS c WHERE c.org_id = l.id AND c.day = l.stamp::date
      )
    ORDER BY l.created_at, l.id
    LIMIT greatest(p_limit, 0)
$$
"""


def upgrade() -> None:
    op.create_table(
        "analysis_claims",
        sa.Column("org_id", sa.UUID(), nullable=False),
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("conversation_id", sa.UUID(), nullable=True),
        sa.Column("agents_dispatched", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("claimed_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint("agents_dispatched >= 0", name=op.f("ck_analysis_claims_agents_dispatched_nonnegative")),
        sa.ForeignKeyConstraint(
            ["org_id"], ["organizations.id"], name=op.f("fk_analysis_claims_org_id_organizations"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name=op.f("fk_analysis_claims_conversation_id_conversations"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("org_id", "day", name=op.f("pk_analysis_claims")),
    )
    op.create_index(op.f("ix_analysis_claims_conversation_id"), "analysis_claims", ["conversation_id"], unique=False)
    for statement in (
        *tenancy.enable_rls_statements("analysis_claims"),
        # The lookup (owned by the migration role) reads which days are claimed, nothing else.
        *tenancy.owner_lookup_statements("analysis_claims"),
    ):
        op.execute(statement)
    op.execute(_LOOKUP_SQL)
    # Only roles granted EXECUTE (the application role, by the migration environment) may call it.
    op.execute(f"REVOKE ALL ON FUNCTION {_LOOKUP} FROM PUBLIC")


def downgrade() -> None:
    op.execute(f"DROP FUNCTION IF EXISTS {_LOOKUP}")
    op.drop_table("analysis_claims")
