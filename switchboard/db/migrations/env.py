"""Alembic environment for Switchboard (configured in code by ``switchboard.db.migrate``).

After the migrations, in the same transaction:

1. the application role gets DML on every table and sequence and EXECUTE on
   the lookup functions, then loses UPDATE/DELETE on ``audit_log``
   (append-only) and writes to ``ai_models`` and ``alembic_version`` (written
   by migrations only) - all skipped with a warning when the role does not exist;
2. when the database is now at head, row-level security is verified against
   ``switchboard.db.tenancy.TENANT_TABLES``: a tenant table left without its
   policy fails the upgrade instead of shipping a cross-tenant leak.

Migrations must run as the owner role. Run as the application role they would
make it the owner of every table, able to switch row-level security off.
"""

from __future__ import annotations

import logging
import os

from alembic import context
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, text
from sqlalchemy.pool import NullPool

from switchboard.db.base import Base
from switchboard.db.session import create_engine
from switchboard.db.tenancy import rls_problems

log = logging.getLogger("switchboard.db.migrations")

DEFAULT_APP_ROLE = "switchboard_app"

# Privileges taken back from the application role after the blanket grant, and why:
# the audit log is append-only; the model catalog and the migration bookkeeping are
# written by migrations only; the dispatch rate counter is reached only through the
# SECURITY DEFINER function admit_org_runs (revision 0008), never directly.
READ_MOSTLY_TABLES: dict[str, str] = {
    "audit_log": "UPDATE, DELETE, TRUNCATE",
    "ai_models": "INSERT, UPDATE, DELETE, TRUNCATE",
    "alembic_version": "INSERT, UPDATE, DELETE, TRUNCATE",
    "dispatch_rate_windows": "SELECT, INSERT, UPDATE, DELETE, TRUNCATE",
}

config = context.config
target_metadata = Base.metadata


def _url() -> str:
    url = config.attributes.get("url") or config.get_main_option("sqlalchemy.url")
    if url:
        return str(url)
    from switchboard.settings import DatabaseSettings

    return DatabaseSettings().migration_url


def _app_role() -> str:
    return str(config.attributes.get("app_role") or os.environ.get("DATABASE_APP_ROLE") or DEFAULT_APP_ROLE)


def _quote_role(connection: Connection, role: str) -> str:
    return connection.dialect.identifier_preparer.quote_identifier(role)


def grant_app_role(connection: Connection, role: str) -> None:
    """Give the application role exactly what it needs, if it exists."""
    exists = connection.execute(text("SELECT 1 FROM pg_roles WHERE rolname = :r"), {"r": role}).first()
    if exists is None:
        log.warning("application role %r does not exist: grants skipped", role)
        return
    if connection.execute(text("SELECT current_user")).scalar_one() == role:
        raise RuntimeError(
            f"migrations are running as the application role {role!r}; run them as the owner "
            "role (DATABASE_OWNER_URL) so that the application cannot disable row-level security"
        )
    q = _quote_role(connection, role)
    if not connection.execute(text("SELECT has_schema_privilege(:r, 'public', 'USAGE')"), {"r": role}).scalar_one():
        connection.execute(text(f"GRANT USAGE ON SCHEMA public TO {q}"))
    statements = [
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {q}",
        f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO {q}",
        f"GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA public TO {q}",
    ]
    for table, privileges in READ_MOSTLY_TABLES.items():
        if connection.execute(text("SELECT to_regclass(:t)"), {"t": f"public.{table}"}).scalar_one():
            statements.append(f"REVOKE {privileges} ON {table} FROM {q}")
    for statement in statements:
        connection.execute(text(statement))
    log.info("granted application role %r", role)


def _at_head(connection: Connection) -> bool:
    heads = set(ScriptDirectory.from_config(config).get_heads())
    current = set(context.get_context().get_current_heads())
    return bool(heads) and current == heads


def run_migrations_offline() -> None:
    """``--sql`` mode: print the DDL instead of running it (grants are not emitted)."""
    context.configure(
        url=_url(),
        target_metadata=target_metadata,
        literal_binds=True,
        dialect_opts={"paramstyle": "named"},
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    engine = create_engine(_url(), poolclass=NullPool)
    try:
        with engine.connect() as connection:
            context.configure(
                connection=connection,
                target_metadata=target_metadata,
                compare_type=True,
            )
            with context.begin_transaction():
                context.run_migrations()
                grant_app_role(connection, _app_role())
                if _at_head(connection):
                    problems = rls_problems(connection)
                    if problems:
                        raise RuntimeError(
                            "row-level security does not match switchboard.db.tenancy: " + "; ".join(problems)
                        )
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
