"""Reserved revision (no schema change yet).

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-30

Placeholder that keeps the revision chain linear while several changes are
developed in parallel; a later change fills it in or leaves it empty.
"""

from __future__ import annotations

from collections.abc import Sequence

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    pass


def downgrade() -> None:
    pass
