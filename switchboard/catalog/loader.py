"""Read ``models.yaml`` (validated) and make the ``ai_models`` table match it.

Why one YAML file: the catalog and its prices are data that product people
review, not code; a price change is a one-line diff plus a migration that calls
:func:`sync_catalog`. The sync is idempotent (running it twice changes nothing
the second time), upserts by ``(provider, model)``, moves the per-provider
default without ever having two defaults at once, and *deprecates* (never
deletes) a model that left the file, because finished runs keep pointing at it.

The sync works on a plain ``Connection`` and writes only the columns the table
has at that moment, so an old migration that calls it keeps working on a fresh
database after later migrations add catalog columns.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

import sqlalchemy as sa
import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from sqlalchemy.dialects.postgresql import JSONB, insert

from switchboard.db.enums import LlmProvider

CATALOG_FILE = Path(__file__).with_name("models.yaml")
MICROS_PER_USD = 1_000_000

PriceBasis = Literal["list", "family", "unknown", "free"]

# A lightweight description of ``ai_models`` (not the ORM model): migrations must not
# depend on how the ORM class looks in later versions of the code.
_AI_MODELS = sa.table(
    "ai_models",
    sa.column("provider", sa.Text),
    sa.column("model", sa.Text),
    sa.column("display_name", sa.Text),
    sa.column("description", sa.Text),
    sa.column("context_window", sa.Integer),
    sa.column("input_price_micros_per_mtok", sa.BigInteger),
    sa.column("output_price_micros_per_mtok", sa.BigInteger),
    sa.column("supports_tools", sa.Boolean),
    sa.column("is_default", sa.Boolean),
    sa.column("released_at", sa.DateTime(timezone=True)),
    sa.column("deprecated_at", sa.DateTime(timezone=True)),
    sa.column("attributes", JSONB),
    sa.column("updated_at", sa.DateTime(timezone=True)),
)
_KEY = ("provider", "model")


class CatalogError(ValueError):
    """The YAML file is malformed or breaks a catalog rule."""


def _micros(usd: Decimal | None) -> int | None:
    if usd is None:
        return None
    micros = usd * MICROS_PER_USD
    if micros != micros.to_integral_value():
        raise ValueError("prices have at most 6 decimals (micro-USD)")
    return int(micros)


def _midnight(day: date | None) -> datetime | None:
    return None if day is None else datetime.combine(day, time.min, tzinfo=UTC)


class CatalogModel(BaseModel):
    """One model as written in the YAML file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]{0,99}$")
    display_name: str = Field(min_length=1, max_length=200)
    description: str | None = None
    context_window: int | None = Field(default=None, gt=0)
    # Decimal strings in the file ("0.30"), so no binary float ever becomes a price.
    input_usd_per_mtok: Decimal | None = Field(default=None, ge=0)
    output_usd_per_mtok: Decimal | None = Field(default=None, ge=0)
    # Input tokens read from the provider's prompt cache, and written to it (Anthropic bills a write
    # above the input price); unset: billed as input, the provider's full price.
    cache_read_usd_per_mtok: Decimal | None = Field(default=None, ge=0)
    cache_write_usd_per_mtok: Decimal | None = Field(default=None, ge=0)
    price_basis: PriceBasis
    supports_tools: bool = True
    # It thinks before it answers, and the thinking counts against the output cap (billed as
    # output): the runner adds RUNNER_REASONING_ALLOWANCE_TOKENS to its cap and keeps the effort low.
    reasoning: bool = False
    default: bool = False
    released_at: date | None = None
    deprecated_at: date | None = None

    @field_validator("input_usd_per_mtok", "output_usd_per_mtok", "cache_read_usd_per_mtok", "cache_write_usd_per_mtok")
    @classmethod
    def _six_decimals(cls, value: Decimal | None) -> Decimal | None:
        _micros(value)
        return value

    @model_validator(mode="after")
    def _basis_matches_prices(self) -> CatalogModel:
        unknown = self.input_usd_per_mtok is None and self.output_usd_per_mtok is None
        if (self.price_basis == "unknown") != unknown:
            raise ValueError("price_basis 'unknown' if and only if both prices are null")
        if self.default and self.deprecated_at is not None:
            raise ValueError("a deprecated model cannot be the default")
        return self

    @property
    def input_price_micros_per_mtok(self) -> int | None:
        return _micros(self.input_usd_per_mtok)

    @property
    def output_price_micros_per_mtok(self) -> int | None:
        return _micros(self.output_usd_per_mtok)

    def price_attributes(self) -> dict[str, Any]:
        """What ``ai_models.attributes`` carries besides the two prices (read by the runner's pricing)."""
        cache = {
            "cache_read_micros_per_mtok": _micros(self.cache_read_usd_per_mtok),
            "cache_write_micros_per_mtok": _micros(self.cache_write_usd_per_mtok),
        }
        return {
            "price_basis": self.price_basis,
            **({"reasoning": True} if self.reasoning else {}),
            **{key: value for key, value in cache.items() if value is not None},
        }


