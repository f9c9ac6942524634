"""API tests run the real app (lifespan included) in-process against the stack's database and broker."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy.orm import Session

from services.api.app import create_app
from services.api.settings import ApiSettings
from switchboard.db.session import create_engine, set_tenant
from switchboard.settings import DatabaseSettings, KafkaSettings
from tests.support.api import OrgHandle, create_org
from tests.support.stack import StackEndpoints


@pytest.fixture
def api_settings(stack: StackEndpoints, kafka_settings: KafkaSettings, migrated: None) -> ApiSettings:
    # No relay: the stack database's outbox is shared by every test, and a relay here would
    # publish other tests' rows under this test's topic prefix. Tests read the outbox rows;
    # the relay has its own tests on a scratch database (tests/integration/outbox).
    return ApiSettings(
        database=DatabaseSettings(url=stack.database_url, owner_url=stack.database_owner_url),
        kafka=kafka_settings,
        outbox_relay=False,
    )


@contextlib.asynccontextmanager
async def serve(settings: ApiSettings, **transport_options: Any) -> AsyncIterator[httpx.AsyncClient]:
    """A client of a fresh app built from ``settings``, its lifespan entered (``raise_app_exceptions=False``
    and the like go to the ASGI transport)."""
    app = create_app(settings)
    transport = httpx.ASGITransport(app=app, **transport_options)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://api.test") as http,
    ):
        yield http


@pytest.fixture
async def client(api_settings: ApiSettings) -> AsyncIterator[httpx.AsyncClient]:
    async with serve(api_settings) as http:
        yield http


@pytest.fixture
def make_org(stack: StackEndpoints, migrated: None) -> Callable[..., OrgHandle]:
    def _make(**kwargs: object) -> OrgHandle:
        return create_org(stack.database_url, **kwargs)  # type: ignore[arg-type]

    return _make


@pytest.fixture
def org(make_org: Callable[..., OrgHandle]) -> OrgHandle:
    return make_org()


@pytest.fixture
def db(api_settings: ApiSettings) -> Iterator[Callable[[uuid.UUID], Session]]:
    """Sessions as the application role, scoped to one org (row-level security applies)."""
    engine = create_engine(api_settings.database.url.get_secret_value(), pool_size=1)
    sessions: list[Session] = []

    def _open(org_id: uuid.UUID) -> Session:
        session = Session(engine)
        session.begin()
        set_tenant(session, org_id)
        sessions.append(session)
        return session

    yield _open
    for session in sessions:
        session.close()
    engine.dispose()
