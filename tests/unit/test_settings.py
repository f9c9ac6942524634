"""Settings: env prefixes per service, and no placeholder secret in production."""

from __future__ import annotations

import pytest
from pydantic import SecretStr, ValidationError

from services.api.settings import ApiSettings
from services.dispatcher.settings import DispatcherSettings
from switchboard.settings import Environment, RuntimeSettings, require_real_secret


def test_each_service_reads_its_own_prefix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("API_PORT", "8123")
    monkeypatch.setenv("DISPATCHER_HEALTH_PORT", "9191")
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "broker:1234")
    assert ApiSettings().port == 8123
    dispatcher = DispatcherSettings()
    assert dispatcher.health_port == 9191
    assert dispatcher.kafka.bootstrap_servers == "broker:1234"


def test_production_refuses_a_placeholder_database_password(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWITCHBOARD_ENV", "production")
    monkeypatch.setenv("DATABASE_URL", "postgresql+psycopg://app:change-me@db/switchboard")
    with pytest.raises(ValidationError, match="real secret"):
        DispatcherSettings()


def test_production_accepts_a_real_password(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWITCHBOARD_ENV", "production")
    monkeypatch.setenv("DATABASE_URL", "postgresql+psycopg://app:9f8a7b6c5d4e3f2a@db/switchboard")
    assert DispatcherSettings().runtime.env is Environment.PRODUCTION


@pytest.mark.parametrize(
    ("url", "env", "accepted"),
    [
        ("postgresql+psycopg://app@db/switchboard", {}, False),  # the local default, deployed by mistake
        (
            "postgresql+psycopg://app@db/switchboard?sslmode=verify-full&sslcert=/tls/app.crt&sslkey=/tls/app.key",
            {},
            True,
        ),
        ("postgresql+psycopg://app@db/switchboard?passfile=/secrets/pgpass", {}, True),
    ],
)
def test_production_takes_a_url_without_password_only_when_libpq_has_another_way_in(
    monkeypatch: pytest.MonkeyPatch, url: str, env: dict[str, str], accepted: bool
) -> None:
    """A client certificate or a password file named in the URL is a real way in; a URL without
    either is most likely the local default."""
    monkeypatch.setenv("SWITCHBOARD_ENV", "production")
    monkeypatch.setenv("DATABASE_URL", url)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    if accepted:
        assert DispatcherSettings().runtime.env is Environment.PRODUCTION
    else:
        with pytest.raises(ValidationError, match="no password"):
            DispatcherSettings()


def test_development_tolerates_placeholders() -> None:
    require_real_secret("X", SecretStr("change-me"), RuntimeSettings(env=Environment.DEVELOPMENT))
    with pytest.raises(ValueError):
        require_real_secret("X", SecretStr("change-me"), RuntimeSettings(env=Environment.PRODUCTION))


@pytest.mark.parametrize(
    ("environment", "caller", "threshold"),
    [("true", None, 5), ("false", None, None), ("true", False, None), ("false", True, 5)],
)
def test_prepared_statements_off_reaches_the_connections_an_engine_opens(
    monkeypatch: pytest.MonkeyPatch, environment: str, caller: bool | None, threshold: int | None
) -> None:
    """Behind a pooler that cannot follow prepared statements, no connection of ours may prepare one
    (the API through a real PgBouncer: tests/integration/api/test_through_a_pooler.py). The caller's
    settings decide; without them (tools, migrations), the environment."""
    import psycopg

    from switchboard.db.session import create_engine

    seen: dict[str, object] = {}

    def connect(*args: object, **kwargs: object) -> None:
        seen.update(kwargs)
        raise ConnectionRefusedError("no database in a unit test")

    monkeypatch.setenv("DATABASE_PREPARED_STATEMENTS", environment)
    monkeypatch.setattr(psycopg, "connect", connect)
    engine = create_engine("postgresql+psycopg://app:secret@127.0.0.1:5432/db", prepared_statements=caller)
    with pytest.raises(Exception, match="no database in a unit test"):
        engine.connect()
    assert seen.get("prepare_threshold", 5) == threshold
