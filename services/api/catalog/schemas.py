"""Response models of the catalog domain [004 §4.1]."""

from __future__ import annotations

import uuid
from datetime import datetime

from pydantic import BaseModel, Field

from switchboard.db.enums import LlmProvider


class ProviderView(BaseModel):
    provider: LlmProvider
    display_name: str
    accepts_credentials: bool = Field(description="False for the built-in demo model, which needs no key.")
    models_count: int = Field(description="Models currently offered (not deprecated).")
    default_model: str | None = Field(description="The provider's recommended model, if one is offered.")


class ModelView(BaseModel):
    """A catalog entry. Prices are micro-USD per million tokens (3000000 = $3.00 / 1M tokens)."""

    id: uuid.UUID
    provider: LlmProvider
    model: str = Field(description="The id to put in a version's `model`, e.g. `claude-sonnet-4-6`.")
    display_name: str
    description: str | None
    context_window: int | None = Field(description="Input tokens the model accepts.")
    input_price_micros_per_mtok: int | None = Field(
        description="Price of a million input tokens in micro-USD; null = unknown, runs then cost 0."
    )
    output_price_micros_per_mtok: int | None = Field(
        description="Price of a million output tokens in micro-USD; null = unknown, runs then cost 0."
    )
    cache_read_price_micros_per_mtok: int | None = Field(
        default=None,
        description="Price of a million input tokens read from the provider's prompt cache; null = billed as input.",
    )
    cache_write_price_micros_per_mtok: int | None = Field(
        default=None,
        description="Price of a million input tokens written to the prompt cache; null = billed as input.",
    )
    price_basis: str | None = Field(
        description="`list` (provider list price), `family` (family price), `unknown`, or `free` (demo)."
    )
    supports_tools: bool
    reasoning: bool = Field(
        description="The model thinks before it answers; its thinking is billed as output tokens "
        '(runs give it a larger output cap, docs/runner.md "Output cap").'
    )
    is_default: bool = Field(description="The provider's recommended model.")
    released_at: datetime | None
    deprecated_at: datetime | None
