"""Find or start a real Kafka broker and PostgreSQL for the tests.

Order (SPEC §12): explicit environment variables; else a local stack that
already answers (``make up`` wrote ``var/stack.env``); else testcontainers when
a Docker engine answers; else the same launcher ``make up`` uses.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import make_url

REPO_ROOT = Path(__file__).resolve().parents[2]
STACK_ENV = REPO_ROOT / "var" / "stack.env"
STACK_SCRIPT = REPO_ROOT / "scripts" / "stack" / "stack.sh"


@dataclass(frozen=True)
class SaslListener:
    """The local broker's SASL/PLAIN listener (scripts/stack/kafka.sh): where and who."""

    bootstrap_servers: str
    username: str
    password: str


@dataclass(frozen=True)
class StackEndpoints:
    kafka_bootstrap_servers: str
    database_url: str  # application role: subject to row-level security
    database_owner_url: str  # owner role: migrations, test setup
    source: str  # "environment" | "local-stack" | "testcontainers" | "launcher"
    # None on a broker started without it (testcontainers, an external one).
    kafka_sasl: SaslListener | None = None


def _read_env_file(path: Path) -> dict[str, str]:
    values: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            values[key.strip()] = value.strip()
    return values


def _answers(host_port: str) -> bool:
    host, _, port = host_port.split(",")[0].rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=1):
            return True
    except OSError:
        return False


def _database_answers(url: str) -> bool:
    parsed = make_url(url)
    return _answers(f"{parsed.host or '127.0.0.1'}:{parsed.port or 5432}")


def _from_mapping(values: dict[str, str], source: str) -> StackEndpoints:
    return StackEndpoints(
        kafka_bootstrap_servers=values["KAFKA_BOOTSTRAP_SERVERS"],
        database_url=values["DATABASE_URL"],
        database_owner_url=values.get("DATABASE_OWNER_URL", values["DATABASE_URL"]),
        source=source,
        kafka_sasl=(
            SaslListener(
                values["SWITCHBOARD_KAFKA_SASL_BOOTSTRAP"],
                values["SWITCHBOARD_KAFKA_SASL_USERNAME"],
                values["SWITCHBOARD_KAFKA_SASL_PASSWORD"],
            )
            if "SWITCHBOARD_KAFKA_SASL_BOOTSTRAP" in values
            else None
        ),
    )


def _docker_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _testcontainers() -> tuple[StackEndpoints, list[object]]:  # pragma: no cover - needs Docker
    from testcontainers.kafka import KafkaContainer
    from testcontainers.postgres import PostgresContainer

    kafka = KafkaContainer("apache/kafka:4.1.1").with_kraft()
    postgres = PostgresContainer("postgres:16", driver="psycopg")
    kafka.start()
    postgres.start()
    owner_url = postgres.get_connection_url()
    import sqlalchemy

    engine = sqlalchemy.create_engine(owner_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.exec_driver_sql("CREATE ROLE switchboard_app LOGIN PASSWORD 'switchboard_app' NOSUPERUSER NOBYPASSRLS")
        conn.exec_driver_sql(f"GRANT CONNECT ON DATABASE {make_url(owner_url).database} TO switchboard_app")
        conn.exec_driver_sql("GRANT USAGE ON SCHEMA public TO switchboard_app")
    engine.dispose()
    app_url = make_url(owner_url).set(username="switchboard_app", password="switchboard_app")
    endpoints = StackEndpoints(
        kafka_bootstrap_servers=kafka.get_bootstrap_server(),
        database_url=app_url.render_as_string(hide_password=False),
        database_owner_url=owner_url,
        source="testcontainers",
    )
    return endpoints, [kafka, postgres]


def acquire_stack() -> tuple[StackEndpoints, list[object]]:
    """Return endpoints and the containers to stop at the end (empty unless testcontainers)."""
    if os.environ.get("KAFKA_BOOTSTRAP_SERVERS") and os.environ.get("DATABASE_URL"):
        return _from_mapping(dict(os.environ), "environment"), []
    if STACK_ENV.exists():
        values = _read_env_file(STACK_ENV)
        if _answers(values["KAFKA_BOOTSTRAP_SERVERS"]) and _database_answers(values["DATABASE_URL"]):
            return _from_mapping(values, "local-stack"), []
    if _docker_answers():
        return _testcontainers()
    subprocess.run(["bash", str(STACK_SCRIPT), "up"], check=True, cwd=REPO_ROOT)
    return _from_mapping(_read_env_file(STACK_ENV), "launcher"), []
