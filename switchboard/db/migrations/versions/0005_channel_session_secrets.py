"""Channel sessions keep their webhook secret and provider API key, AES-GCM sealed.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30

The WAHA webhook is unauthenticated HTTP: the only proof that a delivery comes
from the session's WAHA server is the HMAC-SHA512 it signs the body with, keyed
by a secret Switchboard generates per session. The API needs that secret in
clear to verify, so it is sealed (not hashed) with the platform key ring, like
provider keys: ciphertext, 12-byte IV, 16-byte tag, key id (for rotation), and
associated data naming the row. The optional WAHA API key for outbound sends is
sealed the same way. All columns are nullable: a session without a secret (rows
from before this revision) refuses every webhook until the secret is rotated.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TABLE = "channel_sessions"
_SEALED = ("webhook_secret", "api_key")


def upgrade() -> None:
    for prefix in _SEALED:
        op.add_column(_TABLE, sa.Column(f"{prefix}_ciphertext", sa.LargeBinary(), nullable=True))
        op.add_column(_TABLE, sa.Column(f"{prefix}_iv", sa.LargeBinary(), nullable=True))
        op.add_column(_TABLE, sa.Column(f"{prefix}_tag", sa.LargeBinary(), nullable=True))
        op.add_column(_TABLE, sa.Column(f"{prefix}_key_id", sa.Text(), nullable=True))
        if prefix == "webhook_secret":
            op.add_column(_TABLE, sa.Column("webhook_secret_rotated_at", sa.DateTime(timezone=True), nullable=True))
        cols = [f"{prefix}_{c}" for c in ("ciphertext", "iv", "tag", "key_id")]
        complete = " AND ".join(f"({cols[0]} IS NULL) = ({c} IS NULL)" for c in cols[1:])
        op.create_check_constraint(f"{prefix}_complete", _TABLE, complete)
        op.create_check_constraint(
            f"{prefix}_iv_length", _TABLE, f"{prefix}_iv IS NULL OR octet_length({prefix}_iv) = 12"
        )
        op.create_check_constraint(
            f"{prefix}_tag_length", _TABLE, f"{prefix}_tag IS NULL OR octet_length({prefix}_tag) = 16"
        )


def downgrade() -> None:
    for prefix in reversed(_SEALED):
        for name in ("tag_length", "iv_length", "complete"):
            op.drop_constraint(f"{prefix}_{name}", _TABLE, type_="check")
        if prefix == "webhook_secret":
            op.drop_column(_TABLE, "webhook_secret_rotated_at")
        for column in ("key_id", "tag", "iv", "ciphertext"):
            op.drop_column(_TABLE, f"{prefix}_{column}")
