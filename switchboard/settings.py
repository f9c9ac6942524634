"""Settings every service shares: runtime mode, Kafka, PostgreSQL.

Each service composes these into its own settings class with its own env
prefix (``API_``, ``DISPATCHER_``...). Values come from the environment, and
locally from ``var/stack.env`` written by ``make up``.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any, Self
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from switchboard.egress import EgressPolicy

REPO_ROOT = Path(__file__).resolve().parent.parent
STACK_ENV_FILE = REPO_ROOT / "var" / "stack.env"

# Values that mean "nobody set this": refused when running in production.
PLACEHOLDER_SECRETS = frozenset({"", "change-me", "changeme", "secret", "dev", "development", "test", "password"})


class Environment(StrEnum):
    DEVELOPMENT = "development"
    TEST = "test"
    PRODUCTION = "production"


def stack_env_files() -> tuple[Path, ...]:
    """The local stack's file, when present; real environment variables always win."""
    return (STACK_ENV_FILE,) if STACK_ENV_FILE.exists() else ()


class SharedSettings(BaseSettings):
    """Base for every settings class: reads the environment, then ``var/stack.env``."""

    model_config = SettingsConfigDict(env_file=stack_env_files(), extra="ignore", frozen=True)


class RuntimeSettings(SharedSettings):
    """How this process runs: environment and logging."""

    model_config = SettingsConfigDict(
        env_prefix="SWITCHBOARD_", env_file=stack_env_files(), extra="ignore", frozen=True
    )

    env: Environment = Environment.DEVELOPMENT
    log_level: str = "INFO"
    log_json: bool = True
    # Run services on uvloop's event loop when it is installed (switchboard.lifecycle).
    uvloop: bool = True

    @property
    def is_production(self) -> bool:
        return self.env is Environment.PRODUCTION


class KafkaSecurityProtocol(StrEnum):
    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"

    @property
    def uses_sasl(self) -> bool:
        return self in (KafkaSecurityProtocol.SASL_PLAINTEXT, KafkaSecurityProtocol.SASL_SSL)

    @property
    def uses_tls(self) -> bool:
        return self in (KafkaSecurityProtocol.SSL, KafkaSecurityProtocol.SASL_SSL)


class KafkaSaslMechanism(StrEnum):
    PLAIN = "PLAIN"
    SCRAM_SHA_256 = "SCRAM-SHA-256"
    SCRAM_SHA_512 = "SCRAM-SHA-512"


