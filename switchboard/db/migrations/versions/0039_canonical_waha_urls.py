"""WAHA server URLs in one form: ``channel_sessions.base_url`` rewritten canonically.

Revision ID: 0039
Revises: 0038
Create Date: 2026-12-05

A session name is unique per WAHA server (revision 0029), but the index compares the URL as
typed: another org could register the name a business uses on its own WAHA under
``HTTP://WAHA.internal:80/`` and, through ``:connect``, rewire that number's webhook or send
through it. The API now stores every URL in one form (``switchboard.server_urls``); this
revision rewrites the rows stored before. Two live sessions that turn out to share a name on
one server stop the upgrade (as 0029 did): an operator must rename or archive one.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from switchboard.db.tenancy import TENANT_SETTING
from switchboard.server_urls import canonical_server_url

revision: str = "0039"
down_revision: str | None = "0038"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    bind = op.get_bind()
    rows = bind.execute(
        sa.text(
            "SELECT id, org_id, provider, base_url, external_session, archived_at IS NULL AS live"
            " FROM channel_sessions WHERE base_url IS NOT NULL"
        )
    ).all()
    rewritten: dict[object, str] = {}
    for row in rows:
        try:
            rewritten[row.id] = canonical_server_url(row.base_url)
        except ValueError as exc:  # a port the old validator never parsed
            raise RuntimeError(f"channel session {row.id}: base_url {row.base_url!r} is not a URL ({exc})") from exc
    seen: dict[tuple[str, str, str], int] = {}
    for row in rows:
        if row.live:
            key = (row.provider, rewritten[row.id], row.external_session)
            seen[key] = seen.get(key, 0) + 1
    clashes = [key for key, count in seen.items() if count > 1]
    if clashes:
        listed = ", ".join(f"{name!r} on {server}" for _, server, name in clashes[:10])
        raise RuntimeError(f"channel session names used twice on one WAHA server (written two ways): {listed}")
    for row in rows:
        if rewritten[row.id] != row.base_url:
            # The owner reads every session (the lookups' policy) but writes as the row's tenant.
            bind.execute(sa.text(f"SELECT set_config('{TENANT_SETTING}', :org_id, true)"), {"org_id": str(row.org_id)})
            updated = bind.execute(
                sa.text("UPDATE channel_sessions SET base_url = :url WHERE id = :id"),
                {"url": rewritten[row.id], "id": row.id},
            )
            if updated.rowcount != 1:  # never silently: a URL left as typed keeps the hole open
                raise RuntimeError(f"channel session {row.id}: its base_url could not be rewritten")
    bind.execute(sa.text(f"SELECT set_config('{TENANT_SETTING}', '', true)"))


def downgrade() -> None:
    # The canonical form is one of the ways the URL could have been typed: nothing to undo.
    pass
