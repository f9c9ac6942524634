"""Per-route request metrics (services/api/core/request_metrics.py) and the request id on every
refusal's log line: an operator reads latency and error rates per route, never per resource id,
and finds the log line of the 4xx a caller reports by its ``X-Request-Id``."""

from __future__ import annotations

import logging
import uuid

import httpx
import pytest
from fastapi import FastAPI
from prometheus_client import REGISTRY

from services.api.core.errors import install_error_handlers
from services.api.core.request_metrics import install_request_metrics
from switchboard.db.enums import Role
from tests.support.api import OrgHandle

pytestmark = pytest.mark.integration

AGENT_ROUTE = "/api/v1/agents/{agent_id}"


def _count(method: str, route: str, status: int) -> float:
    value = REGISTRY.get_sample_value(
        "switchboard_api_requests_total", {"method": method, "route": route, "status": str(status)}
    )
    return value or 0.0


def _observed(method: str, route: str) -> float:
    value = REGISTRY.get_sample_value(
        "switchboard_api_request_duration_seconds_count", {"method": method, "route": route}
    )
    return value or 0.0


async def test_requests_are_counted_and_timed_per_route_template_never_per_id(
    client: httpx.AsyncClient, org: OrgHandle
) -> None:
    missing = uuid.uuid4()
    before = (_count("GET", AGENT_ROUTE, 404), _count("GET", AGENT_ROUTE, 401), _observed("GET", AGENT_ROUTE))
    before_unmatched = _count("GET", "unmatched", 404)
    before_other = _count("OTHER", "unmatched", 404) + _count("OTHER", "unmatched", 405)

    for _ in range(2):
        answered = await client.get(f"/api/v1/agents/{missing}", headers=org.headers(Role.MANAGER))
        assert answered.status_code == 404
    assert (await client.get(f"/api/v1/agents/{missing}")).status_code == 401
    assert (await client.get(f"/no/such/{missing}")).status_code == 404
    assert (await client.request("BREW", "/coffee")).status_code in (404, 405)

    assert _count("GET", AGENT_ROUTE, 404) - before[0] == 2
    assert _count("GET", AGENT_ROUTE, 401) - before[1] == 1
    assert _observed("GET", AGENT_ROUTE) - before[2] == 3
    assert _count("GET", "unmatched", 404) - before_unmatched == 1
    other = _count("OTHER", "unmatched", 404) + _count("OTHER", "unmatched", 405)
    assert other - before_other == 1, "an unknown method is one series, not one per word"

    # A router of its own (skills) and the mounted MCP server: full templates, the mount's prefix in front.
    before_skill = _count("GET", "/api/v1/skills/{name}", 404)
    before_guard = _count("POST", "/internal/*", 401)
    assert (await client.get("/api/v1/skills/no-such-skill", headers=org.headers(Role.MANAGER))).status_code == 404
    assert (await client.post("/internal/mcp", json={})).status_code == 401  # the run-token guard, before routing
    assert _count("GET", "/api/v1/skills/{name}", 404) - before_skill == 1
    assert _count("POST", "/internal/*", 401) - before_guard == 1

    exposed = (await client.get("/metrics")).text
    assert 'route="/api/v1/agents/{agent_id}"' in exposed
    assert str(missing) not in exposed, "no resource id in a label"
    assert "BREW" not in exposed


async def test_a_refusal_is_logged_with_the_request_id_its_caller_got(
    client: httpx.AsyncClient, org: OrgHandle, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="services.api.core.errors")
    refused = await client.get(f"/api/v1/agents/{uuid.uuid4()}", headers=org.headers(Role.MANAGER))
    invalid = await client.patch("/api/v1/organization", json={"digest_hour": 99}, headers=org.headers())
    assert (refused.status_code, invalid.status_code) == (404, 422)

    logged = {
        (getattr(r, "request_id", None), getattr(r, "error_code", None))
        for r in caplog.records
        if r.getMessage() == "request refused"
    }
    assert (refused.headers["X-Request-Id"], "not_found") in logged
    assert (invalid.headers["X-Request-Id"], "validation_error") in logged


async def test_an_unhandled_error_is_counted_as_the_500_its_caller_received() -> None:
    app = FastAPI()
    install_error_handlers(app)
    install_request_metrics(app)

    @app.get("/boom/{thing}")
    async def boom(thing: str) -> None:
        raise RuntimeError(f"broken {thing}")

    before = _count("GET", "/boom/{thing}", 500)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://api.test") as client:
        answered = await client.get("/boom/x")
    assert answered.status_code == 500 and answered.json()["error"]["code"] == "internal_error"
    assert _count("GET", "/boom/{thing}", 500) - before == 1
