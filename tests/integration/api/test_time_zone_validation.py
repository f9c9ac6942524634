"""Time zones in the organization settings and an agent's business hours: a name ``ZoneInfo`` cannot
load is a 422 ``validation_error``, whatever it raises (``"America"`` is a directory: an OSError)."""

from __future__ import annotations

import httpx
import pytest

from tests.support.agents import make_channel, version_body
from tests.support.api import OrgHandle

pytestmark = pytest.mark.integration

BAD_ZONES = ["America", "America/Argentina", "Etc", "../x", "", "Europe/", "zone.tab", "Mars/Olympus"]


@pytest.mark.parametrize("time_zone", BAD_ZONES)
async def test_the_orgs_zone_must_be_an_iana_zone(client: httpx.AsyncClient, org: OrgHandle, time_zone: str) -> None:
    response = await client.patch("/api/v1/organization", json={"time_zone": time_zone}, headers=org.headers())
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "validation_error"
    assert (await client.get("/api/v1/organization", headers=org.headers())).json()["data"]["time_zone"] == "UTC"


@pytest.mark.parametrize("time_zone", BAD_ZONES)
async def test_business_hours_zone_must_be_an_iana_zone(
    client: httpx.AsyncClient, org: OrgHandle, time_zone: str
) -> None:
    hours = {"time_zone": time_zone, "windows": [{"weekday": "monday", "start_minute": 540, "end_minute": 1080}]}
    body = version_body(make_channel(org), trigger_config={"event_types": ["message"], "business_hours": hours})
    response = await client.post("/api/v1/agents", json={"name": "Suporte", "version": body}, headers=org.headers())
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "validation_error"


async def test_a_real_zone_is_still_accepted(client: httpx.AsyncClient, org: OrgHandle) -> None:
    response = await client.patch(
        "/api/v1/organization", json={"time_zone": "America/Argentina/Buenos_Aires"}, headers=org.headers()
    )
    assert response.status_code == 200, response.text
    assert response.json()["data"]["time_zone"] == "America/Argentina/Buenos_Aires"
