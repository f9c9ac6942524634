"""Run the Alembic migrations shipped inside this package, without an alembic.ini.

    python -m switchboard.db.migrate upgrade            # to every head, DATABASE_OWNER_URL
    python -m switchboard.db.migrate downgrade base     # the target is required
    python -m switchboard.db.migrate current
    python -m switchboard.db.migrate revision -m "add widgets"   # autogenerate, then edit

Migrations run as the owner role (``DatabaseSettings.migration_url``); at the
end of each run the migration environment grants the application role
(``DATABASE_APP_ROLE``, default ``switchboard_app``) the DML it needs.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.exc import OperationalError
from sqlalchemy.pool import NullPool

from switchboard.db.session import create_engine, normalize_url
from switchboard.observability.logging import get_logger

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"

log = get_logger(__name__)


def alembic_config(url: str, *, app_role: str | None = None) -> Config:
    """An Alembic config pointing at the packaged scripts, with the URL passed as an attribute
    (not an ini option, whose ``%`` interpolation would mangle encoded passwords)."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.attributes["url"] = normalize_url(url).render_as_string(hide_password=False)
    if app_role is not None:
        config.attributes["app_role"] = app_role
    return config


class DatabaseUnreachable(RuntimeError):
    """PostgreSQL did not accept a connection within the wait (``switchboard migrate --wait``)."""


def wait_for_database(url: str, wait_s: float, *, every_s: float = 2.0) -> None:
    """Return once PostgreSQL at ``url`` accepts a connection; :class:`DatabaseUnreachable` after
    ``wait_s``. A fresh cluster's migration Job starts with its database (CloudNativePG, compose):
    without waiting it failed its few tries before initdb finished, and every pod then waited on
    it for good (docs/deploy.md "Migrations")."""
    deadline = time.monotonic() + wait_s
    engine = create_engine(url, poolclass=NullPool, connect_args={"connect_timeout": max(1, int(every_s))})
    try:
        while True:
            try:
                with engine.connect() as conn:
                    conn.exec_driver_sql("SELECT 1")
                return
            except OperationalError as exc:
                if time.monotonic() >= deadline:
                    raise DatabaseUnreachable(f"PostgreSQL did not answer within {wait_s:.0f} s") from exc
                log.info("waiting for PostgreSQL", extra={"error_type": type(exc).__name__})
                time.sleep(every_s)
    finally:
        engine.dispose()


def upgrade(url: str, revision: str = "heads", *, app_role: str | None = None) -> None:
    """Migrate the database at ``url`` up to ``revision`` and grant the application role."""
    command.upgrade(alembic_config(url, app_role=app_role), revision)


def downgrade(url: str, revision: str = "base", *, app_role: str | None = None) -> None:
    """Migrate down to ``revision``; ``base`` drops every Switchboard object."""
    command.downgrade(alembic_config(url, app_role=app_role), revision)


def revision(url: str, message: str, *, autogenerate: bool = True) -> None:
    """Write a new revision script, diffed against the database at ``url`` (which must be at head).

    Review and edit the result: autogenerate knows nothing of row-level security,
    functions or data, and it cannot see expression indexes perfectly.
    """
    command.revision(alembic_config(url), message=message, autogenerate=autogenerate)


def head_revision() -> str | None:
    """The newest revision shipped with this code."""
    return ScriptDirectory.from_config(alembic_config("postgresql://localhost/x")).get_current_head()


def current_revision(url: str) -> str | None:
    """The revision the database is at (None when never migrated); readiness checks compare
    it with ``head_revision()``."""
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        engine.dispose()


def main(argv: list[str] | None = None) -> int:
    from switchboard.settings import DatabaseSettings

    parser = argparse.ArgumentParser(prog="python -m switchboard.db.migrate", description=__doc__)
    parser.add_argument("action", choices=["upgrade", "downgrade", "current", "heads", "revision"])
    parser.add_argument("revision", nargs="?", help="target (default: head / base)")
    parser.add_argument("--url", help="database URL (default: DATABASE_OWNER_URL or DATABASE_URL)")
    parser.add_argument("-m", "--message", help="message of a new revision")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s %(message)s")

    url = args.url or DatabaseSettings().migration_url
    if args.action == "upgrade":
        upgrade(url, args.revision or "heads")
    elif args.action == "downgrade":
        if not args.revision:
            parser.error("downgrade needs an explicit target revision (e.g. base)")
        downgrade(url, args.revision)
    elif args.action == "current":
        print(current_revision(url) or "base")
    elif args.action == "revision":
        if not args.message:
            parser.error("revision needs -m/--message")
        revision(url, args.message)
    else:
        print(head_revision())
    return 0


if __name__ == "__main__":
    sys.exit(main())
