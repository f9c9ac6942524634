"""Per-version silence timeout of a run.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-30

``ai_agent_versions.silence_timeout_minutes`` (integer, 1-240, default 15) [002
"Cosa delimita un'esecuzione"]: a run of the version that produces no model output
and no tool result for that long is aborted (``silence_timeout``, family silentRun).
A column rather than a key of an existing JSON config: it bounds every run, has a
range the database can check, and the runner reads it with the version's other limits
(``max_steps``, budgets). Existing versions get the default, which is what the
runner applied to them so far (``RUNNER_SILENCE_TIMEOUT_S`` 900).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "ai_agent_versions",
        sa.Column("silence_timeout_minutes", sa.Integer(), server_default=sa.text("15"), nullable=False),
    )
    op.create_check_constraint(
        op.f("ck_ai_agent_versions_silence_timeout_minutes_range"),
        "ai_agent_versions",
        "silence_timeout_minutes BETWEEN 1 AND 240",
    )


def downgrade() -> None:
    op.drop_constraint(op.f("ck_ai_agent_versions_silence_timeout_minutes_range"), "ai_agent_versions", type_="check")
    op.drop_column("ai_agent_versions", "silence_timeout_minutes")
