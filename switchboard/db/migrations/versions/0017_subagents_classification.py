"""Sub-agents and classification (issue 6 item 9).

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-30

- ``ai_agent_versions.subagent_ids``: agents of the same org this version may delegate to
  (each offered to the model as a tool ``agent_<slug>``); same org, published and not the
  agent itself are checked by the agents API (an array cannot carry foreign keys).
- ``ai_agent_versions.classification_enabled``: label the inbound message(s) with intent,
  urgency, category and tone before the agent's loop.
- ``ai_agent_runs.classification``: those labels (JSONB, NULL when not classified).

See docs/agent-context.md "Sub-agents and classification".
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "ai_agent_versions",
        sa.Column(
            "subagent_ids",
            postgresql.ARRAY(postgresql.UUID(as_uuid=True)),
            server_default=sa.text("'{}'::uuid[]"),
            nullable=False,
        ),
    )
    op.add_column(
        "ai_agent_versions",
        sa.Column("classification_enabled", sa.Boolean(), server_default=sa.text("false"), nullable=False),
    )
    op.create_check_constraint(
        op.f("ck_ai_agent_versions_subagent_ids_count"), "ai_agent_versions", "cardinality(subagent_ids) <= 20"
    )
    op.add_column("ai_agent_runs", sa.Column("classification", postgresql.JSONB(), nullable=True))


def downgrade() -> None:
    op.drop_column("ai_agent_runs", "classification")
    op.drop_constraint(op.f("ck_ai_agent_versions_subagent_ids_count"), "ai_agent_versions", type_="check")
    op.drop_column("ai_agent_versions", "classification_enabled")
    op.drop_column("ai_agent_versions", "subagent_ids")
