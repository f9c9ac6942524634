"""Pure helpers of switchboard.db: URLs, months, redaction, migrations layout."""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime, timedelta, timezone

import pytest
from alembic.script import ScriptDirectory

from switchboard.db import migrate
from switchboard.db.audit import REDACTED, is_secret_key, redact
from switchboard.db.lookups import hash_api_token
from switchboard.db.session import create_async_engine, normalize_url
from switchboard.db.usage import month_start


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u:p@h:5432/d",
        "postgresql+psycopg2://u:p@h/d",
        "postgresql+psycopg://u:p@h/d",
    ],
)
def test_urls_always_use_psycopg3(url: str) -> None:
    assert normalize_url(url).drivername == "postgresql+psycopg"


def test_non_postgres_urls_are_refused() -> None:
    with pytest.raises(ValueError):
        normalize_url("sqlite:///x.db")


def test_month_start() -> None:
    assert month_start(date(2026, 2, 28)) == date(2026, 2, 1)
    # 23:30 on Jan 31 in UTC-3 is already February in UTC.
    assert month_start(datetime(2026, 1, 31, 23, 30, tzinfo=timezone(timedelta(hours=-3)))) == date(2026, 2, 1)
    assert month_start(datetime(2026, 3, 5, tzinfo=UTC)) == date(2026, 3, 1)
    assert month_start().day == 1


@pytest.mark.parametrize(
    "key",
    ["api_key", "apiKey", "x-api-key", "authorization", "openai_key", "client_secret", "access_token", "password"],
)
def test_secret_keys_are_recognized(key: str) -> None:
    assert is_secret_key(key)


@pytest.mark.parametrize("key", ["token_prefix", "tokens_in", "key_id", "last4", "provider", "monkey"])
def test_ordinary_keys_are_kept(key: str) -> None:
    assert not is_secret_key(key)


def test_redact_is_deep_and_keeps_the_rest() -> None:
    org = uuid.uuid4()
    details = {
        "provider": "anthropic",
        "api_key": "sk-ant-123",
        "nested": {"headers": {"Authorization": "Bearer x", "x-request-id": "r1"}},
        "items": [{"client_secret": "s"}, b"raw"],
        "org": org,
    }
    assert redact(details) == {
        "provider": "anthropic",
        "api_key": REDACTED,
        "nested": {"headers": {"Authorization": REDACTED, "x-request-id": "r1"}},
        "items": [{"client_secret": REDACTED}, REDACTED],
        "org": str(org),
    }


def test_api_token_hash_is_sha256() -> None:
    assert len(hash_api_token("sbk_abc")) == 32
    assert hash_api_token("sbk_abc") == hash_api_token("sbk_abc") != hash_api_token("sbk_abd")


def test_migrations_form_one_linear_history_without_an_ini_file() -> None:
    config = migrate.alembic_config("postgresql://u:p%40ss@h/d")
    assert config.config_file_name is None
    # The URL travels as an attribute, so a %-encoded password is not mangled by ini interpolation.
    assert "p%40ss" in config.attributes["url"]
    script = ScriptDirectory.from_config(config)
    assert len(script.get_heads()) == 1
    revisions = [r.revision for r in script.walk_revisions()]
    assert revisions[-1] == "0001" and migrate.head_revision() == revisions[0]


def test_a_services_pool_holds_at_most_twice_its_size_unless_it_says_otherwise() -> None:
    """docs/deploy.md counts connections per pod from the pool sizes: SQLAlchemy's fixed default
    overflow of 10, whatever the pool, made those counts wrong."""
    url = "postgresql://app@db.invalid/switchboard"
    default = create_async_engine(url, pool_size=7)
    bounded = create_async_engine(url, pool_size=7, max_overflow=0)
    try:
        assert (default.pool.size(), default.pool._max_overflow) == (7, 7)  # type: ignore[attr-defined]
        assert bounded.pool._max_overflow == 0  # type: ignore[attr-defined]
    finally:
        default.sync_engine.dispose()
        bounded.sync_engine.dispose()
