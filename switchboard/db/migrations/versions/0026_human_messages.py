"""A person's message to the customer, sent from Switchboard after a handoff.

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-02

Once a conversation is handed to humans, the person who took it can answer from Switchboard
(``POST /api/v1/conversations/{id}/messages``); the notifier sends it like a reply, at most
once, through the same ``run_deliveries`` claim. Such a delivery belongs to no run: ``run_id``
becomes nullable and the kind ``human`` is added; every other kind still names its run.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0026"
down_revision: str | None = "0025"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_KIND = "ck_run_deliveries_kind"
_RUN = "ck_run_deliveries_run_unless_human"


def upgrade() -> None:
    op.alter_column("run_deliveries", "run_id", nullable=True)
    op.drop_constraint(op.f(_KIND), "run_deliveries", type_="check")
    op.create_check_constraint(op.f(_KIND), "run_deliveries", "kind IN ('reply', 'intent', 'human')")
    op.create_check_constraint(op.f(_RUN), "run_deliveries", "run_id IS NOT NULL OR kind = 'human'")


def downgrade() -> None:
    op.execute("DELETE FROM run_deliveries WHERE kind = 'human'")
    op.drop_constraint(op.f(_RUN), "run_deliveries", type_="check")
    op.drop_constraint(op.f(_KIND), "run_deliveries", type_="check")
    op.create_check_constraint(op.f(_KIND), "run_deliveries", "kind IN ('reply', 'intent')")
    op.alter_column("run_deliveries", "run_id", nullable=False)
