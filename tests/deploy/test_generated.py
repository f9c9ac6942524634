"""Generated deployment files are what the generator writes from the code today."""

from __future__ import annotations

import pytest

from scripts.deploy import generate


def test_generated_files_are_up_to_date() -> None:
    stale = [str(path.relative_to(generate.REPO_ROOT)) for path in generate.stale(generate.render_all())]
    assert stale == [], f"run `make manifests`: {stale}"


def test_every_cli_workload_is_declared() -> None:
    assert generate.workload_commands() == sorted(w.name for w in generate.WORKLOADS)


def test_settings_discovery_finds_the_known_classes() -> None:
    names = {f"{cls.__module__}:{cls.__qualname__}" for cls in generate.settings_classes()}
    assert {
        "switchboard.settings:RuntimeSettings",
        "switchboard.settings:KafkaSettings",
        "switchboard.settings:DatabaseSettings",
        "switchboard.crypto:EncryptionSettings",
        "services.api.settings:ApiSettings",
    } <= names
    raw = {s.name for s in generate.raw_env_reads()}
    assert {"SWITCHBOARD_SCHEMAS_DIR", "DATABASE_APP_ROLE"} <= raw


def test_secret_detection_by_type_and_by_name() -> None:
    secrets = {s.name for s in generate.all_settings() if s.secret}
    assert {"DATABASE_URL", "DATABASE_OWNER_URL", "SWITCHBOARD_ENCRYPTION_KEYS"} <= secrets
    assert generate.is_secret_name("API_WEBHOOK_SECRET")
    assert not generate.is_secret_name("RUNNER_MAX_OUTPUT_TOKENS")


def test_config_values_are_accepted_by_every_settings_class(monkeypatch: pytest.MonkeyPatch) -> None:
    """The generated ConfigMap parses: a value the code would refuse fails here, not in a pod."""
    config = generate.parse_env_file((generate.BASE / "config.env").read_text())
    for key, value in config.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("DATABASE_URL", "postgresql+psycopg://switchboard_app:s3cr3t-value@db:5432/switchboard")
    for cls in generate.settings_classes():
        cls()
