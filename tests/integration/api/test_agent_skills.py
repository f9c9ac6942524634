"""Skill bodies over HTTP (docs/api.md "Skills"): create/replace/delete, name and body validation,
roles, audit, isolation — and a body written through the API is the directive of a ``/skill`` run."""

from __future__ import annotations

import json

import httpx
import pytest
from sqlalchemy import update
from sqlalchemy.orm import Session

from services.api.agents.skills import SKILL_NAME_PATTERN
from switchboard import slash_commands
from switchboard.db.enums import Role
from switchboard.db.models import AiAgentVersion
from switchboard.db.models.memory import STATE_NOTE_TOOL
from switchboard.db.session import tenant_transaction
from switchboard.settings import KafkaSettings
from tests.integration.runner.harness import command, create_agent, harness, run_request
from tests.support.agents import audit_actions, error_body, make_channel, version_body
from tests.support.agents import create_agent as create_api_agent
from tests.support.api import OrgHandle
from tests.support.fake_llm import Reply
from tests.support.stack import StackEndpoints

pytestmark = pytest.mark.integration

BODY = "Always quote the list price: the blue sofa is 450 EUR."


async def test_put_creates_then_replaces_and_delete_removes(client: httpx.AsyncClient, org: OrgHandle) -> None:
    created = await client.put("/api/v1/skills/pricing", json={"body": BODY}, headers=org.headers())
    assert created.status_code == 201, created.text
    skill = created.json()["data"]
    assert skill["name"] == "pricing" and skill["body"] == BODY

    replaced = await client.put("/api/v1/skills/pricing", json={"body": "Quote 400 EUR."}, headers=org.headers())
    assert replaced.status_code == 200 and replaced.json()["data"]["id"] == skill["id"]
    await client.put("/api/v1/skills/a-first", json={"body": "First."}, headers=org.headers())

    listed = await client.get("/api/v1/skills", headers=org.headers(Role.MANAGER))
    assert listed.status_code == 200
    assert [(s["name"], s["body"]) for s in listed.json()["data"]] == [
        ("a-first", "First."),
        ("pricing", "Quote 400 EUR."),
    ]
    one = await client.get("/api/v1/skills/pricing", headers=org.headers(Role.MANAGER))
    assert one.status_code == 200 and one.json()["data"]["body"] == "Quote 400 EUR."

    assert (await client.delete("/api/v1/skills/pricing", headers=org.headers())).status_code == 204
    assert (await client.get("/api/v1/skills/pricing", headers=org.headers())).status_code == 404
    assert (await client.delete("/api/v1/skills/pricing", headers=org.headers())).status_code == 404
    assert audit_actions(org, skill["id"]) == ["agent_skill.created", "agent_skill.replaced", "agent_skill.deleted"]


@pytest.mark.parametrize("name", ["Pricing", "-pricing", "pri cing", "a" * 65, "pricing!"])
async def test_names_the_parser_cannot_reach_are_rejected(client: httpx.AsyncClient, org: OrgHandle, name: str) -> None:
    response = await client.put(f"/api/v1/skills/{name}", json={"body": BODY}, headers=org.headers())
    assert response.status_code == 422 and error_body(response)["code"] == "validation_error"


def test_name_pattern_is_the_parsers() -> None:
    assert slash_commands._SKILL_NAME.pattern == SKILL_NAME_PATTERN


@pytest.mark.parametrize("body", ["", "   \n", "x" * 20_001])
async def test_bodies_are_bounded(client: httpx.AsyncClient, org: OrgHandle, body: str) -> None:
    response = await client.put("/api/v1/skills/pricing", json={"body": body}, headers=org.headers())
    assert response.status_code == 422 and error_body(response)["code"] == "validation_error"


async def test_writes_need_admin_with_mfa_and_reads_manager(client: httpx.AsyncClient, org: OrgHandle) -> None:
    assert (await client.put("/api/v1/skills/pricing", json={"body": BODY}, headers=org.headers())).status_code == 201
    no_mfa = await client.put("/api/v1/skills/pricing", json={"body": "x"}, headers=org.headers(mfa=False))
    assert no_mfa.status_code == 403 and error_body(no_mfa)["code"] == "mfa_required"
    manager = await client.delete("/api/v1/skills/pricing", headers=org.headers(Role.MANAGER))
    assert manager.status_code == 403
    assert (await client.get("/api/v1/skills", headers=org.headers(Role.VIEWER))).status_code == 403
    body = (await client.get("/api/v1/skills/pricing", headers=org.headers(Role.MANAGER))).json()["data"]["body"]
    assert body == BODY


async def test_another_orgs_skill_is_a_404(client: httpx.AsyncClient, org: OrgHandle, make_org: object) -> None:
    other: OrgHandle = make_org()  # type: ignore[operator]
    assert (await client.put("/api/v1/skills/pricing", json={"body": BODY}, headers=org.headers())).status_code == 201
    assert (await client.get("/api/v1/skills/pricing", headers=other.headers())).status_code == 404
    assert (await client.delete("/api/v1/skills/pricing", headers=other.headers())).status_code == 404
    assert (await client.get("/api/v1/skills", headers=other.headers())).json()["data"] == []
    # The other org's PUT of the same name is its own skill, not a replacement.
    assert (
        await client.put("/api/v1/skills/pricing", json={"body": "Mine."}, headers=other.headers())
    ).status_code == 201
    assert (await client.get("/api/v1/skills/pricing", headers=org.headers())).json()["data"]["body"] == BODY


async def test_a_skill_written_through_the_api_is_the_directive_of_a_skill_run(
    client: httpx.AsyncClient, org: OrgHandle, stack: StackEndpoints, topics: KafkaSettings
) -> None:
    async with harness(stack.database_url, topics) as rh:
        agent = create_agent(rh.db, org_id=org.org_id)
        with Session(rh.db) as session, tenant_transaction(session, agent.org_id):
            session.execute(
                update(AiAgentVersion).where(AiAgentVersion.id == agent.version_id).values(skills=["pricing"])
            )
        put = await client.put("/api/v1/skills/pricing", json={"body": BODY}, headers=org.headers())
        assert put.status_code == 201

        rh.fake.script([Reply(text="450 EUR")])
        before = len(rh.fake.received)
        row = await rh.run(run_request(agent, [command(rh.db, agent, "/skill:pricing how much is the sofa?")]))
        assert row.final_text == "450 EUR"
        sent = json.dumps(rh.fake.received[before].body)
        assert BODY in sent and "how much is the sofa?" in sent


async def test_a_version_may_grant_the_local_state_note_tool(client: httpx.AsyncClient, org: OrgHandle) -> None:
    """docs/memory.md "State": ``state_note`` is not an MCP catalog tool, yet a version may grant it."""
    created = await create_api_agent(client, org, make_channel(org), tool_ids=[STATE_NOTE_TOOL, "crm_search_contacts"])
    assert created["version"]["tool_ids"] == [STATE_NOTE_TOOL, "crm_search_contacts"]
    refused = await client.post(
        "/api/v1/agents",
        json={"name": "X", "priority": 10, "version": version_body(None, tool_ids=["state_notes"])},
        headers=org.headers(),
    )
    assert refused.status_code == 422, refused.text
