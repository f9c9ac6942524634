"""A run row records when a late finish counted its usage.

Revision ID: 0030
Revises: 0029
Create Date: 2026-12-03

A runner that finishes after a newer attempt closed its run (lost) adds the usage that
closing did not count, and its trace tail (``services/runner/store.py``). Its terminal
transaction is retried after a lost connection, and a connection can drop after the COMMIT
landed: the retry found the row closed as before and counted the remainder again. The late
finish now writes its ``completed_at`` here, in the same transaction, and a retry that
finds its own instant writes nothing. NULL: no late finish.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0030"
down_revision: str | None = "0029"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("ai_agent_runs", sa.Column("late_finished_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    op.drop_column("ai_agent_runs", "late_finished_at")
