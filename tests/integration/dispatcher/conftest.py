"""Fixtures of the dispatcher tests: a scratch database and orgs in it, the test's worker log dir."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest
from sqlalchemy import text

from switchboard.db.session import normalize_url, tenant_transaction
from tests.integration.db.conftest import MigratedDatabase, PgServer, scratch_database
from tests.integration.db.factories import create_org
from tests.support.stack import StackEndpoints


@pytest.fixture(scope="package")
def dispatcher_db(stack: StackEndpoints) -> Iterator[MigratedDatabase]:
    """A database at head for the workers of this package (decisions, rate windows, budgets)."""
    server = PgServer(owner_url=normalize_url(stack.database_owner_url), app_url=normalize_url(stack.database_url))
    with scratch_database(server) as database:
        assert isinstance(database, MigratedDatabase)
        yield database


@pytest.fixture
def database_url(dispatcher_db: MigratedDatabase) -> str:
    """DATABASE_URL of the application role for a worker process."""
    return dispatcher_db.app_url.render_as_string(hide_password=False)


@pytest.fixture
def make_org(dispatcher_db: MigratedDatabase) -> Callable[..., uuid.UUID]:
    """Create an organization with a given rate limit (runs per window)."""

    def make(rate_limit: int = 1_000_000) -> uuid.UUID:
        org_id = uuid.uuid4()
        with dispatcher_db.owner_session() as session, tenant_transaction(session, org_id):
            create_org(session, org_id)
            session.flush()
            session.execute(
                text("UPDATE organizations SET rate_limit_runs_per_minute = :n WHERE id = :o"),
                {"n": rate_limit, "o": org_id},
            )
        return org_id

    return make
