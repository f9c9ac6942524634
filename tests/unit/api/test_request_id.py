"""Every response carries ``X-Request-Id`` — the unexpected 500 included, since that is the one to trace."""

from __future__ import annotations

import httpx
import pytest

from services.api.app import create_app


@pytest.fixture
def app_with_failing_route() -> httpx.AsyncClient:
    app = create_app()

    @app.get("/test-only/boom")
    async def boom() -> None:
        raise RuntimeError("unexpected")

    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    return httpx.AsyncClient(transport=transport, base_url="http://api.test")


async def test_unexpected_error_keeps_the_callers_request_id(app_with_failing_route: httpx.AsyncClient) -> None:
    async with app_with_failing_route as client:
        response = await client.get("/test-only/boom", headers={"X-Request-Id": "trace-me-42"})

    assert response.status_code == 500
    assert response.json()["error"]["code"] == "internal_error"
    assert response.headers["X-Request-Id"] == "trace-me-42"


async def test_unexpected_error_gets_a_fresh_request_id(app_with_failing_route: httpx.AsyncClient) -> None:
    async with app_with_failing_route as client:
        response = await client.get("/test-only/boom")

    assert response.status_code == 500
    assert len(response.headers["X-Request-Id"]) == 36


async def test_ordinary_responses_still_carry_it(app_with_failing_route: httpx.AsyncClient) -> None:
    async with app_with_failing_route as client:
        response = await client.get("/healthz", headers={"X-Request-Id": "abc"})

    assert response.status_code == 200
    assert response.headers["X-Request-Id"] == "abc"
