"""``/api/v1/members`` and ``/auth/password``: an admin adds people with a role, changes it and
removes them; tokens follow (a demotion or a removal takes effect at once); the last admin stays;
a person changes their own password."""

from __future__ import annotations

import asyncio
import uuid

import httpx
import pytest
from sqlalchemy import delete, select, update

from services.api.identity.service import mint_token
from switchboard.db.enums import ApiTokenKind, Role
from switchboard.db.models.audit import AuditLogEntry
from switchboard.db.models.tenancy import Membership
from tests.support.agents import tenant_session
from tests.support.api import OrgHandle, create_org
from tests.support.stack import StackEndpoints

pytestmark = pytest.mark.integration

PASSWORD = "correct horse battery"


def _email() -> str:
    return f"person-{uuid.uuid4().hex[:10]}@example.com"


async def _login(client: httpx.AsyncClient, email: str, password: str, org: OrgHandle) -> httpx.Response:
    return await client.post(
        "/api/v1/auth/login", json={"email": email, "password": password, "org_id": str(org.org_id)}
    )


def _bearer(response: httpx.Response) -> dict[str, str]:
    return {"Authorization": f"Bearer {response.json()['data']['token']}"}


async def test_add_change_and_remove_a_member_and_their_tokens_follow(
    client: httpx.AsyncClient, org: OrgHandle
) -> None:
    email = _email()
    no_password = await client.post("/api/v1/members", json={"email": email, "role": "manager"}, headers=org.headers())
    assert no_password.status_code == 422 and no_password.json()["error"]["code"] == "password_required"
    body = {"email": email, "role": "manager", "display_name": "Ana", "password": PASSWORD}
    assert (await client.post("/api/v1/members", json=body, headers=org.headers(Role.MANAGER))).status_code == 403
    added = await client.post("/api/v1/members", json=body, headers=org.headers())
    assert added.status_code == 201, added.text
    member = added.json()["data"]
    assert member["role"] == "manager" and member["display_name"] == "Ana" and member["mfa_enrolled"] is False
    again = await client.post("/api/v1/members", json=body, headers=org.headers())
    assert again.status_code == 409 and again.json()["error"]["code"] == "member_exists"

    session = await _login(client, email, PASSWORD, org)
    assert session.status_code == 201 and session.json()["data"]["role"] == "manager"
    listed = await client.get("/api/v1/members", headers=_bearer(session))
    assert {m["email"]: m["role"] for m in listed.json()["data"]}[email] == "manager"
    assert len(listed.json()["data"]) == 2

    path = f"/api/v1/members/{member['user_id']}"
    demoted = await client.patch(path, json={"role": "viewer"}, headers=org.headers())
    assert demoted.status_code == 200 and demoted.json()["data"]["role"] == "viewer"
    assert (await client.get("/api/v1/auth/me", headers=_bearer(session))).status_code == 401, "manager token revoked"
    as_viewer = await _login(client, email, PASSWORD, org)
    assert as_viewer.json()["data"]["role"] == "viewer"
    promoted = await client.patch(path, json={"role": "manager"}, headers=org.headers())
    assert promoted.status_code == 200
    assert (await client.get("/api/v1/auth/me", headers=_bearer(as_viewer))).status_code == 200, (
        "a promotion keeps tokens"
    )

    assert (await client.delete(path, headers=org.headers())).status_code == 204
    assert (await client.get("/api/v1/auth/me", headers=_bearer(as_viewer))).status_code == 401
    assert (await _login(client, email, PASSWORD, org)).status_code == 401
    assert (await client.delete(path, headers=org.headers())).status_code == 404

    with tenant_session(org) as db:
        rows = db.execute(
            select(AuditLogEntry.created_at, AuditLogEntry.action)
            .where(AuditLogEntry.org_id == org.org_id, AuditLogEntry.target_id == member["user_id"])
            .order_by(AuditLogEntry.created_at)
        ).all()
    # Entries of one request share its transaction's timestamp: their order among themselves is not kept.
    by_request: dict[object, set[str]] = {}
    for at, action in rows:
        if action.startswith("member."):
            by_request.setdefault(at, set()).add(action)
    assert list(by_request.values()) == [
        {"member.added"},
        {"member.role_changed", "member.tokens_revoked"},
        {"member.role_changed"},
        {"member.removed"},
    ]


