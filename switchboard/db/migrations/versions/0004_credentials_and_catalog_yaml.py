"""Credentials get a base URL and tombstone deletes; the model catalog is synced from models.yaml.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01

``ai_provider_credentials``:

- ``base_url``: an OpenAI-compatible local server (or a proxy) instead of the
  provider's own endpoint.
- ``deleted_at``: DELETE keeps the row (versions and runs still name it) but
  erases the sealed key, so the four secret columns become nullable and are
  NULL exactly when the row is deleted; labels are unique among live rows only.

``ai_models``: from now on ``switchboard/catalog/models.yaml`` is the single
source of the catalog. This revision upserts it (``sync_catalog``); later price
changes are a YAML edit plus a new revision that calls ``sync_catalog`` again.
Revision 0002 stays as the historical first seed.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from switchboard.catalog import sync_catalog

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TABLE = "ai_provider_credentials"
_SECRET_COLUMNS: tuple[tuple[str, sa.types.TypeEngine[object]], ...] = (
    ("ciphertext", sa.LargeBinary()),
    ("iv", sa.LargeBinary()),
    ("tag", sa.LargeBinary()),
    ("key_id", sa.Text()),
)
_CHECKS: tuple[tuple[str, str], ...] = (
    ("label_length", "char_length(label) BETWEEN 1 AND 200"),
    ("base_url_length", "base_url IS NULL OR char_length(base_url) BETWEEN 1 AND 2048"),
    (
        "secret_complete",
        "(ciphertext IS NULL) = (iv IS NULL) AND (ciphertext IS NULL) = (tag IS NULL)"
        " AND (ciphertext IS NULL) = (key_id IS NULL)",
    ),
    ("secret_iff_live", "(deleted_at IS NULL) = (ciphertext IS NOT NULL)"),
    ("deleted_is_inactive", "deleted_at IS NULL OR NOT (is_active OR is_default)"),
)
_LABEL_UNIQUE = "uq_ai_provider_credentials_org_id_provider_label"
_LIVE_LABEL_UNIQUE = "uq_ai_provider_credentials_live_label"

# What revision 0002 seeded, frozen here: the downgrade removes only what this revision added.
_SEEDED_BY_0002: tuple[tuple[str, str], ...] = (
    ("anthropic", "claude-opus-4-7"),
    ("anthropic", "claude-sonnet-4-6"),
    ("anthropic", "claude-haiku-4-5"),
    ("openai", "gpt-5"),
    ("openai", "gpt-5-mini"),
    ("openai", "gpt-4o"),
    ("google", "gemini-2.5-pro"),
    ("google", "gemini-2.5-flash"),
    ("google", "gemini-3.5-flash-lite"),
    ("demo", "demo"),
)


def upgrade() -> None:
    op.add_column(_TABLE, sa.Column("base_url", sa.Text(), nullable=True))
    op.add_column(_TABLE, sa.Column("deleted_at", sa.DateTime(timezone=True), nullable=True))
    for column, type_ in _SECRET_COLUMNS:
        op.alter_column(_TABLE, column, existing_type=type_, nullable=True)
    for name, condition in _CHECKS:
        op.create_check_constraint(name, _TABLE, condition)
    op.drop_constraint(_LABEL_UNIQUE, _TABLE, type_="unique")
    op.create_index(
        _LIVE_LABEL_UNIQUE,
        _TABLE,
        ["org_id", "provider", "label"],
        unique=True,
        postgresql_where=sa.text("deleted_at IS NULL"),
    )
    sync_catalog(op.get_bind())


def downgrade() -> None:
    # Catalog: drop the models 0002 did not seed (0002's own downgrade removes the rest).
    ai_models = sa.table("ai_models", sa.column("provider", sa.Text), sa.column("model", sa.Text))
    op.execute(ai_models.delete().where(sa.tuple_(ai_models.c.provider, ai_models.c.model).not_in(_SEEDED_BY_0002)))
    # Tombstones must satisfy the old NOT NULL columns and the old label uniqueness: they get an
    # undecryptable placeholder and a label naming their id (they stay inactive).
    op.execute(
        f"""
        UPDATE {_TABLE}
        SET ciphertext = '\\x00'::bytea,
            iv = decode(repeat('00', 12), 'hex'),
            tag = decode(repeat('00', 16), 'hex'),
            key_id = 'deleted',
            label = left(label, 150) || ' (deleted ' || id::text || ')'
        WHERE deleted_at IS NOT NULL
        """
    )
    op.drop_index(_LIVE_LABEL_UNIQUE, table_name=_TABLE, postgresql_where=sa.text("deleted_at IS NULL"))
    op.create_unique_constraint(_LABEL_UNIQUE, _TABLE, ["org_id", "provider", "label"])
    for name, _ in reversed(_CHECKS):
        op.drop_constraint(op.f(f"ck_{_TABLE}_{name}"), _TABLE, type_="check")
    for column, type_ in _SECRET_COLUMNS:
        op.alter_column(_TABLE, column, existing_type=type_, nullable=False)
    op.drop_column(_TABLE, "deleted_at")
    op.drop_column(_TABLE, "base_url")
