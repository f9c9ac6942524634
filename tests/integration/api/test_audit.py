"""The audit log: sensitive mutations are recorded, paged newest first, scoped to the org, secret-free."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest

from switchboard.db.enums import Role
from tests.support.api import OrgHandle

pytestmark = pytest.mark.integration


async def test_token_mutations_are_audited_and_paged(client: httpx.AsyncClient, org: OrgHandle) -> None:
    created = []
    for i in range(5):
        response = await client.post("/api/v1/tokens", json={"name": f"t{i}"}, headers=org.headers())
        created.append(response.json()["data"])
    await client.delete(f"/api/v1/tokens/{created[0]['id']}", headers=org.headers())

    seen: list[dict] = []
    cursor = None
    while True:
        params = {"limit": 2, "action": "api_token", **({"cursor": cursor} if cursor else {})}
        page = await client.get("/api/v1/audit", params=params, headers=org.headers(Role.MANAGER))
        assert page.status_code == 200, page.text
        seen.extend(page.json()["data"])
        cursor = page.json()["next_cursor"]
        if cursor is None:
            break
    actions = [entry["action"] for entry in seen]
    assert actions.count("api_token.created") == 5 and actions.count("api_token.revoked") == 1
    assert actions[0] == "api_token.revoked", "newest first"
    assert len({entry["id"] for entry in seen}) == len(seen), "no entry twice across pages"
    for entry in seen:
        assert all(token["token"] not in str(entry) for token in created)


async def test_audit_is_scoped_to_the_org_and_needs_manager(
    client: httpx.AsyncClient, make_org: Callable[..., OrgHandle]
) -> None:
    org_a, org_b = make_org(), make_org()
    await client.post("/api/v1/tokens", json={"name": "only-in-b"}, headers=org_b.headers())
    seen_by_a = (await client.get("/api/v1/audit", headers=org_a.headers())).json()["data"]
    assert all("only-in-b" not in str(entry) for entry in seen_by_a)
    assert {entry["action"] for entry in seen_by_a} == {"organization.bootstrapped"}
    viewer = await client.get("/api/v1/audit", headers=org_a.headers(Role.VIEWER))
    assert viewer.status_code == 403 and viewer.json()["error"]["code"] == "forbidden"


async def test_a_forged_cursor_is_a_validation_error(client: httpx.AsyncClient, org: OrgHandle) -> None:
    response = await client.get("/api/v1/audit", params={"cursor": "not-a-cursor"}, headers=org.headers())
    assert response.status_code == 422 and response.json()["error"]["code"] == "validation_error"
