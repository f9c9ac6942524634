"""The internal MCP tool server on its own: run tokens, tool grants, tenant scoping."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from sqlalchemy.orm import Session

from switchboard.db.models import AiAgentRun
from switchboard.db.session import tenant_transaction
from switchboard.run_tokens import RunTokenClaims, RunTokenSettings, mint_run_token
from switchboard.tool_catalog import (
    CANCEL_FOLLOWUP,
    CONVERSATION_HISTORY,
    LIST_FOLLOWUPS,
    SCHEDULE_FOLLOWUP,
    SEARCH_CONTACTS,
    TOOL_KINDS,
)
from tests.integration.runner.harness import Agent, RunnerHarness, create_agent, inbound

pytestmark = pytest.mark.integration


def _token(
    agent: Agent,
    tools: set[str],
    *,
    dry_run: bool = False,
    secret: bytes | None = None,
    rh: RunnerHarness | None = None,
) -> str:
    run_id = uuid.uuid4()
    if rh is not None:  # tools that write name their run (a foreign key): give it a row
        with Session(rh.db) as session, tenant_transaction(session, agent.org_id):
            session.add(
                AiAgentRun(
                    id=run_id,
                    org_id=agent.org_id,
                    agent_id=agent.agent_id,
                    agent_version_id=agent.version_id,
                    conversation_id=agent.conversation_id,
                    status="running",
                    is_dry_run=True,
                )
            )
    claims = RunTokenClaims(
        org_id=agent.org_id,
        run_id=run_id,
        agent_id=agent.agent_id,
        conversation_id=agent.conversation_id,
        contact_id=agent.contact_id,
        channel_session_id=agent.channel_session_id,
        tools=frozenset(tools),
        dry_run=dry_run,
        expires_at=int(time.time()) + 60,
    )
    return mint_run_token(secret or RunTokenSettings().secret(), claims)


@asynccontextmanager
async def mcp(rh: RunnerHarness, token: str) -> AsyncIterator[Client]:
    assert rh.mcp is not None
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"})
    async with Client(streamable_http_client(f"{rh.mcp.url}/mcp", http_client=http)) as client:
        yield client


async def test_every_catalog_tool_is_served(rh: RunnerHarness) -> None:
    agent = create_agent(rh.db)
    async with mcp(rh, _token(agent, set())) as client:
        listed = {t.name for t in (await client.list_tools()).tools}
    assert listed == set(TOOL_KINDS)


@pytest.mark.parametrize("header", [None, "Bearer nope", "Bearer forged"])
async def test_requests_without_a_valid_run_token_are_refused(rh: RunnerHarness, header: str | None) -> None:
    assert rh.mcp is not None
    if header == "Bearer forged":
        header = f"Bearer {_token(create_agent(rh.db), {SEARCH_CONTACTS}, secret=b'not-the-secret')}"
    async with httpx.AsyncClient() as http:
        response = await http.post(
            f"{rh.mcp.url}/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            headers={"Authorization": header} if header else {},
        )
    assert response.status_code == 401
    assert response.json()["error"]["code"].startswith("run_token_")


async def test_a_tool_not_granted_to_the_run_is_an_error_result(rh: RunnerHarness) -> None:
    agent = create_agent(rh.db)
    async with mcp(rh, _token(agent, {CONVERSATION_HISTORY})) as client:
        result = await client.call_tool(SEARCH_CONTACTS, {"query": "Ana"})
    assert result.is_error and "not granted" in result.content[0].text  # type: ignore[union-attr]


async def test_tools_only_see_the_tokens_org(rh: RunnerHarness) -> None:
    mine = create_agent(rh.db, contact_name="Zuleica Mine")
    create_agent(rh.db, contact_name="Zuleica Other")
    async with mcp(rh, _token(mine, {SEARCH_CONTACTS})) as client:
        result = await client.call_tool(SEARCH_CONTACTS, {"query": "Zuleica"})
    names = [c["name"] for c in json.loads(result.content[0].text)["contacts"]]  # type: ignore[union-attr]
    assert names == ["Zuleica Mine"]


async def test_history_pages_back_through_older_messages(rh: RunnerHarness) -> None:
    agent = create_agent(rh.db)
    for i in range(5):
        inbound(rh.db, agent, f"m{i}")
    async with mcp(rh, _token(agent, {CONVERSATION_HISTORY})) as client:
        first = json.loads((await client.call_tool(CONVERSATION_HISTORY, {"limit": 2})).content[0].text)  # type: ignore[union-attr]
        older = json.loads(
            (await client.call_tool(CONVERSATION_HISTORY, {"limit": 2, "before": first["next_before"]})).content[0].text  # type: ignore[union-attr]
        )
    assert [m["text"] for m in first["messages"]] == ["m3", "m4"]
    assert [m["text"] for m in older["messages"]] == ["m1", "m2"]


async def test_follow_ups_schedule_list_cancel(rh: RunnerHarness) -> None:
    agent = create_agent(rh.db)
    tools = {SCHEDULE_FOLLOWUP, LIST_FOLLOWUPS, CANCEL_FOLLOWUP}
    async with mcp(rh, _token(agent, tools, rh=rh)) as client:
        scheduled = json.loads(
            (await client.call_tool(SCHEDULE_FOLLOWUP, {"reason": "retorno", "due_in_minutes": 60})).content[0].text  # type: ignore[union-attr]
        )
        listed = json.loads((await client.call_tool(LIST_FOLLOWUPS, {})).content[0].text)  # type: ignore[union-attr]
        cancelled = await client.call_tool(CANCEL_FOLLOWUP, {"followup_id": scheduled["followup_id"]})
        again = await client.call_tool(CANCEL_FOLLOWUP, {"followup_id": scheduled["followup_id"]})
    assert [f["followup_id"] for f in listed["followups"]] == [scheduled["followup_id"]]
    assert not cancelled.is_error and again.is_error