async def test_the_last_admin_stays_and_an_existing_account_keeps_its_password(
    client: httpx.AsyncClient, stack: StackEndpoints
) -> None:
    email = _email()
    home = create_org(stack.database_url, email=email, password=PASSWORD)
    admin_path = f"/api/v1/members/{home.admin_user_id}"
    for refused in (
        await client.patch(admin_path, json={"role": "manager"}, headers=home.headers()),
        await client.delete(admin_path, headers=home.headers()),
    ):
        assert refused.status_code == 409 and refused.json()["error"]["code"] == "last_admin"

    other = create_org(stack.database_url)
    joined = await client.post(
        "/api/v1/members",
        json={"email": email.upper(), "role": "viewer", "password": "x" * 20},
        headers=other.headers(),
    )
    assert joined.status_code == 201 and joined.json()["data"]["user_id"] == str(home.admin_user_id)
    assert (await _login(client, email, PASSWORD, other)).status_code == 201, "the account kept its own password"
    assert (await _login(client, email, "x" * 20, other)).status_code == 401


async def test_a_person_changes_their_own_password(client: httpx.AsyncClient, stack: StackEndpoints) -> None:
    email = _email()
    org = create_org(stack.database_url, email=email, password=PASSWORD)
    session = _bearer(await _login(client, email, PASSWORD, org))
    wrong = await client.post(
        "/api/v1/auth/password",
        json={"current_password": "nope", "new_password": "a new long password"},
        headers=session,
    )
    assert wrong.status_code == 422 and wrong.json()["error"]["code"] == "current_password_wrong"
    short = await client.post(
        "/api/v1/auth/password", json={"current_password": PASSWORD, "new_password": "short"}, headers=session
    )
    assert short.status_code == 422
    changed = await client.post(
        "/api/v1/auth/password",
        json={"current_password": PASSWORD, "new_password": "a new long password"},
        headers=session,
    )
    assert changed.status_code == 204, changed.text
    assert (await _login(client, email, PASSWORD, org)).status_code == 401
    assert (await _login(client, email, "a new long password", org)).status_code == 201


async def test_two_admins_demoting_each_other_at_once_leave_one_admin(
    client: httpx.AsyncClient, org: OrgHandle
) -> None:
    added = await client.post(
        "/api/v1/members", json={"email": _email(), "role": "admin", "password": PASSWORD}, headers=org.headers()
    )
    second = uuid.UUID(added.json()["data"]["user_id"])
    with tenant_session(org) as session:
        token = mint_token(
            session,
            org_id=org.org_id,
            name="second admin",
            role=Role.ADMIN,
            kind=ApiTokenKind.SESSION,
            mfa_verified=True,
            user_id=second,
            created_by=second,
            expires_at=None,
        ).plaintext
    first_demotes, second_demotes = await asyncio.gather(
        client.patch(f"/api/v1/members/{second}", json={"role": "viewer"}, headers=org.headers()),
        client.patch(
            f"/api/v1/members/{org.admin_user_id}",
            json={"role": "viewer"},
            headers={"Authorization": f"Bearer {token}"},
        ),
    )
    outcomes = sorted([first_demotes.status_code, second_demotes.status_code])
    assert outcomes in ([200, 409], [200, 401]), (first_demotes.text, second_demotes.text)
    with tenant_session(org) as session:
        admins = session.scalars(
            select(Membership).where(Membership.org_id == org.org_id, Membership.role == "admin")
        ).all()
    assert len(admins) == 1


async def test_a_token_minted_while_its_member_was_removed_or_demoted_is_worth_the_membership(
    client: httpx.AsyncClient, org: OrgHandle
) -> None:
    """A login that read the membership before its removal committed wrote its token after: the
    removal revoked the tokens it saw, not that one, and the removed person kept a session at their
    old role. The token is checked against the membership each time it is used."""
    email = _email()
    body = {"email": email, "role": "admin", "display_name": "Bia", "password": PASSWORD}
    added = await client.post("/api/v1/members", json=body, headers=org.headers())
    assert added.status_code == 201, added.text
    user_id = added.json()["data"]["user_id"]
    session = await _login(client, email, PASSWORD, org)
    assert session.json()["data"]["role"] == "admin"

    # The demotion commits after the login read the membership: the token was not revoked by it.
    with tenant_session(org) as db:
        db.execute(
            update(Membership)
            .where(Membership.org_id == org.org_id, Membership.user_id == user_id)
            .values(role="viewer")
        )
    me = await client.get("/api/v1/auth/me", headers=_bearer(session))
    assert me.status_code == 200 and me.json()["data"]["role"] == "viewer", "it acts at the membership's role"
    assert (
        await client.post("/api/v1/members", json={**body, "email": _email()}, headers=_bearer(session))
    ).status_code == 403

    # The removal commits after the login: the token authenticates nobody.
    with tenant_session(org) as db:
        db.execute(delete(Membership).where(Membership.org_id == org.org_id, Membership.user_id == user_id))
    assert (await client.get("/api/v1/auth/me", headers=_bearer(session))).status_code == 401
