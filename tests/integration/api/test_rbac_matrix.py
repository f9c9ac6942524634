"""The full role x endpoint matrix [004 §7]: who may call what, and admin writes need MFA.

Every operation in the OpenAPI document must appear in ``POLICY`` (a new endpoint
without a declared policy fails the suite). For each operation and each caller —
viewer, manager, admin without MFA, admin with MFA — the answer is 403
``forbidden`` below the minimum role, 403 ``mfa_required`` for an admin write
without a second factor, and otherwise anything but 401/403 (path ids are random,
bodies empty: the request is refused later as 404/422, with no side effect).
"""

from __future__ import annotations

import re
import uuid
from typing import Literal

import httpx
import pytest

from switchboard.db.enums import Role
from tests.support.api import OrgHandle, create_org
from tests.support.stack import StackEndpoints

pytestmark = pytest.mark.integration

Need = Literal["public", "viewer", "manager", "admin_mfa"]

POLICY: dict[tuple[str, str], Need] = {
    ("POST", "/api/v1/auth/login"): "public",
    ("POST", "/api/v1/webhooks/waha"): "public",
    ("POST", "/api/v1/webhooks/waha/{channel_session_id}"): "public",
    ("GET", "/api/v1/auth/me"): "viewer",
    ("POST", "/api/v1/auth/logout"): "viewer",
    ("POST", "/api/v1/auth/mfa/totp"): "viewer",
    ("POST", "/api/v1/auth/mfa/totp:confirm"): "viewer",
    ("GET", "/api/v1/providers"): "viewer",
    ("GET", "/api/v1/models"): "viewer",
    ("GET", "/api/v1/providers/{provider}/models"): "viewer",
    ("GET", "/api/v1/tokens"): "manager",
    ("POST", "/api/v1/tokens"): "admin_mfa",
    ("DELETE", "/api/v1/tokens/{token_id}"): "admin_mfa",
    ("GET", "/api/v1/credentials"): "manager",
    ("GET", "/api/v1/credentials/{credential_id}"): "manager",
    ("POST", "/api/v1/credentials"): "admin_mfa",
    ("PATCH", "/api/v1/credentials/{credential_id}"): "admin_mfa",
    ("DELETE", "/api/v1/credentials/{credential_id}"): "admin_mfa",
    ("POST", "/api/v1/credentials/{credential_id}:revalidate"): "manager",
    ("GET", "/api/v1/agents"): "manager",
    ("GET", "/api/v1/agents/{agent_id}"): "manager",
    ("POST", "/api/v1/agents"): "admin_mfa",
    ("PATCH", "/api/v1/agents/{agent_id}"): "admin_mfa",
    ("DELETE", "/api/v1/agents/{agent_id}"): "admin_mfa",
    ("POST", "/api/v1/agents/{agent_id}:duplicate"): "admin_mfa",
    ("POST", "/api/v1/agents/{agent_id}:pause"): "admin_mfa",
    ("POST", "/api/v1/agents/{agent_id}:publish"): "admin_mfa",
    ("GET", "/api/v1/agents/{agent_id}/versions"): "manager",
    ("POST", "/api/v1/agents/{agent_id}/versions"): "admin_mfa",
    ("GET", "/api/v1/agents/{agent_id}/versions/{version_id}"): "manager",
    ("PATCH", "/api/v1/agents/{agent_id}/versions/{version_id}"): "admin_mfa",
    ("GET", "/api/v1/runs"): "manager",
    ("GET", "/api/v1/runs/{run_id}"): "manager",
    ("GET", "/api/v1/agents/{agent_id}/runs"): "manager",
    ("POST", "/api/v1/agents/{agent_id}/versions/{version_id}:test"): "admin_mfa",
    ("GET", "/api/v1/skills"): "manager",
    ("GET", "/api/v1/skills/{name}"): "manager",
    ("PUT", "/api/v1/skills/{name}"): "admin_mfa",
    ("DELETE", "/api/v1/skills/{name}"): "admin_mfa",
    ("GET", "/api/v1/runs/{run_id}/events"): "manager",
    ("GET", "/api/v1/channel-sessions"): "manager",
    ("GET", "/api/v1/channel-sessions/{session_id}"): "manager",
    ("POST", "/api/v1/channel-sessions"): "admin_mfa",
    ("PATCH", "/api/v1/channel-sessions/{session_id}"): "admin_mfa",
    ("POST", "/api/v1/channel-sessions/{session_id}:rotate-secret"): "admin_mfa",
    ("GET", "/api/v1/audit"): "manager",
    ("GET", "/api/v1/conversations/{conversation_id}"): "manager",
    ("POST", "/api/v1/conversations/{conversation_id}:handback"): "manager",
    ("POST", "/api/v1/conversations/{conversation_id}:takeover"): "manager",
    ("GET", "/api/v1/contacts"): "manager",
    ("GET", "/api/v1/contacts/{contact_id}"): "manager",
    ("PATCH", "/api/v1/contacts/{contact_id}"): "manager",
    ("POST", "/api/v1/contacts/{contact_id}:erase"): "admin_mfa",
    ("GET", "/api/v1/memory/facts"): "manager",
    ("POST", "/api/v1/memory/facts"): "manager",
    ("DELETE", "/api/v1/memory/facts/{fact_id}"): "manager",
    ("GET", "/api/v1/conversations/{conversation_id}/memory"): "manager",
    ("DELETE", "/api/v1/conversations/{conversation_id}/memory/{part}"): "manager",
    ("POST", "/api/v1/conversations/{conversation_id}:wake"): "manager",
    ("GET", "/api/v1/org-webhook"): "manager",
    ("PUT", "/api/v1/org-webhook"): "admin_mfa",
    ("DELETE", "/api/v1/org-webhook"): "admin_mfa",
    ("GET", "/api/v1/home/daily-brief"): "viewer",
    ("POST", "/api/v1/home/todos"): "manager",
    ("POST", "/api/v1/home/todos/{todo_id}:done"): "manager",
    ("GET", "/api/v1/insights"): "viewer",
    ("POST", "/api/v1/insights/{insight_id}:dismiss"): "manager",
    ("POST", "/api/v1/insights/{insight_id}:seen"): "manager",
    ("GET", "/api/v1/budget-policies"): "manager",
    ("GET", "/api/v1/organization"): "viewer",
    ("GET", "/api/v1/home/prefs"): "viewer",
    ("PUT", "/api/v1/home/prefs"): "manager",
    ("GET", "/api/v1/members"): "manager",
    ("POST", "/api/v1/members"): "admin_mfa",
    ("PATCH", "/api/v1/members/{user_id}"): "admin_mfa",
    ("DELETE", "/api/v1/members/{user_id}"): "admin_mfa",
    ("POST", "/api/v1/auth/password"): "viewer",
    ("GET", "/api/v1/conversations"): "manager",
    ("GET", "/api/v1/conversations/{conversation_id}/messages"): "manager",
    ("POST", "/api/v1/conversations/{conversation_id}/messages"): "manager",
    ("GET", "/api/v1/conversations/{conversation_id}/decisions"): "manager",
    ("GET", "/api/v1/dispatch-decisions"): "manager",
    ("GET", "/api/v1/followups"): "manager",
    ("POST", "/api/v1/followups/{followup_id}:cancel"): "manager",
    ("PATCH", "/api/v1/organization"): "admin_mfa",
    ("PUT", "/api/v1/budget-policies/organization"): "admin_mfa",
    ("DELETE", "/api/v1/budget-policies/organization"): "admin_mfa",
    ("PUT", "/api/v1/budget-policies/agents/{agent_id}"): "admin_mfa",
    ("DELETE", "/api/v1/budget-policies/agents/{agent_id}"): "admin_mfa",
    ("POST", "/api/v1/insights/{insight_id}:action"): "manager",
    ("GET", "/api/v1/usage"): "viewer",
    ("GET", "/api/v1/budget-incidents"): "viewer",
    # Autonomy (docs/autonomy.md).
    ("GET", "/api/v1/autonomy"): "viewer",
    ("PUT", "/api/v1/autonomy/areas/{area}"): "admin_mfa",
    ("PUT", "/api/v1/autonomy/actions/{action_type}"): "admin_mfa",
    ("DELETE", "/api/v1/autonomy/actions/{action_type}"): "admin_mfa",
    ("PUT", "/api/v1/autonomy/kill-switch"): "admin_mfa",
    ("POST", "/api/v1/autonomy/{area}/promotions/{action_type}:accept"): "admin_mfa",
    ("POST", "/api/v1/autonomy/{area}/promotions/{action_type}:dismiss"): "manager",
    ("GET", "/api/v1/decisions"): "viewer",
    # Goals (/goal and /loop work).
    ("GET", "/api/v1/goals"): "viewer",
    ("POST", "/api/v1/goals/{goal_id}:stop"): "manager",
    ("POST", "/api/v1/conversations/{conversation_id}/commands"): "manager",
    ("POST", "/api/v1/channel-sessions/{session_id}:connect"): "admin_mfa",
    ("POST", "/api/v1/channel-sessions/{session_id}:disconnect"): "admin_mfa",
    ("POST", "/api/v1/channel-sessions/{session_id}:archive"): "admin_mfa",
    ("GET", "/api/v1/channel-sessions/{session_id}/qr"): "admin_mfa",
    ("POST", "/api/v1/decisions/{action_id}:approve"): "manager",
    ("POST", "/api/v1/decisions/{action_id}:reject"): "manager",
}

