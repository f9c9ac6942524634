"""Fixtures for the database tests: a real PostgreSQL, one scratch database per module.

The server is the session's ``stack`` (tests/support/stack.py: environment,
running local stack, testcontainers, or the launcher); nothing is hard-coded. Each test
module gets its own ``sb_test_<uuid>`` database, created by the owner role
(which has CREATEDB), migrated to head, and dropped afterwards, so the stack's
own database is never touched.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.engine import URL
from sqlalchemy.exc import ProgrammingError
from sqlalchemy.orm import sessionmaker
from sqlalchemy.pool import NullPool

from switchboard.db.migrate import upgrade
from switchboard.db.session import create_engine, normalize_url, tenant_transaction
from tests.support.stack import StackEndpoints

from .factories import create_org


@dataclass(frozen=True)
class PgServer:
    """The PostgreSQL server under test and its two roles."""

    owner_url: URL
    app_url: URL

    @property
    def owner_role(self) -> str:
        return str(self.owner_url.username)

    @property
    def app_role(self) -> str:
        return str(self.app_url.username)


@dataclass
class ScratchDatabase:
    """A throwaway database with engines for the owner and the application role."""

    name: str
    owner_url: URL
    app_url: URL
    app_role: str
    owner_role: str
    _engines: list[Engine] = field(default_factory=list)

    def engine(self, *, owner: bool = False, **kwargs: Any) -> Engine:
        url = self.owner_url if owner else self.app_url
        engine = create_engine(url, **kwargs)
        self._engines.append(engine)
        return engine

    def dispose(self) -> None:
        for engine in self._engines:
            engine.dispose()
        self._engines.clear()


@dataclass
class MigratedDatabase(ScratchDatabase):
    """A scratch database at head, with ready session factories."""

    owner_engine: Engine = field(init=False)
    app_engine: Engine = field(init=False)

    def __post_init__(self) -> None:
        self.owner_engine = self.engine(owner=True, pool_size=2)
        self.app_engine = self.engine(pool_size=5)
        self.owner_session = sessionmaker(self.owner_engine, expire_on_commit=False)
        self.app_session = sessionmaker(self.app_engine, expire_on_commit=False)

    def new_org(self) -> uuid.UUID:
        """A fresh organization row (created as the owner, scoped to itself)."""
        org_id = uuid.uuid4()
        with self.owner_session() as session, tenant_transaction(session, org_id):
            create_org(session, org_id)
        return org_id


@pytest.fixture(scope="session")
def pg_server(stack: StackEndpoints) -> PgServer:
    """The stack's server (tests/support/stack.py finds or starts it; never skipped)."""
    return PgServer(
        owner_url=normalize_url(stack.database_owner_url),
        app_url=normalize_url(stack.database_url),
    )


@contextmanager
def scratch_database(server: PgServer, *, migrate: bool = True) -> Iterator[ScratchDatabase]:
    """Create ``sb_test_<uuid>`` (migrated to head unless told otherwise); drop it afterwards."""
    name = f"sb_test_{uuid.uuid4().hex}"
    admin = create_engine(server.owner_url, poolclass=NullPool, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    owner_url = server.owner_url.set(database=name)
    try:
        if migrate:
            upgrade(owner_url.render_as_string(hide_password=False), app_role=server.app_role)
        cls = MigratedDatabase if migrate else ScratchDatabase
        db = cls(
            name=name,
            owner_url=owner_url,
            app_url=server.app_url.set(database=name),
            app_role=server.app_role,
            owner_role=server.owner_role,
        )
        try:
            yield db
        finally:
            db.dispose()
    finally:
        _drop(admin, name)
        admin.dispose()


def _drop(admin: Engine, name: str, attempts: int = 20) -> None:
    """Drop the scratch database. A backend of the application role that is still exiting
    (its client just disconnected) cannot be terminated by the owner, which is not a
    superuser: FORCE then fails, so wait for it a little and try again."""
    for attempt in range(1, attempts + 1):
        try:
            with admin.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            return
        except ProgrammingError:
            if attempt == attempts:
                raise
            time.sleep(0.25)


@pytest.fixture(scope="module")
def db(pg_server: PgServer) -> Iterator[MigratedDatabase]:
    """A database at head shared by the tests of one module."""
    with scratch_database(pg_server) as database:
        assert isinstance(database, MigratedDatabase)
        yield database


@pytest.fixture
def org_a(db: MigratedDatabase) -> uuid.UUID:
    return db.new_org()


@pytest.fixture
def org_b(db: MigratedDatabase) -> uuid.UUID:
    return db.new_org()
