"""Login with and without a second factor, TOTP enrollment, API tokens, request ids."""

from __future__ import annotations

import base64
import time
import uuid
from collections.abc import Callable

import httpx
import pytest

from services.api.core.security import totp_code
from switchboard.db.enums import Role
from tests.support.api import OrgHandle

pytestmark = pytest.mark.integration


def _secret(b32: str) -> bytes:
    return base64.b32decode(b32 + "=" * (-len(b32) % 8))


async def test_login_yields_mfa_verified_session_only_with_a_valid_totp_code(
    client: httpx.AsyncClient, make_org: Callable[..., OrgHandle]
) -> None:
    email = f"owner-{uuid.uuid4().hex[:8]}@example.com"
    org = make_org(email=email, password="correct horse battery staple")

    plain = await client.post("/api/v1/auth/login", json={"email": email, "password": "correct horse battery staple"})
    assert plain.status_code == 201, plain.text
    session = plain.json()["data"]
    assert session["mfa_verified"] is False and session["kind"] == "session" and session["role"] == "admin"
    auth = {"Authorization": f"Bearer {session['token']}"}

    # Without a second factor an admin session cannot do admin writes.
    refused = await client.post("/api/v1/tokens", json={"name": "ci"}, headers=auth)
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "mfa_required"

    # A TOTP code cannot prove anything before enrollment.
    early = await client.post(
        "/api/v1/auth/login", json={"email": email, "password": "correct horse battery staple", "totp_code": "123456"}
    )
    assert early.status_code == 401

    enrollment = await client.post("/api/v1/auth/mfa/totp", headers=auth)
    assert enrollment.status_code == 201
    secret = _secret(enrollment.json()["data"]["secret"])
    assert enrollment.json()["data"]["otpauth_uri"].startswith("otpauth://totp/")
    bad = await client.post("/api/v1/auth/mfa/totp:confirm", json={"code": "000000"}, headers=auth)
    assert bad.status_code == 422 and bad.json()["error"]["code"] == "validation_error"
    confirmed = await client.post("/api/v1/auth/mfa/totp:confirm", json={"code": totp_code(secret)}, headers=auth)
    assert confirmed.status_code == 204

    wrong = await client.post(
        "/api/v1/auth/login",
        json={
            "email": email,
            "password": "correct horse battery staple",
            "totp_code": "000000" if totp_code(secret) != "000000" else "111111",
        },
    )
    assert wrong.status_code == 401
    strong = await client.post(  # the next step's code: the enrollment's own was used up (a code is good once)
        "/api/v1/auth/login",
        json={
            "email": email,
            "password": "correct horse battery staple",
            "totp_code": totp_code(secret, at=time.time() + 30),
        },
    )
    assert strong.status_code == 201
    assert strong.json()["data"]["mfa_verified"] is True and strong.json()["data"]["org_id"] == str(org.org_id)
    strong_auth = {"Authorization": f"Bearer {strong.json()['data']['token']}"}
    created = await client.post("/api/v1/tokens", json={"name": "ci", "role": "manager"}, headers=strong_auth)
    assert created.status_code == 201, created.text


async def test_wrong_password_and_unknown_user_are_both_401(client: httpx.AsyncClient, org: OrgHandle) -> None:
    for body in ({"email": "nobody@example.com", "password": "x"}, {"email": "nobody@example.com", "password": ""}):
        response = await client.post("/api/v1/auth/login", json=body)
        assert response.status_code in (401, 422)
        assert response.json()["error"]["code"] in ("unauthorized", "validation_error")


async def test_api_tokens_are_shown_once_hashed_and_revocable(client: httpx.AsyncClient, org: OrgHandle) -> None:
    created = await client.post("/api/v1/tokens", json={"name": "reporting", "role": "viewer"}, headers=org.headers())
    assert created.status_code == 201, created.text
    token = created.json()["data"]
    assert token["token"].startswith("sbt_") and token["mfa_verified"] is False
    listed = await client.get("/api/v1/tokens", headers=org.headers())
    views = {t["id"]: t for t in listed.json()["data"]}
    assert token["id"] in views and "token" not in views[token["id"]]
    assert views[token["id"]]["token_prefix"] == token["token"][:12]

    viewer = {"Authorization": f"Bearer {token['token']}"}
    assert (await client.get("/api/v1/auth/me", headers=viewer)).json()["data"]["role"] == "viewer"
    revoked = await client.delete(f"/api/v1/tokens/{token['id']}", headers=org.headers())
    assert revoked.status_code == 204
    after = await client.get("/api/v1/auth/me", headers=viewer)
    assert after.status_code == 401 and after.json()["error"]["code"] == "unauthorized"


@pytest.mark.parametrize("role", ["viewer", "manager", "admin"])
async def test_anyone_can_end_their_own_session_and_it_is_refused_at_once(
    client: httpx.AsyncClient, org: OrgHandle, role: str
) -> None:
    created = await client.post("/api/v1/tokens", json={"name": f"{role} session", "role": role}, headers=org.headers())
    token = created.json()["data"]
    caller = {"Authorization": f"Bearer {token['token']}"}
    assert (await client.get("/api/v1/auth/me", headers=caller)).status_code == 200
    listed = {t["id"]: t for t in (await client.get("/api/v1/tokens", headers=org.headers())).json()["data"]}
    assert listed[token["id"]]["last_used_at"] is not None, "an admin sees which tokens are in use"
    assert (await client.post("/api/v1/auth/logout", headers=caller)).status_code == 204
    after = await client.get("/api/v1/auth/me", headers=caller)
    assert after.status_code == 401 and after.json()["error"]["code"] == "unauthorized"
    assert (await client.post("/api/v1/auth/logout", headers=caller)).status_code == 401
    listed = {t["id"] for t in (await client.get("/api/v1/tokens", headers=org.headers())).json()["data"]}
    assert token["id"] not in listed, "a revoked token is no longer listed"
    assert (await client.get("/api/v1/auth/me", headers=org.headers())).status_code == 200, "other sessions live on"


async def test_a_token_cannot_outrank_its_creator(client: httpx.AsyncClient, org: OrgHandle) -> None:
    # Only admins (with MFA) mint tokens, so the cap shows as: an admin may mint admin, and manager may not mint.
    manager = await client.post(
        "/api/v1/tokens", json={"name": "x", "role": "admin"}, headers=org.headers(Role.MANAGER)
    )
    assert manager.status_code == 403 and manager.json()["error"]["code"] == "forbidden"


async def test_missing_or_malformed_token_is_401_with_the_envelope(client: httpx.AsyncClient) -> None:
    for headers in ({}, {"Authorization": "Bearer sbt_nope"}, {"Authorization": "Basic abc"}):
        response = await client.get("/api/v1/auth/me", headers=headers)
        assert response.status_code == 401
        assert response.json()["error"]["code"] == "unauthorized"
        assert response.headers["X-Request-Id"]


async def test_request_id_is_echoed(client: httpx.AsyncClient, org: OrgHandle) -> None:
    response = await client.get("/api/v1/auth/me", headers={**org.headers(), "X-Request-Id": "req-42"})
    assert response.status_code == 200
    assert response.headers["X-Request-Id"] == "req-42"
    unknown = await client.get("/api/v1/nope", headers={"X-Request-Id": "req-43"})
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "not_found"
    assert unknown.headers["X-Request-Id"] == "req-43"
