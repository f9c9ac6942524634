"""A session's status follows WAHA's reports in the order WAHA made them: ``status_reported_at``.

Revision ID: 0041
Revises: 0040
Create Date: 2026-12-05

WAHA retries a webhook delivery that failed, and deliveries may arrive out of order: a
``STARTING`` retried after the ``WORKING`` that followed it set the number back to
``starting`` — agents could not be bound to it until the next report — and a signed
``FAILED`` body replayed later announced a disconnection that was not. The API now keeps the
time of the report its status came from (the envelope's ``timestamp``, WAHA's clock) and
applies a report only when it is not older. Reports without a timestamp are applied as
before and leave the time as it was; the API's own writes (``:disconnect``, ``:archive``)
leave it too, so only WAHA's clock is ever compared with WAHA's clock.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0041"
down_revision: str | None = "0040"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("channel_sessions", sa.Column("status_reported_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    op.drop_column("channel_sessions", "status_reported_at")