CALLERS: dict[str, tuple[Role, bool]] = {
    "viewer": (Role.VIEWER, True),
    "manager": (Role.MANAGER, True),
    "admin_no_mfa": (Role.ADMIN, False),
    "admin_mfa": (Role.ADMIN, True),
}

_RANK = {"viewer": 0, "manager": 1, "admin_mfa": 2}

# Revokes the calling token: the matrix reuses its callers' tokens, so this one is checked on its
# own (tests/integration/api/test_identity.py, every role logs out).
REVOKES_THE_CALLER = {("POST", "/api/v1/auth/logout")}


@pytest.fixture(scope="module")
def matrix_org(stack: StackEndpoints, migrated: None) -> OrgHandle:
    """One org (and one token per caller) for the whole matrix: the calls have no side effects."""
    return create_org(stack.database_url, name="RBAC matrix")


def _expected(need: Need, caller: str) -> str:
    """'allowed', 'forbidden' or 'mfa_required' for this caller on an operation needing ``need``."""
    role, mfa = CALLERS[caller]
    if need == "public":
        return "allowed"
    if role.rank < _RANK[need]:
        return "forbidden"
    if need == "admin_mfa" and not mfa:
        return "mfa_required"
    return "allowed"


async def test_policy_covers_every_operation(client: httpx.AsyncClient) -> None:
    openapi = (await client.get("/openapi.json")).json()
    operations = {
        (m.upper(), p)
        for p, item in openapi["paths"].items()
        for m in item
        if m in {"get", "post", "put", "patch", "delete"} and p.startswith("/api/v1")
    }
    assert operations == set(POLICY), {
        "undeclared": sorted(operations - set(POLICY)),
        "stale": sorted(set(POLICY) - operations),
    }


@pytest.mark.parametrize("caller", list(CALLERS))
@pytest.mark.parametrize(
    ("method", "path"),
    [op for op, need in POLICY.items() if need != "public" and op not in REVOKES_THE_CALLER],
    ids=lambda value: str(value),
)
async def test_role_matrix(
    client: httpx.AsyncClient, matrix_org: OrgHandle, method: str, path: str, caller: str
) -> None:
    role, mfa = CALLERS[caller]
    concrete = re.sub(r"\{provider\}", "openai", path)
    concrete = re.sub(r"\{part\}", "summary", concrete)
    concrete = re.sub(r"\{[^}]+\}", str(uuid.uuid4()), concrete)
    response = await client.request(
        method,
        concrete,
        headers=matrix_org.headers(role, mfa=mfa),
        json={} if method in {"POST", "PATCH", "PUT"} else None,
    )
    expected = _expected(POLICY[(method, path)], caller)
    if expected == "allowed":
        assert response.status_code not in (401, 403), f"{caller} refused: {response.status_code} {response.text}"
    else:
        assert response.status_code == 403, f"{caller} got {response.status_code}: {response.text}"
        assert response.json()["error"]["code"] == expected
