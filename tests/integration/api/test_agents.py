"""Agents and versions over HTTP [004 §4.3-4.4]: CRUD, save, draft-only PATCH with follow-up
merge, validation at save time, archive/duplicate, isolation, roles, audit."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest
from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from switchboard.db.enums import Role
from switchboard.db.models.agents import AiModel, AiProviderCredential
from switchboard.db.models.audit import AuditLogEntry
from switchboard.db.models.channels import ChannelSession
from switchboard.db.session import create_engine
from tests.support.agents import (
    audit_actions,
    create_agent,
    error_body,
    make_channel,
    make_credential,
    save_draft,
    tenant_session,
    version_body,
)
from tests.support.api import OrgHandle

pytestmark = pytest.mark.integration


async def test_create_agent_with_first_draft_then_read_it_back(client: httpx.AsyncClient, org: OrgHandle) -> None:
    channel = make_channel(org)
    credential = make_credential(org)
    created = await create_agent(client, org, channel, credential_id=str(credential))
    agent, version = created["agent"], created["version"]

    assert agent["kind"] == "mcp_agent" and agent["status"] == "draft" and agent["priority"] == 10
    assert agent["published_version_id"] is None and agent["latest_draft_id"] == version["id"]
    assert version["version_number"] == 1 and version["status"] == "draft"
    assert version["credential_id"] == str(credential) and version["channel_session_id"] == str(channel)
    assert version["cost_budget_cents"] == 25 and version["max_steps"] == 8
    # Defaults of the seed: handoff keywords [004 D4], enqueue, follow-up enabled, own/group messages ignored.
    assert version["handoff_keywords"] == ["falar com humano", "atendente", "pessoa real"]
    assert version["handoff_tool_enabled"] is True and version["concurrency_policy"] == "enqueue"
    assert version["followup"] == {"enabled": True, "callback_enabled": True, "flow_pointer_ids": []}
    assert version["trigger_config"] == {
        "event_types": ["message"],
        "ignore_groups": True,
        "ignore_own": True,
        "keyword_regex": None,
        "business_hours": None,
    }

    got = await client.get(f"/api/v1/agents/{agent['id']}", headers=org.headers(Role.MANAGER))
    assert got.status_code == 200 and got.json()["data"] == agent
    one = await client.get(f"/api/v1/agents/{agent['id']}/versions/{version['id']}", headers=org.headers(Role.MANAGER))
    assert one.status_code == 200 and one.json()["data"] == version
    assert audit_actions(org, agent["id"]) == ["ai_agent.created"]


async def test_seed_shaped_trigger_and_business_hours_are_accepted(client: httpx.AsyncClient, org: OrgHandle) -> None:
    channel = make_channel(org)
    created = await create_agent(
        client,
        org,
        channel,
        trigger_config={
            "events": ["message"],
            "filters": {
                "ignore_groups": False,
                "ignore_self": True,
                "keyword_regex": r"pre(ç|c)o|or[cç]amento",
                "business_hours": {
                    "time_zone": "America/Sao_Paulo",
                    "windows": [
                        {"weekday": "monday", "start_minute": 540, "end_minute": 1080},
                        {"weekday": "saturday", "start_minute": 540, "end_minute": 720},
                    ],
                },
            },
        },
    )
    trigger = created["version"]["trigger_config"]
    assert trigger["event_types"] == ["message"] and trigger["ignore_groups"] is False
    assert trigger["keyword_regex"] == r"pre(ç|c)o|or[cç]amento"
    assert trigger["business_hours"]["time_zone"] == "America/Sao_Paulo"
    assert len(trigger["business_hours"]["windows"]) == 2


@pytest.mark.parametrize(
    ("override", "loc_tail", "needle"),
    [
        ({"trigger_config": {"keyword_regex": "pre(ço"}}, ["trigger_config", "keyword_regex"], "missing )"),
        ({"trigger_config": {"keyword_regex": "a" * 501}}, ["trigger_config", "keyword_regex"], "at most 500"),
        # Catastrophic backtracking: refused before it can stall the dispatcher.
        ({"trigger_config": {"keyword_regex": "^(a|aa)+$"}}, ["trigger_config", "keyword_regex"], "too_slow"),
        ({"trigger_config": {"keyword_regex": r"(\w+\s?)+$"}}, ["trigger_config", "keyword_regex"], "too_slow"),
        (
            {"trigger_config": {"business_hours": {"time_zone": "Mars/Olympus", "windows": []}}},
            ["trigger_config", "business_hours", "time_zone"],
            "IANA",
        ),
        (
            {
                "trigger_config": {
                    "business_hours": {
                        "time_zone": "UTC",
                        "windows": [
                            {"weekday": "monday", "start_minute": 600, "end_minute": 500},
                        ],
                    }
                }
            },
            ["trigger_config", "business_hours", "windows", "0"],
            "end_minute",
        ),
        (
            {
                "trigger_config": {
                    "business_hours": {
                        "time_zone": "UTC",
                        "windows": [
                            {"weekday": "monday", "start_minute": 0, "end_minute": 600},
                            {"weekday": "monday", "start_minute": 500, "end_minute": 700},
                        ],
                    }
                }
            },
            ["trigger_config", "business_hours"],
            "overlap",
        ),
        ({"max_steps": 26}, ["max_steps"], "less than or equal to 25"),
        ({"max_steps": 0}, ["max_steps"], "greater than or equal to 1"),
        ({"concurrency_policy": "ignore"}, ["concurrency_policy"], "enqueue"),
        ({"model": "gpt-5"}, ["model"], "not a anthropic model"),
        ({"model": "claude-nonexistent"}, ["model"], "catalog"),
        ({"credential_id": str(uuid.uuid4())}, ["credential_id"], "No such credential"),
        ({"channel_session_id": str(uuid.uuid4())}, ["channel_session_id"], "No such channel session"),
        ({"temperature": 0.2}, ["temperature"], "Extra inputs"),
        ({"tool_ids": ["crm_search_contacts", "crm_delete_everything"]}, ["tool_ids", "1"], "not a tool"),
        ({"tool_ids": ["crm_search_contacts", "crm_search_contacts"]}, ["tool_ids"], "must not repeat"),
    ],
)
async def test_invalid_configuration_is_a_422_naming_the_field(
    client: httpx.AsyncClient, org: OrgHandle, override: dict[str, Any], loc_tail: list[str], needle: str
) -> None:
    channel = make_channel(org)
    response = await client.post(
        "/api/v1/agents",
        json={"name": "Bad", "version": version_body(channel, **override)},
        headers=org.headers(),
    )
    assert response.status_code == 422, response.text
    error = error_body(response)
    assert error["code"] == "validation_error"
    matching = [e for e in error["details"]["errors"] if e["loc"][-len(loc_tail) :] == loc_tail]
    assert matching, error
    assert any(needle in e["msg"] for e in matching), matching


async def test_a_version_cannot_name_an_archived_number(client: httpx.AsyncClient, org: OrgHandle) -> None:
    channel = make_channel(org)
    with tenant_session(org) as session:
        session.execute(update(ChannelSession).where(ChannelSession.id == channel).values(archived_at=func.now()))
    response = await client.post(
        "/api/v1/agents", json={"name": "Old number", "version": version_body(channel)}, headers=org.headers()
    )
    assert response.status_code == 422, response.text
    assert [e["type"] for e in error_body(response)["details"]["errors"]] == ["archived_channel_session"]


async def test_model_must_not_be_deprecated_and_credential_must_match_provider(
    client: httpx.AsyncClient, org: OrgHandle, stack: Any
) -> None:
    channel = make_channel(org)
    openai_key = make_credential(org, provider="openai")
    wrong = await client.post(
        "/api/v1/agents",
        json={"name": "x", "version": version_body(channel, credential_id=str(openai_key))},
        headers=org.headers(),
    )
    assert wrong.status_code == 422
    assert error_body(wrong)["details"]["errors"][0]["type"] == "credential_provider_mismatch"

    # A deprecated catalog model is refused at save time.
    model = f"test-deprecated-{uuid.uuid4().hex[:8]}"
    engine = create_engine(stack.database_owner_url, pool_size=1)
    try:
        with Session(engine) as session, session.begin():
            session.add(AiModel(provider="google", model=model, display_name="Old", deprecated_at=_now(session)))
        deprecated = await client.post(
            "/api/v1/agents",
            json={"name": "x", "version": version_body(channel, provider="google", model=model)},
            headers=org.headers(),
        )
        assert deprecated.status_code == 422
        assert error_body(deprecated)["details"]["errors"][0]["type"] == "deprecated_model"
    finally:
        with Session(engine) as session, session.begin():
            session.execute(delete(AiModel).where(AiModel.model == model))
        engine.dispose()


def _now(session: Session) -> Any:
    return session.execute(select(func.now())).scalar_one()


async def test_save_numbers_versions_and_patch_only_touches_drafts(client: httpx.AsyncClient, org: OrgHandle) -> None:
    channel = make_channel(org)
    created = await create_agent(client, org, channel)
    agent_id = created["agent"]["id"]
    v2 = await save_draft(client, org, agent_id, channel, system_prompt="Segunda versão")
    v3 = await save_draft(client, org, agent_id, channel, system_prompt="Terceira versão")
    assert (v2["version_number"], v3["version_number"]) == (2, 3)

    listed = await client.get(f"/api/v1/agents/{agent_id}/versions", headers=org.headers(Role.MANAGER))
    assert [v["version_number"] for v in listed.json()["data"]] == [3, 2, 1]
    # Pagination over versions returns each exactly once.
    seen: list[int] = []
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = await client.get(f"/api/v1/agents/{agent_id}/versions", params=params, headers=org.headers())
        seen += [v["version_number"] for v in page.json()["data"]]
        cursor = page.json()["next_cursor"]
        if cursor is None:
            break
    assert seen == [3, 2, 1]

    agent = (await client.get(f"/api/v1/agents/{agent_id}", headers=org.headers())).json()["data"]
    assert agent["latest_draft_id"] == v3["id"] and agent["latest_version_number"] == 3

    patched = await client.patch(
        f"/api/v1/agents/{agent_id}/versions/{v2['id']}",
        json={"system_prompt": "Segunda, revisada", "max_steps": 12, "trigger_config": {"keyword_regex": "oi"}},
        headers=org.headers(),
    )
    assert patched.status_code == 200, patched.text
    body = patched.json()["data"]
    assert body["system_prompt"] == "Segunda, revisada" and body["max_steps"] == 12
    # Unsent properties of the trigger are kept (merge), sent ones change.
    assert body["trigger_config"]["keyword_regex"] == "oi" and body["trigger_config"]["ignore_groups"] is True
    assert body["token_budget"] == v2["token_budget"] and body["tool_ids"] == v2["tool_ids"]
    assert audit_actions(org, v2["id"]) == ["ai_agent_version.saved", "ai_agent_version.updated"]

    bad_regex = await client.patch(
        f"/api/v1/agents/{agent_id}/versions/{v2['id']}",
        json={"trigger_config": {"keyword_regex": "(unclosed"}},
        headers=org.headers(),
    )
    assert bad_regex.status_code == 422 and error_body(bad_regex)["code"] == "validation_error"
    assert "missing )" in str(error_body(bad_regex)["details"])
    nulled = await client.patch(
        f"/api/v1/agents/{agent_id}/versions/{v2['id']}", json={"max_steps": None}, headers=org.headers()
    )
    assert nulled.status_code == 422
    clear = await client.patch(
        f"/api/v1/agents/{agent_id}/versions/{v2['id']}",
        json={"trigger_config": {"keyword_regex": None}},
        headers=org.headers(),
    )
    assert clear.status_code == 200 and clear.json()["data"]["trigger_config"]["keyword_regex"] is None


async def test_followup_patch_merges_only_the_properties_sent(client: httpx.AsyncClient, org: OrgHandle) -> None:
    channel = make_channel(org)
    created = await create_agent(
        client, org, channel, followup={"enabled": False, "flow_pointer_ids": ["flow-a", "flow-b"]}
    )
    agent_id, version_id = created["agent"]["id"], created["version"]["id"]
    assert created["version"]["followup"] == {
        "enabled": False,
        "callback_enabled": True,
        "flow_pointer_ids": ["flow-a", "flow-b"],
    }

    # [004 §4.4]: turning callbacks off changes neither `enabled` nor `flow_pointer_ids`.
    off = await client.patch(
        f"/api/v1/agents/{agent_id}/versions/{version_id}",
        json={"followup": {"callback_enabled": False}},
        headers=org.headers(),
    )
    assert off.status_code == 200, off.text
    assert off.json()["data"]["followup"] == {
        "enabled": False,
        "callback_enabled": False,
        "flow_pointer_ids": ["flow-a", "flow-b"],
    }
    flows = await client.patch(
        f"/api/v1/agents/{agent_id}/versions/{version_id}",
        json={"followup": {"flow_pointer_ids": ["flow-c"]}},
        headers=org.headers(),
    )
    assert flows.json()["data"]["followup"] == {
        "enabled": False,
        "callback_enabled": False,
        "flow_pointer_ids": ["flow-c"],
    }
    # The merge is persisted, not just echoed.
    again = await client.get(f"/api/v1/agents/{agent_id}/versions/{version_id}", headers=org.headers())
    assert again.json()["data"]["followup"]["callback_enabled"] is False


async def test_patch_name_description_priority_and_list_filters(client: httpx.AsyncClient, org: OrgHandle) -> None:
    channel = make_channel(org)
    a = (await create_agent(client, org, channel))["agent"]
    b = (await create_agent(client, org, channel))["agent"]

    patched = await client.patch(
        f"/api/v1/agents/{a['id']}",
        json={"name": "Vendas", "description": "Tira dúvidas", "priority": 50},
        headers=org.headers(),
    )
    assert patched.status_code == 200, patched.text
    assert (patched.json()["data"]["name"], patched.json()["data"]["priority"]) == ("Vendas", 50)
    assert audit_actions(org, a["id"]) == ["ai_agent.created", "ai_agent.updated"]
    null_name = await client.patch(f"/api/v1/agents/{a['id']}", json={"name": None}, headers=org.headers())
    assert null_name.status_code == 422

    archived = await client.delete(f"/api/v1/agents/{b['id']}", headers=org.headers())
    assert archived.status_code == 204
    listed = await client.get("/api/v1/agents", headers=org.headers(Role.MANAGER))
    ids = [x["id"] for x in listed.json()["data"]]
    assert a["id"] in ids and b["id"] not in ids
    with_archived = await client.get("/api/v1/agents", params={"include_archived": True}, headers=org.headers())
    assert {a["id"], b["id"]} <= {x["id"] for x in with_archived.json()["data"]}
    only_archived = await client.get("/api/v1/agents", params={"status": "archived"}, headers=org.headers())
    assert [x["id"] for x in only_archived.json()["data"]] == [b["id"]]
    drafts = await client.get("/api/v1/agents", params={"status": "draft", "kind": "mcp_agent"}, headers=org.headers())
    assert [x["id"] for x in drafts.json()["data"]] == [a["id"]]
    rag = await client.get("/api/v1/agents", params={"kind": "rag_bot"}, headers=org.headers())
    assert rag.json()["data"] == []

    # Archived agents are read-only history.
    got = (await client.get(f"/api/v1/agents/{b['id']}", headers=org.headers())).json()["data"]
    assert got["status"] == "archived" and got["archived_at"] is not None
    for response in (
        await client.patch(f"/api/v1/agents/{b['id']}", json={"name": "x"}, headers=org.headers()),
        await client.post(f"/api/v1/agents/{b['id']}/versions", json=version_body(channel), headers=org.headers()),
        await client.delete(f"/api/v1/agents/{b['id']}", headers=org.headers()),
    ):
        assert response.status_code == 409 and error_body(response)["code"] == "conflict"


async def test_agent_list_pagination_returns_every_agent_once(client: httpx.AsyncClient, org: OrgHandle) -> None:
    channel = make_channel(org)
    created = [(await create_agent(client, org, channel))["agent"]["id"] for _ in range(5)]
    seen: list[str] = []
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = await client.get("/api/v1/agents", params=params, headers=org.headers(Role.MANAGER))
        assert page.status_code == 200
        seen += [x["id"] for x in page.json()["data"]]
        cursor = page.json()["next_cursor"]
        if cursor is None:
            break
    assert seen == list(reversed(created))
    bad = await client.get("/api/v1/agents", params={"cursor": "not-a-cursor"}, headers=org.headers())
    assert bad.status_code == 422 and error_body(bad)["code"] == "validation_error"


async def test_duplicate_copies_the_latest_version_as_a_draft(client: httpx.AsyncClient, org: OrgHandle) -> None:
    channel = make_channel(org)
    created = await create_agent(client, org, channel)
    agent_id = created["agent"]["id"]
    latest = await save_draft(
        client,
        org,
        agent_id,
        channel,
        system_prompt="A mais nova",
        followup={"callback_enabled": False},
        handoff_keywords=["gerente"],
    )
    dup = await client.post(f"/api/v1/agents/{agent_id}:duplicate", headers=org.headers())
    assert dup.status_code == 201, dup.text
    copy = dup.json()["data"]
    assert copy["agent"]["id"] != agent_id and copy["agent"]["name"] == "Suporte Pré-venda (copy)"
    assert copy["agent"]["status"] == "draft" and copy["agent"]["published_version_id"] is None
    assert copy["version"]["version_number"] == 1 and copy["version"]["status"] == "draft"
    config_keys = set(latest) - {"id", "agent_id", "version_number", "status", "created_at", "updated_at"}
    assert {k: copy["version"][k] for k in config_keys} == {k: latest[k] for k in config_keys}
    assert audit_actions(org, copy["agent"]["id"]) == ["ai_agent.duplicated"]

    named = await client.post(f"/api/v1/agents/{agent_id}:duplicate", json={"name": "Clone"}, headers=org.headers())
    assert named.status_code == 201 and named.json()["data"]["agent"]["name"] == "Clone"


async def test_another_orgs_agents_and_versions_are_404(client: httpx.AsyncClient, make_org: Any) -> None:
    org_a, org_b = make_org(), make_org()
    channel_b = make_channel(org_b)
    theirs = await create_agent(client, org_b, channel_b)
    agent_id, version_id = theirs["agent"]["id"], theirs["version"]["id"]
    a = org_a.headers()
    requests = [
        client.get(f"/api/v1/agents/{agent_id}", headers=a),
        client.patch(f"/api/v1/agents/{agent_id}", json={"name": "mine"}, headers=a),
        client.delete(f"/api/v1/agents/{agent_id}", headers=a),
        client.post(f"/api/v1/agents/{agent_id}:duplicate", headers=a),
        client.post(f"/api/v1/agents/{agent_id}:pause", headers=a),
        client.post(f"/api/v1/agents/{agent_id}:publish", json={"version_id": version_id}, headers=a),
        client.get(f"/api/v1/agents/{agent_id}/versions", headers=a),
        client.post(f"/api/v1/agents/{agent_id}/versions", json=version_body(None), headers=a),
        client.get(f"/api/v1/agents/{agent_id}/versions/{version_id}", headers=a),
        client.patch(f"/api/v1/agents/{agent_id}/versions/{version_id}", json={"max_steps": 3}, headers=a),
        client.get(f"/api/v1/agents/{agent_id}/runs", headers=a),
    ]
    for request in requests:
        response = await request
        assert response.status_code == 404, (response.request.method, response.request.url, response.text)
        assert error_body(response)["code"] == "not_found"
    assert agent_id not in {x["id"] for x in (await client.get("/api/v1/agents", headers=a)).json()["data"]}
    # Org A cannot point its own version at org B's channel either.
    leak = await client.post(
        "/api/v1/agents", json={"name": "x", "version": version_body(channel_b)}, headers=org_a.headers()
    )
    assert leak.status_code == 422
    # Nothing changed on B's side.
    still = (await client.get(f"/api/v1/agents/{agent_id}", headers=org_b.headers())).json()["data"]
    assert still["name"] == "Suporte Pré-venda" and still["status"] == "draft"


async def test_a_version_of_another_agent_is_404(client: httpx.AsyncClient, org: OrgHandle) -> None:
    channel = make_channel(org)
    first = await create_agent(client, org, channel)
    second = await create_agent(client, org, channel)
    response = await client.get(
        f"/api/v1/agents/{first['agent']['id']}/versions/{second['version']['id']}", headers=org.headers()
    )
    assert response.status_code == 404


def _endpoints(agent_id: str, version_id: str, channel: uuid.UUID) -> list[tuple[str, str, Any, Role]]:
    """(method, path, json, minimum role) for every agents endpoint [004 §7]."""
    base = f"/api/v1/agents/{agent_id}"
    return [
        ("GET", "/api/v1/agents", None, Role.MANAGER),
        ("GET", base, None, Role.MANAGER),
        ("GET", f"{base}/versions", None, Role.MANAGER),
        ("GET", f"{base}/versions/{version_id}", None, Role.MANAGER),
        ("GET", f"{base}/runs", None, Role.MANAGER),
        ("POST", "/api/v1/agents", {"name": "n", "version": version_body(channel)}, Role.ADMIN),
        ("PATCH", base, {"priority": 3}, Role.ADMIN),
        ("POST", f"{base}/versions", version_body(channel), Role.ADMIN),
        ("PATCH", f"{base}/versions/{version_id}", {"max_steps": 4}, Role.ADMIN),
        ("POST", f"{base}:duplicate", None, Role.ADMIN),
        ("POST", f"{base}:publish", {"version_id": version_id}, Role.ADMIN),
        ("POST", f"{base}:pause", None, Role.ADMIN),
        ("DELETE", base, None, Role.ADMIN),
    ]


async def test_roles_per_endpoint(client: httpx.AsyncClient, org: OrgHandle) -> None:
    """viewer: nothing (list needs manager [004 §7]); manager: reads only; admin without MFA: mfa_required."""
    channel = make_channel(org)
    created = await create_agent(client, org, channel)
    agent_id, version_id = created["agent"]["id"], created["version"]["id"]
    for method, path, body, minimum in _endpoints(agent_id, version_id, channel):
        viewer = await client.request(method, path, json=body, headers=org.headers(Role.VIEWER))
        assert viewer.status_code == 403 and error_body(viewer)["code"] == "forbidden", (method, path)
        manager = await client.request(method, path, json=body, headers=org.headers(Role.MANAGER))
        if minimum is Role.MANAGER:
            assert manager.status_code == 200, (method, path, manager.text)
        else:
            assert manager.status_code == 403 and error_body(manager)["code"] == "forbidden", (method, path)
            no_mfa = await client.request(method, path, json=body, headers=org.headers(Role.ADMIN, mfa=False))
            assert no_mfa.status_code == 403 and error_body(no_mfa)["code"] == "mfa_required", (method, path)
        unauthenticated = await client.request(method, path, json=body)
        assert unauthenticated.status_code == 401
    # None of the refused writes changed anything.
    agent = (await client.get(f"/api/v1/agents/{agent_id}", headers=org.headers())).json()["data"]
    assert agent["priority"] == 10 and agent["status"] == "draft" and agent["latest_version_number"] == 1
    assert audit_actions(org, agent_id) == ["ai_agent.created"]


async def test_audit_entries_never_hold_the_prompt(client: httpx.AsyncClient, org: OrgHandle) -> None:
    channel = make_channel(org)
    created = await create_agent(client, org, channel, system_prompt="SEGREDO-DO-PROMPT")
    version_id = created["version"]["id"]
    await client.patch(
        f"/api/v1/agents/{created['agent']['id']}/versions/{version_id}",
        json={"system_prompt": "OUTRO-SEGREDO"},
        headers=org.headers(),
    )
    with tenant_session(org) as session:
        entries = list(session.scalars(select(AuditLogEntry).where(AuditLogEntry.org_id == org.org_id)))
    dumped = " ".join(str(e.details) for e in entries)
    assert "SEGREDO" not in dumped
    updated = [e for e in entries if e.action == "ai_agent_version.updated"]
    assert updated and updated[0].details["fields"] == ["system_prompt"]


async def test_inactive_credential_is_refused(client: httpx.AsyncClient, org: OrgHandle) -> None:
    channel = make_channel(org)
    credential = make_credential(org)
    with tenant_session(org) as session:
        session.execute(
            update(AiProviderCredential).where(AiProviderCredential.id == credential).values(is_active=False)
        )
    response = await client.post(
        "/api/v1/agents",
        json={"name": "x", "version": version_body(channel, credential_id=str(credential))},
        headers=org.headers(),
    )
    assert response.status_code == 422
    assert error_body(response)["details"]["errors"][0]["type"] == "inactive_credential"


async def test_a_key_pointed_at_its_own_server_may_name_any_model_it_serves(
    client: httpx.AsyncClient, org: OrgHandle
) -> None:
    """An OpenAI-compatible local server (Ollama, vLLM) or proxy serves models the catalog does not
    list: with a key whose ``base_url`` points there, the version may name them (and publish);
    without such a key the catalog still decides."""
    channel = make_channel(org)
    local = make_credential(org, provider="openai", base_url="http://localhost:11434/v1")
    catalog_only = make_credential(org, provider="openai")
    served = {"provider": "openai", "model": "llama3.1:8b", "credential_id": str(local)}
    created = await client.post(
        "/api/v1/agents", json={"name": "local", "version": version_body(channel, **served)}, headers=org.headers()
    )
    assert created.status_code == 201, created.text
    agent, version = created.json()["data"]["agent"], created.json()["data"]["version"]
    assert version["model"] == "llama3.1:8b"
    published = await client.post(
        f"/api/v1/agents/{agent['id']}:publish", json={"version_id": version["id"]}, headers=org.headers()
    )
    assert published.status_code == 200, published.text
    for refused in ({**served, "credential_id": str(catalog_only)}, {"provider": "openai", "model": "llama3.1:8b"}):
        response = await client.post(
            "/api/v1/agents", json={"name": "x", "version": version_body(channel, **refused)}, headers=org.headers()
        )
        assert response.status_code == 422
        assert error_body(response)["details"]["errors"][0]["type"] == "unknown_model"


async def test_the_handoff_message_is_saved_with_the_version_and_bounded(
    client: httpx.AsyncClient, org: OrgHandle
) -> None:
    channel = make_channel(org)
    created = await create_agent(client, org, channel, handoff_message="Um momento: vou chamar alguém.")
    assert created["version"]["handoff_message"] == "Um momento: vou chamar alguém."
    too_long = await client.post(
        "/api/v1/agents",
        json={"name": "Long", "version": version_body(channel, handoff_message="x" * 1001)},
        headers=org.headers(),
    )
    assert too_long.status_code == 422
