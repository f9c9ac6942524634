"""Migrations: empty -> head -> base -> head, matching the models, granting the app role."""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Iterator

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection, insert, text
from sqlalchemy.orm import Session
from sqlalchemy.pool import NullPool

from switchboard.db import migrate
from switchboard.db.base import Base
from switchboard.db.lookups import LOOKUP_FUNCTIONS
from switchboard.db.models import ChannelSession
from switchboard.db.session import tenant_transaction
from switchboard.db.tenancy import TENANT_TABLES, rls_problems

from .conftest import PgServer, ScratchDatabase, scratch_database
from .factories import build_channel_sessions, create_org

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def empty_db(pg_server: PgServer) -> Iterator[ScratchDatabase]:
    with scratch_database(pg_server, migrate=False) as database:
        yield database


def _url(db: ScratchDatabase) -> str:
    return db.owner_url.render_as_string(hide_password=False)


def _tables(conn: Connection) -> set[str]:
    return set(
        conn.execute(
            text(
                "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
                " WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p', 'v', 'm', 'S')"
            )
        ).scalars()
    )


def _functions(conn: Connection) -> set[str]:
    return set(
        conn.execute(
            text(
                "SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace"
                " WHERE n.nspname = 'public'"
            )
        ).scalars()
    )


def _assert_at_head(db: ScratchDatabase) -> None:
    engine = db.engine(owner=True, poolclass=NullPool)
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        assert context.get_current_revision() == migrate.head_revision()
        assert compare_metadata(context, Base.metadata) == []
        tables = {t for t in _tables(conn) if not t.endswith("_seq")}
        assert tables == set(Base.metadata.tables) | {"alembic_version"}
        assert set(LOOKUP_FUNCTIONS) <= _functions(conn)
        assert rls_problems(conn) == []
        assert conn.execute(text("SELECT count(*) FROM ai_models")).scalar_one() > 0


def test_upgrade_downgrade_upgrade(empty_db: ScratchDatabase) -> None:
    url = _url(empty_db)
    assert migrate.current_revision(url) is None

    migrate.upgrade(url, app_role=empty_db.app_role)
    _assert_at_head(empty_db)

    migrate.downgrade(url, app_role=empty_db.app_role)
    assert migrate.current_revision(url) is None
    engine = empty_db.engine(owner=True, poolclass=NullPool)
    with engine.connect() as conn:
        assert _tables(conn) == {"alembic_version"}
        assert _functions(conn) == set()
        assert conn.execute(text("SELECT count(*) FROM pg_policies")).scalar_one() == 0

    migrate.upgrade(url, app_role=empty_db.app_role)
    _assert_at_head(empty_db)

    # Step by step works too: the catalog data migration is reversible on its own.
    migrate.downgrade(url, "0001", app_role=empty_db.app_role)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM ai_models")).scalar_one() == 0
    migrate.upgrade(url, app_role=empty_db.app_role)
    _assert_at_head(empty_db)


def test_app_role_grants(empty_db: ScratchDatabase) -> None:
    migrate.upgrade(_url(empty_db), app_role=empty_db.app_role)
    engine = empty_db.engine(owner=True, poolclass=NullPool)
    with engine.connect() as conn:

        def can(table: str, privilege: str) -> bool:
            return bool(
                conn.execute(
                    text("SELECT has_table_privilege(:r, :t, :p)"),
                    {"r": empty_db.app_role, "t": f"public.{table}", "p": privilege},
                ).scalar_one()
            )

        for table in [*sorted(TENANT_TABLES - {"audit_log"}), "users", "outbox"]:
            assert all(can(table, p) for p in ("SELECT", "INSERT", "UPDATE", "DELETE")), table
        assert can("audit_log", "INSERT") and can("audit_log", "SELECT")
        assert not can("audit_log", "UPDATE") and not can("audit_log", "DELETE")
        assert can("ai_models", "SELECT") and not can("ai_models", "INSERT")
        assert can("alembic_version", "SELECT") and not can("alembic_version", "UPDATE")
        assert conn.execute(
            text("SELECT has_sequence_privilege(:r, 'public.outbox_id_seq', 'USAGE')"), {"r": empty_db.app_role}
        ).scalar_one()
        for function in LOOKUP_FUNCTIONS:
            assert conn.execute(
                text(
                    "SELECT bool_and(has_function_privilege(:r, p.oid, 'EXECUTE')) FROM pg_proc p WHERE p.proname = :f"
                ),
                {"r": empty_db.app_role, "f": function},
            ).scalar_one(), function
            # Nobody else: EXECUTE was revoked from PUBLIC.
            assert not conn.execute(
                text(
                    "SELECT bool_or(has_function_privilege('public', p.oid, 'EXECUTE'))"
                    " FROM pg_proc p WHERE p.proname = :f"
                ),
                {"f": function},
            ).scalar_one(), function


def test_missing_app_role_is_skipped_with_a_warning(pg_server: PgServer, caplog: pytest.LogCaptureFixture) -> None:
    with scratch_database(pg_server, migrate=False) as scratch:
        with caplog.at_level(logging.WARNING, logger="switchboard.db.migrations"):
            migrate.upgrade(_url(scratch), app_role="sb_no_such_role")
        assert "does not exist" in caplog.text
        assert migrate.current_revision(_url(scratch)) == migrate.head_revision()


def _sessions_at_0038(db: ScratchDatabase, base_urls: list[str], name: str | None = None) -> None:
    """Migrate to 0038 and store one session per URL, as the API did before URLs had one form."""
    migrate.upgrade(_url(db), "0038", app_role=db.app_role)
    org_id = uuid.uuid4()
    with Session(db.engine(owner=True, poolclass=NullPool)) as session, tenant_transaction(session, org_id):
        create_org(session, org_id)
        # Only the columns the table had at 0038: the model has grown since.
        columns = set(
            session.scalars(
                text("SELECT column_name FROM information_schema.columns WHERE table_name = 'channel_sessions'")
            )
        )
        for base_url in base_urls:
            row = build_channel_sessions(session, org_id)
            row.base_url, row.routes_by_name = base_url, False
            row.external_session = name or row.external_session
            values = {c.name: getattr(row, c.key) for c in ChannelSession.__table__.columns if c.name in columns}
            values["id"] = uuid.uuid4()
            session.execute(insert(ChannelSession).values({k: v for k, v in values.items() if v is not None}))


def test_waha_urls_stored_before_0039_are_rewritten_in_one_form(pg_server: PgServer) -> None:
    with scratch_database(pg_server, migrate=False) as db:
        _sessions_at_0038(db, ["HTTP://WAHA.Internal:80/", "https://proxy.example:8443/waha-b/"])
        migrate.upgrade(_url(db), app_role=db.app_role)
        with db.engine(owner=True, poolclass=NullPool).connect() as conn:
            stored = conn.execute(text("SELECT base_url FROM channel_sessions ORDER BY base_url")).scalars().all()
        assert stored == ["http://waha.internal", "https://proxy.example:8443/waha-b"]


def test_one_name_on_one_server_written_two_ways_stops_0039(pg_server: PgServer) -> None:
    """Two orgs' numbers behind one name on one server: an operator must decide, not the migration."""
    with scratch_database(pg_server, migrate=False) as db:
        _sessions_at_0038(db, ["http://waha.internal:3000", "HTTP://waha.INTERNAL:3000/"], name="default")
        with pytest.raises(RuntimeError, match=re.escape("'default' on http://waha.internal:3000")):
            migrate.upgrade(_url(db), app_role=db.app_role)
