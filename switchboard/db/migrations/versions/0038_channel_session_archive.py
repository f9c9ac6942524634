"""A channel session can be archived: ``channel_sessions.archived_at``.

Revision ID: 0038
Revises: 0037
Create Date: 2026-12-05

A number given up (a lost phone, a business that changed numbers) could be disconnected but
never removed: it stayed in the list for good, and its name stayed taken on its WAHA server,
so the business could not connect a new phone under the session name WAHA Core forces
(``default``). Its conversations name it, so the row stays; ``POST
/api/v1/channel-sessions/{id}:archive`` marks it. An archived session frees its name (the
uniqueness per server counts live sessions only), routes no webhook (neither URL finds it),
and is left out of the list unless asked for.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0038"
down_revision: str | None = "0037"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_INDEX = "uq_channel_sessions_server_name"
_INDEX_COLUMNS = "channel_sessions (provider, coalesce(base_url, ''), external_session)"
_DEFINER = "LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp"


def _name_taken_sql(live_only: bool) -> str:
    live = " AND s.archived_at IS NULL" if live_only else ""
    return f"""
CREATE OR REPLACE FUNCTION session_name_taken(p_provider text, p_base_url text, p_external_session text)
RETURNS boolean
{_DEFINER} AS $$
    SELECT EXISTS (
        SELECT 1 FROM public.channel_sessions AS s
        WHERE s.provider = p_provider AND coalesce(s.base_url, '') = p_base_url
          AND s.external_session = p_external_session{live}
    )
$$
"""


def _by_id_sql(live_only: bool) -> str:
    live = " AND s.archived_at IS NULL" if live_only else ""
    return f"""
CREATE OR REPLACE FUNCTION lookup_channel_session_by_id(p_provider text, p_channel_session_id uuid)
RETURNS TABLE (channel_session_id uuid, org_id uuid, status text, external_session text)
{_DEFINER} AS $$
    SELECT s.id, s.org_id, s.status, s.external_session
    FROM public.channel_sessions AS s
    WHERE s.provider = p_provider AND s.id = p_channel_session_id{live}
$$
"""


def _by_name_sql(live_only: bool) -> str:
    live = " AND s.archived_at IS NULL" if live_only else ""
    return f"""
CREATE OR REPLACE FUNCTION lookup_channel_session(p_provider text, p_external_session text)
RETURNS TABLE (channel_session_id uuid, org_id uuid, status text)
{_DEFINER} AS $$
    SELECT s.id, s.org_id, s.status
    FROM public.channel_sessions AS s
    WHERE s.provider = p_provider AND s.external_session = p_external_session AND s.routes_by_name{live}
$$
"""


def upgrade() -> None:
    op.add_column("channel_sessions", sa.Column("archived_at", sa.DateTime(timezone=True), nullable=True))
    op.execute(f"DROP INDEX {_INDEX}")
    op.execute(f"CREATE UNIQUE INDEX {_INDEX} ON {_INDEX_COLUMNS} WHERE archived_at IS NULL")
    # CREATE OR REPLACE keeps the functions' owner and grants.
    for sql in (_name_taken_sql, _by_id_sql, _by_name_sql):
        op.execute(sql(live_only=True))


def downgrade() -> None:
    for sql in (_name_taken_sql, _by_id_sql, _by_name_sql):
        op.execute(sql(live_only=False))
    op.execute(f"DROP INDEX {_INDEX}")
    # Fails while an archived session and a live one share a name on a server, as it must.
    op.execute(f"CREATE UNIQUE INDEX {_INDEX} ON {_INDEX_COLUMNS}")
    op.drop_column("channel_sessions", "archived_at")
