"""A contact can be erased: ``contacts.erased_at``.

Revision ID: 0034
Revises: 0033
Create Date: 2026-12-03

``POST /api/v1/contacts/{id}:erase`` (docs/api.md "Erasing a contact") removes a customer's
personal data from every table — their name, number and messages, what the agents remember
of them, the traces and prompts of the runs that served them — and keeps the rows that
billing and the audit need, stripped. ``erased_at`` says it happened (the contact row stays:
runs and usage refer to it) and makes the API refuse to write personal data back onto it.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0034"
down_revision: str | None = "0033"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("contacts", sa.Column("erased_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    op.drop_column("contacts", "erased_at")