class CatalogProvider(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    display_name: str = Field(min_length=1, max_length=100)
    # False for the built-in demo model: there is nothing to bring a key for.
    accepts_credentials: bool
    models: tuple[CatalogModel, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _one_default_and_unique_ids(self) -> CatalogProvider:
        ids = [m.model for m in self.models]
        if len(ids) != len(set(ids)):
            raise ValueError("model ids must be unique within a provider")
        defaults = [m.model for m in self.models if m.default]
        if len(defaults) != 1:
            raise ValueError(f"exactly one default model per provider, got {defaults or 'none'}")
        return self

    @property
    def default_model(self) -> CatalogModel:
        return next(m for m in self.models if m.default)


class Catalog(BaseModel):
    """The whole file: providers in display order, each with its models."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_version: Literal[1]
    providers: dict[LlmProvider, CatalogProvider]

    def provider(self, provider: LlmProvider | str) -> CatalogProvider | None:
        return self.providers.get(LlmProvider(provider)) if provider in set(LlmProvider) else None

    def rows(self) -> list[dict[str, Any]]:
        """One ``ai_models`` row per model, prices converted to micro-USD per million tokens."""
        return [
            {
                "provider": provider.value,
                "model": m.model,
                "display_name": m.display_name,
                "description": m.description,
                "context_window": m.context_window,
                "input_price_micros_per_mtok": m.input_price_micros_per_mtok,
                "output_price_micros_per_mtok": m.output_price_micros_per_mtok,
                "supports_tools": m.supports_tools,
                "is_default": m.default,
                "released_at": _midnight(m.released_at),
                "deprecated_at": _midnight(m.deprecated_at),
                "attributes": m.price_attributes(),
            }
            for provider, entry in self.providers.items()
            for m in entry.models
        ]


def parse_catalog(text: str) -> Catalog:
    """Validate catalog YAML text (raises :class:`CatalogError` naming the problem)."""
    try:
        data = yaml.safe_load(text)
        return Catalog.model_validate(data)
    except (yaml.YAMLError, ValueError) as exc:
        raise CatalogError(f"invalid model catalog: {exc}") from exc


def load_catalog(path: Path | None = None) -> Catalog:
    """The catalog shipped with the package (cached), or the file at ``path``."""
    if path is None:
        return _packaged_catalog()
    return parse_catalog(path.read_text(encoding="utf-8"))


@functools.cache
def _packaged_catalog() -> Catalog:
    return parse_catalog(CATALOG_FILE.read_text(encoding="utf-8"))


@dataclass(frozen=True)
class SyncReport:
    """What a sync changed (``unchanged`` rows were already equal to the file)."""

    inserted: int
    updated: int
    unchanged: int
    deprecated: int


def sync_catalog(connection: sa.Connection, catalog: Catalog | None = None) -> SyncReport:
    """Upsert the catalog into ``ai_models`` inside the caller's transaction.

    Runs as the owner role (migrations): the application role may only read
    ``ai_models``. Safe to run again; only rows that differ are written.
    """
    catalog = catalog or load_catalog()
    present = {c["name"] for c in sa.inspect(connection).get_columns("ai_models")}
    rows = [{k: v for k, v in row.items() if k in present} for row in catalog.rows()]
    t = _AI_MODELS
    keys = [(row["provider"], row["model"]) for row in rows]
    defaults = [(row["provider"], row["model"]) for row in rows if row.get("is_default")]

    # 1. Step down every default the file does not name, so the unique "one default per
    #    provider" index never sees two defaults while the upsert moves one.
    stepped_down = {
        (r.provider, r.model)
        for r in connection.execute(
            t.update()
            .where(t.c.is_default, sa.tuple_(t.c.provider, t.c.model).not_in(defaults))
            .values(is_default=False, updated_at=sa.func.now())
            .returning(t.c.provider, t.c.model)
        )
    }
    # 2. Upsert; rows already equal to the file are left alone (updated_at keeps its meaning).
    inserted: set[tuple[str, str]] = set()
    updated = stepped_down & set(keys)
    for row in rows:
        base = insert(t).values(**row)
        changing = [c for c in row if c not in _KEY]
        upsert: Any = base.on_conflict_do_update(
            index_elements=list(_KEY),
            set_={**{c: base.excluded[c] for c in changing}, "updated_at": sa.func.now()},
            where=sa.or_(*(t.c[c].is_distinct_from(base.excluded[c]) for c in changing)),
        ).returning(sa.literal_column("xmax = 0").label("inserted"))
        result = connection.execute(upsert).first()
        if result is not None:
            (inserted if result.inserted else updated).add((row["provider"], row["model"]))
    # 3. Models that left the file are deprecated, not deleted: old runs still name them.
    retired = connection.execute(
        t.update()
        .where(t.c.deprecated_at.is_(None), sa.tuple_(t.c.provider, t.c.model).not_in(keys))
        .values(deprecated_at=sa.func.now(), is_default=False, updated_at=sa.func.now())
    ).rowcount
    return SyncReport(
        inserted=len(inserted),
        updated=len(updated),
        unchanged=len(rows) - len(inserted) - len(updated),
        deprecated=int(retired or 0),
    )
