"""A channel session says whether a reply typed on the business's phone takes the conversation over.

Revision ID: 0032
Revises: 0031
Create Date: 2026-12-03

A message the business writes on its own phone to a customer (WAHA ``message.any`` with
``fromMe``, not the echo of a message Switchboard sent, not a run command) is a person
answering: the agents stop in that conversation, as with ``POST …:takeover``
(docs/api.md, "A person answers from the business phone"). ``owner_replies_take_over``
(default true) turns it off for a number that other tools also send through (booking
reminders, marketing), whose messages are not a person answering.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0032"
down_revision: str | None = "0031"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "channel_sessions",
        sa.Column("owner_replies_take_over", sa.Boolean(), nullable=False, server_default=sa.text("true")),
    )


def downgrade() -> None:
    op.drop_column("channel_sessions", "owner_replies_take_over")
