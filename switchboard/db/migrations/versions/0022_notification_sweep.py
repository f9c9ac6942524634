"""Pending org notifications: the notifier's sweep sends again what a crashed notifier left.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-02

Handoff and budget-incident notifications to the org's webhook are sent in the background
(services/notifier/notifications.py): the record's offset is committed once the notification
row is written, so a failing webhook no longer holds its partition. A notifier that crashes
before the send finished leaves the row ``pending``, and no redelivery will find it. Every
notifier therefore asks ``list_pending_notifications(older_than_s, limit)`` every
``NOTIFIER_SWEEP_INTERVAL_S``: ids only, rows still ``pending`` whose last change is older
than ``older_than_s`` (far beyond any live attempt), and sends them again — notifications are
at least once, and receivers deduplicate on ``X-Switchboard-Event-Id``. The owner role may
read ``org_notifications`` (``owner_lookup``) for that question only; a partial index keeps
the scan to the pending rows.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from switchboard.db import tenancy

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TABLE = "org_notifications"
_INDEX = "ix_org_notifications_pending_updated_at"
_FUNCTION = "list_pending_notifications(integer, integer)"
_FUNCTION_SQL = """
CREATE FUNCTION list_pending_notifications(p_older_than_s integer, p_limit integer)
RETURNS TABLE (org_id uuid, notification_id uuid)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
    SELECT n.org_id, n.id
    FROM public.org_notifications AS n
    WHERE n.status = 'pending'
      AND n.updated_at < now() - make_interval(secs => greatest(p_older_than_s, 0))
    ORDER BY n.updated_at, n.id
    LIMIT greatest(p_limit, 0)
$$
"""


def upgrade() -> None:
    op.execute(f"CREATE INDEX {_INDEX} ON {_TABLE} (updated_at) WHERE status = 'pending'")
    for statement in tenancy.owner_lookup_statements(_TABLE):
        op.execute(statement)
    op.execute(_FUNCTION_SQL)
    # EXECUTE for the application role is granted by the migration env after every run.
    op.execute(f"REVOKE ALL ON FUNCTION {_FUNCTION} FROM PUBLIC")


def downgrade() -> None:
    op.execute(f"DROP FUNCTION IF EXISTS {_FUNCTION}")
    for statement in tenancy.drop_owner_lookup_statements(_TABLE):
        op.execute(statement)
    op.execute(f"DROP INDEX IF EXISTS {_INDEX}")
