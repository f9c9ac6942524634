"""Tenant isolation over HTTP and in the database [SPEC §3, 004 §9 RLS gate].

Org B owns one of every resource. With org A's admin token (MFA-verified, so no
guard stops the request first), every operation that names one of B's resources
answers 404 ``not_found`` — never 403, which would confirm it exists — and every
list leaves B's resources out. And with the application role and no org set,
every tenant table reads as empty.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from switchboard.db.session import create_engine
from switchboard.db.tenancy import TENANT_TABLES
from tests.integration.api.test_rbac_matrix import POLICY
from tests.integration.api.test_runs import Fixture
from tests.support.agents import create_agent, make_channel, make_credential, version_body
from tests.support.api import OrgHandle
from tests.support.stack import StackEndpoints

pytestmark = pytest.mark.integration


async def _org_b_resources(client: httpx.AsyncClient, org_b: OrgHandle) -> dict[str, str]:
    channel = make_channel(org_b)
    credential = make_credential(org_b, provider="anthropic")
    agent = await create_agent(client, org_b, channel, credential_id=str(credential))
    runs = Fixture(org_b, agent, channel)
    run_id = runs.run(datetime.now(UTC))
    token = await client.post("/api/v1/tokens", json={"name": "b-secret-token"}, headers=org_b.headers())
    assert token.status_code == 201
    return {
        "agent_id": agent["agent"]["id"],
        "version_id": agent["version"]["id"],
        "credential_id": str(credential),
        "session_id": str(channel),
        "run_id": str(run_id),
        "token_id": token.json()["data"]["id"],
    }


async def test_org_a_cannot_read_change_or_learn_of_org_b_resources(
    client: httpx.AsyncClient, make_org: Callable[..., OrgHandle]
) -> None:
    org_a, org_b = make_org(), make_org()
    ids = await _org_b_resources(client, org_b)
    checked = []
    for (method, path), need in POLICY.items():
        params = [name for name in ids if "{" + name + "}" in path]
        if need == "public" or not params:
            continue
        concrete = path
        for name in params:
            concrete = concrete.replace("{" + name + "}", ids[name])
        body: dict[str, Any] | None = {} if method in {"POST", "PATCH", "PUT"} else None
        if method == "POST" and path.endswith("/versions"):
            body = version_body(None)
        if path.endswith(":test"):
            body = {"sample_message": "Oi"}
        if path.endswith(":publish"):
            body = {"version_id": ids["version_id"]}
        if method == "PATCH" and "agents" in path:
            body = {"name": "taken over"} if "versions" not in path else {"system_prompt": "taken over"}
        if method == "PATCH" and "channel-sessions" in path:
            body = {"label": "taken over"}
        response = await client.request(method, concrete, headers=org_a.headers(), json=body)
        assert response.status_code == 404, f"{method} {path}: {response.status_code} {response.text}"
        assert response.json()["error"]["code"] == "not_found"
        checked.append((method, path))
    assert len(checked) >= 15, checked

    # B's resources are untouched and still answer for B.
    for path in (
        f"/api/v1/agents/{ids['agent_id']}",
        f"/api/v1/runs/{ids['run_id']}",
        f"/api/v1/credentials/{ids['credential_id']}",
        f"/api/v1/channel-sessions/{ids['session_id']}",
    ):
        response = await client.get(path, headers=org_b.headers())
        assert response.status_code == 200, path
    agent = (await client.get(f"/api/v1/agents/{ids['agent_id']}", headers=org_b.headers())).json()["data"]
    assert agent["name"] != "taken over" and agent["archived_at"] is None

    # Lists leave B out.
    for path in (
        "/api/v1/agents",
        "/api/v1/runs",
        "/api/v1/credentials",
        "/api/v1/channel-sessions",
        "/api/v1/tokens",
        "/api/v1/audit",
    ):
        listed = await client.get(path, headers=org_a.headers())
        assert listed.status_code == 200, path
        text_of_list = listed.text
        assert not any(value in text_of_list for value in ids.values()), path


def test_application_role_without_an_org_sees_no_tenant_rows(stack: StackEndpoints, migrated: None) -> None:
    engine = create_engine(stack.database_url, pool_size=1)
    try:
        with engine.connect() as conn:
            for table in sorted(TENANT_TABLES):
                count = conn.execute(text(f'SELECT count(*) FROM "{table}"')).scalar_one()
                assert count == 0, f"{table}: {count} rows visible without app.org_id"
    finally:
        engine.dispose()


def test_tenant_rows_exist_for_the_previous_check_to_mean_something(stack: StackEndpoints, migrated: None) -> None:
    engine = create_engine(stack.database_owner_url, pool_size=1)
    try:
        with engine.connect() as conn:
            # The owner is subject to FORCE too; the definer lookup lists orgs across tenants.
            orgs = conn.execute(text("SELECT count(*) FROM list_organization_ids()")).scalar_one()
        assert orgs > 0
    finally:
        engine.dispose()
