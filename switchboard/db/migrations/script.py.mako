"""${message}

Revision ID: ${up_revision}
Revises: ${down_revision | comma,n}
Create Date: ${create_date}

A new tenant table (one with org_id) must also get row-level security here:
    for stmt in tenancy.enable_rls_statements("<table>"): op.execute(stmt)
and its downgrade the inverse. The integration tests compare the database with
switchboard.db.tenancy.TENANT_TABLES, and the migration environment refuses to
finish an upgrade to head that leaves a tenant table unprotected.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
${imports if imports else ""}

revision: str = ${repr(up_revision)}
down_revision: str | None = ${repr(down_revision)}
branch_labels: str | Sequence[str] | None = ${repr(branch_labels)}
depends_on: str | Sequence[str] | None = ${repr(depends_on)}


def upgrade() -> None:
    ${upgrades if upgrades else "pass"}


def downgrade() -> None:
    ${downgrades if downgrades else "pass"}
