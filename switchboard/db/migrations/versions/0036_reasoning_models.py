"""The catalog marks reasoning models (``ai_models.attributes.reasoning``).

Revision ID: 0036
Revises: 0035
Create Date: 2026-12-05

GPT-5, GPT-5 Mini and Gemini 2.5 think before they answer, and their thinking counts against
the output cap: with the runner's 1,024-token cap a question that made them think long came
back empty or cut off. ``models.yaml`` now says which models reason; this revision syncs it,
and the runner gives those models an allowance for their thinking (docs/runner.md "Output cap").
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from switchboard.catalog import sync_catalog

revision: str = "0036"
down_revision: str | None = "0035"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    sync_catalog(op.get_bind())


def downgrade() -> None:
    # The attribute is a hint the runner reads; an older runner ignores it. Nothing to undo.
    pass
