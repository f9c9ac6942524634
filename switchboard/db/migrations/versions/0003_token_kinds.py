"""API tokens know their kind (api / session) and whether a second factor was proven.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30

Admin writes require a session proven with a second factor [004 §7]. A login
yields a ``session`` token whose ``mfa_verified`` is true only when a valid
TOTP code was given; operators' automation tokens (``api``) minted by
``switchboard admin bootstrap`` are marked verified explicitly, because the
operator proved control of the database and the deployment instead.
``lookup_api_token`` returns both facts so authentication stays one call.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_DEFINER = "LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp"

_LOOKUP_V2 = f"""
CREATE FUNCTION lookup_api_token(p_token_hash bytea)
RETURNS TABLE (token_id uuid, org_id uuid, user_id uuid, role text, expires_at timestamptz,
               kind text, mfa_verified boolean)
{_DEFINER} AS $$
    SELECT t.id, t.org_id, t.user_id, t.role, t.expires_at, t.kind, t.mfa_verified
    FROM public.api_tokens AS t
    WHERE t.token_hash = p_token_hash
      AND t.revoked_at IS NULL
      AND (t.expires_at IS NULL OR t.expires_at > now())
$$
"""

_LOOKUP_V1 = f"""
CREATE FUNCTION lookup_api_token(p_token_hash bytea)
RETURNS TABLE (token_id uuid, org_id uuid, user_id uuid, role text, expires_at timestamptz)
{_DEFINER} AS $$
    SELECT t.id, t.org_id, t.user_id, t.role, t.expires_at
    FROM public.api_tokens AS t
    WHERE t.token_hash = p_token_hash
      AND t.revoked_at IS NULL
      AND (t.expires_at IS NULL OR t.expires_at > now())
$$
"""


def upgrade() -> None:
    op.add_column("api_tokens", sa.Column("kind", sa.Text(), server_default=sa.text("'api'"), nullable=False))
    op.add_column(
        "api_tokens", sa.Column("mfa_verified", sa.Boolean(), server_default=sa.text("false"), nullable=False)
    )
    op.create_check_constraint("kind", "api_tokens", "kind IN ('api', 'session')")
    op.execute("DROP FUNCTION lookup_api_token(bytea)")
    op.execute(_LOOKUP_V2)
    # EXECUTE for the application role is granted again by the migration env after every run.
    op.execute("REVOKE ALL ON FUNCTION lookup_api_token(bytea) FROM PUBLIC")


def downgrade() -> None:
    op.execute("DROP FUNCTION lookup_api_token(bytea)")
    op.execute(_LOOKUP_V1)
    # EXECUTE for the application role is granted again by the migration env after every run.
    op.execute("REVOKE ALL ON FUNCTION lookup_api_token(bytea) FROM PUBLIC")
    op.drop_constraint("kind", "api_tokens", type_="check")
    op.drop_column("api_tokens", "mfa_verified")
    op.drop_column("api_tokens", "kind")
