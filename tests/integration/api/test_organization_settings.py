"""``/api/v1/organization``: everyone reads the org's settings, an admin with MFA changes them
(audited with before and after); the dispatcher's rate limit and new business hours use them."""

from __future__ import annotations

import httpx
import pytest
from sqlalchemy import select, text

from switchboard.db.enums import Role
from switchboard.db.models.audit import AuditLogEntry
from tests.support.agents import create_agent, make_channel, tenant_session
from tests.support.api import OrgHandle

pytestmark = pytest.mark.integration

PATH = "/api/v1/organization"


def _audits(org: OrgHandle) -> list[dict[str, object]]:
    with tenant_session(org) as session:
        return list(
            session.scalars(
                select(AuditLogEntry.details)
                .where(AuditLogEntry.org_id == org.org_id, AuditLogEntry.action == "organization.updated")
                .order_by(AuditLogEntry.created_at)
            )
        )


async def test_read_and_change_the_orgs_settings(client: httpx.AsyncClient, org: OrgHandle) -> None:
    seen = await client.get(PATH, headers=org.headers(Role.VIEWER))
    assert seen.status_code == 200, seen.text
    before = seen.json()["data"]
    assert before["id"] == str(org.org_id) and before["rate_limit_runs_per_minute"] == 60

    assert (await client.patch(PATH, json={"name": "X"}, headers=org.headers(Role.MANAGER))).status_code == 403
    assert (await client.patch(PATH, json={"name": "X"}, headers=org.headers(mfa=False))).status_code == 403
    for bad in ({"time_zone": "Mars/Olympus"}, {"rate_limit_runs_per_minute": 0}, {"name": "   "}, {"slug": "x"}):
        refused = await client.patch(PATH, json=bad, headers=org.headers())
        assert refused.status_code == 422, (bad, refused.text)

    changed = await client.patch(
        PATH,
        json={"name": "  Flores da Vila  ", "time_zone": "America/Sao_Paulo", "rate_limit_runs_per_minute": 2},
        headers=org.headers(),
    )
    assert changed.status_code == 200, changed.text
    after = changed.json()["data"]
    assert (after["name"], after["time_zone"], after["rate_limit_runs_per_minute"]) == (
        "Flores da Vila",
        "America/Sao_Paulo",
        2,
    )
    assert after["slug"] == before["slug"]
    same = await client.patch(PATH, json={"rate_limit_runs_per_minute": 2}, headers=org.headers())
    assert same.status_code == 200
    audits = _audits(org)
    assert len(audits) == 1, "a PATCH that changes nothing is not audited"
    assert audits[0]["changes"]["rate_limit_runs_per_minute"] == {"from": 60, "to": 2}  # type: ignore[index]

    # The dispatcher's admission reads the new limit at its next call.
    with tenant_session(org) as session:
        admitted = session.execute(
            text("SELECT admitted, limit_per_window FROM admit_org_runs(:o, 5, 60, 60)"), {"o": org.org_id}
        ).one()
    assert (admitted.admitted, admitted.limit_per_window) == (2, 2)


async def test_business_hours_without_a_zone_are_in_the_orgs_zone(client: httpx.AsyncClient, org: OrgHandle) -> None:
    assert (await client.patch(PATH, json={"time_zone": "Asia/Tokyo"}, headers=org.headers())).status_code == 200
    hours = {"windows": [{"weekday": "monday", "start_minute": 540, "end_minute": 1080}]}
    created = await create_agent(client, org, make_channel(org), trigger_config={"business_hours": hours})
    assert created["version"]["trigger_config"]["business_hours"]["time_zone"] == "Asia/Tokyo"
    # Written into the version: a later change of the org's zone does not move the agent's hours.
    await client.patch(PATH, json={"time_zone": "Europe/Rome"}, headers=org.headers())
    agent_id, version_id = created["agent"]["id"], created["version"]["id"]
    read = await client.get(f"/api/v1/agents/{agent_id}/versions/{version_id}", headers=org.headers(Role.MANAGER))
    assert read.json()["data"]["trigger_config"]["business_hours"]["time_zone"] == "Asia/Tokyo"


async def test_the_morning_digest_hour_is_set_turned_off_and_kept_when_omitted(
    client: httpx.AsyncClient, org: OrgHandle
) -> None:
    seen = await client.get(PATH, headers=org.headers(Role.VIEWER))
    assert seen.json()["data"]["digest_hour"] == 8, "a new org is told at 08:00 by default"
    for bad in (-1, 24, "eight"):
        refused = await client.patch(PATH, json={"digest_hour": bad}, headers=org.headers())
        assert refused.status_code == 422, (bad, refused.text)

    at_seven = await client.patch(PATH, json={"digest_hour": 7}, headers=org.headers())
    assert at_seven.json()["data"]["digest_hour"] == 7
    renamed = await client.patch(PATH, json={"name": "Renamed"}, headers=org.headers())
    assert renamed.json()["data"]["digest_hour"] == 7, "an omitted field stays as it is"
    kept_name = await client.patch(PATH, json={"name": None, "digest_hour": None}, headers=org.headers())
    assert kept_name.status_code == 200, kept_name.text
    # A null is "off" for the digest hour, and "leave it" for a field that cannot be null.
    assert (kept_name.json()["data"]["digest_hour"], kept_name.json()["data"]["name"]) == (None, "Renamed")
    assert _audits(org)[-1]["changes"] == {"digest_hour": {"from": 7, "to": None}}
