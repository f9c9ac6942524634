"""Runs whose runner died: the runners' sweep closes them, so no row stays ``running`` for good.

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-02

A run row is closed by its runner, or as lost by the next attempt's claim. Two kinds were
left ``running`` forever when their runner died: the last attempt of a run (the dispatcher
announced it lost, but no attempt came to close the row) and a dry run (not tracked by the
dispatcher). Every runner asks ``list_stale_runs(older_than_s, limit)`` every
``RUNNER_STALE_SWEEP_INTERVAL_S``: ids only, active rows whose last heartbeat (or, with none
yet, creation) is older than ``older_than_s`` — far beyond a live run's 10 s heartbeat — and
closes each as lost in its org's transaction, counting its usage (services/runner/sweep.py).
The owner role may read ``ai_agent_runs`` (``owner_lookup``) for that question only; the
existing partial index on ``heartbeat_at`` of active rows serves it.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from switchboard.db import tenancy

revision: str = "0028"
down_revision: str | None = "0027"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TABLE = "ai_agent_runs"
_FUNCTION = "list_stale_runs(integer, integer)"
_FUNCTION_SQL = """
CREATE FUNCTION list_stale_runs(p_older_than_s integer, p_limit integer)
RETURNS TABLE (org_id uuid, run_id uuid)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
    SELECT r.org_id, r.id
    FROM public.ai_agent_runs AS r
    WHERE r.status IN ('pending', 'running')
      AND (r.heartbeat_at < now() - make_interval(secs => greatest(p_older_than_s, 0))
           OR (r.heartbeat_at IS NULL AND r.created_at < now() - make_interval(secs => greatest(p_older_than_s, 0))))
    ORDER BY r.created_at, r.id
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
