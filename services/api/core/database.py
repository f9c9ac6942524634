"""The API's database access: one async engine per process, one transaction per request
(webhook deliveries excepted: they share transactions, ``webhooks.group_commit``).

Requests that act for an organization get a session whose transaction has
``app.org_id`` set (row-level security), opened by the authentication
dependency, committed once after the endpoint returned and rolled back if it
raised. Services and repositories never commit (STYLE: Polar).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from switchboard.db.session import create_async_engine, create_async_sessionmaker
from switchboard.settings import DatabaseSettings


@dataclass
class Database:
    engine: AsyncEngine
    sessions: async_sessionmaker[AsyncSession]

    @classmethod
    def connect(cls, settings: DatabaseSettings) -> Database:
        engine = create_async_engine(
            settings.url.get_secret_value(),
            pool_size=settings.pool_size,
            prepared_statements=settings.prepared_statements,
        )
        return cls(engine=engine, sessions=create_async_sessionmaker(engine))

    async def dispose(self) -> None:
        await self.engine.dispose()


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
