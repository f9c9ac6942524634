"""The composed prompt stored with each run.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-30

``ai_agent_runs.prompt`` (JSONB, nullable): the labeled layers, the initial
transcript and the offered tool names the model started from
(``services.runner.context.prompt_record``), pseudonymized exactly as the model
saw them (docs/agent-context.md). NULL for runs that never reached a model.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("ai_agent_runs", sa.Column("prompt", postgresql.JSONB(astext_type=sa.Text()), nullable=True))


def downgrade() -> None:
    op.drop_column("ai_agent_runs", "prompt")
