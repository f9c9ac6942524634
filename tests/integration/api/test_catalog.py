"""The model catalog: seeded from switchboard/catalog/models.yaml, readable by every role, re-syncable."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy import Connection, text
from sqlalchemy.orm import Session

from services.api.app import create_app
from services.api.catalog import service as catalog_service
from services.api.settings import ApiSettings
from switchboard.catalog import CATALOG_FILE, CatalogError, load_catalog, parse_catalog, sync_catalog
from switchboard.db.enums import Role
from switchboard.db.session import create_engine
from tests.support.api import OrgHandle
from tests.support.stack import StackEndpoints

pytestmark = pytest.mark.integration

# The nine models of [004 §2.2], plus the built-in demo model.
SEED_MODELS = {
    ("anthropic", "claude-opus-4-7"),
    ("anthropic", "claude-sonnet-4-6"),
    ("anthropic", "claude-haiku-4-5"),
    ("openai", "gpt-5"),
    ("openai", "gpt-5-mini"),
    ("openai", "gpt-4o"),
    ("google", "gemini-2.5-pro"),
    ("google", "gemini-2.5-flash"),
    ("google", "gemini-3.5-flash-lite"),
}


@pytest.fixture
async def client(api_settings: ApiSettings) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(api_settings.model_copy(update={"outbox_relay": False}))
    transport = httpx.ASGITransport(app=app)
    async with app.router.lifespan_context(app), httpx.AsyncClient(transport=transport, base_url="http://t") as http:
        yield http


@pytest.fixture
def owner_connection(stack: StackEndpoints) -> Iterator[Connection]:
    """The owner role (the only writer of ai_models) inside a transaction that is always rolled back."""
    engine = create_engine(stack.database_owner_url, pool_size=1)
    try:
        with engine.connect() as conn:
            transaction = conn.begin()
            try:
                yield conn
            finally:
                transaction.rollback()
    finally:
        engine.dispose()


def _models(conn: Connection) -> dict[tuple[str, str], dict[str, Any]]:
    rows = conn.execute(text("SELECT * FROM ai_models")).mappings()
    return {(r["provider"], r["model"]): dict(r) for r in rows}


# --------------------------------------------------------------------------- endpoints


async def test_providers_are_listed_for_any_role(client: httpx.AsyncClient, org: OrgHandle) -> None:
    response = await client.get("/api/v1/providers", headers=org.headers(Role.VIEWER))
    assert response.status_code == 200, response.text
    providers = {p["provider"]: p for p in response.json()["data"]}
    assert list(providers) == ["anthropic", "openai", "google", "demo"]
    for name, default in (("anthropic", "claude-sonnet-4-6"), ("openai", "gpt-5-mini"), ("google", "gemini-2.5-flash")):
        assert providers[name]["models_count"] == 3 and providers[name]["default_model"] == default
        assert providers[name]["accepts_credentials"] is True
    assert providers["demo"]["accepts_credentials"] is False and providers["demo"]["default_model"] == "demo"
    assert providers["anthropic"]["display_name"] == "Anthropic"


async def test_models_carry_prices_context_window_and_the_default(client: httpx.AsyncClient, org: OrgHandle) -> None:
    response = await client.get("/api/v1/models", headers=org.headers(Role.VIEWER))
    assert response.status_code == 200, response.text
    models = {(m["provider"], m["model"]): m for m in response.json()["data"]}
    assert set(models) >= SEED_MODELS and ("demo", "demo") in models
    sonnet = models[("anthropic", "claude-sonnet-4-6")]
    assert sonnet["input_price_micros_per_mtok"] == 3_000_000 and sonnet["output_price_micros_per_mtok"] == 15_000_000
    assert sonnet["is_default"] is True and sonnet["context_window"] == 200_000
    assert sonnet["display_name"] == "Claude Sonnet 4.6" and sonnet["deprecated_at"] is None
    # Prompt-cache prices: reads a tenth of the input price, five-minute writes 1.25 times it.
    assert (sonnet["cache_read_price_micros_per_mtok"], sonnet["cache_write_price_micros_per_mtok"]) == (
        300_000,
        3_750_000,
    )
    gpt5 = models[("openai", "gpt-5")]
    assert (gpt5["cache_read_price_micros_per_mtok"], gpt5["cache_write_price_micros_per_mtok"]) == (125_000, None)
    # No price in the catalog means unknown (the runner records cost 0), never a made-up number.
    lite = models[("google", "gemini-3.5-flash-lite")]
    assert lite["input_price_micros_per_mtok"] is None and lite["output_price_micros_per_mtok"] is None
    assert lite["price_basis"] == "unknown" and lite["context_window"] == 1_048_576
    assert sum(m["is_default"] for m in models.values() if m["provider"] == "openai") == 1
    reasoning = {key for key, m in models.items() if m["reasoning"]}
    assert reasoning == {
        ("openai", "gpt-5"),
        ("openai", "gpt-5-mini"),
        ("google", "gemini-2.5-pro"),
        ("google", "gemini-2.5-flash"),
    }


async def test_models_filter_by_provider(client: httpx.AsyncClient, org: OrgHandle) -> None:
    headers = org.headers(Role.VIEWER)
    by_query = (await client.get("/api/v1/models", params={"provider": "openai"}, headers=headers)).json()["data"]
    assert {m["model"] for m in by_query} == {"gpt-5", "gpt-5-mini", "gpt-4o"}
    assert by_query[0]["is_default"] is True  # the default first
    by_path = (await client.get("/api/v1/providers/openai/models", headers=headers)).json()["data"]
    assert by_path == by_query
    unknown = await client.get("/api/v1/models", params={"provider": "mistral"}, headers=headers)
    assert unknown.status_code == 422 and unknown.json()["error"]["code"] == "validation_error"
    assert (await client.get("/api/v1/providers/mistral/models", headers=headers)).status_code == 422


async def test_the_catalog_needs_a_token(client: httpx.AsyncClient) -> None:
    for path in ("/api/v1/providers", "/api/v1/models", "/api/v1/providers/anthropic/models"):
        response = await client.get(path)
        assert response.status_code == 401 and response.json()["error"]["code"] == "unauthorized", path


# --------------------------------------------------------------------------- YAML -> table


def test_the_table_is_what_the_yaml_file_says(owner_connection: Connection) -> None:
    """Migration 0004 synced the packaged YAML: every column of every row matches it."""
    table = _models(owner_connection)
    for row in load_catalog().rows():
        stored = table[(row["provider"], row["model"])]
        assert {k: stored[k] for k in row} == row, "models.yaml changed: add a migration that calls sync_catalog"
    assert {k for k, v in table.items() if v["deprecated_at"] is None} == {
        (r["provider"], r["model"]) for r in load_catalog().rows()
    }
    assert set(table) >= SEED_MODELS
    assert sync_catalog(owner_connection).unchanged == len(load_catalog().rows())  # nothing to do


def test_a_yaml_edit_plus_sync_changes_prices_moves_the_default_and_retires_models(
    owner_connection: Connection,
) -> None:
    original = CATALOG_FILE.read_text(encoding="utf-8")
    edited = (
        original.replace(  # a price change
            'input_usd_per_mtok: "1.00"\n        output_usd_per_mtok: "5.00"',
            'input_usd_per_mtok: "0.80"\n        output_usd_per_mtok: "4.00"\n        default: true',
        )
        .replace("        price_basis: family\n        default: true\n", "        price_basis: family\n")  # sonnet
        .replace(  # opus leaves the file; a new model arrives
            "      - model: claude-opus-4-7\n        display_name: Claude Opus 4.7\n",
            "      - model: claude-opus-5\n        display_name: Claude Opus 5\n",
        )
    )
    catalog = parse_catalog(edited)
    report = sync_catalog(owner_connection, catalog)
    assert (report.inserted, report.deprecated) == (1, 1)
    assert report.updated == 2  # haiku (price, default) and sonnet (no longer default)
    table = _models(owner_connection)
    haiku, sonnet = table[("anthropic", "claude-haiku-4-5")], table[("anthropic", "claude-sonnet-4-6")]
    assert haiku["is_default"] and haiku["input_price_micros_per_mtok"] == 800_000
    assert not sonnet["is_default"]
    assert table[("anthropic", "claude-opus-4-7")]["deprecated_at"] is not None  # kept for old runs' prices
    assert table[("anthropic", "claude-opus-5")]["deprecated_at"] is None

    # The API hides what is deprecated unless asked.
    with Session(bind=owner_connection) as session:
        offered = {m.model for m in catalog_service.models(session, provider=None, include_deprecated=False)}
        everything = {m.model for m in catalog_service.models(session, provider=None, include_deprecated=True)}
        assert "claude-opus-4-7" not in offered and "claude-opus-4-7" in everything
        anthropic = next(p for p in catalog_service.providers(session) if p.provider == "anthropic")
        assert anthropic.default_model == "claude-haiku-4-5" and anthropic.models_count == 3

    # Back to the packaged file: opus returns, the default moves back.
    back = sync_catalog(owner_connection)
    assert back.deprecated == 1  # opus-5 left the file
    table = _models(owner_connection)
    assert table[("anthropic", "claude-opus-4-7")]["deprecated_at"] is None
    assert table[("anthropic", "claude-sonnet-4-6")]["is_default"]
    assert table[("anthropic", "claude-haiku-4-5")]["input_price_micros_per_mtok"] == 1_000_000


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (("        default: true\n", "        default: false\n", 1), "exactly one default"),
        (('input_usd_per_mtok: "5.00"', 'input_usd_per_mtok: "5.0000001"', 1), "6 decimals"),
        (('input_usd_per_mtok: "5.00"', 'input_usd_per_mtok: "-1"', 1), "greater than or equal"),
        (("price_basis: family", "price_basis: unknown", 1), "price_basis 'unknown'"),
        (("  anthropic:\n", "  mistral:\n", 1), "mistral"),
        (("        description: Cheap and fast.\n", "        colour: blue\n", 1), "colour"),
        (("schema_version: 1", "schema_version: 2", 1), "schema_version"),
        (("      - model: claude-haiku-4-5", "      - model: claude-opus-4-7", 1), "unique"),
    ],
)
def test_a_broken_catalog_file_is_refused(change: tuple[str, str, int], problem: str) -> None:
    old, new, count = change
    original = CATALOG_FILE.read_text(encoding="utf-8")
    assert old in original
    with pytest.raises(CatalogError, match=problem):
        parse_catalog(original.replace(old, new, count))
