"""A session name is unique on its WAHA server.

Revision ID: 0029
Revises: 0028
Create Date: 2026-12-02

Revision 0027 let session names repeat, so each business on WAHA Core (whose one session is
always ``default``) can connect. But replies go out by name: the notifier calls the session's
WAHA server (its ``base_url``, or the platform's for NULL) with the session's name. Two
organizations with the same name on the same server would send through one WhatsApp number.
A name is therefore unique per (provider, server): ``NULL`` — the platform's shared WAHA —
counts as one server. Businesses on their own WAHA Core servers may all call it ``default``.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0029"
down_revision: str | None = "0028"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_INDEX = "uq_channel_sessions_server_name"
_FUNCTION = "session_name_taken(text, text, text)"
_FUNCTION_SQL = """
CREATE FUNCTION session_name_taken(p_provider text, p_base_url text, p_external_session text)
RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp AS $$
    SELECT EXISTS (
        SELECT 1 FROM public.channel_sessions AS s
        WHERE s.provider = p_provider AND coalesce(s.base_url, '') = p_base_url
          AND s.external_session = p_external_session
    )
$$
"""


_DUPLICATES = """
SELECT provider, coalesce(base_url, '') AS server, external_session, count(*) AS sessions
FROM channel_sessions GROUP BY 1, 2, 3 HAVING count(*) > 1
"""


def upgrade() -> None:
    duplicates = op.get_bind().exec_driver_sql(_DUPLICATES).all()
    if duplicates:
        # Only sessions created under revision 0027 can collide, and each collision is two orgs
        # sending through one number: an operator must rename one session (in WAHA and here).
        listed = ", ".join(f"{d.external_session!r} on {d.server or 'the platform WAHA'}" for d in duplicates[:10])
        raise RuntimeError(f"channel session names used twice on one WAHA server: {listed}")
    op.execute(f"CREATE UNIQUE INDEX {_INDEX} ON channel_sessions (provider, coalesce(base_url, ''), external_session)")
    # Whether a name is taken on a server, for the create and update checks (yes or no, never whose).
    op.execute(_FUNCTION_SQL)
    # EXECUTE for the application role is granted by the migration env after every run.
    op.execute(f"REVOKE ALL ON FUNCTION {_FUNCTION} FROM PUBLIC")


def downgrade() -> None:
    op.execute(f"DROP FUNCTION IF EXISTS {_FUNCTION}")
    op.execute(f"DROP INDEX IF EXISTS {_INDEX}")
