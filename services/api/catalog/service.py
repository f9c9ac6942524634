"""Catalog rules: which providers exist comes from ``models.yaml``; what is offered, from ``ai_models``.

The table is what migrations synced from the YAML file, so the API and the
runner read the same prices; the file adds the provider facts (display name,
whether it takes a key) that have no table of their own.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from services.api.catalog import repository
from services.api.catalog.schemas import ModelView, ProviderView
from switchboard.catalog import load_catalog
from switchboard.db.enums import LlmProvider
from switchboard.db.models.agents import AiModel


def providers(session: Session) -> list[ProviderView]:
    counts = repository.offered_counts(session)
    views = []
    for provider, entry in load_catalog().providers.items():
        count, default = counts.get(provider.value, (0, None))
        views.append(
            ProviderView(
                provider=provider,
                display_name=entry.display_name,
                accepts_credentials=entry.accepts_credentials,
                models_count=count,
                default_model=default,
            )
        )
    return views


def _price(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def model_view(row: AiModel) -> ModelView:
    attributes = row.attributes if isinstance(row.attributes, dict) else {}
    basis = attributes.get("price_basis")
    return ModelView(
        id=row.id,
        provider=LlmProvider(row.provider),
        model=row.model,
        display_name=row.display_name,
        description=row.description,
        context_window=row.context_window,
        input_price_micros_per_mtok=row.input_price_micros_per_mtok,
        output_price_micros_per_mtok=row.output_price_micros_per_mtok,
        cache_read_price_micros_per_mtok=_price(attributes.get("cache_read_micros_per_mtok")),
        cache_write_price_micros_per_mtok=_price(attributes.get("cache_write_micros_per_mtok")),
        price_basis=None if basis is None else str(basis),
        supports_tools=row.supports_tools,
        reasoning=attributes.get("reasoning") is True,
        is_default=row.is_default,
        released_at=row.released_at,
        deprecated_at=row.deprecated_at,
    )


def models(session: Session, *, provider: LlmProvider | None, include_deprecated: bool) -> list[ModelView]:
    rows = repository.models(session, provider=provider, include_deprecated=include_deprecated)
    return [model_view(row) for row in rows]
