"""The notifier's tables: delivery claims, the org's outgoing webhook, notifications to humans.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-30

- ``run_deliveries``: one row per outbound message handed to a channel, inserted and
  committed *before* the channel is called (unique ``message_id``): the at-most-once claim
  of customer replies (docs/notifier.md). Its status is the run's delivery status.
- ``org_webhooks``: one outgoing webhook per org (url + AES-GCM sealed HMAC secret).
- ``org_notifications``: one row per notification to the org's humans (handoffs, budget
  incidents), unique per ``(org_id, dedupe_key)``.

All three are tenant tables under forced row-level security.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from switchboard.db import tenancy

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TABLES = ("run_deliveries", "org_webhooks", "org_notifications")


def _common() -> list[sa.Column[object]]:
    return [
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("org_id", sa.UUID(), nullable=False),
    ]


def _timestamps() -> list[sa.Column[object]]:
    return [
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
    ]


def _org_fk(table: str) -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(
        ["org_id"], ["organizations.id"], name=op.f(f"fk_{table}_org_id_organizations"), ondelete="CASCADE"
    )


def upgrade() -> None:
    op.create_table(
        "run_deliveries",
        *_common(),
        sa.Column("run_id", sa.UUID(), nullable=False),
        sa.Column("message_id", sa.UUID(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("channel", sa.Text(), nullable=False),
        sa.Column("status", sa.Text(), server_default=sa.text("'sending'"), nullable=False),
        sa.Column("attempts", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("external_id", sa.Text(), nullable=True),
        sa.Column("error_code", sa.Text(), nullable=True),
        sa.Column("error_message", sa.Text(), nullable=True),
        sa.Column("completed_at", sa.DateTime(timezone=True), nullable=True),
        *_timestamps(),
        sa.CheckConstraint("kind IN ('reply', 'intent')", name=op.f("ck_run_deliveries_kind")),
        sa.CheckConstraint("status IN ('sending', 'sent', 'failed', 'unknown')", name=op.f("ck_run_deliveries_status")),
        sa.CheckConstraint("attempts >= 0", name=op.f("ck_run_deliveries_attempts_non_negative")),
        sa.ForeignKeyConstraint(
            ["message_id"], ["messages.id"], name=op.f("fk_run_deliveries_message_id_messages"), ondelete="CASCADE"
        ),
        _org_fk("run_deliveries"),
        sa.ForeignKeyConstraint(
            ["run_id"], ["ai_agent_runs.id"], name=op.f("fk_run_deliveries_run_id_ai_agent_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_run_deliveries")),
        sa.UniqueConstraint("message_id", name=op.f("uq_run_deliveries_message_id")),
    )
    op.create_index(op.f("ix_run_deliveries_org_id_created_at"), "run_deliveries", ["org_id", "created_at"])
    op.create_index(op.f("ix_run_deliveries_run_id_kind"), "run_deliveries", ["run_id", "kind"])

    op.create_table(
        "org_webhooks",
        *_common(),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("secret_ciphertext", sa.LargeBinary(), nullable=False),
        sa.Column("secret_iv", sa.LargeBinary(), nullable=False),
        sa.Column("secret_tag", sa.LargeBinary(), nullable=False),
        sa.Column("secret_key_id", sa.Text(), nullable=False),
        sa.Column("created_by_user_id", sa.UUID(), nullable=True),
        *_timestamps(),
        sa.CheckConstraint("octet_length(secret_iv) = 12", name=op.f("ck_org_webhooks_secret_iv_length")),
        sa.CheckConstraint("octet_length(secret_tag) = 16", name=op.f("ck_org_webhooks_secret_tag_length")),
        sa.ForeignKeyConstraint(
            ["created_by_user_id"],
            ["users.id"],
            name=op.f("fk_org_webhooks_created_by_user_id_users"),
            ondelete="SET NULL",
        ),
        _org_fk("org_webhooks"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_org_webhooks")),
        sa.UniqueConstraint("org_id", name=op.f("uq_org_webhooks_org_id")),
    )

    op.create_table(
        "org_notifications",
        *_common(),
        sa.Column("dedupe_key", sa.Text(), nullable=False),
        sa.Column("event_type", sa.Text(), nullable=False),
        sa.Column("event_id", sa.UUID(), nullable=False),
        sa.Column("status", sa.Text(), server_default=sa.text("'pending'"), nullable=False),
        sa.Column("attempts", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("error_code", sa.Text(), nullable=True),
        sa.Column(
            "payload", postgresql.JSONB(astext_type=sa.Text()), server_default=sa.text("'{}'::jsonb"), nullable=False
        ),
        sa.Column("sent_at", sa.DateTime(timezone=True), nullable=True),
        *_timestamps(),
        sa.CheckConstraint(
            "status IN ('pending', 'sent', 'failed', 'skipped')", name=op.f("ck_org_notifications_status")
        ),
        sa.CheckConstraint("attempts >= 0", name=op.f("ck_org_notifications_attempts_non_negative")),
        _org_fk("org_notifications"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_org_notifications")),
        sa.UniqueConstraint("org_id", "dedupe_key", name=op.f("uq_org_notifications_org_id_dedupe_key")),
    )
    op.create_index(op.f("ix_org_notifications_org_id_created_at"), "org_notifications", ["org_id", "created_at"])

    for table in _TABLES:
        for statement in tenancy.enable_rls_statements(table):
            op.execute(statement)


def downgrade() -> None:
    for table in reversed(_TABLES):
        for statement in tenancy.disable_rls_statements(table):
            op.execute(statement)
        op.drop_table(table)
