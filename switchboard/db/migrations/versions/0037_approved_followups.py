"""A follow-up says whether an owner's approval scheduled it: ``scheduled_followups.approved``.

Revision ID: 0037
Revises: 0036
Create Date: 2026-12-05

A recovery attempt runs a lost run's turn again from the start, so it withdraws what the lost
run left unfinished — its proposals, the messages it queued and the follow-ups it scheduled
(services/runner/superseded.py) — or the attempt doubles them. What an owner approved stays:
it carries the proposing run's id too, so it has to say so. Messages say it in
``attributes.approved``; a follow-up has no such column, hence this one.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0037"
down_revision: str | None = "0036"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "scheduled_followups", sa.Column("approved", sa.Boolean(), nullable=False, server_default=sa.text("false"))
    )


def downgrade() -> None:
    op.drop_column("scheduled_followups", "approved")
