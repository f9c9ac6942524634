"""Autonomy per action type: ``workspace_action_autonomy``.

Revision ID: 0035
Revises: 0034
Create Date: 2026-12-05

The Home's promote card [000 §3, 3-approval-promote] asks to let agents do *one action type*
on their own after the owner approved it three times. Accepting it used to switch the whole
area to ``auto``: three approved follow-ups also let agents send WhatsApp messages (same
``crm`` area) unasked. A row here gives one action type its own mode (``propose`` or
``auto``) over its area's; an area that is off and every kill switch still win
(docs/autonomy.md "Per action type"). A tenant table under forced row-level security.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from switchboard.db import tenancy

revision: str = "0035"
down_revision: str | None = "0034"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TABLE = "workspace_action_autonomy"


def upgrade() -> None:
    op.create_table(
        _TABLE,
        sa.Column("org_id", sa.UUID(), nullable=False),
        sa.Column("action_type", sa.Text(), nullable=False),
        sa.Column("mode", sa.Text(), nullable=False),
        sa.Column("updated_by", sa.UUID(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.CheckConstraint("mode IN ('propose', 'auto')", name=op.f("ck_workspace_action_autonomy_mode")),
        sa.CheckConstraint(
            "action_type ~ '^[a-z][a-z0-9_]{0,127}$'", name=op.f("ck_workspace_action_autonomy_action_type_format")
        ),
        sa.ForeignKeyConstraint(
            ["org_id"],
            ["organizations.id"],
            name=op.f("fk_workspace_action_autonomy_org_id_organizations"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["updated_by"],
            ["users.id"],
            name=op.f("fk_workspace_action_autonomy_updated_by_users"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("org_id", "action_type", name=op.f("pk_workspace_action_autonomy")),
    )
    for statement in tenancy.enable_rls_statements(_TABLE):
        op.execute(statement)


def downgrade() -> None:
    op.drop_table(_TABLE)
