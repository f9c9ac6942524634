"""The catalog prices prompt-cache tokens (``ai_models.attributes.cache_*_micros_per_mtok``).

Revision ID: 0042
Revises: 0041
Create Date: 2026-12-05

The runner prices a cache read and a cache write at the model's own cache prices when the
catalog gives them, at the input price otherwise — and the catalog never gave them: every
cached token was charged as fresh input. The system prompt and tools are cached on every step,
so a four-step Claude run was recorded at about 2.6 times what Anthropic bills (cache reads are
a tenth of the input price), cost budgets stopped runs early and caps paused agents early;
Anthropic's cache writes (1.25 times the input price) were undercharged. ``models.yaml`` now
lists the cache prices; this revision syncs them (docs/runner.md "Cost").
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

from switchboard.catalog import sync_catalog

revision: str = "0042"
down_revision: str | None = "0041"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    sync_catalog(op.get_bind())


def downgrade() -> None:
    # Prices a runner reads when present; an older runner ignores them. Nothing to undo.
    pass
