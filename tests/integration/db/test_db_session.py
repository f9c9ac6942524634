"""The tenant transaction: scoped, transaction-local, rolled back on error."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import text
from sqlalchemy.exc import InvalidRequestError

from switchboard.db.models import Contact
from switchboard.db.session import (
    async_current_tenant,
    async_tenant_transaction,
    create_async_engine,
    current_tenant,
    tenant_transaction,
)

from .conftest import MigratedDatabase
from .factories import build_contacts

pytestmark = pytest.mark.integration


def test_tenant_setting_is_transaction_local(db: MigratedDatabase, org_a: uuid.UUID) -> None:
    with db.app_engine.connect() as conn:
        with tenant_transaction(conn, org_a):
            assert current_tenant(conn) == org_a
        # Same pooled connection, next transaction: the tenant is gone, and querying a
        # tenant table returns nothing instead of failing on ''::uuid.
        with conn.begin():
            assert current_tenant(conn) is None
            assert conn.execute(text("SELECT count(*) FROM contacts")).scalar_one() == 0


def test_tenant_transaction_commits_on_success_and_rolls_back_on_error(db: MigratedDatabase, org_a: uuid.UUID) -> None:
    with db.app_session() as session, tenant_transaction(session, org_a):
        kept = build_contacts(session, org_a)
        session.add(kept)

    with pytest.raises(RuntimeError), db.app_session() as session, tenant_transaction(session, org_a):
        lost = build_contacts(session, org_a)
        session.add(lost)
        session.flush()
        raise RuntimeError("handler failed")

    with db.app_session() as session, tenant_transaction(session, org_a):
        ids = set(session.execute(text("SELECT id FROM contacts")).scalars())
        assert kept.id in ids and lost.id not in ids


def test_a_session_with_a_transaction_already_open_is_refused(db: MigratedDatabase, org_a: uuid.UUID) -> None:
    with db.app_session() as session:
        session.execute(text("SELECT 1"))  # autobegins
        with pytest.raises(InvalidRequestError), tenant_transaction(session, org_a):
            pass


def test_malformed_org_id_fails_before_sql(db: MigratedDatabase) -> None:
    with db.app_session() as session, pytest.raises(ValueError), tenant_transaction(session, "not-a-uuid"):
        pass


async def test_async_tenant_transaction(db: MigratedDatabase, org_a: uuid.UUID, org_b: uuid.UUID) -> None:
    pytest.importorskip("greenlet", reason="SQLAlchemy's asyncio layer needs greenlet")
    from sqlalchemy.ext.asyncio import AsyncSession

    engine = create_async_engine(db.app_url, pool_size=2)
    try:
        async with AsyncSession(engine) as session:
            async with async_tenant_transaction(session, org_b):
                session.add(Contact(org_id=org_b, external_id=f"{uuid.uuid4().hex[:10]}@c.us"))
            async with async_tenant_transaction(session, org_a):
                assert await async_current_tenant(session) == org_a
                visible = (await session.execute(text("SELECT org_id FROM contacts"))).scalars().all()
                assert org_b not in visible
    finally:
        await engine.dispose()
