"""A person's token is worth no more than their membership: ``lookup_api_token`` reads it.

Revision ID: 0043
Revises: 0042
Create Date: 2026-12-05

Removing a member, or lowering their role, revokes their tokens — the ones already committed.
A login (or ``POST /tokens``) running at the same moment read the membership before the removal
committed and wrote its token after: the removed person kept a 12-hour session, or a token
without expiry, at their old role (a departing insider could even loop logins to win the race).
Now the lookup joins the membership: a token of a person who is no longer a member authenticates
nobody, and one whose role is above the membership's acts at the membership's. Tokens without a
person (the bootstrap and automation tokens an operator mints) are unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0043"
down_revision: str | None = "0042"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_DEFINER = "LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public, pg_temp"
_RANK = "ARRAY['viewer', 'manager', 'admin']"

_LOOKUP_MEMBERSHIP = f"""
CREATE OR REPLACE FUNCTION lookup_api_token(p_token_hash bytea)
RETURNS TABLE (token_id uuid, org_id uuid, user_id uuid, role text, expires_at timestamptz,
               kind text, mfa_verified boolean)
{_DEFINER} AS $$
    SELECT t.id, t.org_id, t.user_id,
           CASE WHEN m.role IS NOT NULL
                 AND array_position({_RANK}, m.role) < array_position({_RANK}, t.role)
                THEN m.role ELSE t.role END,
           t.expires_at, t.kind, t.mfa_verified
    FROM public.api_tokens AS t
    LEFT JOIN public.memberships AS m ON m.org_id = t.org_id AND m.user_id = t.user_id
    WHERE t.token_hash = p_token_hash
      AND t.revoked_at IS NULL
      AND (t.expires_at IS NULL OR t.expires_at > now())
      AND (t.user_id IS NULL OR m.user_id IS NOT NULL)
$$
"""

_LOOKUP_TOKEN_ONLY = f"""
CREATE OR REPLACE FUNCTION lookup_api_token(p_token_hash bytea)
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


def upgrade() -> None:
    op.execute(_LOOKUP_MEMBERSHIP)
    # EXECUTE for the application role is granted again by the migration env after every run.
    op.execute("REVOKE ALL ON FUNCTION lookup_api_token(bytea) FROM PUBLIC")


def downgrade() -> None:
    op.execute(_LOOKUP_TOKEN_ONLY)
    op.execute("REVOKE ALL ON FUNCTION lookup_api_token(bytea) FROM PUBLIC")
