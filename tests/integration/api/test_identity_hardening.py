"""Identity hardening found by review (2026-12-05): a second factor is enrolled only from a login
session, and a login's answer takes as long for an unknown email as for a wrong password."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import httpx
import pytest

from services.api.identity import service
from tests.support.api import OrgHandle

pytestmark = pytest.mark.integration


async def test_an_automation_token_cannot_enroll_its_creators_second_factor(
    client: httpx.AsyncClient, org: OrgHandle
) -> None:
    """An automation token carries its creator's user id; whoever holds it (a CI job, a viewer's
    script) is not that person, and enrolling would hand them the creator's TOTP secret."""
    created = await client.post("/api/v1/tokens", json={"name": "reporting", "role": "viewer"}, headers=org.headers())
    assert created.status_code == 201, created.text
    automation = {"Authorization": f"Bearer {created.json()['data']['token']}"}
    for path, body in (("/api/v1/auth/mfa/totp", None), ("/api/v1/auth/mfa/totp:confirm", {"code": "123456"})):
        refused = await client.post(path, json=body, headers=automation)
        assert refused.status_code == 403, refused.text
        assert refused.json()["error"]["code"] == "session_required"
    me = await client.get("/api/v1/auth/me", headers=org.headers())
    assert me.json()["data"]["mfa_enrolled"] is False, "nothing was enrolled"


async def test_an_unknown_email_costs_a_password_check_like_a_wrong_password(
    client: httpx.AsyncClient, make_org: Callable[..., OrgHandle], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Timing is not asserted (this machine is noisy): the work is. Both answers are the same 401
    after one scrypt check each — before, an unknown email skipped it (35 ms against ~0)."""
    checked: list[bool] = []
    real = service.verify_password

    def counting(password: str, stored: str | None) -> bool:
        checked.append(stored is not None)
        return real(password, stored)

    monkeypatch.setattr(service, "verify_password", counting)
    email = f"owner-{uuid.uuid4().hex[:8]}@example.com"
    make_org(email=email, password="correct horse battery staple")
    wrong = await client.post("/api/v1/auth/login", json={"email": email, "password": "wrong password here"})
    unknown = await client.post(
        "/api/v1/auth/login", json={"email": f"nobody-{uuid.uuid4().hex[:8]}@example.com", "password": "whatever!!"}
    )
    assert (wrong.status_code, unknown.status_code) == (401, 401)
    assert wrong.json()["error"] == unknown.json()["error"]
    assert checked == [True, False], "each login ran one password check"
