"""The morning push: the notifier sends each org's Home digest to its webhook at a local hour.

Revision ID: 0033
Revises: 0032
Create Date: 2026-12-03

The brief composes today's digest when the org's day begins, but the owner saw it only by
opening Home. ``organizations.digest_hour`` (0-23 in the org's zone; NULL = no push) is
when the notifier announces the day's digest on the org's webhook, event ``home.digest``
(docs/notifier.md "The morning digest push"). New orgs get 8; orgs that exist already get
NULL: their webhook receivers were built for the events they had, and the digest carries
the Home's texts, so an admin turns it on (``PATCH /api/v1/organization``) rather than
finding it in a Slack channel one morning. Every notifier asks
``list_due_digests(now, after, limit)`` — ids and days only, in id order after ``after``
(keyset pages): orgs with a webhook whose local hour reached their ``digest_hour``, whose
today has a digest and no ``home_digest:<YYYY-MM-DD>`` notification yet. The owner role
may read ``org_webhooks`` (``owner_lookup``) for that question only.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from switchboard.db import tenancy

revision: str = "0033"
down_revision: str | None = "0032"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_CHECK = "ck_organizations_digest_hour_range"
_FUNCTION = "list_due_digests(timestamptz, uuid, integer)"
_FUNCTION_SQL = """
CREATE FUNCTION list_due_digests(p_now timestamptz, p_after uuid, p_limit integer)
RETURNS TABLE (org_id uuid, day date)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
    WITH local AS (
        SELECT o.id, o.digest_hour, p_now AT TIME ZONE coalesce(z.name, 'UTC') AS local_time
        FROM public.organizations AS o
        JOIN public.org_webhooks AS w ON w.org_id = o.id
        LEFT JOIN pg_catalog.pg_timezone_names AS z ON z.name = o.time_zone
        WHERE o.digest_hour IS NOT NULL AND (p_after IS NULL OR o.id > p_after)
    )
    SELECT l.id, l.local_time::date
    FROM local AS l
    WHERE extract(hour FROM l.local_time) >= l.digest_hour
      AND EXISTS (
        SELECT 1 FROM public.workspace_daily_briefs AS b WHERE b.org_id = l.id AND b.day = l.local_time::date
      )
      AND NOT EXISTS (
        SELECT 1 FROM public.org_notifications AS n
        -- to_char, not ::text: the key must not depend on the session's DateStyle.
        WHERE n.org_id = l.id AND n.dedupe_key = 'home_digest:' || to_char(l.local_time, 'YYYY-MM-DD')
      )
    ORDER BY l.id
    LIMIT greatest(p_limit, 0)
$$
"""


def upgrade() -> None:
    # Existing orgs NULL (the push is theirs to turn on), then 8 for every org created from now on.
    op.add_column("organizations", sa.Column("digest_hour", sa.SmallInteger(), nullable=True))
    op.alter_column("organizations", "digest_hour", server_default=sa.text("8"))
    op.create_check_constraint(op.f(_CHECK), "organizations", "digest_hour IS NULL OR digest_hour BETWEEN 0 AND 23")
    for statement in tenancy.owner_lookup_statements("org_webhooks"):
        op.execute(statement)
    op.execute(_FUNCTION_SQL)
    # EXECUTE for the application role is granted by the migration env after every run.
    op.execute(f"REVOKE ALL ON FUNCTION {_FUNCTION} FROM PUBLIC")


def downgrade() -> None:
    op.execute(f"DROP FUNCTION IF EXISTS {_FUNCTION}")
    for statement in tenancy.drop_owner_lookup_statements("org_webhooks"):
        op.execute(statement)
    op.drop_constraint(op.f(_CHECK), "organizations", type_="check")
    op.drop_column("organizations", "digest_hour")
