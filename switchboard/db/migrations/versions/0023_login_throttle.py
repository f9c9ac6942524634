"""The sign-in throttle: failed logins per email and address, and TOTP codes good once.

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-02

``POST /auth/login`` had no limit: a password (and a six-digit second factor) could be
tried at the speed of the API. ``login_failures`` (a platform table like ``users``: no
organization is known at sign-in) keeps each failure's lower-cased email and client
address for the throttle's window (services/api/identity/throttle.py). ``users.mfa_last_step``
is the last TOTP time step accepted, so a code seen once (over a shoulder, in a log) cannot
be used again within its validity.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "login_failures",
        sa.Column("id", sa.UUID(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("email_key", sa.Text(), nullable=False),
        sa.Column("client_address", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_login_failures")),
    )
    op.create_index(op.f("ix_login_failures_email_key_created_at"), "login_failures", ["email_key", "created_at"])
    op.create_index(
        op.f("ix_login_failures_client_address_created_at"), "login_failures", ["client_address", "created_at"]
    )
    op.create_index(op.f("ix_login_failures_created_at"), "login_failures", ["created_at"])
    op.add_column("users", sa.Column("mfa_last_step", sa.BigInteger(), nullable=True))


def downgrade() -> None:
    op.drop_column("users", "mfa_last_step")
    op.drop_table("login_failures")
