"""A web UI on another origin calls the API: CORS for the origins ``API_CORS_ORIGINS`` lists only."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from services.api.app import create_app
from services.api.settings import ApiSettings
from tests.integration.api.conftest import serve
from tests.support.api import OrgHandle

UI = "https://app.example.com"


@pytest.fixture
async def ui_client(api_settings: ApiSettings) -> AsyncIterator[httpx.AsyncClient]:
    async with serve(api_settings.model_copy(update={"cors_origins": f"{UI}, http://localhost:5173"})) as http:
        yield http


async def test_an_allowed_origin_may_call_the_api_with_a_token_and_read_the_answer(
    ui_client: httpx.AsyncClient, org: OrgHandle
) -> None:
    preflight = await ui_client.options(
        "/api/v1/agents",
        headers={
            "Origin": UI,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization,content-type,idempotency-key",
        },
    )
    assert preflight.status_code == 200, preflight.text
    assert preflight.headers["access-control-allow-origin"] == UI
    assert "POST" in preflight.headers["access-control-allow-methods"]
    assert "authorization" in preflight.headers["access-control-allow-headers"].lower()
    assert "access-control-allow-credentials" not in preflight.headers  # bearer tokens, never cookies

    listed = await ui_client.get("/api/v1/agents", headers={"Origin": UI, **org.headers()})
    assert listed.status_code == 200
    assert listed.headers["access-control-allow-origin"] == UI
    assert "x-request-id" in listed.headers["access-control-expose-headers"].lower()


async def test_another_origin_gets_no_cors_headers(ui_client: httpx.AsyncClient, org: OrgHandle) -> None:
    preflight = await ui_client.options(
        "/api/v1/agents", headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "GET"}
    )
    assert preflight.status_code == 400
    assert "access-control-allow-origin" not in preflight.headers
    listed = await ui_client.get("/api/v1/agents", headers={"Origin": "https://evil.example", **org.headers()})
    assert "access-control-allow-origin" not in listed.headers


async def test_without_the_setting_no_origin_is_allowed(client: httpx.AsyncClient) -> None:
    preflight = await client.options("/api/v1/agents", headers={"Origin": UI, "Access-Control-Request-Method": "GET"})
    assert "access-control-allow-origin" not in preflight.headers


@pytest.mark.parametrize("value", ["app.example.com", "https://app.example.com/ui", "ftp://x.example"])
def test_a_value_that_is_not_an_origin_is_refused_at_startup(value: str) -> None:
    with pytest.raises(ValueError, match="is not an origin"):
        ApiSettings(cors_origins=value)


async def test_a_500_still_carries_the_cors_headers_and_its_request_id(api_settings: ApiSettings) -> None:
    """CORS is the outermost layer: a crash reaches the page as a readable 500 with the id to quote,
    not as a CORS failure."""
    app = create_app(api_settings.model_copy(update={"cors_origins": UI}))

    async def boom() -> None:
        raise RuntimeError("a bug")

    app.add_api_route("/api/v1/test-boom", boom)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://api.test") as http,
    ):
        crashed = await http.get("/api/v1/test-boom", headers={"Origin": UI})
    assert crashed.status_code == 500
    assert crashed.headers["access-control-allow-origin"] == UI
    assert crashed.headers["x-request-id"]
    assert "x-request-id" in crashed.headers["access-control-expose-headers"].lower()
