"""Each channel session gets a webhook URL of its own; session names need not be unique.

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-02

WAHA names the session in the webhook body, and until now that name alone routed a delivery
to its org, so names were unique on the platform. WAHA Core (the free edition) only has a
session called ``default``: a second business on WAHA Core could never connect. Deliveries
now route by the URL, ``/api/v1/webhooks/waha/{channel_session_id}``, through
``lookup_channel_session_by_id``. The name-routed URL keeps working for the sessions that
hold their name alone: ``routes_by_name`` (every existing row; a new one when its name is
still free), unique among those rows only, and ``lookup_channel_session`` reads only them.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0027"
down_revision: str | None = "0026"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TABLE = "channel_sessions"
_OLD_UNIQUE = "uq_channel_sessions_provider_external_session"
_NAME_INDEX = "uq_channel_sessions_routing_name"
_DEFINER = "LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp"
_BY_ID = "lookup_channel_session_by_id(text, uuid)"
_BY_ID_SQL = f"""
CREATE FUNCTION lookup_channel_session_by_id(p_provider text, p_channel_session_id uuid)
RETURNS TABLE (channel_session_id uuid, org_id uuid, status text, external_session text)
{_DEFINER} AS $$
    SELECT s.id, s.org_id, s.status, s.external_session
    FROM public.channel_sessions AS s
    WHERE s.provider = p_provider AND s.id = p_channel_session_id
$$
"""


def _by_name_sql(only_routing: bool) -> str:
    where = " AND s.routes_by_name" if only_routing else ""
    return f"""
CREATE OR REPLACE FUNCTION lookup_channel_session(p_provider text, p_external_session text)
RETURNS TABLE (channel_session_id uuid, org_id uuid, status text)
{_DEFINER} AS $$
    SELECT s.id, s.org_id, s.status
    FROM public.channel_sessions AS s
    WHERE s.provider = p_provider AND s.external_session = p_external_session{where}
$$
"""


def upgrade() -> None:
    op.execute(f"ALTER TABLE {_TABLE} ADD COLUMN routes_by_name boolean NOT NULL DEFAULT false")
    op.execute(f"UPDATE {_TABLE} SET routes_by_name = true")
    op.execute(f"ALTER TABLE {_TABLE} DROP CONSTRAINT {_OLD_UNIQUE}")
    op.execute(f"CREATE UNIQUE INDEX {_NAME_INDEX} ON {_TABLE} (provider, external_session) WHERE routes_by_name")
    op.execute(_by_name_sql(only_routing=True))
    op.execute(_BY_ID_SQL)
    # EXECUTE for the application role is granted by the migration env after every run.
    op.execute(f"REVOKE ALL ON FUNCTION {_BY_ID} FROM PUBLIC")


def downgrade() -> None:
    op.execute(f"DROP FUNCTION IF EXISTS {_BY_ID}")
    op.execute(_by_name_sql(only_routing=False))
    op.execute(f"DROP INDEX IF EXISTS {_NAME_INDEX}")
    # Fails while two sessions share a name, as it must: the old routing could not tell them apart.
    op.execute(f"ALTER TABLE {_TABLE} ADD CONSTRAINT {_OLD_UNIQUE} UNIQUE (provider, external_session)")
    op.execute(f"ALTER TABLE {_TABLE} DROP COLUMN routes_by_name")
