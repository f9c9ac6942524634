"""The morning digest: the brief composes each org's Home digest when its local day begins.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-02

The brief composes a day's digest when a record of that day arrives, so until the first run,
handoff or insight of the day the owner's Home had no digest (the API answered 404), and
what still waited from the day before was nowhere on it. Every brief now asks, every
``BRIEF_MORNING_INTERVAL_S``, ``list_orgs_missing_digest(now, limit)``: the orgs whose
current local day (an unknown zone counts as UTC, as in the brief) has no ``workspace_daily_briefs`` row yet — ids and
days only, like ``list_due_analyses``; newest orgs first, so a new org's first Home is there
at once — and composes those days. The owner role may read ``workspace_daily_briefs``
(``owner_lookup``) for that question only.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from switchboard.db import tenancy

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TABLE = "workspace_daily_briefs"
_FUNCTION = "list_orgs_missing_digest(timestamptz, integer)"
_FUNCTION_SQL = """
CREATE FUNCTION list_orgs_missing_digest(p_now timestamptz, p_limit integer)
RETURNS TABLE (org_id uuid, day date)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
    WITH local AS (
        SELECT o.id, o.created_at, (p_now AT TIME ZONE coalesce(z.name, 'UTC'))::date AS day
        FROM public.organizations AS o
        LEFT JOIN pg_catalog.pg_timezone_names AS z ON z.name = o.time_zone
    )
    SELECT l.id, l.day
    FROM local AS l
    WHERE NOT EXISTS (
        SELECT 1 FROM public.workspace_daily_briefs AS b WHERE b.org_id = l.id AND b.day = l.day
    )
    ORDER BY l.created_at DESC, l.id
    LIMIT greatest(p_limit, 0)
$$
"""


def upgrade() -> None:
    for statement in tenancy.owner_lookup_statements(_TABLE):
        op.execute(statement)
    op.execute(_FUNCTION_SQL)
    # EXECUTE for the application role is granted by the migration env after every run.
    op.execute(f"REVOKE ALL ON FUNCTION {_FUNCTION} FROM PUBLIC")


def downgrade() -> None:
    op.execute(f"DROP FUNCTION IF EXISTS {_FUNCTION}")
    for statement in tenancy.drop_owner_lookup_statements(_TABLE):
        op.execute(statement)
