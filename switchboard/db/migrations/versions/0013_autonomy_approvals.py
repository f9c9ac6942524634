"""Autonomy: per-area kill switch, pause-for-approval per version, the parked run status.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-30

- ``workspace_autonomy.kill_switch`` (boolean, default false): the per-area kill switch
  [000 §3]. It forces the area ``off`` and keeps ``mode``, so clearing it restores what
  the owner had chosen.
- ``ai_agent_versions.pause_on_proposal`` (boolean, default false): a write the version
  proposes parks its run until the owner decides (interrupt/resume [003]).
- ``ai_agent_runs.status`` also accepts ``awaiting_approval`` (a parked run: no runner slot,
  not an active status, so it holds no conversation). See docs/autonomy.md.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_OLD = ("pending", "running", "completed", "failed", "aborted", "handoff")
_NEW = (*_OLD, "awaiting_approval")


def _status_check(values: Sequence[str]) -> None:
    op.drop_constraint(op.f("ck_ai_agent_runs_status"), "ai_agent_runs", type_="check")
    listed = ", ".join(f"'{v}'" for v in values)
    op.create_check_constraint(op.f("ck_ai_agent_runs_status"), "ai_agent_runs", f"status IN ({listed})")


def upgrade() -> None:
    op.add_column(
        "workspace_autonomy", sa.Column("kill_switch", sa.Boolean(), server_default=sa.text("false"), nullable=False)
    )
    op.add_column(
        "ai_agent_versions",
        sa.Column("pause_on_proposal", sa.Boolean(), server_default=sa.text("false"), nullable=False),
    )
    _status_check(_NEW)


def downgrade() -> None:
    op.execute("UPDATE ai_agent_runs SET status = 'aborted' WHERE status = 'awaiting_approval'")
    _status_check(_OLD)
    op.drop_column("ai_agent_versions", "pause_on_proposal")
    op.drop_column("workspace_autonomy", "kill_switch")
