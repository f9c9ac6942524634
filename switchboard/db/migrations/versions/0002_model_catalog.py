"""Seed the model catalog [004 §2.2] with list prices in micro-USD per million tokens.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30

Prices are refreshed by new migrations, never by a cron [004 §3.5]. Where a
provider's price for a model was not known when this was written, the price is
the one of the model's family and the row says so (``attributes.price_basis``),
or NULL (unknown: the runner then records cost 0 [003 principle 4]). The
``demo`` row is the clearly labeled built-in model used when no key is set.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

USD = 1_000_000  # micro-USD per dollar

ai_models = sa.table(
    "ai_models",
    sa.column("provider", sa.Text),
    sa.column("model", sa.Text),
    sa.column("display_name", sa.Text),
    sa.column("context_window", sa.Integer),
    sa.column("input_price_micros_per_mtok", sa.BigInteger),
    sa.column("output_price_micros_per_mtok", sa.BigInteger),
    sa.column("supports_tools", sa.Boolean),
    sa.column("is_default", sa.Boolean),
    sa.column("attributes", JSONB),
)


def _micros(dollars: float | None) -> int | None:
    return None if dollars is None else round(dollars * USD)


def _model(
    provider: str,
    model: str,
    display_name: str,
    context_window: int,
    usd_in_per_mtok: float | None,
    usd_out_per_mtok: float | None,
    *,
    default: bool = False,
    basis: str = "list",
) -> dict[str, object]:
    return {
        "provider": provider,
        "model": model,
        "display_name": display_name,
        "context_window": context_window,
        "input_price_micros_per_mtok": _micros(usd_in_per_mtok),
        "output_price_micros_per_mtok": _micros(usd_out_per_mtok),
        "supports_tools": True,
        "is_default": default,
        "attributes": {"price_basis": basis},
    }


# basis: "list" = the provider's list price; "family" = the price of the model's family
# (not yet confirmed for this version); "unknown" = NULL price; "free" = the demo model.
MODELS: tuple[dict[str, object], ...] = (
    _model("anthropic", "claude-opus-4-7", "Claude Opus 4.7", 200_000, 5.0, 25.0, basis="family"),
    _model("anthropic", "claude-sonnet-4-6", "Claude Sonnet 4.6", 200_000, 3.0, 15.0, default=True, basis="family"),
    _model("anthropic", "claude-haiku-4-5", "Claude Haiku 4.5", 200_000, 1.0, 5.0),
    _model("openai", "gpt-5", "GPT-5", 400_000, 1.25, 10.0),
    _model("openai", "gpt-5-mini", "GPT-5 Mini", 400_000, 0.25, 2.0, default=True),
    _model("openai", "gpt-4o", "GPT-4o (legacy)", 128_000, 2.5, 10.0),
    _model("google", "gemini-2.5-pro", "Gemini 2.5 Pro", 1_048_576, 1.25, 10.0),
    _model("google", "gemini-2.5-flash", "Gemini 2.5 Flash", 1_048_576, 0.30, 2.50, default=True),
    _model("google", "gemini-3.5-flash-lite", "Gemini 3.5 Flash-Lite", 1_048_576, None, None, basis="unknown"),
    _model("demo", "demo", "Demo model (built-in, not an LLM)", 8_000, 0.0, 0.0, default=True, basis="free"),
)


def upgrade() -> None:
    op.bulk_insert(ai_models, list(MODELS))


def downgrade() -> None:
    for row in MODELS:
        op.execute(ai_models.delete().where(ai_models.c.provider == row["provider"], ai_models.c.model == row["model"]))
