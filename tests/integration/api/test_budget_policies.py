"""``/api/v1/budget-policies``: the org's and each agent's monthly cap, set by an admin with MFA,
listed for managers, audited; the org's cap is what the dispatcher's budget check reads."""

from __future__ import annotations

import uuid
from datetime import date

import httpx
import pytest
from sqlalchemy import select, text

from switchboard.db.enums import Role
from switchboard.db.models import AuditLogEntry
from switchboard.db.usage import month_start, record_usage
from tests.integration.brief.scene import make_scene
from tests.support.agents import tenant_session
from tests.support.stack import StackEndpoints

pytestmark = pytest.mark.integration

ORG = "/api/v1/budget-policies/organization"


async def test_set_list_replace_and_remove_caps(client: httpx.AsyncClient, stack: StackEndpoints) -> None:
    scene = make_scene(stack.database_url)
    admin, manager = scene.org.headers(), scene.org.headers(Role.MANAGER)
    agent_path = f"/api/v1/budget-policies/agents/{scene.agent_id}"

    assert (await client.put(ORG, json={"cost_limit_micros": 5}, headers=manager)).status_code == 403
    empty = await client.put(ORG, json={"soft_threshold_pct": 50}, headers=admin)
    assert empty.status_code == 422 and empty.json()["error"]["code"] == "budget_limit_required"
    negative = await client.put(ORG, json={"cost_limit_micros": -1}, headers=admin)
    assert negative.status_code == 422

    first = await client.put(ORG, json={"cost_limit_micros": 50_000_000}, headers=admin)
    assert first.status_code == 200, first.text
    org_policy = first.json()["data"]
    assert org_policy["scope"] == "organization" and org_policy["hard_action"] == "block_dispatch"
    assert org_policy["soft_threshold_pct"] == 80 and org_policy["enabled"] is True
    again = await client.put(ORG, json={"token_limit": 2_000_000, "soft_threshold_pct": 90}, headers=admin)
    assert again.json()["data"]["id"] == org_policy["id"], "one policy per subject: replaced, not added"
    assert again.json()["data"]["cost_limit_micros"] is None and again.json()["data"]["token_limit"] == 2_000_000

    unknown = await client.put(f"/api/v1/budget-policies/agents/{uuid.uuid4()}", json={"token_limit": 1}, headers=admin)
    assert unknown.status_code == 404
    capped = await client.put(agent_path, json={"cost_limit_micros": 1_000_000, "hard_action": "notify"}, headers=admin)
    assert capped.status_code == 200, capped.text
    assert capped.json()["data"]["agent_id"] == str(scene.agent_id) and capped.json()["data"]["hard_action"] == "notify"
    bad_action = await client.put(
        agent_path, json={"cost_limit_micros": 1, "hard_action": "block_dispatch"}, headers=admin
    )
    assert bad_action.status_code == 422

    listed = await client.get("/api/v1/budget-policies", headers=manager)
    assert [p["scope"] for p in listed.json()["data"]] == ["organization", "agent"]
    assert (await client.get("/api/v1/budget-policies", headers=scene.org.headers(Role.VIEWER))).status_code == 403

    assert (await client.delete(agent_path, headers=admin)).status_code == 204
    assert (await client.delete(agent_path, headers=admin)).status_code == 404
    assert [p["scope"] for p in (await client.get("/api/v1/budget-policies", headers=manager)).json()["data"]] == [
        "organization"
    ]
    with tenant_session(scene.org) as session:
        actions = session.scalars(
            select(AuditLogEntry.action)
            .where(AuditLogEntry.org_id == scene.org_id, AuditLogEntry.target_type == "budget_policy")
            .order_by(AuditLogEntry.created_at)
        ).all()
    assert actions == ["budget_policy.set", "budget_policy.set", "budget_policy.set", "budget_policy.deleted"]

    other = make_scene(stack.database_url)
    assert (await client.get("/api/v1/budget-policies", headers=other.org.headers(Role.MANAGER))).json()["data"] == []


async def test_the_dispatchers_budget_check_reads_the_cap_set_here(
    client: httpx.AsyncClient, stack: StackEndpoints
) -> None:
    scene = make_scene(stack.database_url)
    month = month_start()

    def over_budget() -> set[uuid.UUID]:
        with tenant_session(scene.org) as session:
            rows = session.execute(text("SELECT org_id FROM list_orgs_over_budget(:m)"), {"m": month})
            return set(rows.scalars())

    with tenant_session(scene.org) as session:
        record_usage(session, scene.org_id, scene.agent_id, date.today(), 1000, 100, 2_000_000)
    assert scene.org_id not in over_budget()
    assert (
        await client.put(ORG, json={"cost_limit_micros": 1_000_000}, headers=scene.org.headers())
    ).status_code == 200
    assert scene.org_id in over_budget()
    disabled = {"cost_limit_micros": 1_000_000, "enabled": False}
    assert (await client.put(ORG, json=disabled, headers=scene.org.headers())).status_code == 200
    assert scene.org_id not in over_budget()
