"""The outbox relay can set a row aside: ``dead_lettered_at``.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-30

A row the relay cannot publish for a reason of its own (unknown topic name,
record larger than the broker accepts) is sent to the dead-letter topic after a
few attempts and marked ``dead_lettered_at``, so it stops holding back later
rows of its key. The relay's index of pending rows now excludes such rows, and
a small partial index lets operators (and pruning) find them. No NOTIFY
trigger: the relay polls, because a NOTIFY serializes the commits of every
writing transaction (measured in docs/api.md, "Outbox relay").

The outbox is pruned continuously, so it is small and the index is rebuilt
without CONCURRENTLY.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("outbox", sa.Column("dead_lettered_at", sa.DateTime(timezone=True), nullable=True))
    op.create_check_constraint(
        "published_or_dead_lettered", "outbox", "published_at IS NULL OR dead_lettered_at IS NULL"
    )
    op.drop_index("ix_outbox_unpublished", table_name="outbox")
    op.create_index(
        "ix_outbox_unpublished",
        "outbox",
        ["id"],
        unique=False,
        postgresql_where=sa.text("published_at IS NULL AND dead_lettered_at IS NULL"),
    )
    op.create_index(
        "ix_outbox_dead_lettered_at",
        "outbox",
        ["dead_lettered_at"],
        unique=False,
        postgresql_where=sa.text("dead_lettered_at IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_outbox_dead_lettered_at", table_name="outbox")
    op.drop_index("ix_outbox_unpublished", table_name="outbox")
    op.create_index(
        "ix_outbox_unpublished", "outbox", ["id"], unique=False, postgresql_where=sa.text("published_at IS NULL")
    )
    # The old schema cannot say "dead-lettered": such rows already went to the
    # dead-letter topic, so they count as handled rather than being published again.
    op.execute("UPDATE outbox SET published_at = dead_lettered_at WHERE dead_lettered_at IS NOT NULL")
    op.drop_constraint("published_or_dead_lettered", "outbox", type_="check")
    op.drop_column("outbox", "dead_lettered_at")