class KafkaSettings(SharedSettings):
    """How to reach the broker and the (optional) schema registry."""

    model_config = SettingsConfigDict(
        env_prefix="KAFKA_", env_file=stack_env_files(), extra="ignore", frozen=True, hide_input_in_errors=True
    )

    bootstrap_servers: str = "127.0.0.1:9092"
    client_id: str = "switchboard"
    # Prepended to every topic name; tests use it to give each test its own topics.
    topic_prefix: str = ""
    # Confluent-compatible registry; without it schema ids come from schemas/catalog.json.
    schema_registry_url: str | None = None
    # HTTP basic auth of the registry (Confluent Cloud: the API key and secret), never in the
    # URL; and the CA bundle of its TLS certificate when the system's does not hold it.
    schema_registry_username: str | None = None
    schema_registry_password: SecretStr | None = None
    schema_registry_cafile: Path | None = None
    # Partitions of every conversation-scoped topic (they must all share one count).
    conversation_partitions: int = Field(default=6, ge=1, le=1024)
    replication_factor: int = Field(default=1, ge=1)
    # How clients authenticate to the broker (docs/deploy.md, "Kafka security"): plaintext for
    # the local stack; TLS and/or SASL for a managed or secured cluster.
    security_protocol: KafkaSecurityProtocol = KafkaSecurityProtocol.PLAINTEXT
    sasl_mechanism: KafkaSaslMechanism = KafkaSaslMechanism.PLAIN
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    # TLS: the CA bundle that signed the brokers' certificates (default: the system's), and a
    # client certificate and key for brokers that authenticate clients by certificate (mTLS).
    ssl_cafile: Path | None = None
    ssl_certfile: Path | None = None
    ssl_keyfile: Path | None = None

    @field_validator(
        "schema_registry_url",
        "schema_registry_username",
        "schema_registry_password",
        "schema_registry_cafile",
        "sasl_username",
        "sasl_password",
        "ssl_cafile",
        "ssl_certfile",
        "ssl_keyfile",
        mode="before",
    )
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        # config.env lists every setting; an empty one means "not set", never the path ".".
        return None if value == "" else value

    @model_validator(mode="after")
    def _security_is_complete(self) -> Self:
        if self.security_protocol.uses_sasl and (not self.sasl_username or self.sasl_password is None):
            raise ValueError(
                f"KAFKA_SECURITY_PROTOCOL={self.security_protocol.value} "
                "needs KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD"
            )
        if (self.schema_registry_username is None) != (self.schema_registry_password is None):
            raise ValueError("KAFKA_SCHEMA_REGISTRY_USERNAME and KAFKA_SCHEMA_REGISTRY_PASSWORD go together")
        if self.schema_registry_url and urlsplit(self.schema_registry_url).password is not None:
            # A URL is logged and shown; a password in it would be too.
            raise ValueError(
                "KAFKA_SCHEMA_REGISTRY_URL must not embed credentials: "
                "set KAFKA_SCHEMA_REGISTRY_USERNAME and KAFKA_SCHEMA_REGISTRY_PASSWORD"
            )
        if (self.ssl_certfile is None) != (self.ssl_keyfile is None):
            raise ValueError("KAFKA_SSL_CERTFILE and KAFKA_SSL_KEYFILE go together (a client certificate and its key)")
        return self

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context of every connection to the broker; None without TLS."""
        if not self.security_protocol.uses_tls:
            return None
        context = ssl.create_default_context(cafile=str(self.ssl_cafile) if self.ssl_cafile else None)
        if self.ssl_certfile is not None and self.ssl_keyfile is not None:
            context.load_cert_chain(certfile=str(self.ssl_certfile), keyfile=str(self.ssl_keyfile))
        return context

    def schema_registry_auth(self) -> tuple[str, str] | None:
        """Basic auth of the schema registry, when one is configured."""
        if self.schema_registry_username is None or self.schema_registry_password is None:
            return None
        return self.schema_registry_username, self.schema_registry_password.get_secret_value()

    def client_options(self) -> dict[str, Any]:
        """What every aiokafka client (producer, consumer, admin) is built with: where the broker is
        and how to authenticate. One place, so no client is ever left on plaintext by mistake."""
        options: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap_servers,
            "security_protocol": self.security_protocol.value,
        }
        context = self.ssl_context()
        if context is not None:
            options["ssl_context"] = context
        if self.security_protocol.uses_sasl:
            assert self.sasl_password is not None  # checked by the validator
            options["sasl_mechanism"] = self.sasl_mechanism.value
            options["sasl_plain_username"] = self.sasl_username
            options["sasl_plain_password"] = self.sasl_password.get_secret_value()
        return options

    def consumer_group(self, name: str) -> str:
        """A consumer group scoped like the topics: stacks that share a broker under different
        prefixes (tests, the demo, an environment per prefix) never share a group, so one
        stack's members never join — and rebalance — another's."""
        return f"{self.topic_prefix}{name}"


# psycopg's own default: a statement is prepared on the server after this many runs on a connection.
PSYCOPG_PREPARE_THRESHOLD = 5


class DatabaseSettings(SharedSettings):
    """PostgreSQL: the application role for services, the owner role for migrations."""

    model_config = SettingsConfigDict(env_prefix="DATABASE_", env_file=stack_env_files(), extra="ignore", frozen=True)

    url: SecretStr = SecretStr("postgresql+psycopg://switchboard_app@127.0.0.1:55432/switchboard")
    owner_url: SecretStr | None = None
    # Connections kept open per process; size it to the concurrency one process serves.
    pool_size: int = Field(default=10, ge=1)
    # psycopg prepares a statement on the server once a connection ran it 5 times. A transaction
    # pooler hands the next statement to any server session, so it must track prepared statements
    # (PgBouncer >= 1.21 with max_prepared_statements > 0); behind one that does not, false turns
    # them off in every connection the services open (docs/deploy.md, "Database connections").
    prepared_statements: bool = True

    @property
    def prepare_threshold(self) -> int | None:
        """psycopg's ``prepare_threshold`` for our connections: its default, or None (never prepare)."""
        return PSYCOPG_PREPARE_THRESHOLD if self.prepared_statements else None

    @property
    def migration_url(self) -> str:
        """Migrations run as the owner role; without one configured, as the app role."""
        return (self.owner_url or self.url).get_secret_value()


