"""The API's database access: one async engine per process, one transaction per request
(webhook deliveries excepted: they share transactions, ``webhooks.group_commit``).

Requests that act for an organization get a session whose transaction has
``app.org_id`` set (row-level security), opened by the authentication
dependency, committed once after the endpoint returned and rolled back if it
raised. Services and repositories never commit (STYLE: Polar).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker
from sqlalchemy.pool import NullPool

from switchboard.db.session import create_async_engine, create_async_sessionmaker
from switchboard.settings import DatabaseSettings

# How long the readiness probe waits for PostgreSQL (the kubelet's probe gives up after 2 s).
PROBE_TIMEOUT_S = 1.0


@dataclass
class Database:
    engine: AsyncEngine
    sessions: async_sessionmaker[AsyncSession]
    # The readiness probe's own connections (one per probe, no pool): the probe asks whether
    # PostgreSQL answers, not whether the request pool has a connection free. Checked out of the
    # request pool, a load that used every connection (30 s checkout wait) failed the probe, took
    # the pod out of its Service, shifted its traffic to the others and failed them in turn.
    probe_engine: AsyncEngine

    @classmethod
    def connect(cls, settings: DatabaseSettings) -> Database:
        url = settings.url.get_secret_value()
        engine = create_async_engine(
            url, pool_size=settings.pool_size, prepared_statements=settings.prepared_statements
        )
        probe = create_async_engine(url, poolclass=NullPool, prepared_statements=settings.prepared_statements)
        return cls(engine=engine, sessions=create_async_sessionmaker(engine), probe_engine=probe)

    async def answers(self) -> bool:
        """Whether PostgreSQL answers ``SELECT 1`` within ``PROBE_TIMEOUT_S``, on a connection of its own."""

        async def select_one() -> None:
            async with self.probe_engine.connect() as conn:
                await conn.execute(text("SELECT 1"))

        try:
            await asyncio.wait_for(select_one(), PROBE_TIMEOUT_S)
        except Exception:
            return False
        return True

    async def dispose(self) -> None:
        await self.engine.dispose()
        await self.probe_engine.dispose()


def database(request: Request) -> Database:
    db: Database = request.app.state.database
    return db


async def public_session(request: Request) -> AsyncIterator[AsyncSession]:
    """A transaction with no organization set, for the few unauthenticated endpoints (login, webhooks).

    Row-level security still applies: until the code sets ``app.org_id`` after
    identifying the tenant, tenant tables look empty.
    """
    db: Database = request.app.state.database
    async with db.sessions() as session, session.begin():
        yield session


PublicSession = Annotated[AsyncSession, Depends(public_session, scope="function")]
