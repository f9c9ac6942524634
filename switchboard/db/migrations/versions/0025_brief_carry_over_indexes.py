"""Partial indexes for the Home digest's carry-over: what still waits from the 30 days before.

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-02

Every composition of today's digest asks for the run facts of the 30 days before that
proposed an action, and for the insight facts of those days (services/brief/store.py).
Through the (org_id, day) index both read every fact of the window — for a busy org tens
of thousands of run facts per batch of records, almost none with a proposal. Two partial
indexes hold only the rows asked for; the queries write the kinds as literals so the
planner can prove the predicates at any plan.

Built without CONCURRENTLY: a migration runs in a transaction, and brief_facts is written
by the brief alone, which waits for the lock and catches up (its records stay in Kafka).
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0025"
down_revision: str | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

PROPOSING_RUNS = "ix_brief_facts_proposing_runs"
INSIGHTS = "ix_brief_facts_insights"
PROPOSING_RUNS_WHERE = "kind = 'run' AND jsonb_array_length(COALESCE(payload -> 'proposed', '[]'::jsonb)) > 0"
INSIGHTS_WHERE = "kind = 'insight'"


def upgrade() -> None:
    op.execute(f"CREATE INDEX {PROPOSING_RUNS} ON brief_facts (org_id, day) WHERE {PROPOSING_RUNS_WHERE}")
    op.execute(f"CREATE INDEX {INSIGHTS} ON brief_facts (org_id, day) WHERE {INSIGHTS_WHERE}")


def downgrade() -> None:
    op.execute(f"DROP INDEX IF EXISTS {INSIGHTS}")
    op.execute(f"DROP INDEX IF EXISTS {PROPOSING_RUNS}")