class EgressSettings(SharedSettings):
    """Which addresses tenant-set URLs may reach (``switchboard.egress``; docs/security.md)."""

    model_config = SettingsConfigDict(
        env_prefix="SWITCHBOARD_EGRESS_", env_file=stack_env_files(), extra="ignore", frozen=True
    )

    # Refuse loopback and private networks too (link-local, multicast and reserved always are).
    deny_private: bool = False
    # Comma-separated CIDRs tenants may reach even when private (e.g. the in-cluster WAHA's).
    allowed_cidrs: str = ""

    def policy(self, *, trusted_urls: tuple[str, ...] = ()) -> EgressPolicy:
        return EgressPolicy.build(
            deny_private=self.deny_private, allowed_cidrs=self.allowed_cidrs.split(","), trusted_urls=trusted_urls
        )

    @model_validator(mode="after")
    def _cidrs_parse(self) -> Self:
        try:
            self.policy()
        except ValueError as exc:
            raise ValueError(f"SWITCHBOARD_EGRESS_ALLOWED_CIDRS: {exc}") from exc
        return self


def require_real_secret(name: str, value: SecretStr | None, runtime: RuntimeSettings) -> None:
    """Refuse placeholder secrets in production; they are fine on a laptop."""
    if not runtime.is_production:
        return
    if value is None or value.get_secret_value().strip().lower() in PLACEHOLDER_SECRETS:
        raise ValueError(f"{name} must be set to a real secret when SWITCHBOARD_ENV=production")


def _libpq_authenticates_otherwise(query: Mapping[str, Any]) -> bool:
    """Whether the URL gives libpq a way in without a password in it (docs/deploy.md, Secrets)."""
    return "sslcert" in query or "passfile" in query


class ServiceSettings(SharedSettings):
    """Base of each service's settings: the shared parts plus a health/metrics port."""

    runtime: RuntimeSettings = Field(default_factory=RuntimeSettings)
    kafka: KafkaSettings = Field(default_factory=KafkaSettings)
    database: DatabaseSettings = Field(default_factory=DatabaseSettings)
    # Port of the /healthz, /readyz and /metrics endpoints (0 = pick a free port).
    health_port: int = Field(default=0, ge=0, le=65535)

    @model_validator(mode="after")
    def _no_placeholder_database_password(self) -> Self:
        """In production a password in ``DATABASE_URL`` must be a real one. A URL without one is
        accepted only when it gives libpq another way in — a client certificate (``sslcert=``) or
        a password file (``passfile=``) — and refused otherwise: most often it is the local
        default deployed by mistake. (Named in the URL, not read from libpq's environment: every
        variable the code reads is one the manifests must set, scripts/deploy/generate.py.)"""
        if self.runtime.is_production:
            from sqlalchemy.engine import make_url

            url = make_url(self.database.url.get_secret_value())
            if url.password is None and _libpq_authenticates_otherwise(url.query):
                return self
            if url.password is None:
                raise ValueError(
                    "DATABASE_URL has no password: set one, or name a client certificate (sslcert=) or a"
                    " password file (passfile=) in it, when SWITCHBOARD_ENV=production"
                )
            require_real_secret("DATABASE_URL password", SecretStr(url.password), self.runtime)
        return self
