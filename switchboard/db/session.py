"""Engines, sessions and the tenant transaction.

Every piece of application work on tenant data runs inside
``tenant_transaction(session, org_id)``: it begins the transaction and sets
``app.org_id`` *transaction-locally* (``set_config(..., true)``), so the setting
can never leak to the next user of a pooled connection. Row-level security
then hides every other tenant's rows. Repositories still filter by ``org_id``
in their queries: the database is the second line, not the only one.

    engine = create_engine(settings.database.url.get_secret_value())
    Session = create_sessionmaker(engine)
    with Session() as session, tenant_transaction(session, org_id):
        session.add(...)
    # committed here; rolled back if the block raised
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

import sqlalchemy
from sqlalchemy import Connection, Engine, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.orm import Session, sessionmaker

if TYPE_CHECKING:
    # Imported lazily at run time: SQLAlchemy's asyncio layer needs greenlet, which the
    # sync services (and the migrations) do not.
    from sqlalchemy.ext.asyncio import (
        AsyncConnection,
        AsyncEngine,
        AsyncSession,
        async_sessionmaker,
    )

from switchboard.db.tenancy import TENANT_SETTING
from switchboard.settings import DatabaseSettings

DRIVER = "postgresql+psycopg"

_SET_TENANT = text(f"SELECT set_config('{TENANT_SETTING}', :org_id, true)")
_GET_TENANT = text(f"SELECT NULLIF(current_setting('{TENANT_SETTING}', true), '')")

SyncTarget = TypeVar("SyncTarget", Session, Connection)
AsyncTarget = TypeVar("AsyncTarget", "AsyncSession", "AsyncConnection")


def normalize_url(url: str | URL) -> URL:
    """Force the psycopg 3 driver: ``postgresql://`` would pick psycopg2, which we do not ship."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "postgresql":
        raise ValueError(f"not a PostgreSQL URL: {parsed.render_as_string(hide_password=True)}")
    return parsed.set(drivername=DRIVER)


def _connect_args(kwargs: dict[str, Any], prepared_statements: bool | None) -> None:
    """``DATABASE_PREPARED_STATEMENTS=false`` reaches every connection an engine opens: the caller's
    settings say it, or (tools, migrations) the environment."""
    if prepared_statements is None:
        prepared_statements = DatabaseSettings().prepared_statements
    if not prepared_statements:
        kwargs.setdefault("connect_args", {}).setdefault("prepare_threshold", None)


def create_engine(
    url: str | URL, *, pool_size: int = 5, prepared_statements: bool | None = None, **kwargs: Any
) -> Engine:
    """A sync engine on psycopg 3 with pre-ping, so a restarted database is survived."""
    kwargs.setdefault("pool_pre_ping", True)
    _connect_args(kwargs, prepared_statements)
    if kwargs.get("poolclass") is None:
        kwargs.setdefault("pool_size", pool_size)
    return sqlalchemy.create_engine(normalize_url(url), **kwargs)


def create_async_engine(
    url: str | URL, *, pool_size: int = 5, prepared_statements: bool | None = None, **kwargs: Any
) -> AsyncEngine:
    """The asyncio engine of the services (psycopg 3 async; same URL; needs greenlet), at most
    ``pool_size`` connections plus as many again in bursts (``max_overflow``, when not given).

    No pre-ping: it is one more round trip on every checkout — measured here, a tenant
    transaction of one statement took 3.3 ms with it and 1.0 ms without — on the hot
    path of every service. A connection the database dropped (a restart) fails its next
    statement instead; SQLAlchemy then invalidates the whole pool, so one transaction
    per pool fails, and every caller retries a transient error (the runner's
    ``_with_db_retries``, the consumers' error policy, the relay's next poll).
    """
    from sqlalchemy.ext.asyncio import create_async_engine as sa_create_async_engine

    kwargs.setdefault("pool_pre_ping", False)
    _connect_args(kwargs, prepared_statements)
    if kwargs.get("poolclass") is None:
        kwargs.setdefault("pool_size", pool_size)
        # At most twice the pool size unless a service says otherwise: SQLAlchemy's default
        # overflow is a fixed 10 whatever the pool, which docs/deploy.md "Database connections"
        # could not count on. Not 0: a request that holds its connection while a second one
        # records something (a failed sign-in, an approval's tool call) needs the headroom.
        kwargs.setdefault("max_overflow", kwargs["pool_size"])
    return sa_create_async_engine(normalize_url(url), **kwargs)


def create_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    """Sessions that keep loaded attributes after commit (handlers return them afterwards)."""
    return sessionmaker(engine, expire_on_commit=False)


def create_async_sessionmaker(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    from sqlalchemy.ext.asyncio import async_sessionmaker

    return async_sessionmaker(engine, expire_on_commit=False)


def _org_str(org_id: uuid.UUID | str) -> str:
    """Validate before it reaches SQL: a malformed id must fail here, loudly."""
    return str(org_id if isinstance(org_id, uuid.UUID) else uuid.UUID(str(org_id)))


def set_tenant(target: Session | Connection, org_id: uuid.UUID | str) -> None:
    """State the tenant for the rest of the current transaction (which must be open)."""
    target.execute(_SET_TENANT, {"org_id": _org_str(org_id)})


def current_tenant(target: Session | Connection) -> uuid.UUID | None:
    """The tenant the current transaction is scoped to, or None."""
    value = target.execute(_GET_TENANT).scalar_one()
    return uuid.UUID(value) if value else None


@contextmanager
def tenant_transaction(target: SyncTarget, org_id: uuid.UUID | str) -> Iterator[SyncTarget]:
    """Begin a transaction scoped to ``org_id``; commit on success, roll back on error.

    Works with a ``Session`` or a ``Connection`` that has no transaction open
    (a session that already auto-began one is refused, because the tenant
    would then be set in the middle of someone else's unit of work).
    """
    with target.begin():
        set_tenant(target, org_id)
        yield target


async def async_set_tenant(target: AsyncSession | AsyncConnection, org_id: uuid.UUID | str) -> None:
    await target.execute(_SET_TENANT, {"org_id": _org_str(org_id)})


async def async_current_tenant(target: AsyncSession | AsyncConnection) -> uuid.UUID | None:
    value = (await target.execute(_GET_TENANT)).scalar_one()
    return uuid.UUID(value) if value else None


@asynccontextmanager
async def async_tenant_transaction(target: AsyncTarget, org_id: uuid.UUID | str) -> AsyncIterator[AsyncTarget]:
    """The asyncio twin of ``tenant_transaction``."""
    async with target.begin():
        await async_set_tenant(target, org_id)
        yield target
