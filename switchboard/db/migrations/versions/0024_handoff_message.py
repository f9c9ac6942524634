"""A version's handoff message: what the customer is told when a run hands off to a person.

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-02

A customer who wrote "falar com humano" got silence: a handoff run's text is never sent (it was
written for the model's own reasoning, or not at all before a keyword handoff). With
``handoff_message`` set, the runner makes it the run's final text and the notifier sends it
once, like a reply (docs/notifier.md "Handoffs"). NULL keeps the old behaviour.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0024"
down_revision: str | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_CHECK = "ck_ai_agent_versions_handoff_message_length"


def upgrade() -> None:
    op.add_column("ai_agent_versions", sa.Column("handoff_message", sa.Text(), nullable=True))
    op.create_check_constraint(
        op.f(_CHECK), "ai_agent_versions", "handoff_message IS NULL OR char_length(handoff_message) BETWEEN 1 AND 1000"
    )


def downgrade() -> None:
    op.drop_constraint(op.f(_CHECK), "ai_agent_versions", type_="check")
    op.drop_column("ai_agent_versions", "handoff_message")
